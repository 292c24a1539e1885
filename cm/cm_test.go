package cm_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// connect runs REQ → REP → RTU between a (active) and b (passive).
func connect(t *testing.T, a, b *node) (*cm.ID, *cm.ID) {
	t.Helper()
	acceptAll(b)
	rtuOnREP(a)
	b.listen(testSID)
	ca := a.newID()
	if err := ca.SendREQ(reqParam(a, b, 0x100)); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	sb := b.mustFind(cm.EventRTUReceived).id
	wantState(t, ca, cm.StateEstablished)
	wantState(t, sb, cm.StateEstablished)
	return ca, sb
}

func TestConnectDisconnect(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		ca, sb := connect(t, a, b)

		req := b.mustFind(cm.EventREQReceived)
		if string(req.ev.PrivateData[:5]) != "hello" || len(req.ev.PrivateData) != 92 ||
			req.ev.REQ.ServiceID != testSID || req.ev.Listener == nil || req.ev.From.GID() != a.gid {
			t.Errorf("REQ event %+v", req.ev)
		}
		rep := a.mustFind(cm.EventREPReceived)
		if string(rep.ev.PrivateData[:7]) != "welcome" || rep.ev.REP.LocalQPN != 0x200 {
			t.Errorf("REP event %+v", rep.ev.REP)
		}
		if ca.RemoteCommID() != sb.LocalCommID() || sb.RemoteCommID() != ca.LocalCommID() ||
			ca.RemoteQPN() != 0x200 || sb.RemoteQPN() != 0x100 || sb.ServiceID() != testSID {
			t.Error("comm IDs / QPNs not exchanged")
		}
		if sb.Context() != b || ca.Context() != a {
			t.Error("context")
		}
		// The wire: TIDs of REP and RTU reuse the REQ's.
		reqTID := mad.Header(n.last(mad.AttrREQ)).TID()
		if reqTID != 1<<32|uint64(ca.LocalCommID()) ||
			mad.Header(n.last(mad.AttrREP)).TID() != reqTID || mad.Header(n.last(mad.AttrRTU)).TID() != reqTID {
			t.Errorf("TIDs")
		}

		// QP attributes, active side.
		qa, m, err := ca.InitQPAttr(verbs.QPStateInit)
		if err != nil || m != verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPKeyIndex|verbs.QPAttrPort ||
			qa.AccessFlags != verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic {
			t.Errorf("INIT %+v %v %v", qa, m, err)
		}
		qa, m, err = ca.InitQPAttr(verbs.QPStateRTR)
		// A StartingPSN is where its sender receives: the active side
		// receives from its REQ's PSN and sends from the REP's.
		if err != nil || qa.DestQPN != 0x200 || qa.RQPSN != 0x123456 || qa.PathMTU != verbs.MTU1024 ||
			qa.MaxDestRdAtomic != 4 || qa.AH.GRH.DGID != b.gid || qa.AH.GRH.HopLimit != 64 || !qa.AH.IsGlobal ||
			m&verbs.QPAttrMaxDestRdAtomic == 0 || m&verbs.QPAttrAltPath != 0 {
			t.Errorf("RTR %+v %v %v", qa, m, err)
		}
		qa, m, err = ca.InitQPAttr(verbs.QPStateRTS)
		if err != nil || qa.SQPSN != 0xABCDEF || qa.MaxRdAtomic != 2 || qa.RetryCnt != 7 || qa.RNRRetry != 7 ||
			qa.Timeout != 17 || m&verbs.QPAttrTimeout == 0 {
			t.Errorf("RTS %+v %v %v", qa, m, err)
		}
		// Passive side mirrors it.
		qb, _, _ := sb.InitQPAttr(verbs.QPStateRTR)
		if qb.DestQPN != 0x100 || qb.RQPSN != 0xABCDEF || qb.MaxDestRdAtomic != 2 || qb.AH.GRH.DGID != a.gid {
			t.Errorf("passive RTR %+v", qb)
		}
		qb, _, _ = sb.InitQPAttr(verbs.QPStateRTS)
		if qb.SQPSN != 0x123456 || qb.MaxRdAtomic != 4 || qb.RetryCnt != 7 || qb.RNRRetry != 6 {
			t.Errorf("passive RTS %+v", qb)
		}
		if _, _, err := sb.InitQPAttr(verbs.QPStateSQD); !errors.Is(err, cm.ErrInvalidParam) {
			t.Errorf("SQD: %v", err)
		}

		// Disconnect.
		if err := ca.SendDREQ([]byte("bye")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if d := b.mustFind(cm.EventDREQReceived); string(d.ev.PrivateData[:3]) != "bye" {
			t.Error("DREQ private data")
		}
		a.mustFind(cm.EventDREPReceived)
		wantState(t, ca, cm.StateTimewait)
		wantState(t, sb, cm.StateTimewait)
		if a.cm.NumTimewait() != 1 || b.cm.NumTimewait() != 1 {
			t.Error("timewait records")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		a.mustFind(cm.EventTimewaitExit)
		b.mustFind(cm.EventTimewaitExit)
		wantState(t, ca, cm.StateIdle)
		wantState(t, sb, cm.StateIdle)
		if a.cm.NumTimewait() != 0 || b.cm.NumTimewait() != 0 {
			t.Error("timewait not released")
		}
		ca.Destroy()
		sb.Destroy()
		if a.cm.NumIDs() != 0 || b.cm.NumIDs() != 1 { // b keeps its listener
			t.Errorf("ids: %d %d", a.cm.NumIDs(), b.cm.NumIDs())
		}
		if got := a.evs(); !slices.Equal(got, []cm.EventType{cm.EventREPReceived, cm.EventDREPReceived, cm.EventTimewaitExit}) {
			t.Errorf("active events %v", got)
		}
		if got := b.evs(); !slices.Equal(got, []cm.EventType{cm.EventREQReceived, cm.EventRTUReceived, cm.EventDREQReceived, cm.EventTimewaitExit}) {
			t.Errorf("passive events %v", got)
		}
	})
}

