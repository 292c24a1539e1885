package rxe_test

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unsafe"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/verbs"
)

// Fast registration and memory windows: the key state machines of
// rxe_mr.c/rxe_mw.c (rvt_fast_reg_mr, rvt_invalidate_rkey) through real
// RC traffic between two devices. A failed remote access moves both QPs to
// the error state, so each failing step uses a fresh QP pair (mmConn) on
// the same devices and PDs.

// mmHangGuard bounds completion waits; it catches hangs and times nothing.
const mmHangGuard = 30 * time.Second

type mmDev struct {
	dev verbs.Device
	pd  verbs.PD
}

func mmOpen(t *testing.T) *mmDev {
	t.Helper()
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return &mmDev{d, pd}
}

type mmEnd struct {
	*mmDev
	cq verbs.CQ
	qp verbs.QP
}

// mmConn connects a new RC QP on a to a new one on b.
func mmConn(t *testing.T, a, b *mmDev) (*mmEnd, *mmEnd) {
	t.Helper()
	return mmConnType(t, a, b, verbs.QPTypeRC)
}

// mmConnType connects a new QP of type typ (RC or UC) on a to one on b.
func mmConnType(t *testing.T, a, b *mmDev, typ verbs.QPType) (*mmEnd, *mmEnd) {
	t.Helper()
	mk := func(d *mmDev) *mmEnd {
		cq, err := d.dev.CreateCQ(verbs.CQAttr{CQE: 64})
		if err != nil {
			t.Fatal(err)
		}
		qp, err := d.pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 4, MaxRecvSGE: 1, MaxInlineData: 64}})
		if err != nil {
			t.Fatal(err)
		}
		return &mmEnd{d, cq, qp}
	}
	ea, eb := mk(a), mk(b)
	rtrMask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	rtsMask := verbs.QPAttrState | verbs.QPAttrSQPSN
	if typ == verbs.QPTypeRC {
		rtrMask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		rtsMask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	for _, p := range [][2]*mmEnd{{ea, eb}, {eb, ea}} {
		s, peer := p[0], p[1]
		gid, _ := peer.dev.QueryGID(1, 1)
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
			AccessFlags: verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic | verbs.AccessLocalWrite},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			MaxDestRdAtomic: 4, MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
			rtrMask); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			rtsMask); err != nil {
			t.Fatal(err)
		}
	}
	return ea, eb
}

func (e *mmEnd) wait(t *testing.T) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(mmHangGuard)
	for {
		n, err := e.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("hang guard: no completion")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// do posts one signaled work request and returns its completion.
func (e *mmEnd) do(t *testing.T, wr verbs.SendWR) verbs.WC {
	t.Helper()
	wr.Flags |= verbs.SendSignaled
	if _, err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	return e.wait(t)
}

func wantStatus(t *testing.T, what string, wc verbs.WC, st verbs.WCStatus) {
	t.Helper()
	if wc.Status != st {
		t.Fatalf("%s: %s (%v), want %s", what, wc.Status.ID(), wc.Opcode, st.ID())
	}
}

// mmAligned returns n bytes starting on a 4 KiB boundary.
func mmAligned(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0])))%4096) % 4096
	return b[off : off+n : off+n]
}

// writeWR writes the bytes of mr at [off, off+n) to raddr/rkey.
func writeWR(mr verbs.MR, off, n int, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{mr.SGE(off, n)}, RemoteAddr: raddr, RKey: rkey}
}

