//go:build linux

package rxe_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/interop/vm"
	"softib/interop/vmtest"
	"softib/rdmarw"
	"softib/verbs"
)

// memmgtGuestScript is the guest side: a pyverbs agent on the guest
// kernel's rdma_rxe that softib drives over a TCP control connection.
const memmgtGuestScript = "testdata/guest/memmgt.py"

// Linux ibv_wc_status and ibv_wc_flags values the guest reports.
const (
	kWCSuccess      = 0
	kWCRemInvReqErr = 9
	kWCRemAccessErr = 10
	// kWCWithInv is the flag Linux 6.1 rxe sets in a user CQ entry for a
	// received SEND_WITH_INV: the kernel's IB_WC_WITH_INVALIDATE (1<<2),
	// copied as is, which libibverbs would read as IBV_WC_IP_CSUM_OK
	// (its IBV_WC_WITH_INV is 1<<3); either is accepted.
	kWCWithInv = 1<<2 | 1<<3
)

// agent is the control connection to the guest agent.
type agent struct {
	t  *testing.T
	c  net.Conn
	r  *bufio.Reader
	id int
}

// call sends one request and returns the reply; an agent error fails the
// test.
func (g *agent) call(req map[string]any) map[string]any {
	g.t.Helper()
	b, _ := json.Marshal(req)
	g.c.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := g.c.Write(append(b, '\n')); err != nil {
		g.t.Fatalf("agent %v: %v", req["op"], err)
	}
	line, err := g.r.ReadBytes('\n')
	if err != nil {
		g.t.Fatalf("agent %v: %v", req["op"], err)
	}
	var rep map[string]any
	if err := json.Unmarshal(line, &rep); err != nil {
		g.t.Fatalf("agent %v: %q: %v", req["op"], line, err)
	}
	if e, ok := rep["error"]; ok {
		g.t.Fatalf("agent %v %v: %v", req["op"], req, e)
	}
	return rep
}

func (g *agent) nextID() int { g.id++; return g.id }

func num(rep map[string]any, k string) uint64 {
	f, _ := rep[k].(float64)
	return uint64(f)
}

// wantK checks a guest completion's status.
func wantK(t *testing.T, what string, rep map[string]any, st int) {
	t.Helper()
	if got, _ := rep["status"].(float64); int(got) != st {
		t.Fatalf("%s: guest completion %v, want status %d", what, rep, st)
	}
	t.Logf("%s: guest status %d as expected", what, st)
}

// kconn is one RC connection between a softib QP and a guest QP.
type kconn struct {
	qp    verbs.QP
	cq    verbs.CQ
	kqpn  uint64
	kaddr uint64 // the guest buffer's address, rkey and lkey
	krkey uint32
}

