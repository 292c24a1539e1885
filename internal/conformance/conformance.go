// Package conformance is the verbs conformance suite that every provider
// passes: softib's Soft-RoCE provider (rxe) in the normal test run, and the
// ibverbs provider over a kernel RDMA device (Linux rdma_rxe in the interop
// guest). It exercises the verbs API as an application does, through
// verbs.Device only, so the same code proves both providers.
package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"softib/verbs"
)

// Pair is two devices that reach each other (they may be two opens of one
// device: a QP can talk to another QP of its own device).
type Pair struct {
	A, B verbs.Device
	// PeerPort is the AHAttr.DPort toward the other device (0 = 4791).
	PeerPort uint16
}

// Run runs the whole suite against the pair open returns (called once per
// subtest, so each starts from fresh devices).
func Run(t *testing.T, open func(t *testing.T) Pair) {
	tests := []struct {
		name string
		fn   func(t *testing.T, p Pair)
	}{
		{"Query", testQuery},
		{"RCSendRecv", testRCSendRecv},
		{"RCWriteRead", testRCWriteRead},
		{"RCAtomics", testRCAtomics},
		{"RCRemoteAccessError", testRCRemoteAccess},
		{"RCSRQ", testRCSRQ},
		{"MemoryWindowType2", testMWType2},
		{"MemoryWindowType1", testMWType1},
		{"UDSendRecv", testUD},
		{"CompletionChannel", testChannel},
		{"Drain", testDrain},
		{"IllegalTransition", testIllegal},
		{"ModifyAH", testModifyAH},
		{"SharedMR", testSharedMR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// ipv4GID returns the index of the device's IPv4-mapped RoCEv2 GID.
func ipv4GID(t *testing.T, d verbs.Device) (int, verbs.GID) {
	t.Helper()
	tbl, err := d.GIDTable(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tbl {
		if e.GID.IsIPv4() && e.Type == verbs.GIDTypeRoCEv2 {
			return e.Index, e.GID
		}
	}
	t.Fatalf("%s has no IPv4 RoCEv2 GID: %v", d.Name(), tbl)
	return 0, verbs.GID{}
}

func testQuery(t *testing.T, p Pair) {
	for _, d := range []verbs.Device{p.A, p.B} {
		a := d.Query()
		if a.MaxQP <= 0 || a.MaxCQE <= 0 || a.MaxSGE <= 0 || a.PhysPortCnt < 1 {
			t.Errorf("%s: implausible attributes %+v", d.Name(), a)
		}
		pa, err := d.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		if pa.State != verbs.PortActive || !pa.ActiveMTU.Valid() || pa.LinkLayer != verbs.LinkLayerEthernet {
			t.Errorf("%s port 1: state %v MTU %v link %v", d.Name(), pa.State, pa.ActiveMTU, pa.LinkLayer)
		}
		ipv4GID(t, d)
		if _, err := d.QueryPort(9); err == nil {
			t.Errorf("%s: port 9 exists", d.Name())
		}
	}
}

// end is one side of a connection: its PD, CQs, QP and a buffer.
type end struct {
	dev  verbs.Device
	pd   verbs.PD
	scq  verbs.CQ
	rcq  verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	gidx int
	gid  verbs.GID
	ch   *verbs.CompChannel
}

const bufSize = 1 << 16

func newEnd(t *testing.T, d verbs.Device, typ verbs.QPType, srq bool, access verbs.AccessFlags) *end {
	t.Helper()
	e := &end{dev: d}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	e.ch = verbs.NewCompChannel(4)
	if e.scq, err = d.CreateCQ(verbs.CQAttr{CQE: 256}); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = d.CreateCQ(verbs.CQAttr{CQE: 256, Channel: e.ch}); err != nil {
		t.Fatal(err)
	}
	ia := &verbs.QPInitAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}}
	if srq {
		s, err := e.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 64, MaxSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		ia.SRQ = s
		t.Cleanup(func() { s.Destroy() })
	}
	if e.qp, err = e.pd.CreateQP(ia); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, bufSize)
	if e.mr, err = e.pd.RegMR(buf, access); err != nil {
		t.Fatal(err)
	}
	e.gidx, e.gid = ipv4GID(t, d)
	t.Cleanup(func() {
		e.qp.Destroy()
		e.mr.Dereg()
		e.scq.Destroy()
		e.rcq.Destroy()
		e.pd.Dealloc()
	})
	return e
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// connectRC moves a and b's QPs RESET→INIT→RTR→RTS toward each other.
func connectRC(t *testing.T, p Pair, a, b *end, access verbs.AccessFlags) {
	t.Helper()
	for _, x := range [][2]*end{{a, b}, {b, a}} {
		l, r := x[0], x[1]
		if err := l.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: access},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		rtr := &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: r.qp.QPN(), RQPSN: 100,
			MaxDestRdAtomic: 4, MinRNRTimer: 12,
			AH: verbs.AHAttr{IsGlobal: true, PortNum: 1, DPort: p.PeerPort, GRH: verbs.GlobalRoute{DGID: r.gid, SGIDIndex: uint8(l.gidx), HopLimit: 64}}}
		if err := l.qp.Modify(rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
			verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []*end{a, b} {
		rts := &verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
		if err := l.qp.Modify(rts, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
			verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			t.Fatal(err)
		}
	}
}

// wait polls cq until one completion arrives (or 10 s pass).
func wait(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		time.Sleep(50 * time.Microsecond)
	}
	t.Fatal("no completion within 10 s")
	return verbs.WC{}
}

func waitOK(t *testing.T, cq verbs.CQ, op verbs.WCOpcode) verbs.WC {
	t.Helper()
	wc := wait(t, cq)
	if wc.Status != verbs.WCSuccess || wc.Opcode != op {
		t.Fatalf("completion %v %v (want %v success)", wc.Opcode, wc.Status, op)
	}
	return wc
}

func post(t *testing.T, qp verbs.QP, wr verbs.SendWR) {
	t.Helper()
	if _, err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

func postRecv(t *testing.T, qp verbs.QP, id uint64, sge ...verbs.SGE) {
	t.Helper()
	if _, err := qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: sge}}); err != nil {
		t.Fatal(err)
	}
}

