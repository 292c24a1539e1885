package o2iblnd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/testenv"
	"softib/internal/tsharktest"
	"softib/interop/vm"
	"softib/interop/vmtest"
	"softib/lnet"
	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// guestPeerScript is the guest side: a minimal o2iblnd peer in Python over
// the guest's librdmacm and rdma_rxe (pyverbs).
const guestPeerScript = "testdata/guest/o2ibpeer.py"

// guestOp is one LNet operation of the plan both sides follow.
type guestOp struct {
	get  bool
	size int
	bits uint64
}

func (o guestOp) String() string {
	k := "put"
	if o.get {
		k = "get"
	}
	return fmt.Sprintf("%s:%d:%#x", k, o.size, o.bits)
}

// guestPlan: a PUT and a GET small enough for an IMMEDIATE (and for one
// 1024-byte RoCE packet, which Wireshark needs to decode it), and 1 MiB
// each way over RDMA WRITE (PUT_REQ/PUT_ACK/PUT_DONE, GET_REQ/GET_DONE).
var guestPlan = []guestOp{
	{false, 500, 0x101},
	{false, 1 << 20, 0x102},
	{true, 1 << 20, 0x103},
	{true, 500, 0x104},
}

// guestRounds repeats the plan: 4 credit-consuming messages a round, so 3
// rounds overrun the queue depth of 8 unless the guest returns credits.
const guestRounds = 3

// The burst: small PUTs without an ACK request issued back to back, three
// queue depths' worth. Only the guest's NOOPs return the send credits
// they use up, and the guest (peer_credits_hiw Q-1) sends one only when it
// owes Q-1 credits, so softib runs out of credits, must wait, and must
// resume on the NOOP.
const (
	guestBurst     = 3 * o2iblnd.DefaultPeerCredits
	guestBurstSize = 300
	guestBurstBits = 0x200
)

// guestSummary is the guest script's JSON result line.
type guestSummary struct {
	OK          bool           `json:"ok"`
	Ops         int            `json:"ops"`
	OpsDone     int            `json:"ops_done"`
	Rx          map[string]int `json:"rx"`
	Tx          map[string]int `json:"tx"`
	Checks      map[string]int `json:"checks"`
	ImmBytes    int            `json:"imm_bytes_verified"`
	RDMABytes   int            `json:"rdma_bytes_verified"`
	Written     int            `json:"rdma_bytes_written"`
	CreditsBack int            `json:"credits_returned_by_host"`
	MaxInUse    int            `json:"max_host_credits_in_use"`
	Violations  []string       `json:"violations"`
	ConnReq     *struct {
		QueueDepth int    `json:"queue_depth"`
		MaxFrags   int    `json:"max_frags"`
		MaxMsgSize int    `json:"max_msg_size"`
		Cksum      bool   `json:"cksum"`
		ByteOrder  string `json:"byteorder"`
	} `json:"connreq"`
}