// TestMemMgtInteropKernelRxe proves fast registration and memory windows
// against the Linux 6.1 kernel's rdma_rxe in the QEMU guest (pyverbs), in
// one boot:
//
//   - softib registers a fast-reg MR over two page fragments (REG_MR), the
//     guest RDMA WRITEs and READs through it, the guest's SEND_WITH_INV
//     invalidates it (softib's receive reports the key) and the guest's
//     next WRITE fails with REM_ACCESS_ERR; after a re-registration with the
//     next key byte and softib's LOCAL_INV, likewise; the guest's
//     SEND_WITH_INV of an ordinary MR fails (REM_INV_REQ_ERR);
//   - the guest binds a type 2 window (BIND_MW) and a zero-based one, and a
//     type 1 window (ibv_bind_mw); softib WRITEs and READs through them,
//     its SEND_WITH_INV invalidates the type 2 window (the guest's receive
//     reports the key) and its next WRITE fails with REM_ACCESS_ERR;
//   - softib binds type 2 and type 1 windows, the guest WRITEs and READs
//     through them, the guest's SEND_WITH_INV invalidates the type 2 one
//     (and its next WRITE fails) but not the type 1 one;
//   - rdmarw contexts WRITE a three-page list into the guest through a
//     fast-reg MR and READ it back as split READs.
//
// The guest cannot register through REG_MR itself: fast registration is
// a kernel-only verb (libibverbs has no IBV_WR_REG_MR). It runs when
// SOFTIB_INTEROP_IMAGE names an image made by interop/image.sh.
func TestMemMgtInteropKernelRxe(t *testing.T) {
	script, err := os.ReadFile(memmgtGuestScript)
	if err != nil {
		t.Fatal(err)
	}
	ctx, v := vmtest.Boot(t, "memory management interop with kernel rxe", "sibmm", 8*time.Minute)
	if v == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(v.ShareDir(), "memmgt.py"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	inNetns(t, v.Namespace(), func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(host, 0).String())
		return err
	})
	t.Cleanup(func() { ln.Close() })

	hg := verbs.GIDFromAddr(host)
	var words []string
	for i := 0; i < 16; i += 2 {
		words = append(words, hex.EncodeToString(hg[i:i+2]))
	}
	job, err := v.Go("memmgt", strings.Join([]string{
		vm.CountersScript("cnt0"),
		fmt.Sprintf(`python3 "$JOB_DIR/memmgt.py" --host %s --host-gid %s --gid-index 1 --deadline 300`, ln.Addr(), strings.Join(words, ":")),
		"rc=$?",
		vm.CountersScript("cnt1"),
		"exit $rc",
	}, "\n"), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	guestOut := func() string {
		if !job.Done() {
			return "(guest agent still running)"
		}
		r, _ := job.Wait(ctx)
		return fmt.Sprintf("guest rc %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(3 * time.Minute))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("guest agent did not connect: %v\n%s", err, guestOut())
	}
	defer c.Close()
	g := &agent{t: t, c: c, r: bufio.NewReader(c)}
	defer func() {
		if t.Failed() {
			c.Close()
			t.Log(guestOut())
		}
	}()

	// conn connects a new softib RC QP to a new guest QP.
	conn := func() *kconn {
		t.Helper()
		cq, err := dev.CreateCQ(verbs.CQAttr{CQE: 64})
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64}})
		if err != nil {
			t.Fatal(err)
		}
		rep := g.call(map[string]any{"op": "qp", "qpn": qp.QPN()})
		k := &kconn{qp: qp, cq: cq, kqpn: num(rep, "qpn"), kaddr: num(rep, "addr"), krkey: uint32(num(rep, "rkey"))}
		steps := []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
				AccessFlags: verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessLocalWrite},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: uint32(k.kqpn),
				MaxDestRdAtomic: 4, MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
					GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(guest), SGIDIndex: 1, HopLimit: 64}}},
				verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
					verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrSQPSN | verbs.QPAttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if err := qp.Modify(&st.a, st.m); err != nil {
				t.Fatal(err)
			}
		}
		return k
	}
	// do posts a signaled work request on softib's side and waits.
	do := func(k *kconn, wr verbs.SendWR) verbs.WC {
		t.Helper()
		wr.Flags |= verbs.SendSignaled
		if _, err := k.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		return mmPoll(t, k.cq)
	}
	kop := func(k *kconn, op string, kv ...any) map[string]any {
		t.Helper()
		req := map[string]any{"op": op, "qpn": k.kqpn, "id": g.nextID()}
		for i := 0; i+1 < len(kv); i += 2 {
			req[kv[i].(string)] = kv[i+1]
		}
		return g.call(req)
	}
	pattern := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7) + seed
		}
		return b
	}
	kget := func(off, n int) []byte {
		t.Helper()
		b, err := hex.DecodeString(g.call(map[string]any{"op": "get", "off": off, "len": n})["hex"].(string))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// --- softib fast-reg MR, guest accesses ---
	back := mmAligned(3 * 4096)
	backMR, err := pd.RegMR(back, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	fmr, err := verbs.AllocMR(pd, verbs.MRTypeMemReg, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fmr.MapMRSG([]verbs.SGE{backMR.SGE(0, 4096), backMR.SGE(2*4096, 4096)}, 0, 4096); n != 2 || err != nil {
		t.Fatalf("MapMRSG: %d, %v", n, err)
	}
	k := conn()
	key1 := verbs.IncKey(fmr.RKey())
	wantStatus(t, "softib REG_MR", do(k, verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: key1,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead}}), verbs.WCSuccess)
	g.call(map[string]any{"op": "fill", "off": 0, "len": 8192, "seed": 3})
	wantK(t, "guest WRITE through softib's fast-reg MR", kop(k, "write", "off", 0, "len", 8192, "raddr", fmr.IOVA(), "rkey", key1), kWCSuccess)
	k.qp.Query() // softib's responder lock orders its writes before the check
	if want := pattern(8192, 3); !bytes.Equal(back[:4096], want[:4096]) || !bytes.Equal(back[2*4096:], want[4096:]) {
		t.Fatal("guest WRITE landed wrong in softib's fast-reg MR")
	}
	wantK(t, "guest READ through softib's fast-reg MR", kop(k, "read", "off", 16384, "len", 6000, "raddr", fmr.IOVA()+1000, "rkey", key1), kWCSuccess)
	if !bytes.Equal(kget(16384, 6000), pattern(8192, 3)[1000:7000]) {
		t.Fatal("guest READ returned wrong bytes")
	}
	rbuf, _ := pd.RegMR(make([]byte, 256), verbs.AccessLocalWrite)
	if _, err := k.qp.PostRecv([]verbs.RecvWR{{ID: 50, SGL: []verbs.SGE{rbuf.SGE(0, 256)}}}); err != nil {
		t.Fatal(err)
	}
	wantK(t, "guest SEND_WITH_INV of softib's fast-reg key", kop(k, "send_inv", "rkey", key1), kWCSuccess)
	if wc := mmPoll(t, k.cq); wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCFlagWithInv == 0 || wc.InvalidatedRKey != key1 {
		t.Fatalf("softib receive of the guest's SEND_WITH_INV: %+v", wc)
	}
	if fmr.Valid() {
		t.Fatal("fast-reg MR still valid after the guest's SEND_WITH_INV")
	}
	wantK(t, "guest WRITE after its SEND_WITH_INV", kop(k, "write", "off", 0, "len", 64, "raddr", fmr.IOVA(), "rkey", key1), kWCRemAccessErr)

	k = conn()
	key2 := verbs.IncKey(key1)
	wantStatus(t, "softib REG_MR again", do(k, verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: key2,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}}), verbs.WCSuccess)
	wantK(t, "guest WRITE with the new key", kop(k, "write", "off", 0, "len", 64, "raddr", fmr.IOVA(), "rkey", key2), kWCSuccess)
	wantStatus(t, "softib LOCAL_INV", do(k, verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: key2}), verbs.WCSuccess)
	wantK(t, "guest WRITE after softib's LOCAL_INV", kop(k, "write", "off", 0, "len", 64, "raddr", fmr.IOVA(), "rkey", key2), kWCRemAccessErr)

	k = conn()
	ordinary, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	k.qp.PostRecv([]verbs.RecvWR{{ID: 51, SGL: []verbs.SGE{rbuf.SGE(0, 256)}}})
	wantK(t, "guest SEND_WITH_INV of an ordinary softib MR", kop(k, "send_inv", "rkey", ordinary.RKey()), kWCRemInvReqErr)

	// --- guest windows, softib accesses ---
	src := pattern(4096, 9)
	srcMR, _ := pd.RegMR(src, verbs.AccessLocalWrite)
	dst := make([]byte, 4096)
	dstMR, _ := pd.RegMR(dst, verbs.AccessLocalWrite)
	k = conn()
	g.call(map[string]any{"op": "alloc_mw", "name": "m2", "type": 2})
	rep := kop(k, "bind_mw", "name", "m2", "type", 2, "off", 4096, "len", 4096, "access", []string{"write", "read"})
	wantK(t, "guest BIND_MW (type 2)", rep, kWCSuccess)
	r2, a2 := uint32(num(rep, "rkey")), num(rep, "addr")
	wantStatus(t, "softib WRITE through the guest's type 2 window",
		do(k, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{srcMR.SGE(0, 4096)}, RemoteAddr: a2, RKey: r2}), verbs.WCSuccess)
	if !bytes.Equal(kget(4096, 4096), src) {
		t.Fatal("softib WRITE through the guest's window landed wrong")
	}
	wantStatus(t, "softib READ through the guest's type 2 window",
		do(k, verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{dstMR.SGE(0, 1000)}, RemoteAddr: a2 + 100, RKey: r2}), verbs.WCSuccess)
	if !bytes.Equal(dst[:1000], src[100:1100]) {
		t.Fatal("softib READ through the guest's window returned wrong bytes")
	}
	kop(k, "recv", "id", 900, "off", 32768, "len", 256)
	wantStatus(t, "softib SEND_WITH_INV of the guest's type 2 window",
		do(k, verbs.SendWR{Opcode: verbs.WRSendWithInv, InvalidateRKey: r2, Flags: verbs.SendInline, InlineData: []byte("inv")}), verbs.WCSuccess)
	rep = g.call(map[string]any{"op": "wait", "id": 900})
	if num(rep, "status") != kWCSuccess || num(rep, "flags")&kWCWithInv == 0 || uint32(num(rep, "inv_rkey")) != r2 {
		t.Fatalf("guest receive of softib's SEND_WITH_INV: %v (want WITH_INV of %#x)", rep, r2)
	}
	wantStatus(t, "softib WRITE after invalidating the guest's window",
		do(k, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{srcMR.SGE(0, 64)}, RemoteAddr: a2, RKey: r2}), verbs.WCRemAccessErr)

	k = conn()
	// A fresh window: libibverbs keeps a type 2 window's original rkey,
	// which rxe no longer accepts as the window's key after a bind.
	g.call(map[string]any{"op": "alloc_mw", "name": "mz", "type": 2})
	rep = kop(k, "bind_mw", "name", "mz", "type", 2, "off", 8192, "len", 1024, "access", []string{"write", "zero"})
	wantK(t, "guest zero-based BIND_MW", rep, kWCSuccess)
	rz := uint32(num(rep, "rkey"))
	wantStatus(t, "softib WRITE at offset 256 of the guest's zero-based window",
		do(k, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{srcMR.SGE(0, 256)}, RemoteAddr: 256, RKey: rz}), verbs.WCSuccess)
	if !bytes.Equal(kget(8192+256, 256), src[:256]) {
		t.Fatal("softib WRITE through the guest's zero-based window landed wrong")
	}
	g.call(map[string]any{"op": "alloc_mw", "name": "m1", "type": 1})
	rep = kop(k, "bind_mw", "name", "m1", "type", 1, "off", 12288, "len", 2048, "access", []string{"write"})
	wantK(t, "guest ibv_bind_mw (type 1)", rep, kWCSuccess)
	r1, a1 := uint32(num(rep, "rkey")), num(rep, "addr")
	k2 := conn() // type 1 windows are not tied to the binding QP
	wantStatus(t, "softib WRITE through the guest's type 1 window on another QP",
		do(k2, verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{srcMR.SGE(512, 512)}, RemoteAddr: a1 + 1024, RKey: r1}), verbs.WCSuccess)
	if !bytes.Equal(kget(12288+1024, 512), src[512:1024]) {
		t.Fatal("softib WRITE through the guest's type 1 window landed wrong")
	}

	// --- softib windows, guest accesses ---
	wbuf := make([]byte, 4096)
	wmr, _ := pd.RegMR(wbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
	k = conn()
	mw2, err := verbs.AllocMW(pd, verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	s2 := verbs.IncKey(mw2.RKey())
	wantStatus(t, "softib BIND_MW (type 2)", do(k, verbs.SendWR{Opcode: verbs.WRBindMW, BindMW: verbs.BindWR{MW: mw2, RKey: s2,
		Bind: verbs.MWBind{MR: wmr, Addr: wmr.Addr() + 1024, Length: 1024, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}}}), verbs.WCSuccess)
	g.call(map[string]any{"op": "fill", "off": 0, "len": 1024, "seed": 5})
	wantK(t, "guest WRITE through softib's type 2 window", kop(k, "write", "off", 0, "len", 1024, "raddr", wmr.Addr()+1024, "rkey", s2), kWCSuccess)
	k.qp.Query()
	if !bytes.Equal(wbuf[1024:2048], pattern(1024, 5)) {
		t.Fatal("guest WRITE through softib's window landed wrong")
	}
	wantK(t, "guest READ through softib's type 2 window", kop(k, "read", "off", 20000, "len", 512, "raddr", wmr.Addr()+1024+256, "rkey", s2), kWCSuccess)
	if !bytes.Equal(kget(20000, 512), pattern(1024, 5)[256:768]) {
		t.Fatal("guest READ through softib's window returned wrong bytes")
	}
	k.qp.PostRecv([]verbs.RecvWR{{ID: 52, SGL: []verbs.SGE{rbuf.SGE(0, 256)}}})
	wantK(t, "guest SEND_WITH_INV of softib's type 2 window", kop(k, "send_inv", "rkey", s2), kWCSuccess)
	if wc := mmPoll(t, k.cq); wc.Status != verbs.WCSuccess || wc.InvalidatedRKey != s2 {
		t.Fatalf("softib receive of the guest's SEND_WITH_INV: %+v", wc)
	}
	wantK(t, "guest WRITE after invalidating softib's window", kop(k, "write", "off", 0, "len", 64, "raddr", wmr.Addr()+1024, "rkey", s2), kWCRemAccessErr)

	k = conn()
	mw1, err := verbs.AllocMW(pd, verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := mw1.Bind(k.qp, 77, verbs.SendSignaled, verbs.MWBind{MR: wmr, Addr: wmr.Addr() + 2048, Length: 1024, Access: verbs.AccessRemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "softib type 1 bind", mmPoll(t, k.cq), verbs.WCSuccess)
	wantK(t, "guest WRITE through softib's type 1 window", kop(k, "write", "off", 0, "len", 1024, "raddr", wmr.Addr()+2048, "rkey", s1), kWCSuccess)
	k.qp.PostRecv([]verbs.RecvWR{{ID: 53, SGL: []verbs.SGE{rbuf.SGE(0, 256)}}})
	wantK(t, "guest SEND_WITH_INV of softib's type 1 window", kop(k, "send_inv", "rkey", s1), kWCRemInvReqErr)

	// --- rdmarw contexts against the guest's memory ---
	// Three pages of four, more elements than the QP's two send SGEs:
	// Auto WRITEs them through one fast-reg MR (REG_MR + one WRITE);
	// SGEOnly READs them back as two READs.
	k = conn()
	rw := mmAligned(4 * 4096)
	for i := range rw {
		rw[i] = byte(i*11 + 2)
	}
	rwMR, _ := pd.RegMR(rw, verbs.AccessLocalWrite)
	sgl := []verbs.SGE{rwMR.SGE(0, 4096), rwMR.SGE(2*4096, 4096), rwMR.SGE(3*4096, 4096)}
	want := append(append(append([]byte{}, rw[:4096]...), rw[2*4096:3*4096]...), rw[3*4096:]...)
	var rwc rdmarw.Ctx
	if n, err := rwc.Init(k.qp, pd, sgl, 0, k.kaddr+40960, k.krkey, rdmarw.Write); err != nil || n != 2 || rwc.NumMRs() != 1 {
		t.Fatalf("rdmarw WRITE Init: %d WRs, %d MRs, %v", n, rwc.NumMRs(), err)
	}
	if err := rwc.Post(nil, 101); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "rdmarw WRITE (fast-reg) into the guest", mmPoll(t, k.cq), verbs.WCSuccess)
	rwc.Destroy()
	if !bytes.Equal(kget(40960, 3*4096), want) {
		t.Fatal("rdmarw WRITE landed wrong in the guest")
	}
	clear(rw)
	rwc.Mode = rdmarw.SGEOnly
	if n, err := rwc.Init(k.qp, pd, sgl, 0, k.kaddr+40960, k.krkey, rdmarw.Read); err != nil || n != 2 {
		t.Fatalf("rdmarw READ Init: %d WRs, %v", n, err)
	}
	if err := rwc.Post(nil, 102); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "rdmarw READ (two WRs) from the guest", mmPoll(t, k.cq), verbs.WCSuccess)
	rwc.Destroy()
	got := append(append(append([]byte{}, rw[:4096]...), rw[2*4096:3*4096]...), rw[3*4096:]...)
	if !bytes.Equal(got, want) {
		t.Fatal("rdmarw READ from the guest returned wrong bytes")
	}

	g.call(map[string]any{"op": "quit"})
	r, err := job.Wait(ctx)
	if err != nil || r.Code != 0 {
		t.Fatalf("guest agent: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
	}
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, "cnt") {
			t.Log(l)
		}
	}
}

// mmPoll waits for one completion on cq under the hang guard.
func mmPoll(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(mmHangGuard)
	for {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("hang guard: no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