func TestNoListener(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		id := a.newID()
		if err := id.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r := a.mustFind(cm.EventREJReceived)
		if r.ev.REJ.Reason != mad.RejInvalidServiceID || r.ev.REJ.MessageRejected != mad.MsgREQ {
			t.Errorf("REJ %+v", r.ev.REJ)
		}
		var re *cm.RejectError
		if !errors.As(r.ev.Err, &re) || re.Reason != mad.RejInvalidServiceID || !errors.Is(r.ev.Err, cm.ErrRejected) {
			t.Errorf("Err %v", r.ev.Err)
		}
		wantState(t, id, cm.StateIdle)
		if b.cm.NumIDs() != 0 {
			t.Error("passive leaked an ID")
		}
		// SIDR to no listener: SIDR_REP "unsupported".
		s := a.newID()
		if err := s.SendSIDRREQ(&cm.SIDRREQParam{Path: reqParam(a, b, 1).Primary, ServiceID: 0x1110000}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if r := a.mustFind(cm.EventSIDRREPReceived); r.ev.SIDRREP.Status != mad.SIDRUnsupported {
			t.Errorf("SIDR status %v", r.ev.SIDRREP.Status)
		}
	})
}

func TestLostREQ(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		n.setDrop(dropAttr(mad.AttrREQ, 3))
		ca, _ := func() (*cm.ID, *cm.ID) {
			acceptAll(b)
			rtuOnREP(a)
			b.listen(testSID)
			ca := a.newID()
			if err := ca.SendREQ(reqParam(a, b, 0x100)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			return ca, nil
		}()
		wantState(t, ca, cm.StateEstablished)
		if got := a.cm.Stats().Retransmits.Load(); got != 3 {
			t.Errorf("retransmits %d", got)
		}
		if n.count(mad.AttrREQ, a.gid) != 4 {
			t.Errorf("REQs sent %d", n.count(mad.AttrREQ, a.gid))
		}
		// Each try waits 2×2^(16-8) + 2^(20-8) ms = 4.608 s (ib-cm.md §7.2).
		if iv := cm.RetransmitInterval(16, 20); iv != 4608*time.Millisecond {
			t.Errorf("interval %v", iv)
		}
		if iv := cm.RetransmitInterval(18, 20); iv != 6144*time.Millisecond {
			t.Errorf("interval %v", iv)
		}
	})
}

func TestREQTimeout(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		b.listen(testSID)
		n.setDrop(dropAttr(mad.AttrREQ, -1))
		id := a.newID()
		p := reqParam(a, b, 0x100)
		p.MaxCMRetries = 3
		start := time.Now()
		if err := id.SendREQ(p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		// Fake time: the error came after exactly 4 tries.
		if at := a.mustFind(cm.EventREQError).at; at.Sub(start) != 4*4608*time.Millisecond {
			t.Errorf("gave up after %v", at.Sub(start))
		}
		synctest.Wait()
		r := a.mustFind(cm.EventREQError)
		if !errors.Is(r.ev.Err, cm.ErrTimeout) {
			t.Errorf("err %v", r.ev.Err)
		}
		if n.count(mad.AttrREQ, a.gid) != 4 {
			t.Errorf("REQs sent %d, want 1+3", n.count(mad.AttrREQ, a.gid))
		}
		wantState(t, id, cm.StateIdle)
		id.Destroy()
		if a.cm.NumIDs() != 0 || b.cm.NumIDs() != 1 || a.cm.Stats().Timeouts.Load() != 1 {
			t.Error("leaked IDs")
		}
	})
}

func TestLostREP(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		n.setDrop(dropAttr(mad.AttrREP, 2))
		acceptAll(b)
		rtuOnREP(a)
		b.listen(testSID)
		ca := a.newID()
		if err := ca.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		wantState(t, ca, cm.StateEstablished)
		sb := b.mustFind(cm.EventRTUReceived).id
		wantState(t, sb, cm.StateEstablished)
		// Exactly one connection on b despite the retransmitted REQs.
		if b.cm.NumIDs() != 2 || b.cm.Stats().Duplicates.Load() == 0 {
			t.Errorf("b ids %d dups %d", b.cm.NumIDs(), b.cm.Stats().Duplicates.Load())
		}
		if k := len(b.evs()); k != 2 {
			t.Errorf("b events %v", b.evs())
		}
	})
}