func TestFastRegKeyStateMachine(t *testing.T) {
	a, b := mmOpen(t), mmOpen(t)
	if f := a.dev.Query().DeviceCapFlags; f&verbs.DeviceMemMgtExtensions == 0 {
		t.Fatal("no MEM_MGT_EXTENSIONS")
	}
	// a's memory: three pages of one buffer, the middle one skipped, so
	// the fast-reg MR maps two fragments.
	back := mmAligned(3 * 4096)
	backMR, err := a.pd.RegMR(back, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 8192)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	srcMR, _ := b.pd.RegMR(src, verbs.AccessLocalWrite)

	fmr, err := verbs.AllocMR(a.pd, verbs.MRTypeMemReg, 4)
	if err != nil {
		t.Fatal(err)
	}
	if fmr.Valid() {
		t.Fatal("fast-reg MR valid at allocation")
	}
	if _, err := verbs.AllocMR(a.pd, verbs.MRTypeSGGaps, 4); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("SG_GAPS: %v", err)
	}
	if _, err := verbs.AllocMR(a.pd, verbs.MRTypeMemReg, rxe.MaxFastRegPageList+1); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("too many pages: %v", err)
	}
	sgl := []verbs.SGE{backMR.SGE(0, 4096), backMR.SGE(2*4096, 4096)}
	if n, err := fmr.MapMRSG(sgl, 0, 4096); err != nil || n != 2 || fmr.Len() != 8192 || fmr.IOVA() != backMR.Addr() {
		t.Fatalf("MapMRSG = %d, %v; len %d iova %#x", n, err, fmr.Len(), fmr.IOVA())
	}
	key0 := fmr.RKey()

	// 1. Before REG_MR the key is worth nothing.
	_, tb := mmConn(t, a, b)
	wantStatus(t, "write to a free MR", tb.do(t, writeWR(srcMR, 0, 64, fmr.IOVA(), key0)), verbs.WCRemAccessErr)

	// 2. REG_MR with a new key byte; the peer writes across both
	// fragments and reads back.
	ta, tb := mmConn(t, a, b)
	key1 := verbs.IncKey(key0)
	wantStatus(t, "REG_MR", ta.do(t, verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: key1,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead}}), verbs.WCSuccess)
	if !fmr.Valid() || fmr.RKey() != key1 || fmr.LKey() != key1 {
		t.Fatalf("after REG_MR: valid %v key %#x want %#x", fmr.Valid(), fmr.RKey(), key1)
	}
	wc := tb.do(t, writeWR(srcMR, 0, 8192, fmr.IOVA(), key1))
	wantStatus(t, "write across fragments", wc, verbs.WCSuccess)
	ta.qp.Query() // the responder's lock: its writes happen before
	if !bytes.Equal(back[:4096], src[:4096]) || !bytes.Equal(back[2*4096:], src[4096:]) || back[4096] != 0 {
		t.Fatal("WRITE through the fast-reg MR landed wrong")
	}
	dst := make([]byte, 8192)
	dstMR, _ := b.pd.RegMR(dst, verbs.AccessLocalWrite)
	wc = tb.do(t, verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{dstMR.SGE(0, 6000)}, RemoteAddr: fmr.IOVA() + 1000, RKey: key1})
	wantStatus(t, "read across fragments", wc, verbs.WCSuccess)
	if !bytes.Equal(dst[:6000], src[1000:7000]) {
		t.Fatal("READ through the fast-reg MR returned wrong bytes")
	}
	// The old key byte no longer matches.
	wantStatus(t, "REG_MR of a valid MR", ta.do(t, verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: key1,
		Access: verbs.AccessLocalWrite}}), verbs.WCLocQPOpErr)
	if _, err := fmr.MapMRSG(sgl, 0, 4096); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("MapMRSG of a registered MR: %v", err)
	}

	// 3. The peer's SEND_WITH_INV invalidates it; the next access fails
	// with REM_ACCESS_ERR.
	ta, tb = mmConn(t, a, b)
	rbuf, _ := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if _, err := ta.qp.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{rbuf.SGE(0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "SEND_WITH_INV", tb.do(t, verbs.SendWR{Opcode: verbs.WRSendWithInv, InvalidateRKey: key1,
		Flags: verbs.SendInline, InlineData: []byte("inv")}), verbs.WCSuccess)
	wc = ta.wait(t)
	if wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCFlagWithInv == 0 || wc.InvalidatedRKey != key1 {
		t.Fatalf("receive of SEND_WITH_INV: %+v", wc)
	}
	if fmr.Valid() {
		t.Fatal("MR valid after SEND_WITH_INV")
	}
	wantStatus(t, "write after remote invalidation", tb.do(t, writeWR(srcMR, 0, 64, fmr.IOVA(), key1)), verbs.WCRemAccessErr)

	// 4. Re-register with the next key byte, LOCAL_INV it, and the peer's
	// access fails again; the stale key of step 2 never worked meanwhile.
	ta, tb = mmConn(t, a, b)
	key2 := verbs.IncKey(key1)
	wantStatus(t, "REG_MR again", ta.do(t, verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: key2,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}}), verbs.WCSuccess)
	wantStatus(t, "write with the new key", tb.do(t, writeWR(srcMR, 0, 64, fmr.IOVA(), key2)), verbs.WCSuccess)
	wantStatus(t, "LOCAL_INV", ta.do(t, verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: key2}), verbs.WCSuccess)
	wantStatus(t, "write after LOCAL_INV", tb.do(t, writeWR(srcMR, 0, 64, fmr.IOVA(), key2)), verbs.WCRemAccessErr)

	// 5. A key byte change is all REG_MR may make.
	ta, _ = mmConn(t, a, b)
	wantStatus(t, "REG_MR with another index", ta.do(t, verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: key2 ^ 0x100,
		Access: verbs.AccessLocalWrite}}), verbs.WCLocQPOpErr)
	if err := fmr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// TestOrdinaryMRNotInvalidatable: LOCAL_INV and SEND_WITH_INV of a RegMR
