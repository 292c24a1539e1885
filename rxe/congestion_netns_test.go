//go:build linux

package rxe_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/internal/tsharktest"
	"softib/rxe"
	"softib/verbs"
)

// ceMarkRules marks pct% of the ECT(0) RoCEv2 packets a namespace sends
// CE (nftables: this kernel has neither sch_netem nor sch_red, whose ecn
// options would do it on a queue), as a congested router's AQM does.
func ceMarkRules(fam string, pct float64) string {
	return fmt.Sprintf("table %s softib_ecn {\n chain out {\n  type filter hook output priority 0; policy accept;\n"+
		"  udp dport 4791 %s ecn ect0 numgen random mod 1000000 < %d counter %s ecn set ce\n }\n}\n", fam, fam, int(pct*10000), fam)
}

// nsCapture runs dumpcap inside a namespace on its link.
type nsCapture struct {
	path string
	stop func()
}

// startNSCapture starts dumpcap on n's link and returns once it captures:
// dumpcap writes the file header before its filter is attached, so a
// probe datagram (UDP port 9, discard) is sent from prober to probeTo
// until it is in the file.
func startNSCapture(t *testing.T, n, prober *netns.Node, probeTo netip.Addr) *nsCapture {
	t.Helper()
	testenv.RequireTool(t, "tshark")
	testenv.RequireTool(t, "dumpcap")
	path := filepath.Join(t.TempDir(), "ecn.pcap")
	f, err := os.Create(path) // dumpcap (run as root) writes into it
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := n.Command("dumpcap", "-q", "-i", n.Dev, "-P", "-B", "64", "-s", "128", "-f", "udp port 4791 or udp port 9", "-w", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// dumpcap writes the pcap header when the capture is live; hang
	// guard 20 s.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err := os.Stat(path); err == nil && st.Size() >= 24 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("hang guard: dumpcap did not start: %s", stderr.String())
		}
	}
	// mark sends a probe carrying token until it is in the file: at the
	// start (the capture is live), and before the stop (everything sent
	// earlier has been written; dumpcap drops what is still in its ring
	// at SIGINT).
	mark := func(token string) {
		probe := []byte("softib ecn capture " + token)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if err := prober.Do(func() error {
				c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(probeTo, 9)))
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Write(probe)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, probe) {
				return
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("hang guard: dumpcap did not capture the %s probe: %s", token, stderr.String())
			}
		}
	}
	mark("start")
	c := &nsCapture{path: path}
	stopped := false
	c.stop = func() {
		if !stopped {
			stopped = true
			mark("end")
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
		}
	}
	t.Cleanup(c.stop)
	return c
}

// TestNetnsECN: softib to softib across a veth between two namespaces,
// with A's RoCEv2 packets CE-marked on the way (2%, nftables) and ECN on
// at both ends. B counts the marks and sends CNPs; A's QP handles them
// and its DCQCN limiter cuts the rate (and, at this machine's speed,
// holds sends back: logged); with the marking removed, A's rate recovers
// as it sends. On the wire (dumpcap in B's namespace, decoded by
// tshark) A's packets carry ECT(0) or CE, B's ECT(0), and B's CNPs are
// opcode 129 to A's QP. The same for UD QPs (ipv4-ud): B's CNPs go to the
// source QP of A's marked datagrams.
func TestNetnsECN(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft")
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) { netnsECN(t, v6) })
	}
	t.Run("ipv4-ud", netnsECNUD)
}