func TestLostRTU(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		n.setDrop(dropAttr(mad.AttrRTU, 1))
		acceptAll(b)
		rtuOnREP(a)
		b.listen(testSID)
		ca := a.newID()
		if err := ca.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		wantState(t, ca, cm.StateEstablished)
		wantState(t, b.mustFind(cm.EventRTUReceived).id, cm.StateEstablished)
		if n.count(mad.AttrRTU, a.gid) != 2 || n.count(mad.AttrREP, b.gid) != 2 {
			t.Errorf("RTUs %d REPs %d", n.count(mad.AttrRTU, a.gid), n.count(mad.AttrREP, b.gid))
		}
		if k := len(a.evs()); k != 1 {
			t.Errorf("a events %v", a.evs())
		}
	})
}

func TestREPTimeoutAndEstablish(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		n.setDrop(dropAttr(mad.AttrRTU, -1))
		acceptAll(b)
		a.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventREPReceived {
				return id.SendRTU(nil)
			}
			return nil
		})
		b.listen(testSID)
		p := reqParam(a, b, 0x100)
		p.MaxCMRetries = 2
		ca := a.newID()
		if err := ca.SendREQ(p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		r := b.mustFind(cm.EventREPError)
		if !errors.Is(r.ev.Err, cm.ErrTimeout) || n.count(mad.AttrREP, b.gid) != 3 {
			t.Errorf("REP error %v, REPs %d", r.ev.Err, n.count(mad.AttrREP, b.gid))
		}
		wantState(t, r.id, cm.StateIdle)
		r.id.Destroy()

		// Establish: the passive side moves on without the RTU.
		ca.Destroy()
		synctest.Wait()
		a2 := a.newID()
		if err := a2.SendREQ(reqParam(a, b, 0x101)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var sb *cm.ID
		for _, rc := range b.events {
			if rc.ev.Type == cm.EventREQReceived && rc.ev.REQ.LocalQPN == 0x101 {
				sb = rc.id
			}
		}
		wantState(t, sb, cm.StateREPSent)
		if err := sb.Establish(); err != nil {
			t.Fatal(err)
		}
		if err := sb.Establish(); !errors.Is(err, cm.ErrState) {
			t.Errorf("second Establish: %v", err)
		}
		synctest.Wait()
		b.mustFind(cm.EventUserEstablished)
		wantState(t, sb, cm.StateEstablished)
	})
}

func TestLostDREQAndDREP(t *testing.T) {
	for _, tc := range []struct {
		name string
		attr mad.AttrID
	}{{"DREQ", mad.AttrDREQ}, {"DREP", mad.AttrDREP}} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, func(t *testing.T) {
				n := newNet(t)
				a := n.node(t, "10.0.0.1", cm.Config{})
				b := n.node(t, "10.0.0.2", cm.Config{})
				ca, sb := connect(t, a, b)
				n.setDrop(dropAttr(tc.attr, 1))
				if err := ca.SendDREQ(nil); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Second)
				synctest.Wait()
				a.mustFind(cm.EventDREPReceived)
				wantDREP := 1
				if tc.attr == mad.AttrDREP {
					wantDREP = 2
				}
				if n.count(mad.AttrDREQ, a.gid) != 2 || n.count(mad.AttrDREP, b.gid) != wantDREP {
					t.Errorf("DREQs %d DREPs %d", n.count(mad.AttrDREQ, a.gid), n.count(mad.AttrDREP, b.gid))
				}
				if got := b.evs(); countEv(got, cm.EventDREQReceived) != 1 {
					t.Errorf("duplicate DREQ event: %v", got)
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				wantState(t, ca, cm.StateIdle)
				wantState(t, sb, cm.StateIdle)
			})
		})
	}
}

func TestDREQTimeout(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		ca, _ := connect(t, a, b)
		n.setDrop(dropAttr(mad.AttrDREQ, -1))
		if err := ca.SendDREQ(nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		r := a.mustFind(cm.EventDREQError)
		if !errors.Is(r.ev.Err, cm.ErrTimeout) || n.count(mad.AttrDREQ, a.gid) != 16 {
			t.Errorf("%v, %d DREQs", r.ev.Err, n.count(mad.AttrDREQ, a.gid))
		}
		a.mustFind(cm.EventTimewaitExit)
		wantState(t, ca, cm.StateIdle)
	})
}

