package rdmarw_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"softib/internal/testaddr"
	"softib/rdmarw"
	"softib/rxe"
	"softib/verbs"
)

// hangGuard bounds waits for completions: it catches a hang, it times
// nothing.
const hangGuard = 30 * time.Second

type side struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
}

func open(t *testing.T, maxSGE int) *side {
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
	cq, err := d.CreateCQ(verbs.CQAttr{CQE: 1024})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 16, MaxSendSGE: maxSGE, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return &side{d, pd, cq, qp}
}

func connect(t *testing.T, s, peer *side) {
	t.Helper()
	gid, _ := peer.dev.QueryGID(1, 1)
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
			AccessFlags: verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessLocalWrite},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			MaxDestRdAtomic: 4, MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
				verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrSQPSN | verbs.QPAttrMaxQPRdAtomic},
	}
	for _, st := range steps {
		if err := s.qp.Modify(&st.a, st.m); err != nil {
			t.Fatal(err)
		}
	}
}

func pair(t *testing.T, maxSGE int) (*side, *side) {
	a, b := open(t, maxSGE), open(t, maxSGE)
	connect(t, a, b)
	connect(t, b, a)
	return a, b
}

// wait polls cq until one completion arrives.
func wait(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(hangGuard)
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

// pageAligned returns n bytes starting on a page boundary.
func pageAligned(n int) []byte {
	b := make([]byte, n+rdmarw.PageSize)
	off := (rdmarw.PageSize - int(uintptr(unsafe.Pointer(&b[0])))%rdmarw.PageSize) % rdmarw.PageSize
	return b[off : off+n : off+n]
}

// scatter registers buf and returns a list of pieces of it, in order but
// with a gap of skip bytes after each piece.
func scatter(t *testing.T, pd verbs.PD, buf []byte, piece, skip int) (verbs.MR, []verbs.SGE) {
	t.Helper()
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mr.Dereg() })
	var sgl []verbs.SGE
	for off := 0; off+piece <= len(buf); off += piece + skip {
		sgl = append(sgl, mr.SGE(off, piece))
	}
	return mr, sgl
}

func gathered(buf []byte, sgl []verbs.SGE, mr verbs.MR) []byte {
	var out []byte
	for _, e := range sgl {
		off := e.Addr - mr.Addr()
		out = append(out, buf[off:off+uint64(e.Length)]...)
	}
	return out
}

// TestSplitSGE checks the splitting into work requests of at most the
// QP's SGE count, and the data, both directions, with a final SEND chained.
func TestSplitSGE(t *testing.T) {
	a, b := pair(t, 3)
	src := make([]byte, 20*100)
	for i := range src {
		src[i] = byte(rand.N(256))
	}
	smr, sgl := scatter(t, a.pd, src, 80, 20) // 20 pieces of 80 bytes
	remote := make([]byte, 20*80)
	rmr, err := b.pd.RegMR(remote, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	// b expects a SEND after the data.
	note, _ := b.pd.RegMR(make([]byte, 16), verbs.AccessLocalWrite)
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{note.SGE(0, 16)}}}); err != nil {
		t.Fatal(err)
	}

	var c rdmarw.Ctx
	n, err := c.Init(a.qp, a.pd, sgl, 0, rmr.Addr(), rmr.RKey(), rdmarw.Write)
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 { // ceil(20/3)
		t.Fatalf("Init = %d work requests, want 7", n)
	}
	send := []verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("done")}}
	wrs := c.WRs(send, 0)
	if len(wrs) != 8 || wrs[7].Opcode != verbs.WRSend {
		t.Fatalf("WRs: %d, last %v", len(wrs), wrs[len(wrs)-1].Opcode)
	}
	for i, w := range wrs[:7] {
		if len(w.SGL) > 3 || w.Flags&verbs.SendSignaled != 0 {
			t.Fatalf("wr %d: %d SGEs, flags %v", i, len(w.SGL), w.Flags)
		}
	}
	if err := c.Post(send, 0); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.cq); wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("a: %+v", wc)
	}
	if wc := wait(t, b.cq); wc.Status != verbs.WCSuccess || wc.WRID != 9 {
		t.Fatalf("b: %+v", wc)
	}
	if want := gathered(src, sgl, smr); !bytes.Equal(remote, want) {
		t.Fatal("remote bytes differ after WRITE")
	}
	c.Destroy()

	// READ it back into a fresh scattered buffer, with a 100-byte offset.
	dst := make([]byte, len(src))
	dmr, dsgl := scatter(t, a.pd, dst, 80, 20)
	if n, err = c.Init(a.qp, a.pd, dsgl, 100, rmr.Addr(), rmr.RKey(), rdmarw.Read); err != nil {
		t.Fatal(err)
	}
	// The offset skips one whole piece and 20 bytes of the second.
	if n != 7 || c.WRs(nil, 0)[0].SGL[0].Length != 60 {
		t.Fatalf("read Init: %d WRs, first SGE %+v", n, c.WRs(nil, 0)[0].SGL[0])
	}
	if err := c.Post(nil, 5); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.cq); wc.Status != verbs.WCSuccess || wc.WRID != 5 || wc.Opcode != verbs.WCRDMARead {
		t.Fatalf("read: %+v", wc)
	}
	got := gathered(dst, dsgl, dmr)[100:]
	if !bytes.Equal(got, remote[:len(got)]) {
		t.Fatal("READ bytes differ")
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestSplitMessageSize cuts one SGE at the maximum message size.
func TestSplitMessageSize(t *testing.T) {
	a, _ := pair(t, 2)
	big := make([]byte, 2*rxe.MaxMsgSize+10)
	mr, err := a.pd.RegMR(big, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	var c rdmarw.Ctx
	c.Mode = rdmarw.SGEOnly
	n, err := c.Init(a.qp, a.pd, []verbs.SGE{mr.SGE(0, len(big))}, 0, 0x1000, 1234, rdmarw.Write)
	if err != nil {
		t.Fatal(err)
	}
	wrs := c.WRs(nil, 0)
	if n != 3 || wrs[0].SGL[0].Length != rxe.MaxMsgSize || wrs[2].SGL[0].Length != 10 ||
		wrs[1].RemoteAddr != 0x1000+rxe.MaxMsgSize || wrs[2].RemoteAddr != 0x1000+2*rxe.MaxMsgSize {
		t.Fatalf("%d WRs: %+v", n, wrs)
	}
	c.Destroy()
}

func TestInitErrors(t *testing.T) {
	a, _ := pair(t, 2)
	var c rdmarw.Ctx
	if _, err := c.Init(a.qp, a.pd, nil, 0, 0, 0, rdmarw.Write); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("empty list: %v", err)
	}
	if _, err := c.Init(a.qp, a.pd, []verbs.SGE{{Length: 8}}, 8, 0, 0, rdmarw.Write); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("offset past the list: %v", err)
	}
	if _, err := c.Init(a.qp, a.pd, []verbs.SGE{{Length: 8}}, 0, 0, 0, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("no direction: %v", err)
	}
	if err := c.Post(nil, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("post before init: %v", err)
	}
}