// key fail as in Linux rxe (LOC_QP_OP_ERR; REM_INV_REQ_ERR at the
// receiver) and leave the MR working.
func TestOrdinaryMRNotInvalidatable(t *testing.T) {
	a, b := mmOpen(t), mmOpen(t)
	buf := make([]byte, 256)
	mr, _ := a.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	src, _ := b.pd.RegMR(bytes.Repeat([]byte{0xAB}, 64), verbs.AccessLocalWrite)

	ta, _ := mmConn(t, a, b)
	wantStatus(t, "LOCAL_INV of an ordinary MR", ta.do(t, verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey()}), verbs.WCLocQPOpErr)
	if ta.qp.State() != verbs.QPStateErr {
		t.Fatalf("QP %v after a failed LOCAL_INV", ta.qp.State())
	}

	ta, tb := mmConn(t, a, b)
	rbuf, _ := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	ta.qp.PostRecv([]verbs.RecvWR{{ID: 3, SGL: []verbs.SGE{rbuf.SGE(0, 64)}}})
	tb.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSendWithInv, InvalidateRKey: mr.RKey(), Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("x")}})
	wantStatus(t, "receiver of SEND_WITH_INV for an ordinary MR", ta.wait(t), verbs.WCRemInvReqErr)
	wantStatus(t, "sender of SEND_WITH_INV for an ordinary MR", tb.wait(t), verbs.WCRemInvReqErr)

	ta, tb = mmConn(t, a, b)
	wantStatus(t, "write to the ordinary MR afterwards", tb.do(t, writeWR(src, 0, 64, mr.Addr(), mr.RKey())), verbs.WCSuccess)
	ta.qp.Query()
	if buf[0] != 0xAB {
		t.Fatal("write did not land")
	}
}