func TestRejectReasons(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		b.listen(testSID)
		var reason mad.RejectReason
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventREQReceived {
				if err := id.SendREJ(reason, []byte{1, 2, 3}, []byte("no thanks")); err != nil {
					return err
				}
				return id.Destroy()
			}
			return nil
		})
		for i, r := range mad.RejectReasons() {
			reason = r
			id := a.newID()
			if err := id.SendREQ(reqParam(a, b, uint32(0x100+i))); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			ev := a.mustFind(cm.EventREJReceived).ev
			if ev.REJ.Reason != r || !bytes.Equal(ev.REJ.ARI, []byte{1, 2, 3}) ||
				string(ev.PrivateData[:9]) != "no thanks" || ev.REJ.MessageRejected != mad.MsgREQ {
				t.Errorf("%v: REJ %+v", r, ev.REJ)
			}
			want := cm.StateIdle
			if r == mad.RejStaleConn {
				want = cm.StateTimewait
			}
			wantState(t, id, want)
			id.Destroy()
		}
		if b.cm.NumIDs() != 1 {
			t.Errorf("passive ids %d", b.cm.NumIDs())
		}
		// Limits.
		id := a.newID()
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventREQReceived {
				if err := id.SendREJ(mad.RejConsumerDefined, make([]byte, 73), nil); !errors.Is(err, cm.ErrPrivateDataTooLong) {
					t.Errorf("ARI 73: %v", err)
				}
				if err := id.SendREJ(mad.RejConsumerDefined, nil, make([]byte, 149)); !errors.Is(err, mad.ErrTooLong) {
					t.Errorf("REJ pd 149: %v", err)
				}
				if err := id.SendREP(&cm.REPParam{QPN: 1, PrivateData: make([]byte, 197)}); !errors.Is(err, cm.ErrPrivateDataTooLong) {
					t.Errorf("REP pd 197: %v", err)
				}
				return id.SendREJ(mad.RejConsumerDefined, nil, make([]byte, 148))
			}
			return nil
		})
		p := reqParam(a, b, 0x300)
		p.PrivateData = make([]byte, 93)
		if err := id.SendREQ(p); !errors.Is(err, cm.ErrPrivateDataTooLong) {
			t.Errorf("REQ pd 93: %v", err)
		}
		p.PrivateData = make([]byte, 92)
		if err := id.SendREQ(p); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ev := a.mustFind(cm.EventREJReceived).ev; ev.REJ.Reason != mad.RejConsumerDefined {
			t.Errorf("%v", ev.REJ.Reason)
		}
	})
}

func TestMRA(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		b.listen(testSID)
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventREQReceived {
				return id.SendMRA(24, []byte("wait")) // 2^16 ms ≈ 65 s
			}
			return nil
		})
		rtuOnREP(a)
		ca := a.newID()
		if err := ca.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if r := a.mustFind(cm.EventMRAReceived); r.ev.MRA.MessageMRAed != mad.MsgREQ || r.ev.MRA.ServiceTimeout != 24 {
			t.Errorf("MRA %+v", r.ev.MRA)
		}
		wantState(t, ca, cm.StateMRAREQRcvd)
		sb := b.mustFind(cm.EventREQReceived).id
		wantState(t, sb, cm.StateMRAREQSent)
		// Far longer than a REQ retry interval: the MRA holds them off.
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if a.cm.Stats().Retransmits.Load() != 0 {
			t.Errorf("REQ retransmitted during MRA")
		}
		// A duplicate REQ now gets the MRA again.
		if err := sb.SendREP(&cm.REPParam{QPN: 0x300}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, ca, cm.StateEstablished)
		wantState(t, sb, cm.StateEstablished)

		// MRA of a REP.
		a.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventREPReceived {
				return id.SendMRA(20, nil)
			}
			return nil
		})
		acceptAll(b)
		c2 := a.newID()
		if err := c2.SendREQ(reqParam(a, b, 0x101)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, c2, cm.StateMRAREPSent)
		s2 := b.mustFind(cm.EventMRAReceived).id
		wantState(t, s2, cm.StateMRAREPRcvd)
		if err := c2.SendRTU(nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, s2, cm.StateEstablished)
		if err := c2.SendMRA(1, nil); !errors.Is(err, cm.ErrState) {
			t.Errorf("MRA when established: %v", err)
		}
	})
}

func TestLAPAPR(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		ca, sb := connect(t, a, b)
		alt := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: a.ip, Dst: b.ip, TrafficClass: 96, HopLimit: 8})
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventLAPReceived {
				if err := id.SendMRA(18, nil); err != nil {
					return err
				}
				return id.SendAPR(mad.APRSuccess, []byte{7}, []byte("ok"))
			}
			return nil
		})
		if err := ca.SendLAP(&alt, []byte("alt")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		lap := b.mustFind(cm.EventLAPReceived)
		if lap.ev.LAP.Alternate != alt || lap.ev.LAP.RemoteQPN != 0x200 {
			t.Errorf("LAP %+v", lap.ev.LAP)
		}
		apr := a.mustFind(cm.EventAPRReceived)
		if apr.ev.APR.Status != mad.APRSuccess || !bytes.Equal(apr.ev.APR.Info, []byte{7}) {
			t.Errorf("APR %+v", apr.ev.APR)
		}
		a.mustFind(cm.EventMRAReceived)
		wantState(t, ca, cm.StateEstablished)
		wantState(t, sb, cm.StateEstablished)
		qa, m, _ := ca.InitQPAttr(verbs.QPStateRTR)
		if m&verbs.QPAttrAltPath == 0 || qa.AltAH.GRH.TrafficClass != 96 || qa.AltAH.GRH.DGID != b.gid {
			t.Errorf("alt AH %+v", qa.AltAH)
		}
		qb, m, _ := sb.InitQPAttr(verbs.QPStateRTR)
		if m&verbs.QPAttrAltPath == 0 || qb.AltAH.GRH.DGID != a.gid {
			t.Errorf("passive alt AH %+v", qb.AltAH)
		}
		// LAP lost forever: LAP_ERROR, back to ESTABLISHED.
		n.setDrop(dropAttr(mad.AttrLAP, -1))
		if err := ca.SendLAP(&alt, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		a.mustFind(cm.EventLAPError)
		wantState(t, ca, cm.StateEstablished)
	})
}

