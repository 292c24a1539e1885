package rxe_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"softib/rxe"
	"softib/udp/udptest"
	"softib/verbs"
)

// The async events and completion statuses verbs declares that this
// provider never produces, and why each stays declared: every one is a
// value of libibverbs' numbering that the ibverbs provider passes on from
// a kernel device (verbs.EventType(ev.event_type), verbs.WCStatus(wc.status)),
// so removing it would leave such a report nameless. The audit table in
// verbs' package documentation says the same per value.
var (
	eventsNotProduced = map[verbs.EventType]string{
		verbs.EventPathMig:          "no automatic path migration in rxe or softib (hardware with APM, via ibverbs)",
		verbs.EventPathMigErr:       "no automatic path migration in rxe or softib (hardware with APM, via ibverbs)",
		verbs.EventDeviceFatal:      "uverbs raises it when a kernel device is removed under its users (ibverbs); a softib device is removed only by its owner's Close",
		verbs.EventLIDChange:        "InfiniBand link layer (subnet manager) only; RoCE has no LIDs",
		verbs.EventPKeyChange:       "InfiniBand link layer (subnet manager) only; rxe's P_Key table is fixed",
		verbs.EventSMChange:         "InfiniBand link layer (subnet manager) only",
		verbs.EventClientReregister: "InfiniBand link layer (subnet manager) only",
		verbs.EventSRQErr:           "hardware SRQ failures (ibverbs); neither rxe nor softib has one",
		verbs.EventGIDChange:        "the kernel's GID cache raises it when the netdev's addresses change (ibverbs on rxe); a softib device's GID table is fixed for its life",
	}
	statusesNotProduced = map[verbs.WCStatus]string{
		verbs.WCLocEECOpErr:    "reliable datagram (EE contexts): in neither Linux nor softib",
		verbs.WCBadRespErr:     "Linux rxe reports unexpected responses as FATAL_ERR or REM_OP_ERR, and so does softib; hardware (ibverbs) may",
		verbs.WCLocAccessErr:   "rxe reports local key failures as LOC_PROT_ERR; hardware (ibverbs, e.g. iWARP STag errors) may",
		verbs.WCLocRDDViolErr:  "reliable datagram: in neither Linux nor softib",
		verbs.WCRemInvRDReqErr: "reliable datagram: in neither Linux nor softib",
		verbs.WCRemAbortErr:    "hardware only (ibverbs)",
		verbs.WCInvEECNErr:     "reliable datagram: in neither Linux nor softib",
		verbs.WCInvEECStateErr: "reliable datagram: in neither Linux nor softib",
		verbs.WCRespTimeoutErr: "hardware only (ibverbs)",
		verbs.WCGeneralErr:     "hardware only (ibverbs)",
	}
	// Produced, but proven by a package-internal test.
	statusesProvenInternally = map[verbs.WCStatus]string{
		verbs.WCFatalErr: "TestCompleterFatalResponses (a READ response to a SEND)",
	}
)

// audit records the events and statuses the scenarios produce.
type audit struct {
	mu       sync.Mutex
	events   map[verbs.EventType]bool
	statuses map[verbs.WCStatus]bool
}

func (a *audit) wc(t *testing.T, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	wcs := waitWC(t, cq, n)
	a.mu.Lock()
	for _, wc := range wcs {
		a.statuses[wc.Status] = true
	}
	a.mu.Unlock()
	return wcs
}

// event waits for an event of type want on d (hang guard 20 s).
func (a *audit) event(t *testing.T, d verbs.Device, want verbs.EventType) {
	t.Helper()
	guard := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-d.Events():
			if !ok {
				t.Fatalf("%s: events closed before %v", d.Name(), want)
			}
			a.mu.Lock()
			a.events[e.Type] = true
			a.mu.Unlock()
			if e.Type == want {
				return
			}
		case <-guard:
			t.Fatalf("%s: no %v event", d.Name(), want)
		}
	}
}

func (a *audit) status(t *testing.T, wc verbs.WC, want verbs.WCStatus) {
	t.Helper()
	if wc.Status != want {
		t.Fatalf("completion %+v, want %v", wc, want.ID())
	}
}