func TestMapMRSGRules(t *testing.T) {
	a := mmOpen(t)
	back := mmAligned(8 * 4096)
	mr, _ := a.pd.RegMR(back, verbs.AccessLocalWrite)
	fmr, err := verbs.AllocMR(a.pd, verbs.MRTypeMemReg, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sgl  []verbs.SGE
		off  uint32
		want int
		len  int
	}{
		{"first starts mid-page", []verbs.SGE{mr.SGE(100, 4096-100), mr.SGE(4096, 4096)}, 0, 2, 8092},
		{"offset into the first", []verbs.SGE{mr.SGE(0, 4096), mr.SGE(2*4096, 100)}, 96, 2, 4000 + 100},
		{"gap: second not page aligned", []verbs.SGE{mr.SGE(0, 4096), mr.SGE(4096+8, 100)}, 0, 1, 4096},
		{"gap: first ends mid-page", []verbs.SGE{mr.SGE(0, 100), mr.SGE(4096, 100)}, 0, 1, 100},
		{"page list full", []verbs.SGE{mr.SGE(0, 2*4096), mr.SGE(3*4096, 4096), mr.SGE(5*4096, 4096)}, 0, 2, 3 * 4096},
		{"too big for the list", []verbs.SGE{mr.SGE(0, 4*4096)}, 0, 0, 0},
	} {
		n, err := fmr.MapMRSG(c.sgl, c.off, 4096)
		if err != nil || n != c.want || fmr.Len() != c.len {
			t.Errorf("%s: mapped %d (len %d), %v; want %d (len %d)", c.name, n, fmr.Len(), err, c.want, c.len)
		}
	}
	if _, err := fmr.MapMRSG([]verbs.SGE{{Addr: 0x1000, Length: 4096, LKey: 0x12345}}, 0, 4096); !errors.Is(err, verbs.ErrInvalidLKey) {
		t.Errorf("unknown lkey: %v", err)
	}
	if _, err := fmr.MapMRSG([]verbs.SGE{mr.SGE(0, 10)}, 0, 1000); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("page size 1000: %v", err)
	}
}