// guestPattern is the data both sides expect: byte i is i*7 + seed.
func guestPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// TestGuestInteropO2ib runs softib's o2iblnd (over softib's rxe and RDMA
// CM) against a minimal o2iblnd peer on the Linux 6.1 kernel's rdma_rxe and
// librdmacm in the QEMU guest. The guest validates the CONNREQ in the CM
// REQ private data and every kib_msg (header, stamps, NIDs, checksums,
// credits, lengths, LNet headers, payloads and RDMA-written data); softib
// checks its LNet events and data. The tap capture must have a correct
// ICRC on every RoCE frame and decode without malformed packets, and the
// guest's rxe error counters must not move. It runs when
// SOFTIB_INTEROP_IMAGE names an image made by interop/image.sh.
func TestGuestInteropO2ib(t *testing.T) {
	script, err := os.ReadFile(guestPeerScript)
	if err != nil {
		t.Fatal(err)
	}
	ctx, v := vmtest.Boot(t, "o2iblnd guest interop", "sibo2", 10*time.Minute)
	if v == nil {
		return
	}
	testenv.RequireTool(t, "tcpdump")
	if err := os.WriteFile(filepath.Join(v.ShareDir(), "o2ibpeer.py"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	pcapPath := filepath.Join(t.TempDir(), "o2ib-guest.pcap")
	if p := os.Getenv("SOFTIB_INTEROP_PCAP"); p != "" {
		pcapPath = p
	}
	capt, err := v.Capture(ctx, pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Stop()

	ops := make([]string, len(guestPlan))
	for i, o := range guestPlan {
		ops[i] = o.String()
	}
	const guestLimit = 240 * time.Second
	job, err := v.Go("o2ibpeer", strings.Join([]string{
		vm.CountersScript("cnt0"),
		fmt.Sprintf(`python3 "$JOB_DIR/o2ibpeer.py" --ready-file "$JOB_DIR/$JOB_ID.ready" --local %s --peer %s --cksum --require-cksum --ops %s --rounds %d --burst %d:%d:%#x --hiw %d --deadline %d`,
			guest, host, strings.Join(ops, ","), guestRounds, guestBurst, guestBurstSize, guestBurstBits,
			o2iblnd.DefaultPeerCredits-1, int(guestLimit.Seconds())-20),
		"rc=$?",
		vm.CountersScript("cnt1"),
		"exit $rc",
	}, "\n"), guestLimit)
	if err != nil {
		t.Fatal(err)
	}
	guestResult := func() string {
		r, _ := job.Wait(ctx)
		return fmt.Sprintf("guest rc %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if err := job.WaitMarker(ctx, "ready"); err != nil {
		t.Fatalf("guest peer not listening: %v\n%s", err, guestResult())
	}

	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	x := newNodeOn(t, dev, m, host, o2iblnd.Config{Cksum: true})
	// The guest peer is an o2iblnd peer following a plan of PUTs and GETs,
	// not an LNet node: discovery's ping (a GET before the first PUT)
	// would break its plan.
	x.in.SetDiscovery(false)
	g4 := guest.As4()
	target := lnetwire.ProcessID{
		NID: lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.O2IBLND, 0), uint32(g4[0])<<24|uint32(g4[1])<<16|uint32(g4[2])<<8|uint32(g4[3])),
		PID: 12345, // LNET_PID_LUSTRE: the peer answers whatever PID it is sent
	}
	const portal = 51 // the guest script's default portal
	// wait returns the next LNet event; it gives up early once the guest
	// peer has exited (after a violation nothing more will come).
	wait := func(what string) lnet.Event {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ev, _, err := x.in.EQPoll([]*lnet.EQ{x.eq}, time.Second)
			if err == nil {
				return ev
			}
			if !errors.Is(err, lnet.ErrTimeout) || time.Now().After(deadline) {
				t.Fatalf("%s: no LNet event: %v\n%s", what, err, guestResult())
			}
			if job.Done() {
				if ev, _, err = x.in.EQPoll([]*lnet.EQ{x.eq}, 2*time.Second); err == nil {
					return ev
				}
				t.Fatalf("%s: no LNet event and the guest peer has exited\n%s", what, guestResult())
			}
		}
	}
	for round := range guestRounds {
		for _, o := range guestPlan {
			what := fmt.Sprintf("round %d %v", round, o)
			src := guestPattern(o.size, byte(o.bits))
			buf := src
			if o.get {
				buf = make([]byte, o.size)
			}
			h, err := x.in.MDBind(lnet.MD{Start: buf, Threshold: 2, EQ: x.eq}, lnet.AutoUnlink)
			if err != nil {
				t.Fatal(err)
			}
			final := lnet.EventAck
			if o.get {
				final = lnet.EventReply
				err = x.in.Get(lnetwire.NIDAny, h, target, portal, o.bits, 0)
			} else {
				err = x.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, target, portal, o.bits, 0, 0)
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			got := map[lnet.EventType]lnet.Event{}
			for range 2 {
				ev := wait(what)
				got[ev.Type] = ev
			}
			if ev, ok := got[lnet.EventSend]; !ok || ev.Status != nil {
				t.Fatalf("%s: SEND event %+v\n%s", what, ev, guestResult())
			}
			if ev, ok := got[final]; !ok || ev.Status != nil || ev.MLength != o.size {
				t.Fatalf("%s: %v event %+v\n%s", what, final, ev, guestResult())
			}
			if o.get && !bytes.Equal(buf, src) {
				t.Fatalf("%s: GET data differs from the guest's pattern", what)
			}
		}
	}

	for i := range guestBurst {
		bits := uint64(guestBurstBits + i)
		h, err := x.in.MDBind(lnet.MD{Start: guestPattern(guestBurstSize, byte(bits)), Threshold: 1, EQ: x.eq}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, target, portal, bits, 0, 0); err != nil {
			t.Fatalf("burst PUT %d: %v", i, err)
		}
	}
	for i := range guestBurst {
		if ev := wait(fmt.Sprintf("burst PUT %d", i)); ev.Type != lnet.EventSend || ev.Status != nil {
			t.Fatalf("burst PUT %d: event %+v\n%s", i, ev, guestResult())
		}
	}

	r, err := job.Wait(ctx)
	if err != nil {
		t.Fatalf("guest peer: %v", err)
	}
	var sum guestSummary
	var jsonLine string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, "{") {
			jsonLine = l
		}
	}
	if err := json.Unmarshal([]byte(jsonLine), &sum); err != nil {
		t.Fatalf("guest summary %q: %v\n%s", jsonLine, err, guestResult())
	}
	t.Logf("guest peer: %s", jsonLine)
	if r.Code != 0 || !sum.OK || len(sum.Violations) != 0 {
		t.Fatalf("guest peer rc %d, violations %q\n%s", r.Code, sum.Violations, r.Stderr)
	}
	nops := len(guestPlan)*guestRounds + guestBurst
	if sum.Ops != nops || sum.OpsDone != nops {
		t.Errorf("guest completed %d of %d operations (plan %d)", sum.OpsDone, sum.Ops, nops)
	}
	if c := sum.ConnReq; c == nil || c.QueueDepth != o2iblnd.DefaultPeerCredits || c.MaxFrags != lnetwire.KibMaxRDMAFrags ||
		c.MaxMsgSize != lnetwire.KibMsgSize || !c.Cksum {
		t.Errorf("guest saw CONNREQ %+v", sum.ConnReq)
	}
	// Every message type of the plan, each checksum verified by the guest.
	for _, ty := range []string{"IMMEDIATE", "PUT_REQ", "PUT_DONE", "GET_REQ"} {
		if sum.Rx[ty] == 0 {
			t.Errorf("guest received no %s (rx %v)", ty, sum.Rx)
		}
	}
	rxTotal := 0
	for _, n := range sum.Rx {
		rxTotal += n
	}
	if sum.Checks["cksum"] != rxTotal {
		t.Errorf("guest verified %d checksums for %d messages", sum.Checks["cksum"], rxTotal)
	}
	if want := 2 * guestRounds * (1 << 20); sum.RDMABytes+sum.Written != want {
		t.Errorf("RDMA bytes verified %d + written %d, want %d", sum.RDMABytes, sum.Written, want)
	}
	if sum.CreditsBack == 0 {
		t.Errorf("softib returned no credits to the guest")
	}
	if sum.Tx["NOOP"] == 0 {
		t.Errorf("the guest returned no credits by NOOP (tx %v)", sum.Tx)
	}
	if sum.MaxInUse < o2iblnd.DefaultPeerCredits-1 {
		t.Errorf("softib had at most %d credits in use: the burst did not drain them", sum.MaxInUse)
	}
	t.Logf("credits: softib had up to %d of %d in use; the guest sent %d NOOPs, softib returned %d credits",
		sum.MaxInUse, o2iblnd.DefaultPeerCredits, sum.Tx["NOOP"], sum.CreditsBack)

	// softib's side of the same traffic.
	st := x.drv().Stats()
	if st.Malformed.Load()+st.CreditOverflow.Load()+st.Stale.Load()+st.TxTimeouts.Load()+st.PutNaks.Load() != 0 {
		t.Errorf("o2iblnd: malformed %d overflow %d stale %d timeouts %d put_naks %d", st.Malformed.Load(),
			st.CreditOverflow.Load(), st.Stale.Load(), st.TxTimeouts.Load(), st.PutNaks.Load())
	}
	ds := dev.(*rxe.Device).Stats()
	for _, k := range []string{"ICRCErr", "BadResp", "BadLength", "RemAccessNAK", "InvReqNAK", "RemOpNAK", "SndRNR", "RcvRNR", "RetryExceeded"} {
		if ds[k] != 0 {
			t.Errorf("softib rxe %s = %d", k, ds[k])
		}
	}

	// The guest rxe's counters: no error may move; sequence anomalies only
	// as far as retransmissions (TCG stalls) explain them.
	var c0, c1 strings.Builder
	for _, l := range strings.Split(r.Stdout, "\n") {
		if s, ok := strings.CutPrefix(l, "cnt0 "); ok {
			c0.WriteString(s + "\n")
		} else if s, ok := strings.CutPrefix(l, "cnt1 "); ok {
			c1.WriteString(s + "\n")
		}
	}
	before, after := vm.ParseCounters(c0.String()), vm.ParseCounters(c1.String())
	if len(after) == 0 {
		t.Fatalf("no guest rxe counters:\n%s", r.Stdout)
	}
	delta := map[string]uint64{}
	for k, a := range after {
		delta[k] = a - before[k]
	}
	t.Logf("guest rxe counter deltas: %v; softib rxe: CompRetry %d DupReq %d OutOfSeqReq %d", delta, ds["CompRetry"], ds["DupReq"], ds["OutOfSeqReq"])
	for _, k := range []string{"retry_exceeded_err", "retry_rnr_exceeded_err", "send_err", "rcvd_rnr_err", "send_rnr_err", "link_downed"} {
		if delta[k] != 0 {
			t.Errorf("guest rxe %s rose by %d", k, delta[k])
		}
	}
	if anomalies := delta["duplicate_request"] + delta["out_of_seq_request"]; anomalies > 0 && ds["CompRetry"] == 0 {
		t.Errorf("guest rxe saw %d duplicate/out-of-sequence requests but softib retransmitted nothing", anomalies)
	}
	if delta["rcvd_seq_err"] > 0 && ds["DupReq"]+ds["OutOfSeqReq"] == 0 {
		t.Errorf("guest rxe received %d sequence-error NAKs but softib saw no sequence anomaly", delta["rcvd_seq_err"])
	}

	// The wire: every RoCE frame's ICRC, then Wireshark's view.
	x.in.Close()
	time.Sleep(300 * time.Millisecond) // let the last frames reach tcpdump
	dropped, counted := capt.Dropped()
	complete := counted && dropped == 0
	if !complete {
		// The checks below still cover every frame captured.
		t.Logf("capture incomplete: tcpdump dropped %d frames (count reported: %v)", dropped, counted)
	}
	cs, err := vm.RoCECapture(pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	sb, gs := cs[host], cs[guest]
	if sb == nil || gs == nil {
		t.Fatalf("capture lacks RoCE traffic of one side: %v", cs)
	}
	t.Logf("capture: softib %+v, guest %+v", *sb, *gs)
	if gs.BadICRC != 0 {
		t.Errorf("the ICRC checker disagrees with Linux on %d guest frames", gs.BadICRC)
	}
	if sb.BadICRC+sb.Unparsed != 0 || sb.Frames == 0 {
		t.Errorf("softib sent %d frames with a bad ICRC, %d unparsable, of %d", sb.BadICRC, sb.Unparsed, sb.Frames)
	}
	if complete && gs.Frames < int(delta["sent_pkts"]) {
		t.Errorf("capture has %d guest frames, guest rxe sent %d", gs.Frames, delta["sent_pkts"])
	}
	if sb.RNRNAKs+gs.RNRNAKs != 0 {
		t.Errorf("RNR NAKs on the wire: softib %d, guest %d", sb.RNRNAKs, gs.RNRNAKs)
	}
	if _, err := exec.LookPath("tshark"); err == nil || testenv.InCI() {
		checkDecode(t, pcapPath)
		seen := map[string]int{}
		for _, row := range tsharktest.Fields(t, pcapPath, []string{"lnet.ib.type"}, "-Y", "lnet.ib.type") {
			for _, ty := range strings.Split(row[0], ",") {
				seen[ty]++
			}
		}
		t.Logf("tshark: o2iblnd messages by type %v", seen)
		for _, want := range []string{"0xc0", "0xc1", "0xd0", "0xd1", "0xd2", "0xd4", "0xd5", "0xd6", "0xd7"} {
			if seen[want] == 0 && complete {
				t.Errorf("tshark decoded no o2iblnd message of type %s (seen %v)", want, seen)
			}
		}
	}

	guestKernelConnsPerPeer(ctx, t, v, dev, m, host, guest)
}