// fence orders b's memory with this goroutine: a zero-length SEND from a
// to b and b's receive completion. A provider writes remote memory (WRITE,
// atomics) and reads it (READ) on goroutines of its own, in step with the
// peer only through the network, which the race detector cannot see; b's
// receive completion is made after everything a sent before it. Fence
// after filling memory a peer will read, and before checking memory a peer
// wrote.
func fence(t *testing.T, a, b *end) {
	t.Helper()
	postRecv(t, b.qp, 0xfe)
	post(t, a.qp, verbs.SendWR{ID: 0xfe, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	waitOK(t, a.scq, verbs.WCSend)
	waitOK(t, b.rcq, verbs.WCRecv)
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func testRCSendRecv(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, allAccess)
	connectRC(t, p, a, b, allAccess)
	for _, size := range []int{1, 1000, 4096, 60000} {
		src, dst := a.mr.Buf()[:size], b.mr.Buf()[:size]
		fill(src, byte(size))
		clear(dst)
		postRecv(t, b.qp, 7, b.mr.SGE(0, size))
		post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRSendWithImm, ImmData: 0x01020304, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, size)}})
		waitOK(t, a.scq, verbs.WCSend)
		wc := waitOK(t, b.rcq, verbs.WCRecv)
		if wc.WRID != 7 || int(wc.ByteLen) != size || wc.Flags&verbs.WCFlagWithImm == 0 || wc.ImmData != 0x01020304 || wc.QPN != b.qp.QPN() {
			t.Fatalf("recv completion %+v", wc)
		}
		if !bytes.Equal(src, dst) {
			t.Fatalf("%d-byte SEND: data differs", size)
		}
	}
	// Two SGEs on each side, and inline data.
	fill(a.mr.Buf()[:200], 9)
	postRecv(t, b.qp, 8, b.mr.SGE(1000, 50), b.mr.SGE(2000, 150))
	post(t, a.qp, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 120), a.mr.SGE(120, 80)}})
	waitOK(t, a.scq, verbs.WCSend)
	waitOK(t, b.rcq, verbs.WCRecv)
	got := append(append([]byte{}, b.mr.Buf()[1000:1050]...), b.mr.Buf()[2000:2150]...)
	if !bytes.Equal(got, a.mr.Buf()[:200]) {
		t.Fatal("scatter/gather SEND: data differs")
	}
}