func TestMemoryWindowType2(t *testing.T) {
	a, b := mmOpen(t), mmOpen(t)
	if f := a.dev.Query().DeviceCapFlags; f&verbs.DeviceMemWindowType2B == 0 {
		t.Fatal("no MEM_WINDOW_TYPE_2B")
	}
	buf := make([]byte, 4096)
	mr, _ := a.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
	noBind, _ := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	src, _ := b.pd.RegMR(bytes.Repeat([]byte{0x5A}, 256), verbs.AccessLocalWrite)
	scratch, _ := b.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	mw, err := verbs.AllocMW(a.pd, verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mw.Bind(nil, 0, 0, verbs.MWBind{}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("type 2 Bind call: %v", err)
	}
	bindWR := func(key uint32, m verbs.MR, addr, length uint64, acc verbs.AccessFlags) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRBindMW, BindMW: verbs.BindWR{MW: mw, RKey: key,
			Bind: verbs.MWBind{MR: m, Addr: addr, Length: length, Access: acc}}}
	}

	// Bind errors complete with MW_BIND_ERR: an MR without MW_BIND.
	ta, _ := mmConn(t, a, b)
	wantStatus(t, "bind to an MR without MW_BIND", ta.do(t, bindWR(verbs.IncKey(mw.RKey()), noBind, noBind.Addr(), 64, verbs.AccessRemoteWrite)), verbs.WCMWBindErr)

	// Bind [1024, 2048) for remote write.
	ta, tb := mmConn(t, a, b)
	key := verbs.IncKey(mw.RKey())
	wantStatus(t, "BIND_MW", ta.do(t, bindWR(key, mr, mr.Addr()+1024, 1024, verbs.AccessRemoteWrite)), verbs.WCSuccess)
	if bnd, k, _ := mw.Query(); k != key || bnd.Length != 1024 || bnd.Addr != mr.Addr()+1024 {
		t.Fatalf("Query: %+v %#x", bnd, k)
	}
	if err := mr.Dereg(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Dereg of an MR with a bound window: %v", err)
	}
	wantStatus(t, "write inside the window", tb.do(t, writeWR(src, 0, 256, mr.Addr()+1024, key)), verbs.WCSuccess)
	ta.qp.Query()
	if buf[1024] != 0x5A || buf[1023] != 0 {
		t.Fatal("write through the window landed wrong")
	}
	// A second bind of a bound type 2 window fails (o10-37.2.30).
	wantStatus(t, "rebind of a bound type 2 window", ta.do(t, bindWR(verbs.IncKey(key), mr, mr.Addr(), 64, verbs.AccessRemoteWrite)), verbs.WCMWBindErr)
	// ta is in error now; the window stays bound to it, so another QP of
	// the same PD cannot use it.
	_, tb2 := mmConn(t, a, b)
	wantStatus(t, "write through another QP than the binder", tb2.do(t, writeWR(src, 0, 16, mr.Addr()+1024, key)), verbs.WCRemAccessErr)

	// Outside the window but inside the MR.
	ta, tb = mmConn(t, a, b)
	mw2, _ := verbs.AllocMW(a.pd, verbs.MWType2)
	key = verbs.IncKey(mw2.RKey())
	wantStatus(t, "BIND_MW", ta.do(t, verbs.SendWR{Opcode: verbs.WRBindMW, BindMW: verbs.BindWR{MW: mw2, RKey: key,
		Bind: verbs.MWBind{MR: mr, Addr: mr.Addr() + 1024, Length: 1024, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}}}), verbs.WCSuccess)
	wantStatus(t, "read inside", tb.do(t, verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{scratch.SGE(0, 16)}, RemoteAddr: mr.Addr() + 2048 - 16, RKey: key}), verbs.WCSuccess)
	wantStatus(t, "write across the window's end", tb.do(t, writeWR(src, 0, 16, mr.Addr()+2048-8, key)), verbs.WCRemAccessErr)

	// LOCAL_INV frees mw2 (from any QP of the PD, as in rxe); a
	// zero-based rebind; the peer's SEND_WITH_INV frees it again.
	ta, tb = mmConn(t, a, b)
	wantStatus(t, "LOCAL_INV of a type 2 window", ta.do(t, verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: key}), verbs.WCSuccess)
	key = verbs.IncKey(key)
	wantStatus(t, "zero-based BIND_MW", ta.do(t, verbs.SendWR{Opcode: verbs.WRBindMW, BindMW: verbs.BindWR{MW: mw2, RKey: key,
		Bind: verbs.MWBind{MR: mr, Addr: mr.Addr() + 3072, Length: 512, Access: verbs.AccessRemoteWrite | verbs.AccessZeroBased}}}), verbs.WCSuccess)
	wantStatus(t, "zero-based write at 256", tb.do(t, writeWR(src, 0, 256, 256, key)), verbs.WCSuccess)
	ta.qp.Query()
	if buf[3072+255] != 0 || buf[3072+256] != 0x5A || buf[3072+511] != 0x5A || buf[3072+512] != 0 {
		t.Fatal("zero-based window write landed wrong")
	}
	rbuf, _ := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	ta.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{rbuf.SGE(0, 64)}}})
	wantStatus(t, "SEND_WITH_INV of the window", tb.do(t, verbs.SendWR{Opcode: verbs.WRSendWithInv, InvalidateRKey: key, Flags: verbs.SendInline, InlineData: []byte("i")}), verbs.WCSuccess)
	if wc := ta.wait(t); wc.Status != verbs.WCSuccess || wc.InvalidatedRKey != key {
		t.Fatalf("receive: %+v", wc)
	}
	wantStatus(t, "write after the window's invalidation", tb.do(t, writeWR(src, 0, 16, 0, key)), verbs.WCRemAccessErr)
	// rxe_check_invalidate_mw refuses only deallocated and type 1
	// windows: invalidating a free one succeeds.
	ta, _ = mmConn(t, a, b)
	wantStatus(t, "LOCAL_INV of a free window", ta.do(t, verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: key}), verbs.WCSuccess)

	for _, w := range []verbs.MW{mw, mw2} {
		if err := w.Dealloc(); err != nil {
			t.Fatal(err)
		}
	}
	if err := mr.Dereg(); err != nil {
		t.Fatalf("Dereg after the windows went: %v", err)
	}
}

