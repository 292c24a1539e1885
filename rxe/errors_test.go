package rxe_test

import (
	"bytes"
	"errors"
	"testing"

	"softib/rxe"
	"softib/verbs"
)

func TestLocalErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(a, b *end, ro verbs.MR) verbs.SendWR
		want verbs.WCStatus
	}{
		{"bad lkey", func(a, b *end, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey() ^ 1}}}
		}, verbs.WCLocProtErr},
		{"out of bounds", func(a, b *end, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(len(a.buf)-4, 8)}}
		}, verbs.WCLocProtErr},
		{"read into read-only MR", func(a, b *end, ro verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{ro.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.WCLocProtErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
			ro, err := a.pd.RegMR(make([]byte, 64), 0)
			if err != nil {
				t.Fatal(err)
			}
			postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64)}})
			wr := c.wr(a, b, ro)
			wr.ID, wr.Flags = 11, 0 // errors complete even unsignaled
			post(t, a, wr, verbs.SendWR{ID: 12, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			wcs := waitWC(t, a.cq, 2)
			if wcs[0].Status != c.want || wcs[0].WRID != 11 || wcs[1].Status != verbs.WCWRFlushErr || wcs[1].WRID != 12 {
				t.Fatalf("completions %+v", wcs)
			}
			if a.qp.State() != verbs.QPStateErr {
				t.Fatalf("state %v", a.qp.State())
			}
		})
	}
}

func TestPostErrors(t *testing.T) {
	a, _ := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
	_, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: make([]byte, 401)}})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("inline 401: %v", err)
	}
	sgl := make([]verbs.SGE, 33)
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGL: sgl}}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("33 SGEs: %v", err)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRBindMW}}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("bind MW without a window: %v", err)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRegMR}}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("REG_MR without an MR: %v", err)
	}
	pd, _ := a.dev.AllocPD()
	cq, _ := a.dev.CreateCQ(verbs.CQAttr{CQE: 4})
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); !errors.Is(err, verbs.ErrQPState) {
		t.Fatalf("post in RESET: %v", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("dealloc busy PD: %v", err)
	}
	if err := cq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("destroy busy CQ: %v", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState); !errors.Is(err, verbs.ErrQPState) {
		t.Fatalf("RESET→RTS: %v", err)
	}
	bad := verbs.QPAttr{State: verbs.QPStateInit, PortNum: 2}
	if err := qp.Modify(&bad, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Fatalf("port 2: %v", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

func TestRemoteErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(a, b *end) verbs.SendWR
		want verbs.WCStatus
	}{
		{"bad rkey write", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x80}
		}, verbs.WCRemAccessErr},
		{"write past MR end", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.mr.SGE(0, 2048)}, RemoteAddr: b.mr.Addr() + 3000, RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"read bad rkey", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: 0x1234500}
		}, verbs.WCRemAccessErr},
		{"misaligned atomic", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey(), CompareAdd: 1}
		}, verbs.WCRemInvReqErr},
		{"receive too small", func(a, b *end) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 200)}}
		}, verbs.WCRemInvReqErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
			fill(a.buf, 1)
			b.sync()
			snapshot := bytes.Clone(b.buf)
			postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 100)}})
			wr := c.wr(a, b)
			wr.ID, wr.Flags = 5, verbs.SendSignaled
			post(t, a, wr)
			wc := waitWC(t, a.cq, 1)[0]
			if wc.Status != c.want {
				t.Fatalf("completion %+v, want %v", wc, c.want.ID())
			}
			if a.qp.State() != verbs.QPStateErr {
				t.Fatalf("requester state %v", a.qp.State())
			}
			// The responder moved to ERR too; its receive flushed (or,
			// for the length error, completed with REM_INV_REQ_ERR, as
			// Linux rxe's class C length error).
			rwc := waitWC(t, b.cq, 1)[0]
			if c.name == "receive too small" {
				if rwc.Status != verbs.WCRemInvReqErr {
					t.Fatalf("receive %+v", rwc)
				}
			} else if rwc.Status != verbs.WCWRFlushErr {
				t.Fatalf("receive %+v", rwc)
			}
			if b.qp.State() != verbs.QPStateErr {
				t.Fatalf("responder state %v", b.qp.State())
			}
			b.sync()
			if c.name != "receive too small" && !bytes.Equal(b.buf, snapshot) {
				t.Fatal("peer memory modified")
			}
		})
	}
}

func TestDrainAndFlush(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
	postRecv(t, a, verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2})
	// Sends to a peer with no receives get RNR NAKs and stay outstanding.
	post(t, a, verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}, verbs.SendWR{ID: 4, Opcode: verbs.WRSend})
	_ = b
	if err := a.qp.Drain(); err != nil {
		t.Fatal(err)
	}
	wcs := waitWC(t, a.cq, 4)
	got := map[uint64]verbs.WCStatus{}
	for _, wc := range wcs {
		got[wc.WRID] = wc.Status
	}
	for id := uint64(1); id <= 4; id++ {
		if got[id] != verbs.WCWRFlushErr {
			t.Fatalf("wr %d: %v (%+v)", id, got[id], wcs)
		}
	}
	// Posting in ERR completes at once with WR_FLUSH_ERR.
	post(t, a, verbs.SendWR{ID: 5, Opcode: verbs.WRSend})
	postRecv(t, a, verbs.RecvWR{ID: 6})
	wcs = waitWC(t, a.cq, 2)
	if wcs[0].Status != verbs.WCWRFlushErr || wcs[1].Status != verbs.WCWRFlushErr {
		t.Fatalf("%+v", wcs)
	}
}

func TestRNR(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{rnrRetry: 7, minRNR: 1}, 4096)
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 10)}})
	// Wait until at least one RNR NAK went out, then post the receive.
	for i := 0; a.dev.Stats()["RcvRNR"] == 0; i++ {
		if i > 1e6 {
			t.Fatal("no RNR NAK")
		}
		b.cq.(*rxe.CQ).Wait(1e6)
	}
	postRecv(t, b, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(0, 10)}})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	wantOK(t, waitWC(t, b.cq, 1)[0], verbs.WCRecv)

	// rnr_retry 0: the first RNR NAK fails the WR.
	a, _ = pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{exact: true, timeout: 14, retry: 7, rnrRetry: 0, minRNR: 1}, 4096)
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 10)}})
	if wc := waitWC(t, a.cq, 1)[0]; wc.Status != verbs.WCRNRRetryExcErr {
		t.Fatalf("%+v", wc)
	}
	if a.dev.Stats()["RNRRetryExceeded"] != 1 {
		t.Fatal("RNRRetryExceeded not counted")
	}
}

func TestRetryExceeded(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{exact: true, timeout: 8, retry: 2, rnrRetry: 7, minRNR: 1}, 4096)
	b.dev.Close() // peer gone
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 10)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := waitWC(t, a.cq, 1)[0]; wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("%+v", wc)
	}
	st := a.dev.Stats()
	if st["RetryExceeded"] != 1 || st["CompRetry"] != 2 {
		t.Fatalf("stats %v", st)
	}
}