func testRCWriteRead(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, allAccess)
	connectRC(t, p, a, b, allAccess)
	fill(a.mr.Buf(), 3)
	post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 40000)},
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()})
	waitOK(t, a.scq, verbs.WCRDMAWrite)
	fence(t, a, b)
	if !bytes.Equal(b.mr.Buf()[100:40100], a.mr.Buf()[:40000]) {
		t.Fatal("RDMA WRITE: data differs")
	}
	// WRITE_WITH_IMM consumes a receive.
	postRecv(t, b.qp, 5)
	post(t, a.qp, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 77, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	waitOK(t, a.scq, verbs.WCRDMAWrite)
	if wc := waitOK(t, b.rcq, verbs.WCRecvRDMAWithImm); wc.ImmData != 77 || wc.WRID != 5 {
		t.Fatalf("WRITE_WITH_IMM completion %+v", wc)
	}
	fill(b.mr.Buf()[50000:], 11)
	fence(t, a, b)
	post(t, a.qp, verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(1000, 15000)},
		RemoteAddr: b.mr.Addr() + 50000, RKey: b.mr.RKey()})
	if wc := waitOK(t, a.scq, verbs.WCRDMARead); wc.ByteLen != 15000 {
		t.Fatalf("READ byte_len %d", wc.ByteLen)
	}
	if !bytes.Equal(a.mr.Buf()[1000:16000], b.mr.Buf()[50000:65000]) {
		t.Fatal("RDMA READ: data differs")
	}
}

func testRCAtomics(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, allAccess)
	connectRC(t, p, a, b, allAccess)
	if b.dev.Query().AtomicCap == verbs.AtomicNone {
		t.Skipf("%s has no atomics", b.dev.Name())
	}
	binary.LittleEndian.PutUint64(b.mr.Buf()[8:], 40)
	fence(t, a, b)
	post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 2})
	waitOK(t, a.scq, verbs.WCFetchAdd)
	fence(t, a, b)
	if old, now := binary.LittleEndian.Uint64(a.mr.Buf()), binary.LittleEndian.Uint64(b.mr.Buf()[8:]); old != 40 || now != 42 {
		t.Fatalf("FETCH_ADD: returned %d, memory %d", old, now)
	}
	fence(t, a, b) // the check read b's memory, which the CMP_SWP writes next
	post(t, a.qp, verbs.SendWR{ID: 2, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(16, 8)},
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 1000})
	waitOK(t, a.scq, verbs.WCCompSwap)
	fence(t, a, b)
	if old, now := binary.LittleEndian.Uint64(a.mr.Buf()[16:]), binary.LittleEndian.Uint64(b.mr.Buf()[8:]); old != 42 || now != 1000 {
		t.Fatalf("CMP_SWP: returned %d, memory %d", old, now)
	}
}

func testRCRemoteAccess(t *testing.T, p Pair) {
	a := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess)
	b := newEnd(t, p.B, verbs.QPTypeRC, false, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	connectRC(t, p, a, b, allAccess)
	post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	wc := wait(t, a.scq)
	if wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE to a read-only MR completed with %v, want REM_ACCESS_ERR", wc.Status)
	}
	if err := wc.Err(); !errors.Is(err, &verbs.WCError{Status: verbs.WCRemAccessErr}) {
		t.Fatalf("WC error %v", err)
	}
	if st := a.qp.State(); st != verbs.QPStateErr {
		t.Fatalf("requester QP in %v after a remote access error, want ERR", st)
	}
}

func testRCSRQ(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, true, allAccess)
	connectRC(t, p, a, b, allAccess)
	_, init, err := b.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	srq := init.SRQ
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("PostRecv on an SRQ QP: %v, want ErrInvalidArgument", err)
	}
	for i := 0; i < 4; i++ {
		if _, err := srq.PostRecv([]verbs.RecvWR{{ID: uint64(10 + i), SGL: []verbs.SGE{b.mr.SGE(i*1000, 1000)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		fill(a.mr.Buf()[:500], byte(i))
		post(t, a.qp, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 500)}})
		waitOK(t, a.scq, verbs.WCSend)
		wc := waitOK(t, b.rcq, verbs.WCRecv)
		if wc.WRID != uint64(10+i) || wc.ByteLen != 500 {
			t.Fatalf("SRQ completion %+v", wc)
		}
		if !bytes.Equal(b.mr.Buf()[i*1000:i*1000+500], a.mr.Buf()[:500]) {
			t.Fatalf("SRQ receive %d: data differs", i)
		}
	}
}

// udQKey is the Q_Key of the UD cases' QPs.
const udQKey = 0x11111111

// udEnds makes a UD QP on each device of p and brings both to RTS with
// udQKey.
func udEnds(t *testing.T, p Pair) (a, b *end) {
	t.Helper()
	a, b = newEnd(t, p.A, verbs.QPTypeUD, false, verbs.AccessLocalWrite), newEnd(t, p.B, verbs.QPTypeUD, false, verbs.AccessLocalWrite)
	for _, e := range []*end{a, b} {
		if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: udQKey},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func testUD(t *testing.T, p Pair) {
	a, b := udEnds(t, p)
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, DPort: p.PeerPort,
		GRH: verbs.GlobalRoute{DGID: b.gid, SGIDIndex: uint8(a.gidx), HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	fill(a.mr.Buf()[:512], 5)
	postRecv(t, b.qp, 3, b.mr.SGE(0, 40+512))
	post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 512)},
		AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: udQKey})
	waitOK(t, a.scq, verbs.WCSend)
	wc := waitOK(t, b.rcq, verbs.WCRecv)
	if wc.ByteLen != 40+512 || wc.SrcQP != a.qp.QPN() || wc.Flags&verbs.WCFlagGRH == 0 {
		t.Fatalf("UD completion %+v", wc)
	}
	if !bytes.Equal(b.mr.Buf()[40:552], a.mr.Buf()[:512]) {
		t.Fatal("UD SEND: data differs")
	}
}