func TestMemoryWindowType1(t *testing.T) {
	a, b := mmOpen(t), mmOpen(t)
	buf := make([]byte, 4096)
	mr, _ := a.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind)
	src, _ := b.pd.RegMR(bytes.Repeat([]byte{0x11}, 64), verbs.AccessLocalWrite)
	mw, err := verbs.AllocMW(a.pd, verbs.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	ta, tb := mmConn(t, a, b)
	if _, err := mw.Bind(ta.qp, 1, verbs.SendSignaled, verbs.MWBind{MR: mr, Addr: mr.Addr(), Length: 64, Access: verbs.AccessRemoteWrite | verbs.AccessZeroBased}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("zero-based type 1: %v", err)
	}
	key, err := mw.Bind(ta.qp, 1, verbs.SendSignaled, verbs.MWBind{MR: mr, Addr: mr.Addr() + 64, Length: 64, Access: verbs.AccessRemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	if wc := ta.wait(t); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW || wc.WRID != 1 {
		t.Fatalf("bind completion: %+v", wc)
	}
	wantStatus(t, "write through a type 1 window", tb.do(t, writeWR(src, 0, 64, mr.Addr()+64, key)), verbs.WCSuccess)
	// Usable through any QP of the PD.
	ta2, tb2 := mmConn(t, a, b)
	wantStatus(t, "write through another QP", tb2.do(t, writeWR(src, 0, 8, mr.Addr()+64, key)), verbs.WCSuccess)
	// Not invalidatable (o10-37.2.26).
	wantStatus(t, "LOCAL_INV of a type 1 window", ta2.do(t, verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: key}), verbs.WCLocQPOpErr)
	// Rebinding with length 0 unbinds it.
	ta, tb = mmConn(t, a, b)
	key2, err := mw.Bind(ta.qp, 2, verbs.SendSignaled, verbs.MWBind{})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "unbind", ta.wait(t), verbs.WCSuccess)
	if key2 == key {
		t.Fatal("rebind kept the key byte")
	}
	wantStatus(t, "write to an unbound window", tb.do(t, writeWR(src, 0, 8, mr.Addr()+64, key2)), verbs.WCRemAccessErr)
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mw.Dealloc(); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("second Dealloc: %v", err)
	}
}