func TestSIDR(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		sid := mad.ServiceID(mad.PSUDP, 4000)
		b.listen(sid)
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventSIDRREQReceived {
				return id.SendSIDRREP(&cm.SIDRREPParam{Status: mad.SIDRSuccess, QPN: 0x77,
					QKey: mad.RDMAUDPQKey, PrivateData: []byte("ud")})
			}
			return nil
		})
		n.setDrop(dropAttr(mad.AttrSIDRREQ, 2))
		id := a.newID()
		path := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: a.ip, Dst: b.ip})
		if err := id.SendSIDRREQ(&cm.SIDRREQParam{Path: path, ServiceID: sid, PrivateData: []byte("q")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		r := a.mustFind(cm.EventSIDRREPReceived)
		if r.ev.SIDRREP.QPN != 0x77 || r.ev.SIDRREP.QKey != mad.RDMAUDPQKey || r.ev.SIDRREP.ServiceID != sid ||
			string(r.ev.PrivateData[:2]) != "ud" {
			t.Errorf("SIDR_REP %+v", r.ev.SIDRREP)
		}
		q := b.mustFind(cm.EventSIDRREQReceived)
		if q.ev.SIDRREQ.PKey != 0xFFFF || string(q.ev.PrivateData[:1]) != "q" {
			t.Errorf("SIDR_REQ %+v", q.ev.SIDRREQ)
		}
		wantState(t, id, cm.StateIdle)
		id.Destroy()
		q.id.Destroy()
		if a.cm.NumIDs() != 0 || b.cm.NumIDs() != 1 {
			t.Errorf("ids %d %d", a.cm.NumIDs(), b.cm.NumIDs())
		}
		// Timeout.
		n.setDrop(dropAttr(mad.AttrSIDRREQ, -1))
		id2 := a.newID()
		if err := id2.SendSIDRREQ(&cm.SIDRREQParam{Path: path, ServiceID: sid, Timeout: time.Second, MaxCMRetries: 2}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if r := a.mustFind(cm.EventSIDRREQError); !errors.Is(r.ev.Err, cm.ErrTimeout) {
			t.Errorf("%v", r.ev.Err)
		}
		wantState(t, id2, cm.StateIdle)
	})
}

func TestSimultaneousConnect(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		// Same first comm ID on both sides: IDs must still not mix.
		a := n.node(t, "10.0.0.1", cm.Config{FirstCommID: 1000})
		b := n.node(t, "10.0.0.2", cm.Config{FirstCommID: 1000})
		both := func(nd *node) {
			nd.setReact(func(id *cm.ID, ev *cm.Event) error {
				switch ev.Type {
				case cm.EventREQReceived:
					return id.SendREP(&cm.REPParam{QPN: 0x900})
				case cm.EventREPReceived:
					return id.SendRTU(nil)
				}
				return nil
			})
		}
		both(a)
		both(b)
		a.listen(testSID)
		b.listen(testSID)
		ia, ib := a.newID(), b.newID()
		if err := ia.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		if err := ib.SendREQ(reqParam(b, a, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, ia, cm.StateEstablished)
		wantState(t, ib, cm.StateEstablished)
		pa := a.mustFind(cm.EventRTUReceived).id
		pb := b.mustFind(cm.EventRTUReceived).id
		if pa.RemoteCommID() != ib.LocalCommID() || pb.RemoteCommID() != ia.LocalCommID() ||
			ia.RemoteCommID() != pb.LocalCommID() || ia.LocalCommID() != ib.LocalCommID() {
			t.Error("connections crossed")
		}
		if a.cm.NumIDs() != 3 || b.cm.NumIDs() != 3 {
			t.Errorf("ids %d %d", a.cm.NumIDs(), b.cm.NumIDs())
		}
	})
}