func testChannel(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, allAccess)
	connectRC(t, p, a, b, allAccess)
	if err := b.rcq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	postRecv(t, b.qp, 1, b.mr.SGE(0, 100))
	post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 100)}})
	select {
	case cq := <-b.ch.C():
		if cq != b.rcq {
			t.Fatal("event for another CQ")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no completion event within 10 s")
	}
	waitOK(t, b.rcq, verbs.WCRecv)
	waitOK(t, a.scq, verbs.WCSend)
}

func testDrain(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, allAccess)
	connectRC(t, p, a, b, allAccess)
	for i := 0; i < 5; i++ {
		postRecv(t, b.qp, uint64(i), b.mr.SGE(i*100, 100))
	}
	// Poll both CQs meanwhile, as an application does: a provider may
	// need its CQs polled to see the drain through (the kernel's
	// ib_drain_qp polls too).
	got := make(chan []verbs.WC, 1)
	stop := make(chan struct{})
	go func() {
		var out []verbs.WC
		wc := make([]verbs.WC, 8)
		for {
			n, _ := b.rcq.Poll(wc)
			out = append(out, wc[:n]...)
			m, _ := b.scq.Poll(wc)
			if n+m == 0 {
				select {
				case <-stop:
					got <- out
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
		}
	}()
	err := b.qp.Drain()
	// Collect for a moment more: Drain returned, the flushes are queued.
	time.Sleep(10 * time.Millisecond)
	close(stop)
	wcs := <-got
	if err != nil {
		t.Fatalf("%v (receive completions seen: %d)", err, len(wcs))
	}
	if len(wcs) != 5 {
		t.Fatalf("Drain: %d receive completions, want 5 flushed", len(wcs))
	}
	for _, wc := range wcs {
		if wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("flushed receive completed with %v", wc.Status)
		}
	}
	if st := b.qp.State(); st != verbs.QPStateErr {
		t.Fatalf("state %v after Drain", st)
	}
}

func testIllegal(t *testing.T, p Pair) {
	a := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess)
	err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState)
	if !errors.Is(err, verbs.ErrQPState) && !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("RESET→RTS: %v, want ErrQPState or ErrInvalidAttr", err)
	}
	if st := a.qp.State(); st != verbs.QPStateReset {
		t.Fatalf("state %v after a refused transition", st)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); err == nil {
		t.Fatal("PostSend in RESET accepted")
	}
}

const mwAccess = allAccess | verbs.AccessMWBind

// testMWType2 binds a type 2 window with a BIND_MW work request, lets the
// peer WRITE through it, invalidates it with LOCAL_INV, and checks that the
// peer's next WRITE fails with REM_ACCESS_ERR.
func testMWType2(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, mwAccess)
	connectRC(t, p, a, b, allAccess)
	w, err := verbs.AllocMW(b.pd, verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Dealloc()
	rkey := verbs.IncKey(w.RKey())
	post(t, b.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, BindMW: verbs.BindWR{MW: w, RKey: rkey,
		Bind: verbs.MWBind{MR: b.mr, Addr: b.mr.Addr() + 4096, Length: 4096, Access: verbs.AccessRemoteWrite}}})
	waitOK(t, b.scq, verbs.WCBindMW)
	fill(a.mr.Buf()[:100], 21)
	post(t, a.qp, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 100)},
		RemoteAddr: b.mr.Addr() + 4096 + 50, RKey: rkey})
	waitOK(t, a.scq, verbs.WCRDMAWrite)
	fence(t, a, b)
	if !bytes.Equal(b.mr.Buf()[4146:4246], a.mr.Buf()[:100]) {
		t.Fatal("WRITE through a type 2 window: data differs")
	}
	post(t, b.qp, verbs.SendWR{ID: 3, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: rkey})
	waitOK(t, b.scq, verbs.WCLocalInv)
	post(t, a.qp, verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 100)},
		RemoteAddr: b.mr.Addr() + 4096, RKey: rkey})
	if wc := wait(t, a.scq); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through an invalidated window: %v, want REM_ACCESS_ERR", wc.Status)
	}
}

