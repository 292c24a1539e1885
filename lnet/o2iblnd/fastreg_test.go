package o2iblnd

import (
	"bytes"
	"testing"
	"time"
	"unsafe"

	"softib/internal/testaddr"
	"softib/lnet/lnd"
	"softib/rxe"
	"softib/verbs"
)

// fastRegRC is one end of an RC connection for TestFastRegSink.
type fastRegRC struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
}

func fastRegPair(t *testing.T) (*fastRegRC, *fastRegRC) {
	t.Helper()
	mk := func() *fastRegRC {
		d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 16})
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return &fastRegRC{d, pd, cq, qp}
	}
	a, b := mk(), mk()
	for _, p := range [][2]*fastRegRC{{a, b}, {b, a}} {
		s, peer := p[0], p[1]
		gid, _ := peer.dev.QueryGID(1, 1)
		for _, st := range []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessLocalWrite},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 12,
				AH: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
				verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrSQPSN | verbs.QPAttrMaxQPRdAtomic},
		} {
			if err := s.qp.Modify(&st.a, st.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b
}

func (e *fastRegRC) waitWC(t *testing.T) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(30 * time.Second) // hang guard, times nothing
	for {
		if n, _ := e.cq.Poll(wc); n == 1 {
			return wc[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("hang guard: no completion")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestFastRegSink: a sink over page-aligned fragments is registered
// through one fast-reg MR (its REG_MR queued ahead of the message), the
// peer's RDMA WRITE lands in place with no bounce copy, and unmap drops
// the registration; fragments with gaps inside pages still bounce.
func TestFastRegSink(t *testing.T) {
	a, b := fastRegPair(t)
	d := &Driver{pd: a.pd, mrs: newMRCache(a.pd, 16, 1<<30), bounce: &bouncePool{pd: a.pd, maxIdle: 1}}
	raw := make([]byte, 4*4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&raw[0])))%4096) % 4096
	pages := raw[off : off+3*4096]
	f1, f2 := pages[:4096:4096], pages[2*4096:]
	tx1 := &tx{idx: 3}
	key, err := d.mapSink(tx1, lnd.IOV{Frags: [][]byte{f1, f2}, Offset: 100, Len: 8000})
	if err != nil || tx1.fmr == nil || tx1.bounce != nil || len(tx1.frags) != 1 || tx1.frags[0].Nob != 8000 ||
		len(tx1.wrs) != 1 || tx1.wrs[0].Opcode != verbs.WRRegMR || d.stats.FastRegs.Load() != 1 {
		t.Fatalf("page-aligned sink: key %#x err %v fmr %v bounce %v frags %+v wrs %d", key, err, tx1.fmr != nil, tx1.bounce != nil, tx1.frags, len(tx1.wrs))
	}
	if _, err := a.qp.PostSend(tx1.wrs); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 8000)
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	smr, _ := b.pd.RegMR(src, verbs.AccessLocalWrite)
	if _, err := b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{smr.SGE(0, 8000)}, RemoteAddr: tx1.frags[0].Addr, RKey: key}}); err != nil {
		t.Fatal(err)
	}
	if wc := b.waitWC(t); wc.Status != verbs.WCSuccess {
		t.Fatalf("peer WRITE into the fast-reg sink: %v", wc.Status.ID())
	}
	a.qp.Query() // the responder's lock orders its writes before the check
	if !bytes.Equal(f1[100:], src[:3996]) || !bytes.Equal(f2[:4004], src[3996:]) {
		t.Fatal("the WRITE did not land in the sink's fragments")
	}
	d.unmap(tx1, true)
	if tx1.fmr != nil || len(tx1.mrs) != 0 {
		t.Fatal("unmap kept the fast-reg registration")
	}

	// Two separate small allocations: gaps inside pages, so a bounce.
	tx2 := &tx{idx: 4}
	if _, err := d.mapSink(tx2, lnd.IOV{Frags: [][]byte{make([]byte, 100), make([]byte, 100)}, Offset: 50, Len: 100}); err != nil ||
		tx2.bounce == nil || tx2.fmr != nil || len(tx2.wrs) != 0 {
		t.Fatalf("unaligned sink: err %v bounce %v fmr %v", err, tx2.bounce != nil, tx2.fmr != nil)
	}
	d.unmap(tx2, false)
	d.mrs.close()
	d.bounce.close()
}