// netnsECNUD is TestNetnsECN's UD case: A's UD datagrams to B are
// CE-marked on the way (20%); B's UD QP sends CNPs to the source QP in
// their DETH at A's address, A's UD QP handles them and its limiter cuts
// its rate; on the wire (tshark in B's namespace) B's CNPs are opcode
// 129 to A's UD QP.
func netnsECNUD(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{})
	open := func(n *netns.Node, addr netip.Addr) *rxe.Device {
		var d verbs.Device
		if err := n.Do(func() (err error) {
			d, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr, NetMTU: n.MTU, FixedSourcePort: true}, ECN: rxe.ECNConfig{Enable: true}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d.(*rxe.Device)
	}
	da, db := open(p.A, p.A.Addr), open(p.B, p.B.Addr)
	a, b := newEnd(t, da, verbs.QPTypeUD, 1<<20), newEnd(t, db, verbs.QPTypeUD, 1<<20)
	connect(t, a, b, connOpts{})
	connect(t, b, a, connOpts{})
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(p.B.Addr), SGIDIndex: 1, HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	capt := startNSCapture(t, p.B, p.A, p.B.Addr)
	if err := runIn(p.A, ceMarkRules("ip", 20)); err != nil {
		t.Fatalf("nft: %v", err)
	}
	const n, size = 512, 1024
	for i := range n {
		postRecv(t, b, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE((i%256)*2048, 40+size)}})
	}
	for i := 0; i < n; i += 16 {
		var wrs []verbs.SendWR
		for j := range 16 {
			wrs = append(wrs, verbs.SendWR{ID: uint64(i + j), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(0, size)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
		}
		post(t, a, wrs...)
		waitWC(t, a.cq, 16)
	}
	// The CNPs travel on their own: wait for A to have handled one (hang
	// guard 20 s).
	for deadline := time.Now().Add(20 * time.Second); rxe.CQDeviceStats(a.cq)["RPCNPHandled"] == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("hang guard: A handled no CNP; B %v", rxe.CQDeviceStats(b.cq))
		}
	}
	as, bs := rxe.CQDeviceStats(a.cq), rxe.CQDeviceStats(b.cq)
	_, rate, minRate, cuts := rxe.QPRate(a.qp)
	t.Logf("B: %d CE-marked datagrams, %d CNPs sent; A: %d CNPs handled, %d cuts, lowest rate %.3g b/s, now %.3g",
		bs["NPECNMarked"], bs["NPCNPSent"], as["RPCNPHandled"], cuts, minRate, rate)
	if bs["NPECNMarked"] == 0 || bs["NPCNPSent"] == 0 || as["RPCNPHandled"] > bs["NPCNPSent"] || cuts == 0 || as["NoQP"]+as["BadQPType"] != 0 {
		t.Fatalf("counters: A %v; B %v; %d cuts", as, bs, cuts)
	}
	if err := runIn(p.A, "delete table ip softib_ecn\n"); err != nil {
		t.Fatal(err)
	}
	capt.stop()
	rows := tsharktest.Fields(t, capt.path, []string{"ip.src", "infiniband.bth.opcode", "infiniband.bth.destqp"}, "-Y", "infiniband")
	cnps := 0
	for _, r := range rows {
		if netip.MustParseAddr(r[0]) == p.B.Addr && r[1] == "129" {
			cnps++
			if want := fmt.Sprintf("0x%06x", a.qp.QPN()); r[2] != want {
				t.Fatalf("CNP to %s, want A's UD QP %s", r[2], want)
			}
		}
	}
	// B's count now: datagrams A sent were still arriving at B when the
	// counters above were read (UD has no ACK to wait for); the capture
	// stopped after them.
	sent := rxe.CQDeviceStats(b.cq)["NPCNPSent"]
	t.Logf("capture: %d CNPs from B (B sent %d)", cnps, sent)
	if cnps == 0 || uint64(cnps) > sent {
		t.Fatalf("capture: %d CNPs from B (B counted %d)", cnps, sent)
	}
}