// TestEventStatusAudit provokes every async event and completion status
// softib's rxe produces (issue #15's audit) and checks that each value
// verbs declares is either produced here, proven by a named internal
// test, or listed as not produced with the reason it stays declared.
func TestEventStatusAudit(t *testing.T) {
	au := &audit{events: map[verbs.EventType]bool{}, statuses: map[verbs.WCStatus]bool{}}
	rc := func(t *testing.T, o connOpts) (a, b *end) { return pair(t, verbs.QPTypeRC, rxe.Config{}, o, 4096) }
	send := func(id uint64, n int, e *end) verbs.SendWR {
		return verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{e.mr.SGE(0, n)}}
	}
	scenarios := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"PORT_ACTIVE and PORT_ERR", func(t *testing.T) {
			nw := udptest.NewNetwork(1)
			defer nw.Close()
			addr := testAddr()
			conn := nw.Endpoint(netipPort(addr))
			d := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}, Conn: conn})
			au.event(t, d, verbs.EventPortActive)
			conn.Close() // the link fails under the open device
			au.event(t, d, verbs.EventPortErr)
		}},
		{"SUCCESS, remote access: REM_ACCESS_ERR, QP_FATAL, QP_ACCESS_ERR", func(t *testing.T) {
			a, b := rc(t, connOpts{})
			post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCSuccess)
			post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x80})
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCRemAccessErr)
			au.event(t, a.dev, verbs.EventQPFatal)
			au.event(t, b.dev, verbs.EventQPAccessErr)
		}},
		{"invalid request: REM_INV_REQ_ERR, QP_REQ_ERR", func(t *testing.T) {
			a, b := rc(t, connOpts{})
			post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
				RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey(), CompareAdd: 1})
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCRemInvReqErr)
			au.event(t, b.dev, verbs.EventQPReqErr)
		}},
		{"message longer than the receive: REM_INV_REQ_ERR both sides", func(t *testing.T) {
			a, b := rc(t, connOpts{})
			postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 16)}})
			post(t, a, send(2, 64, a))
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCRemInvReqErr)
			au.status(t, au.wc(t, b.cq, 1)[0], verbs.WCRemInvReqErr)
		}},
		{"malformed receive WQE: LOC_QP_OP_ERR, REM_OP_ERR", func(t *testing.T) {
			a, b := rc(t, connOpts{})
			postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey() ^ 1}}})
			post(t, a, send(2, 8, a))
			au.status(t, au.wc(t, b.cq, 1)[0], verbs.WCLocQPOpErr)
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCRemOpErr)
			au.event(t, b.dev, verbs.EventQPFatal)
		}},
		{"bad lkey: LOC_PROT_ERR, WR_FLUSH_ERR", func(t *testing.T) {
			a, _ := rc(t, connOpts{})
			post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey() ^ 1}}},
				send(2, 8, a))
			wcs := au.wc(t, a.cq, 2)
			au.status(t, wcs[0], verbs.WCLocProtErr)
			au.status(t, wcs[1], verbs.WCWRFlushErr)
		}},
		{"LOCAL_INV of an ordinary MR: LOC_QP_OP_ERR", func(t *testing.T) {
			a, _ := rc(t, connOpts{})
			post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: a.mr.RKey()})
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCLocQPOpErr)
		}},
		{"bind to an MR without MW_BIND: MW_BIND_ERR", func(t *testing.T) {
			a, _ := rc(t, connOpts{})
			mw, err := verbs.AllocMW(a.pd, verbs.MWType2)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := a.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, BindMW: verbs.BindWR{MW: mw, RKey: verbs.IncKey(mw.RKey()),
				Bind: verbs.MWBind{MR: plain, Addr: plain.Addr(), Length: 64, Access: verbs.AccessRemoteWrite}}})
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCMWBindErr)
		}},
		{"UD receive too small: LOC_LEN_ERR", func(t *testing.T) {
			a, b := pair(t, verbs.QPTypeUD, rxe.Config{}, connOpts{}, 4096)
			ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(b.dev.Addr().Addr()), SGIDIndex: 1}})
			if err != nil {
				t.Fatal(err)
			}
			postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 60)}})
			wr := send(2, 100, a)
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, b.qp.QPN(), 0x11111111
			post(t, a, wr)
			au.status(t, au.wc(t, b.cq, 1)[0], verbs.WCLocLenErr)
		}},
		{"RETRY_EXC_ERR", func(t *testing.T) {
			a, b := rc(t, connOpts{exact: true, timeout: 8, retry: 1, rnrRetry: 7, minRNR: 1})
			b.dev.Close()
			post(t, a, send(1, 8, a))
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCRetryExcErr)
		}},
		{"RNR_RETRY_EXC_ERR, COMM_EST", func(t *testing.T) {
			// b stays in RTR: the first request it gets raises COMM_EST.
			da, db := openDev(t, rxe.Config{}), openDev(t, rxe.Config{})
			a, b := newEnd(t, da, verbs.QPTypeRC, 4096), newEnd(t, db, verbs.QPTypeRC, 4096)
			o := connOpts{exact: true, timeout: 14, retry: 7, rnrRetry: 0, minRNR: 1}
			connect(t, a, b, o)
			toRTR(t, b, a)
			post(t, a, send(1, 8, a))
			au.status(t, au.wc(t, a.cq, 1)[0], verbs.WCRNRRetryExcErr)
			au.event(t, db, verbs.EventCommEst)
		}},
		{"SQ_DRAINED", func(t *testing.T) {
			a, _ := rc(t, connOpts{})
			if err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPStateSQD, EnSQDAsyncNotify: true}, verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify); err != nil {
				t.Fatal(err)
			}
			au.event(t, a.dev, verbs.EventSQDrained)
		}},
		{"CQ_ERR", func(t *testing.T) {
			_, b := rc(t, connOpts{})
			small, err := b.dev.CreateCQ(verbs.CQAttr{CQE: 1})
			if err != nil {
				t.Fatal(err)
			}
			qp, err := b.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: small, RecvCQ: small,
				Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			n := small.CQE() + 1
			for i := range n {
				if _, err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(i)}}); err != nil {
					t.Fatal(err)
				}
			}
			// ERR flushes more receives than the CQ holds.
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			au.event(t, b.dev, verbs.EventCQErr)
		}},
		{"SRQ_LIMIT_REACHED, QP_LAST_WQE_REACHED", func(t *testing.T) {
			_, b := rc(t, connOpts{})
			srq, err := b.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			qp, err := b.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			a2 := newEnd(t, openDev(t, rxe.Config{}), verbs.QPTypeRC, 4096)
			bs := &end{dev: b.dev, pd: b.pd, cq: b.cq, qp: qp, mr: b.mr, buf: b.buf}
			connect(t, a2, bs, connOpts{})
			connect(t, bs, a2, connOpts{})
			for i := range 4 {
				if _, err := srq.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(i*64, 64)}}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := srq.Modify(verbs.SRQAttr{Limit: 4}, verbs.SRQAttrLimit); err != nil {
				t.Fatal(err)
			}
			post(t, a2, send(1, 8, a2))
			au.wc(t, a2.cq, 1)
			au.event(t, b.dev, verbs.EventSRQLimitReached)
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			au.event(t, b.dev, verbs.EventQPLastWQEReached)
		}},
	}
	for _, s := range scenarios {
		t.Run(s.name, s.fn)
	}
	if t.Failed() {
		return
	}
	for e := verbs.EventCQErr; e <= verbs.EventGIDChange; e++ {
		why, listed := eventsNotProduced[e]
		switch {
		case au.events[e] && listed:
			t.Errorf("event %v is produced but listed as not produced (%s)", e, why)
		case !au.events[e] && !listed:
			t.Errorf("event %v: neither produced by a scenario nor listed with a reason", e)
		}
	}
	for s := verbs.WCSuccess; s <= verbs.WCGeneralErr; s++ {
		why, listed := statusesNotProduced[s]
		_, internal := statusesProvenInternally[s]
		switch {
		case au.statuses[s] && listed:
			t.Errorf("status %v is produced but listed as not produced (%s)", s.ID(), why)
		case !au.statuses[s] && !listed && !internal:
			t.Errorf("status %v: neither produced by a scenario nor listed with a reason", s.ID())
		}
	}
}

func netipPort(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, rxe.RoCEv2Port) }

// toRTR moves e's RC QP from RESET to RTR talking to peer's QP (which
// sends from its current SQ PSN), and no further.
func toRTR(t *testing.T, e, peer *end) {
	t.Helper()
	pa, _, err := peer.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, AH: ahTo(peer.dev), PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(), RQPSN: pa.SQPSN,
			MaxDestRdAtomic: 16, MinRNRTimer: 1},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
	} {
		if err := e.qp.Modify(&st.a, st.m); err != nil {
			t.Fatal(err)
		}
	}
}