// TestFastRegMode moves a page-aligned list longer than the QP's SGE
// limit through fast-registration MRs, both directions.
func TestFastRegMode(t *testing.T) {
	a, b := pair(t, 2)
	// 6 pages of one buffer, every other page: 3 fragments.
	back := pageAligned(6 * rdmarw.PageSize)
	bmr, _, _ := func() (verbs.MR, int, int) {
		mr, err := a.pd.RegMR(back, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return mr, 0, 0
	}()
	sgl := []verbs.SGE{bmr.SGE(0, rdmarw.PageSize), bmr.SGE(2*rdmarw.PageSize, rdmarw.PageSize), bmr.SGE(4*rdmarw.PageSize, rdmarw.PageSize)}
	for i := range back {
		back[i] = byte(i % 251)
	}
	remote := make([]byte, 3*rdmarw.PageSize)
	rmr, _ := b.pd.RegMR(remote, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	var c rdmarw.Ctx
	n, err := c.Init(a.qp, a.pd, sgl, 0, rmr.Addr(), rmr.RKey(), rdmarw.Write)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumMRs() != 1 || n != 2 {
		t.Fatalf("Init: %d WRs, %d MRs; want REG_MR + WRITE with one MR", n, c.NumMRs())
	}
	if wrs := c.WRs(nil, 0); wrs[0].Opcode != verbs.WRRegMR || wrs[1].Opcode != verbs.WRRDMAWrite || len(wrs[1].SGL) != 1 {
		t.Fatalf("WRs: %v %v", wrs[0].Opcode, wrs[1].Opcode)
	}
	if err := c.Post(nil, 11); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.cq); wc.Status != verbs.WCSuccess || wc.WRID != 11 {
		t.Fatalf("write: %+v", wc)
	}
	b.qp.Query() // the responder's lock orders its writes before the check
	if want := gathered(back, sgl, bmr); !bytes.Equal(remote, want) {
		t.Fatal("remote bytes differ after the fast-reg WRITE")
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}

	// READ back into the same pages after clearing them.
	clear(back)
	c.Mode = rdmarw.ForceMR
	if _, err := c.Init(a.qp, a.pd, sgl, 0, rmr.Addr(), rmr.RKey(), rdmarw.Read); err != nil {
		t.Fatal(err)
	}
	if err := c.Post(nil, 12); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.cq); wc.Status != verbs.WCSuccess || wc.WRID != 12 {
		t.Fatalf("read: %+v", wc)
	}
	if got := gathered(back, sgl, bmr); !bytes.Equal(got, remote) {
		t.Fatal("READ through fast-reg MRs returned wrong bytes")
	}
	c.Destroy()

	// A list with gaps inside pages cannot be registered: Auto falls back
	// to splitting, ForceMR refuses.
	gappy := []verbs.SGE{bmr.SGE(0, 100), bmr.SGE(200, 100), bmr.SGE(400, 100)}
	c.Mode = rdmarw.Auto
	if n, err := c.Init(a.qp, a.pd, gappy, 0, rmr.Addr(), rmr.RKey(), rdmarw.Write); err != nil || c.NumMRs() != 0 || n != 2 {
		t.Fatalf("Auto with gaps: %d WRs, %d MRs, %v", n, c.NumMRs(), err)
	}
	c.Destroy()
	c.Mode = rdmarw.ForceMR
	if _, err := c.Init(a.qp, a.pd, gappy, 0, rmr.Addr(), rmr.RKey(), rdmarw.Write); err != nil {
		// the first element maps; the rest need MRs of their own, each
		// one element: that works, so ForceMR succeeds with 3 MRs.
		t.Fatal(err)
	}
	if c.NumMRs() != 3 {
		t.Fatalf("ForceMR with gaps: %d MRs, want 3", c.NumMRs())
	}
	c.Destroy()
}

func TestMRFactor(t *testing.T) {
	a, _ := pair(t, 1)
	if got := rdmarw.MRFactor(a.dev, 1000); got != 4 { // 256 pages per MR
		t.Fatalf("MRFactor(1000) = %d, want 4", got)
	}
	if got := rdmarw.MRFactor(a.dev, 256); got != 1 {
		t.Fatalf("MRFactor(256) = %d, want 1", got)
	}
}