func TestListenerDestroyed(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		rtuOnREP(a)
		l := b.listen(testSID)
		// 1. A request already delivered survives the listener.
		c1 := a.newID()
		if err := c1.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s1 := b.mustFind(cm.EventREQReceived).id
		l.Destroy()
		if err := s1.SendREP(&cm.REPParam{QPN: 0x200}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, c1, cm.StateEstablished)
		// 2. New requests are refused.
		c2 := a.newID()
		if err := c2.SendREQ(reqParam(a, b, 0x101)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if r := a.mustFind(cm.EventREJReceived); r.id != c2 || r.ev.REJ.Reason != mad.RejInvalidServiceID {
			t.Errorf("REJ %+v", r.ev.REJ)
		}
		// 3. A request queued behind a busy handler when its listener
		// goes away is refused and its ID freed.
		l2 := b.listen(testSID)
		block := make(chan struct{})
		other := b.newID()
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventSIDRREQReceived {
				<-block
			}
			return nil
		})
		// Make "other" receive an event: an SIDR to a second listener.
		sid2 := mad.ServiceID(mad.PSUDP, 1)
		if err := other.Listen(sid2, 0); err != nil {
			t.Fatal(err)
		}
		q := a.newID()
		if err := q.SendSIDRREQ(&cm.SIDRREQParam{Path: reqParam(a, b, 1).Primary, ServiceID: sid2}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // dispatcher now blocked inside other's handler
		c3 := a.newID()
		if err := c3.SendREQ(reqParam(a, b, 0x102)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		before := b.cm.NumIDs()
		l2.Destroy()
		close(block)
		synctest.Wait()
		if r := a.mustFind(cm.EventREJReceived); r.id != c3 || r.ev.REJ.Reason != mad.RejInvalidServiceID {
			t.Errorf("orphan REJ %+v", r.ev.REJ)
		}
		if b.cm.NumIDs() != before-2 { // l2 and the orphan
			t.Errorf("ids %d, before %d", b.cm.NumIDs(), before)
		}
		for _, r := range b.events {
			if r.ev.Type == cm.EventREQReceived && r.ev.REQ.LocalQPN == 0x102 {
				t.Error("orphan REQ delivered")
			}
		}
	})
}

func TestDestroyInCallback(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		b.listen(testSID)
		b.setReact(func(id *cm.ID, ev *cm.Event) error {
			if ev.Type == cm.EventREQReceived {
				if err := id.Destroy(); err != nil {
					return err
				}
				if err := id.SendREP(&cm.REPParam{QPN: 1}); !errors.Is(err, cm.ErrDestroyed) {
					t.Errorf("use after destroy: %v", err)
				}
			}
			return nil
		})
		c := a.newID()
		if err := c.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if r := a.mustFind(cm.EventREJReceived); r.ev.REJ.Reason != mad.RejConsumerDefined {
			t.Errorf("reason %v", r.ev.REJ.Reason)
		}
		// Returning an error from the handler destroys the ID too.
		b.setReact(func(id *cm.ID, ev *cm.Event) error { return errors.New("no") })
		c2 := a.newID()
		if err := c2.SendREQ(reqParam(a, b, 0x101)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if b.cm.NumIDs() != 1 {
			t.Errorf("ids %d", b.cm.NumIDs())
		}
		wantState(t, c2, cm.StateIdle)
	})
}

func TestDestroyEstablished(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		ca, sb := connect(t, a, b)
		lid := ca.LocalCommID()
		ca.Destroy()
		synctest.Wait()
		b.mustFind(cm.EventDREQReceived)
		wantState(t, sb, cm.StateTimewait)
		if a.cm.NumIDs() != 0 || a.cm.NumTimewait() != 1 {
			t.Errorf("ids %d tw %d", a.cm.NumIDs(), a.cm.NumTimewait())
		}
		// The comm ID and QPN stay reserved through timewait.
		id := a.newID()
		if id.LocalCommID() == lid {
			t.Error("comm ID reused during timewait")
		}
		if err := id.SendREQ(reqParam(a, b, 0x100)); !errors.Is(err, cm.ErrQPNInTimewait) {
			t.Errorf("QPN reuse: %v", err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if a.cm.NumTimewait() != 0 || b.cm.NumTimewait() != 0 {
			t.Error("timewait not over")
		}
		acceptAll(b)
		if err := id.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, id, cm.StateEstablished)
	})
}

func TestStaleConnection(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		ca, sb := connect(t, a, b)
		// A second REQ from the same remote QPN while the first
		// connection lives: REJ STALE_CONN.
		id := a.newID()
		if err := id.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r := a.mustFind(cm.EventREJReceived)
		if r.id != id || r.ev.REJ.Reason != mad.RejStaleConn {
			t.Errorf("REJ %+v", r.ev.REJ)
		}
		wantState(t, id, cm.StateTimewait)
		if b.cm.Stats().StaleConns.Load() != 1 {
			t.Error("stale not counted")
		}
		// B also takes the old connection down: DREQ, answered by A.
		if r := b.mustFind(cm.EventDREPReceived); r.id != sb {
			t.Errorf("DREP_RECEIVED on %v, want the old connection", r.id.LocalCommID())
		}
		if r := a.mustFind(cm.EventDREQReceived); r.id != ca {
			t.Errorf("DREQ_RECEIVED on %v, want the old connection", r.id.LocalCommID())
		}
		wantState(t, sb, cm.StateTimewait)
	})
}