// guestKernelConnsPerPeer runs in the same guest as TestGuestInteropO2ib,
// once its Python peer is done: the Lustre 2.17 kernel's own LNet and
// ko2iblnd (the image's modules, conns_per_peer 1) on the guest's
// rdma_rxe, and a softib node with conns_per_peer 2 on the same host
// device. softib opens two RC connections to the kernel, which accepts
// both (kiblnd_passive_connect: no race while it is not connecting);
// softib's pings go round-robin over them, the kernel's pings of softib
// go over the connections it accepted, every ping is answered and the
// kernel logs no LNetError.
func guestKernelConnsPerPeer(ctx context.Context, t *testing.T, v *vm.VM, dev verbs.Device, m *rdmacm.Manager, host, guest netip.Addr) {
	t.Helper()
	up := `set -e
for m in libcfs lnet ko2iblnd; do modprobe $m; done
lnetctl lnet configure
lnetctl net add --net o2ib --if eth0 --skip-mr-route-setup
lnetctl net show --net o2ib`
	if r, err := v.Run(ctx, "kernel-lnet-up", up, 2*time.Minute); err != nil || r.Code != 0 {
		t.Fatalf("guest kernel LNet up: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
	}
	x := newNodeOn(t, dev, m, host, o2iblnd.Config{ConnsPerPeer: 2})
	g4 := guest.As4()
	knid := lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.O2IBLND, 0), uint32(g4[0])<<24|uint32(g4[1])<<16|uint32(g4[2])<<8|uint32(g4[3]))
	ping := func(i int) {
		t.Helper()
		if _, err := x.in.Ping(ctx, lnetwire.ProcessID{NID: knid, PID: lnetwire.PIDLustre}, 30*time.Second); err != nil {
			t.Fatalf("softib ping %d of the kernel's %s: %v", i, knid, err)
		}
	}
	ping(0)
	// The first ping went on the first connection up; the second may
	// still be connecting (hang guard only).
	for deadline := time.Now().Add(time.Minute); x.drv().Conns(knid) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("softib has %d connections to the kernel, want 2 (conns_per_peer)", x.drv().Conns(knid))
		}
	}
	for i := 1; i <= 8; i++ {
		ping(i)
	}
	r, err := v.Run(ctx, "kernel-ping", fmt.Sprintf(`set -e
for i in 1 2 3 4; do lnetctl ping --timeout 30 %s@o2ib; done
dmesg | grep -E 'LNetError|BUG|Oops' && exit 3 || true`, host), 3*time.Minute)
	if err != nil || r.Code != 0 {
		t.Fatalf("kernel pings of softib: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
	}
	if strings.Count(r.Stdout, "nid: "+host.String()+"@o2ib") < 4 {
		t.Fatalf("kernel pings of softib: replies do not name %s@o2ib:\n%s", host, r.Stdout)
	}
	sends := x.drv().ConnSends(knid)
	if len(sends) != 2 || sends[0] == 0 || sends[1] == 0 {
		t.Fatalf("softib messages per connection to the kernel %v, want 2 connections both used", sends)
	}
	st := x.drv().Stats()
	if st.Races.Load()+st.Malformed.Load()+st.Stale.Load()+st.ConnectFailures.Load()+st.CreditOverflow.Load() != 0 {
		t.Errorf("o2iblnd with the kernel: races %d malformed %d stale %d connect failures %d overflow %d", st.Races.Load(),
			st.Malformed.Load(), st.Stale.Load(), st.ConnectFailures.Load(), st.CreditOverflow.Load())
	}
	t.Logf("conns_per_peer 2 with the kernel's ko2iblnd: %d connections established, messages per connection %v, %d received",
		st.ConnsEstablished.Load(), sends, st.RxMsgs.Load())
	x.in.Close()
}