// testMWType1 binds a type 1 window with MW.Bind, lets the peer WRITE
// through it inside its range, then unbinds it (length 0) and checks that
// the peer's next WRITE fails with REM_ACCESS_ERR.
func testMWType1(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, mwAccess)
	connectRC(t, p, a, b, allAccess)
	w, err := verbs.AllocMW(b.pd, verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Dealloc()
	rkey, err := w.Bind(b.qp, 1, verbs.SendSignaled, verbs.MWBind{MR: b.mr, Addr: b.mr.Addr() + 8192, Length: 1024, Access: verbs.AccessRemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	waitOK(t, b.scq, verbs.WCBindMW)
	fill(a.mr.Buf()[:64], 33)
	post(t, a.qp, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)},
		RemoteAddr: b.mr.Addr() + 8192, RKey: rkey})
	waitOK(t, a.scq, verbs.WCRDMAWrite)
	fence(t, a, b)
	if !bytes.Equal(b.mr.Buf()[8192:8256], a.mr.Buf()[:64]) {
		t.Fatal("WRITE through a type 1 window: data differs")
	}
	if _, err := w.Bind(b.qp, 3, verbs.SendSignaled, verbs.MWBind{MR: b.mr, Addr: b.mr.Addr() + 8192}); err != nil {
		t.Fatal(err)
	}
	waitOK(t, b.scq, verbs.WCBindMW)
	post(t, a.qp, verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)},
		RemoteAddr: b.mr.Addr() + 8192, RKey: rkey})
	if wc := wait(t, a.scq); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through an unbound window: %v, want REM_ACCESS_ERR", wc.Status)
	}
}

// optional reports whether an optional verb is there: nil means yes,
// ErrNotSupported means the provider refuses it as it must when it
// cannot (the test ends there), anything else fails.
func optional(t *testing.T, what string, err error) bool {
	t.Helper()
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Logf("%s: not supported by this provider (%v)", what, err)
		return false
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return true
}

// testModifyAH: modify_av changes an AH in place (rxe), or the provider
// refuses it with ErrNotSupported (ibverbs: libibverbs has no such verb).
// The modified AH still reaches the peer, with the new attributes.
func testModifyAH(t *testing.T, p Pair) {
	a, b := udEnds(t, p)
	attr := verbs.AHAttr{IsGlobal: true, PortNum: 1, DPort: p.PeerPort,
		GRH: verbs.GlobalRoute{DGID: b.gid, SGIDIndex: uint8(a.gidx), HopLimit: 64}}
	ah, err := a.pd.CreateAH(&attr)
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	attr.GRH.HopLimit, attr.GRH.TrafficClass = 8, 0x20
	if !optional(t, "modify AH", verbs.ModifyAH(ah, &attr)) {
		return
	}
	if got := ah.Attr(); got != attr {
		t.Fatalf("AH after modify: %+v, want %+v", got, attr)
	}
	postRecv(t, b.qp, 1, b.mr.SGE(0, 40+64))
	post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)},
		AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: udQKey})
	waitOK(t, a.scq, verbs.WCSend)
	waitOK(t, b.rcq, verbs.WCRecv)
}

// testSharedMR: register_smr gives a second MR with its own rkey over
// the same memory (rxe), or the provider refuses it with ErrNotSupported
// (ibverbs: libibverbs has no shared registration). A peer READs through
// the shared rkey, also after the original MR is deregistered.
func testSharedMR(t *testing.T, p Pair) {
	a, b := newEnd(t, p.A, verbs.QPTypeRC, false, allAccess), newEnd(t, p.B, verbs.QPTypeRC, false, allAccess)
	connectRC(t, p, a, b, allAccess)
	sm, err := verbs.RegSharedMR(b.pd, b.mr, verbs.AccessLocalWrite|verbs.AccessRemoteRead, b.mr.Addr())
	if !optional(t, "register shared MR", err) {
		return
	}
	defer sm.Dereg()
	if sm.RKey() == b.mr.RKey() {
		t.Fatal("the shared MR has the original's rkey")
	}
	fill(b.mr.Buf()[:4096], 13)
	fence(t, a, b)
	if err := b.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	post(t, a.qp, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 4096)},
		RemoteAddr: sm.Addr(), RKey: sm.RKey()})
	waitOK(t, a.scq, verbs.WCRDMARead)
	if !bytes.Equal(a.mr.Buf()[:4096], sm.Buf()[:4096]) {
		t.Fatal("READ through the shared rkey: data differs")
	}
}