// restart replaces nd's CM by a new one on the same address, as a
// restarted process: same GID and CA GUID, a fresh comm ID space, nothing
// remembered. The old CM sends nothing more.
func (n *memNet) restart(t *testing.T, nd *node) *node {
	t.Helper()
	if err := nd.cm.Close(); err != nil {
		t.Fatal(err)
	}
	return n.node(t, nd.ip.String(), cm.Config{})
}

// TestStalePeerRestartActive: the active side restarts and reuses its
// QPN in a new REQ while the passive side still holds the old connection
// ESTABLISHED. The passive side rejects with STALE_CONN and sends a DREQ
// on the old connection; the restarted CM answers it with a DREP for an
// unknown connection, so the old connection's owner hears DREP_RECEIVED.
// Once its timewait is over the retry connects.
func TestStalePeerRestartActive(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		_, sb := connect(t, a, b)
		a2 := n.restart(t, a)
		rtuOnREP(a2)
		id := a2.newID()
		if err := id.SendREQ(reqParam(a2, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r := a2.mustFind(cm.EventREJReceived)
		if r.id != id || r.ev.REJ.Reason != mad.RejStaleConn || !errors.Is(r.ev.Err, cm.ErrRejected) {
			t.Fatalf("first REQ after restart: %+v", r.ev.REJ)
		}
		if d := b.mustFind(cm.EventDREPReceived); d.id != sb {
			t.Fatalf("DREP_RECEIVED on %v, want the old connection", d.id.LocalCommID())
		}
		wantState(t, sb, cm.StateTimewait)
		if b.cm.Stats().StaleConns.Load() != 1 || a2.cm.Stats().Unmatched.Load() != 1 {
			t.Errorf("stale %d, unmatched DREQ at the restarted side %d",
				b.cm.Stats().StaleConns.Load(), a2.cm.Stats().Unmatched.Load())
		}
		// The owner destroys the old ID (as a ULP does on disconnect);
		// its identifiers stay reserved until timewait ends.
		if err := sb.Destroy(); err != nil {
			t.Fatal(err)
		}
		if err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if b.cm.NumTimewait() != 0 {
			t.Fatalf("%d connections still in timewait", b.cm.NumTimewait())
		}
		retry := a2.newID()
		if err := retry.SendREQ(reqParam(a2, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, retry, cm.StateEstablished)
		if got := b.mustFind(cm.EventRTUReceived).id; got == sb {
			t.Error("the retry reused the old ID")
		}
	})
}

// TestStalePeerRestartPassive: the passive side restarts and answers a
// new REQ with a REP naming the QPN its old incarnation had, which the
// active side still holds ESTABLISHED. The active side refuses the REP
// (REJ STALE_CONN), fails the attempt with REQ_ERROR and disconnects the
// old connection; after timewait a new attempt connects.
func TestStalePeerRestartPassive(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		ca, _ := connect(t, a, b)
		b2 := n.restart(t, b)
		acceptAll(b2) // hands out QPN 0x200 again
		b2.listen(testSID)
		id := a.newID()
		if err := id.SendREQ(reqParam(a, b2, 0x101)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r := a.mustFind(cm.EventREQError)
		var re *cm.RejectError
		if r.id != id || !errors.As(r.ev.Err, &re) || re.Reason != mad.RejStaleConn {
			t.Fatalf("REQ after the peer restarted: %v", r.ev.Err)
		}
		if rej := b2.mustFind(cm.EventREJReceived); rej.ev.REJ.Reason != mad.RejStaleConn ||
			rej.ev.REJ.MessageRejected != mad.MsgREP {
			t.Errorf("restarted side got %+v", rej.ev.REJ)
		}
		if d := a.mustFind(cm.EventDREPReceived); d.id != ca {
			t.Fatalf("DREP_RECEIVED on %v, want the old connection", d.id.LocalCommID())
		}
		wantState(t, ca, cm.StateTimewait)
		if err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		retry := a.newID()
		if err := retry.SendREQ(reqParam(a, b2, 0x102)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantState(t, retry, cm.StateEstablished)
		if retry.RemoteQPN() != 0x201 {
			t.Errorf("remote QPN %#x", retry.RemoteQPN())
		}
	})
}

func TestMisc(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		a := n.node(t, "10.0.0.1", cm.Config{})
		b := n.node(t, "10.0.0.2", cm.Config{})
		b.listen(testSID)
		l := b.newID()
		if err := l.Listen(testSID, 0); !errors.Is(err, cm.ErrBusy) {
			t.Errorf("dup listen: %v", err)
		}
		if err := l.Listen(testSID&^0xFFFF, 0xFFFFFFFFFFFF0000); !errors.Is(err, cm.ErrBusy) {
			t.Errorf("overlapping listen: %v", err)
		}
		if err := l.Listen(testSID+1, 0); err != nil {
			t.Error(err)
		}
		id := a.newID()
		for name, err := range map[string]error{
			"RTU":  id.SendRTU(nil),
			"DREQ": id.SendDREQ(nil),
			"DREP": id.SendDREP(nil),
			"REP":  id.SendREP(&cm.REPParam{QPN: 1}),
			"REJ":  id.SendREJ(mad.RejNoQP, nil, nil),
			"LAP":  id.SendLAP(&mad.Path{}, nil),
			"APR":  id.SendAPR(0, nil, nil),
			"SREP": id.SendSIDRREP(&cm.SIDRREPParam{}),
		} {
			if !errors.Is(err, cm.ErrState) {
				t.Errorf("%s in IDLE: %v", name, err)
			}
		}
		if _, _, err := id.InitQPAttr(verbs.QPStateRTR); !errors.Is(err, cm.ErrState) {
			t.Errorf("RTR attrs in IDLE: %v", err)
		}
		if err := id.SendREQ(&cm.REQParam{}); !errors.Is(err, cm.ErrInvalidParam) {
			t.Errorf("QPN 0: %v", err)
		}
		// Garbage and non-Send MADs are counted and dropped.
		b.cm.HandleMAD([]byte{1, 2, 3}, cm.Addr{})
		get := mad.AppendMAD(nil, mad.HeaderFields{BaseVersion: 1, MgmtClass: mad.ClassCM, ClassVersion: 2,
			Method: mad.MethodGet}, &mad.ClassPortInfo{})
		b.cm.HandleMAD(get, cm.Addr{})
		if b.cm.Stats().Malformed.Load() != 2 {
			t.Errorf("malformed %d", b.cm.Stats().Malformed.Load())
		}
		// A DREQ for an unknown connection is answered with a DREP.
		from := cm.Addr{QPN: 1}
		from.AH.GRH.DGID = a.gid
		b.cm.HandleMAD(mad.AppendCM(nil, 42, &mad.DREQ{LocalCommID: 5, RemoteCommID: 6}), from)
		synctest.Wait()
		drep := n.last(mad.AttrDREP)
		var d mad.DREP
		if drep == nil || d.Decode(drep[24:]) != nil || d.LocalCommID != 6 || d.RemoteCommID != 5 ||
			mad.Header(drep).TID() != 42 {
			t.Errorf("DREP for unknown DREQ: %+v", d)
		}
		if err := a.cm.Close(); err != nil {
			t.Error(err)
		}
		if err := a.cm.Close(); !errors.Is(err, cm.ErrClosed) {
			t.Errorf("double close: %v", err)
		}
		if _, err := a.cm.CreateID(nil, nil); !errors.Is(err, cm.ErrClosed) {
			t.Errorf("create after close: %v", err)
		}
	})
}