// netnsECN is TestNetnsECN over IPv4 or IPv6 (traffic class, ip6 nft
// rule; IPv6 also leaves as UDP GSO super-packets, which the rule marks
// whole).
func netnsECN(t *testing.T, v6 bool) {
	p := netns.NewPair(t, netns.PairConfig{})
	fam, src, ecnField := "ip", "ip.src", "ip.dsfield.ecn"
	addrA, addrB := p.A.Addr, p.B.Addr
	if v6 {
		if !p.A.Addr6.IsValid() {
			t.Fatal("no IPv6 in the namespaces")
		}
		fam, src, ecnField = "ip6", "ipv6.src", "ipv6.tclass.ecn"
		addrA, addrB = p.A.Addr6, p.B.Addr6
	}
	// A reacts with the DCQCN paper's byte counter and timer (10 MB,
	// 55 us) rather than mlx5's 32 KiB, 300 us: at a software device's
	// rates mlx5's byte counter recovers the rate between two CNPs.
	ecnA := rxe.ECNConfig{Enable: true, MinRate: 100e6, MaxRate: 20e9, ByteReset: 10 << 20, TimeReset: 55 * time.Microsecond}
	open := func(n *netns.Node, addr netip.Addr, ecn rxe.ECNConfig) *rxe.Device {
		var d verbs.Device
		if err := n.Do(func() (err error) {
			d, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr, NetMTU: n.MTU, FixedSourcePort: true}, ECN: ecn})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d.(*rxe.Device)
	}
	da, db := open(p.A, addrA, ecnA), open(p.B, addrB, rxe.ECNConfig{Enable: true})
	a, b := newEnd(t, da, verbs.QPTypeRC, 8<<20), newEnd(t, db, verbs.QPTypeRC, 8<<20)
	o := connOpts{timeout: 14, retry: 7, rnrRetry: 7}
	connect(t, a, b, o)
	connect(t, b, a, o)
	capt := startNSCapture(t, p.B, p.A, addrB)

	const chunk = 64 << 10
	fill(a.buf, 21)
	// send writes total bytes from a to b, 16 WRITEs in flight, and
	// returns how long it took.
	send := func(total int) time.Duration {
		start := time.Now()
		for done := 0; done < total; done += 16 * chunk {
			var wrs []verbs.SendWR
			for i := range 16 {
				off := (done + i*chunk) % (8 << 20)
				wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{a.mr.SGE(off, chunk)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
			}
			post(t, a, wrs...)
			for _, wc := range waitWC(t, a.cq, 16) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %+v", wc)
				}
			}
		}
		return time.Since(start)
	}

	// Phase 1: the path marks.
	if err := runIn(p.A, ceMarkRules(fam, 5)); err != nil {
		t.Fatalf("nft: %v", err)
	}
	const total = 8 << 20
	d1 := send(total)
	as, bs := rxe.CQDeviceStats(a.cq), rxe.CQDeviceStats(b.cq)
	active1, rate1, minRate, cuts, held := rxe.QPRateHeld(a.qp)
	t.Logf("marked: %d MiB in %v (%.0f Mb/s); B: %d CE-marked, %d CNPs sent; A: %d CNPs handled, %d cuts, lowest rate %.3g b/s, now %.3g (active %v), %d sends held back",
		total>>20, d1, float64(total)*8/d1.Seconds()/1e6, bs["NPECNMarked"], bs["NPCNPSent"], as["RPCNPHandled"], cuts, minRate, rate1, active1, held)
	if bs["NPECNMarked"] == 0 || bs["NPCNPSent"] == 0 || as["RPCNPHandled"] == 0 || as["RPCNPHandled"] > bs["NPCNPSent"] {
		t.Fatalf("counters: B %d marked, %d CNPs sent; A %d handled", bs["NPECNMarked"], bs["NPCNPSent"], as["RPCNPHandled"])
	}
	// How low the rate goes and how many sends it holds back depend on
	// how fast this machine moves packets between CNPs (logged above;
	// TestRateLimiterPacing checks the pacing on a fake clock): only the
	// cut itself is certain.
	if cuts == 0 || minRate >= ecnA.MaxRate {
		t.Fatalf("A's rate not reduced: %d cuts, lowest %.3g b/s, %d sends held back", cuts, minRate, held)
	}
	if as["NPCNPSent"] != 0 || bs["RPCNPHandled"] != 0 || as["RPCNPIgnored"]+bs["RPCNPIgnored"] != 0 {
		t.Fatalf("CNPs the wrong way: A %v / B %v", as, bs)
	}

	// Phase 2: the marking stops; every ByteReset bytes A sends raises
	// its rate (byte-counter expiries, no clock involved), until the
	// limiter switches off at MaxRate.
	if err := runIn(p.A, "delete table "+fam+" softib_ecn\n"); err != nil {
		t.Fatal(err)
	}
	d2 := send(total)
	active2, rate2, _, _ := rxe.QPRate(a.qp)
	t.Logf("unmarked: %d MiB in %v (%.0f Mb/s); A's rate %.3g b/s (active %v)", total>>20, d2, float64(total)*8/d2.Seconds()/1e6, rate2, active2)
	if active2 && rate2 <= minRate {
		t.Fatalf("A's rate did not recover: %.3g b/s (lowest %.3g)", rate2, minRate)
	}
	b.sync()
	if !bytes.Equal(b.buf[:8<<20], a.buf[:8<<20]) {
		t.Fatal("data differs")
	}

	// The wire, as tshark decodes it.
	capt.stop()
	rows := tsharktest.Fields(t, capt.path, []string{src, ecnField, "infiniband.bth.opcode", "infiniband.bth.destqp"}, "-Y", "infiniband")
	var fromA, ceA, fromB, cnps int
	for _, r := range rows {
		src, ecn, op := r[0], r[1], r[2]
		switch netip.MustParseAddr(src) {
		case addrA:
			fromA++
			switch ecn {
			case "2":
			case "3":
				ceA++
			default:
				t.Fatalf("A's packet with ECN %s: %q", ecn, r)
			}
		case addrB:
			fromB++
			if ecn != "2" {
				t.Fatalf("B's packet with ECN %s: %q", ecn, r)
			}
			if op == "129" {
				cnps++
				if want := fmt.Sprintf("0x%06x", a.qp.QPN()); r[3] != want {
					t.Fatalf("CNP to %s, want A's QP %s", r[3], want)
				}
			}
		}
	}
	t.Logf("capture: %d packets from A (%d CE), %d from B (%d CNPs)", fromA, ceA, fromB, cnps)
	if ceA == 0 || cnps == 0 || uint64(cnps) > bs["NPCNPSent"] {
		t.Fatalf("capture: %d CE-marked packets from A, %d CNPs from B (B counted %d)", ceA, cnps, bs["NPCNPSent"])
	}
}

// runIn loads an nftables script in n's namespace.
func runIn(n *netns.Node, script string) error {
	cmd := n.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