// TestRereg moves an MR's access, memory and PD with ibv_rereg_mr's
// semantics: the keys stay, remote accesses see the new registration.
func TestRereg(t *testing.T) {
	a, b := mmOpen(t), mmOpen(t)
	buf1, buf2 := make([]byte, 128), make([]byte, 256)
	mr, err := a.pd.RegMR(buf1, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	key := mr.RKey()
	src, _ := b.pd.RegMR(bytes.Repeat([]byte{0x77}, 64), verbs.AccessLocalWrite)

	if err := verbs.Rereg(mr, verbs.ReregAccess, nil, nil, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	_, tb := mmConn(t, a, b)
	wantStatus(t, "write after rereg without remote write", tb.do(t, writeWR(src, 0, 8, mr.Addr(), key)), verbs.WCRemAccessErr)

	if err := verbs.Rereg(mr, verbs.ReregAccess|verbs.ReregTranslation, nil, buf2, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if mr.RKey() != key || mr.Len() != 256 || &mr.Buf()[0] != &buf2[0] {
		t.Fatalf("after rereg: key %#x (was %#x), len %d", mr.RKey(), key, mr.Len())
	}
	ta, tb := mmConn(t, a, b)
	wantStatus(t, "write to the new memory", tb.do(t, writeWR(src, 0, 64, mr.Addr()+192, key)), verbs.WCSuccess)
	ta.qp.Query()
	if buf2[192] != 0x77 || buf1[0] != 0 {
		t.Fatal("write after the translation rereg landed wrong")
	}

	pd2, _ := a.dev.AllocPD()
	if err := verbs.Rereg(mr, verbs.ReregPD, pd2, nil, 0); err != nil {
		t.Fatal(err)
	}
	_, tb = mmConn(t, a, b)
	wantStatus(t, "write through a QP of the old PD", tb.do(t, writeWR(src, 0, 8, mr.Addr(), key)), verbs.WCRemAccessErr)
	_, tb = mmConn(t, &mmDev{a.dev, pd2}, b)
	wantStatus(t, "write through a QP of the new PD", tb.do(t, writeWR(src, 0, 8, mr.Addr(), key)), verbs.WCSuccess)

	if err := verbs.Rereg(mr, 0, nil, nil, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("no flags: %v", err)
	}
	if err := verbs.Rereg(mr, verbs.ReregAccess, nil, nil, verbs.AccessRemoteWrite); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("remote write without local write: %v", err)
	}
	fmr, _ := verbs.AllocMR(a.pd, verbs.MRTypeMemReg, 1)
	if err := verbs.Rereg(fmr, verbs.ReregAccess, nil, nil, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("rereg of a fast-reg MR: %v", err)
	}
	bmr, _ := pd2.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessMWBind)
	mw, _ := verbs.AllocMW(pd2, verbs.MWType1)
	ta, _ = mmConn(t, &mmDev{a.dev, pd2}, b)
	if _, err := mw.Bind(ta.qp, 1, verbs.SendSignaled, verbs.MWBind{MR: bmr, Addr: bmr.Addr(), Length: 64, Access: verbs.AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "bind", ta.wait(t), verbs.WCSuccess)
	if err := verbs.Rereg(bmr, verbs.ReregAccess, nil, nil, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("rereg with a bound window: %v", err)
	}
}

// TestMemMgtZeroAllocs: WRITEs and READs through a two-fragment fast-reg
// MR and through a type 2 window allocate nothing per packet (REG_MR and
// MapMRSG allocate per registration, not per packet).
func TestMemMgtZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	a, b := mmOpen(t), mmOpen(t)
	back := mmAligned(4 * 4096)
	backMR, _ := a.pd.RegMR(back, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessMWBind)
	fmr, err := verbs.AllocMR(a.pd, verbs.MRTypeMemReg, 4)
	if err != nil {
		t.Fatal(err)
	}
	fmr.MapMRSG([]verbs.SGE{backMR.SGE(0, 4096), backMR.SGE(2*4096, 4096)}, 0, 4096)
	ta, tb := mmConn(t, a, b)
	fkey := verbs.IncKey(fmr.RKey())
	wantStatus(t, "REG_MR", ta.do(t, verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: fkey,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead}}), verbs.WCSuccess)
	mw, _ := verbs.AllocMW(a.pd, verbs.MWType2)
	wkey := verbs.IncKey(mw.RKey())
	wantStatus(t, "BIND_MW", ta.do(t, verbs.SendWR{Opcode: verbs.WRBindMW, BindMW: verbs.BindWR{MW: mw, RKey: wkey,
		Bind: verbs.MWBind{MR: backMR, Addr: backMR.Addr() + 3*4096, Length: 4096, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}}}), verbs.WCSuccess)
	src := make([]byte, 8192)
	srcMR, _ := b.pd.RegMR(src, verbs.AccessLocalWrite)
	wrs := []verbs.SendWR{
		{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{srcMR.SGE(0, 8192)}, RemoteAddr: fmr.IOVA(), RKey: fkey},
		{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{srcMR.SGE(0, 6000)}, RemoteAddr: fmr.IOVA() + 1000, RKey: fkey},
		{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{srcMR.SGE(0, 4096)}, RemoteAddr: backMR.Addr() + 3*4096, RKey: wkey},
		{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{srcMR.SGE(0, 2048)}, RemoteAddr: backMR.Addr() + 3*4096 + 1024, RKey: wkey},
	}
	wc := make([]verbs.WC, 1)
	round := func() {
		for i := range wrs {
			tb.qp.PostSend(wrs[i : i+1])
			for n, _ := tb.cq.Poll(wc); n == 0; n, _ = tb.cq.Poll(wc) {
				time.Sleep(20 * time.Microsecond)
			}
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("wr %d: %v", i, wc[0].Status)
			}
		}
	}
	for range 20 {
		round() // warm pools and rings
	}
	if n := testing.AllocsPerRun(30, round); n != 0 {
		t.Fatalf("%v allocations per round of fast-reg and window WRITE+READ", n)
	}
}