func TestStateTable(t *testing.T) {
	if len(cm.States()) != 20 || len(cm.EventTypes()) != 18 {
		t.Fatal("enum sizes")
	}
	names := map[string]bool{}
	for _, s := range cm.States() {
		if names[s.String()] {
			t.Errorf("dup name %s", s)
		}
		names[s.String()] = true
	}
	for _, e := range cm.EventTypes() {
		if e.String() == "" || names[e.String()] {
			t.Errorf("event name %s", e)
		}
		names[e.String()] = true
	}
	if cm.State(99).String() != "State(99)" || cm.EventType(99).String() != "EventType(99)" {
		t.Error("unknown names")
	}
	// Every state but LISTEN is reachable from IDLE and every state can
	// get back to IDLE.
	reach := func(from cm.State) map[cm.State]bool {
		seen := map[cm.State]bool{from: true}
		todo := []cm.State{from}
		for len(todo) > 0 {
			s := todo[0]
			todo = todo[1:]
			for _, n := range cm.States() {
				if cm.CanTransition(s, n) && !seen[n] {
					seen[n] = true
					todo = append(todo, n)
				}
			}
		}
		return seen
	}
	fromIdle := reach(cm.StateIdle)
	for _, s := range cm.States() {
		if !fromIdle[s] {
			t.Errorf("%v unreachable", s)
		}
		if !reach(s)[cm.StateIdle] {
			t.Errorf("%v cannot return to IDLE", s)
		}
	}
	if cm.CanTransition(cm.StateIdle, cm.StateEstablished) || cm.CanTransition(99, cm.StateIdle) {
		t.Error("bogus transition allowed")
	}
}

func countEv(evs []cm.EventType, tp cm.EventType) int {
	k := 0
	for _, e := range evs {
		if e == tp {
			k++
		}
	}
	return k
}

func TestDropSend(t *testing.T) {
	run(t, func(t *testing.T) {
		n := newNet(t)
		dropped := 0
		a := n.node(t, "10.0.0.1", cm.Config{DropSend: func(m []byte, _ cm.Addr) bool {
			if mad.Header(m).AttrID() == mad.AttrREQ && dropped == 0 {
				dropped++
				return true
			}
			return false
		}})
		b := n.node(t, "10.0.0.2", cm.Config{})
		acceptAll(b)
		rtuOnREP(a)
		b.listen(testSID)
		id := a.newID()
		if err := id.SendREQ(reqParam(a, b, 0x100)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		wantState(t, id, cm.StateEstablished)
		if dropped != 1 || n.count(mad.AttrREQ, a.gid) != 1 || a.cm.Stats().Retransmits.Load() != 1 {
			t.Errorf("dropped %d, REQs on the wire %d", dropped, n.count(mad.AttrREQ, a.gid))
		}
	})
}