// TestMemoryWindowUC: BIND_MW is a local operation of UC QPs too (rxe
// allows it on RC and UC; LOCAL_INV and REG_MR only on RC), and a UC
// WRITE through the window lands.
func TestMemoryWindowUC(t *testing.T) {
	a, b := mmOpen(t), mmOpen(t)
	buf := make([]byte, 1024)
	mr, _ := a.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessMWBind)
	src, _ := b.pd.RegMR(bytes.Repeat([]byte{0x3C}, 64), verbs.AccessLocalWrite)
	ta, tb := mmConnType(t, a, b, verbs.QPTypeUC)
	mw, _ := verbs.AllocMW(a.pd, verbs.MWType2)
	key := verbs.IncKey(mw.RKey())
	wantStatus(t, "BIND_MW on UC", ta.do(t, verbs.SendWR{Opcode: verbs.WRBindMW, BindMW: verbs.BindWR{MW: mw, RKey: key,
		Bind: verbs.MWBind{MR: mr, Addr: mr.Addr() + 512, Length: 256, Access: verbs.AccessRemoteWrite}}}), verbs.WCSuccess)
	// WRITE_WITH_IMM: its receive completion on a's side orders the data
	// before the check (UC has no ACK).
	rmr, _ := a.pd.RegMR(make([]byte, 16), verbs.AccessLocalWrite)
	if _, err := ta.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{rmr.SGE(0, 16)}}}); err != nil {
		t.Fatal(err)
	}
	w := writeWR(src, 0, 64, mr.Addr()+512, key)
	w.Opcode, w.ImmData = verbs.WRRDMAWriteWithImm, 7
	wantStatus(t, "UC WRITE_WITH_IMM through the window", tb.do(t, w), verbs.WCSuccess)
	if wc := ta.wait(t); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || buf[512] != 0x3C || buf[511] != 0 {
		t.Fatalf("UC WRITE through the window: %+v, byte %#x", wc, buf[512])
	}
	if _, err := ta.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRLocalInv, InvalidateRKey: key}}); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("LOCAL_INV on UC: %v", err)
	}
}

// TestMapMRSGAllocs: mapping a 256-page scatter list (a 1 MiB LNet sink
// of separate pages, as o2iblnd maps it) allocates the new mapping and
// its fragment list only, not a slice per element.
func TestMapMRSGAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	a := mmOpen(t)
	const pages = 256
	fmr, err := verbs.AllocMR(a.pd, verbs.MRTypeMemReg, pages)
	if err != nil {
		t.Fatal(err)
	}
	sgl := make([]verbs.SGE, pages)
	for i := range sgl {
		// Separate allocations, so no two pages merge into one fragment.
		mr, err := a.pd.RegMR(mmAligned(4096), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		sgl[i] = mr.SGE(0, 4096)
	}
	mapAll := func() {
		if n, err := fmr.MapMRSG(sgl, 0, 4096); n != pages || err != nil {
			t.Fatalf("MapMRSG: %d mapped, %v", n, err)
		}
	}
	mapAll()
	if n := testing.AllocsPerRun(20, mapAll); n > 2 {
		t.Fatalf("%v allocations per MapMRSG of %d pages, want at most 2", n, pages)
	}
}
