package cm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"softib/cm"
	"softib/internal/verbstest"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/mad"
)

func openRXE(t *testing.T) verbs.Device {
	t.Helper()
	return verbstest.Loopback().Open(t, rxe.Config{})
}

func gsiAddr(dev verbs.Device) cm.Addr {
	var a cm.Addr
	a.AH.GRH.DGID = verbs.GIDFromAddr(dev.(*rxe.Device).Addr().Addr())
	return a
}

// newRC makes an RC QP with a 4 KiB buffer on dev, to be connected
// through the CM.
func newRC(t *testing.T, dev verbs.Device) *verbstest.End {
	t.Helper()
	return verbstest.NewEnd(t, dev, verbs.QPTypeRC, verbstest.EndOpts{Buf: 4096, CQE: 64,
		Cap:    verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead})
}

// modify applies the CM's attributes for each state in turn.
func modify(id *cm.ID, qp verbs.QP, states ...verbs.QPState) error {
	for _, s := range states {
		a, m, err := id.InitQPAttr(s)
		if err != nil {
			return err
		}
		if err := qp.Modify(&a, m); err != nil {
			return err
		}
	}
	return nil
}

func waitWC(t *testing.T, cq verbs.CQ) verbs.WC { t.Helper(); return verbstest.WaitOne(t, cq) }

// TestGSIConnectRC connects two rxe RC QPs through the CM over real GSI
// QPs and moves data over them.
func TestGSIConnectRC(t *testing.T) {
	da, db := openRXE(t), openRXE(t)
	ca, err := cm.Attach(da, cm.Config{}, cm.GSIConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := cm.Attach(db, cm.Config{}, cm.GSIConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	ea, eb := newRC(t, da), newRC(t, db)
	sid := mad.ServiceID(mad.PSTCP, 7174)
	type result struct {
		ev  cm.EventType
		err error
	}
	passive := make(chan result, 8)
	active := make(chan result, 8)
	lis, err := cb.CreateID(func(id *cm.ID, ev *cm.Event) error {
		switch ev.Type {
		case cm.EventREQReceived:
			// Like ipoib_cm: RTR before the REP, with the receive PSN the
			// REP will announce.
			err := modify(id, eb.QP, verbs.QPStateInit)
			if err == nil {
				a, m, _ := id.InitQPAttr(verbs.QPStateRTR)
				a.RQPSN = 0x300
				err = eb.QP.Modify(&a, m)
			}
			if err == nil {
				err = modify(id, eb.QP, verbs.QPStateRTS)
			}
			if err != nil {
				passive <- result{ev.Type, err}
				return err
			}
			if _, err := eb.QP.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{eb.MR.SGE(0, 100)}}}); err != nil {
				return err
			}
			return id.SendREP(&cm.REPParam{QPN: eb.QP.QPN(), StartingPSN: 0x300, ResponderResources: 1,
				InitiatorDepth: 1, RNRRetryCount: 7, PrivateData: []byte("rep")})
		case cm.EventDREQReceived:
			return id.SendDREP(nil)
		}
		passive <- result{ev.Type, ev.Err}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(sid, 0); err != nil {
		t.Fatal(err)
	}
	id, err := ca.CreateID(func(id *cm.ID, ev *cm.Event) error {
		if ev.Type == cm.EventREPReceived {
			if err := modify(id, ea.QP, verbs.QPStateRTR, verbs.QPStateRTS); err != nil {
				active <- result{ev.Type, err}
				return err
			}
			if err := id.SendRTU(nil); err != nil {
				return err
			}
		}
		active <- result{ev.Type, ev.Err}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gaddr := func(d verbs.Device) netip.Addr { return d.(*rxe.Device).Addr().Addr() }
	p := &cm.REQParam{
		Primary:     mad.RoCEv2Path(mad.RoCEv2PathParams{Src: gaddr(da), Dst: gaddr(db)}),
		SGIDIndex:   1,
		ServiceID:   sid,
		QPN:         ea.QP.QPN(),
		StartingPSN: 0x100, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
	}
	// The active QP goes to INIT before the REQ, as rdma_cm moves it when
	// the QP is created (cma_init_conn_qp): the REP can come back, and
	// the handler move the QP to RTR, before SendREQ returns.
	if err := ea.QP.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := id.SendREQ(p); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second) // hang guard
	for _, want := range []struct {
		ch chan result
		ev cm.EventType
	}{{active, cm.EventREPReceived}, {passive, cm.EventRTUReceived}} {
		select {
		case r := <-want.ch:
			if r.ev != want.ev || r.err != nil {
				t.Fatalf("event %v (%v), want %v", r.ev, r.err, want.ev)
			}
		case <-timeout:
			t.Fatalf("no %v", want.ev)
		}
	}
	copy(ea.Buf, "over RC via CM")
	if _, err := ea.QP.PostSend([]verbs.SendWR{{ID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{ea.MR.SGE(0, 14)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, ea.CQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("send wc %+v", wc)
	}
	if wc := waitWC(t, eb.CQ); wc.Status != verbs.WCSuccess || wc.ByteLen != 14 || string(eb.Buf[:14]) != "over RC via CM" {
		t.Fatalf("recv wc %+v %q", wc, eb.Buf[:14])
	}
	if err := id.SendDREQ(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-active:
		if r.ev != cm.EventDREPReceived {
			t.Fatalf("event %v", r.ev)
		}
	case <-timeout:
		t.Fatal("no DREP")
	}
	g := ca.Port().(*cm.GSI)
	if g.Stats().Sent.Load() < 2 || g.Stats().Received.Load() < 2 || g.Stats().Malformed.Load() != 0 {
		t.Errorf("GSI stats sent %d received %d malformed %d", g.Stats().Sent.Load(), g.Stats().Received.Load(),
			g.Stats().Malformed.Load())
	}
}

// TestGSIUnclaimed checks the Linux MAD-layer behaviour for MADs no
// agent claims, response matching by TID, and request timeouts.
func TestGSIUnclaimed(t *testing.T) {
	da, db := openRXE(t), openRXE(t)
	ga, err := cm.NewGSI(da, cm.GSIConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close()
	cb, err := cm.Attach(db, cm.Config{}, cm.GSIConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	gb := cb.Port().(*cm.GSI)
	ctx := context.Background()
	to := gsiAddr(db)

	// Get(ClassPortInfo) to the CM class: the CM takes Send only, so the
	// MAD layer answers GetResp with status 0x000C.
	get := mad.AppendMAD(nil, mad.HeaderFields{BaseVersion: 1, MgmtClass: mad.ClassCM, ClassVersion: 2,
		Method: mad.MethodGet}, &mad.ClassPortInfo{})
	resp, err := ga.Request(ctx, get, to, 2*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	h := mad.Header(resp)
	if h.Method() != mad.MethodGetResp || h.Status() != mad.StatusUnsupportedMethodAttr ||
		h.AttrID() != mad.AttrClassPortInfo || h.MgmtClass() != mad.ClassCM {
		t.Errorf("response %+v", h.Fields())
	}
	// An unknown class Set: same answer.
	set := mad.AppendMAD(nil, mad.HeaderFields{BaseVersion: 1, MgmtClass: 0x0A, ClassVersion: 1,
		Method: mad.MethodSet}, &mad.ClassPortInfo{})
	if resp, err := ga.Request(ctx, set, to, 2*time.Second, 3); err != nil || mad.Header(resp).Status() != 0x000C {
		t.Errorf("Set to unknown class: %v", err)
	}
	// An unknown-class Send is dropped silently: the request times out.
	send := bytes.Clone(set)
	mad.Header(send).SetMethod(mad.MethodSend)
	if _, err := ga.Request(ctx, send, to, 50*time.Millisecond, 1); !errors.Is(err, cm.ErrTimeout) {
		t.Errorf("unclaimed Send: %v", err)
	}
	if ga.Stats().Retries.Load() != 1 || ga.Stats().Timeouts.Load() != 1 {
		t.Errorf("retries %d timeouts %d", ga.Stats().Retries.Load(), ga.Stats().Timeouts.Load())
	}
	// An SMP class on QP1 and a short MAD are malformed; a stray
	// response is unmatched.
	smp := bytes.Clone(get)
	smp[1] = byte(mad.ClassSubnLID)
	if err := ga.Send(smp, to); err != nil {
		t.Fatal(err)
	}
	stray := bytes.Clone(get)
	mad.Header(stray).SetMethod(mad.MethodGetResp)
	if err := ga.Send(stray, to); err != nil {
		t.Fatal(err)
	}
	if err := ga.Send(get[:100], to); !errors.Is(err, cm.ErrInvalidParam) {
		t.Errorf("short send: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second) // hang guard
	for (gb.Stats().Malformed.Load() < 1 || gb.Stats().UnmatchedResp.Load() < 1) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if gb.Stats().Malformed.Load() != 1 || gb.Stats().UnmatchedResp.Load() != 1 || gb.Stats().UnsupportedTx.Load() != 2 ||
		gb.Stats().Unclaimed.Load() < 3 {
		t.Errorf("b stats: malformed %d unmatched %d unsupported %d unclaimed %d", gb.Stats().Malformed.Load(),
			gb.Stats().UnmatchedResp.Load(), gb.Stats().UnsupportedTx.Load(), gb.Stats().Unclaimed.Load())
	}
	if err := ga.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ga.Request(ctx, get, to, time.Second, 0); !errors.Is(err, cm.ErrClosed) {
		t.Errorf("request after close: %v", err)
	}
}

func TestParseGRHArea(t *testing.T) {
	b := make([]byte, 40)
	b[20], b[21] = 0x45, 0x88
	copy(b[32:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	s, d, tc, ok := cm.ParseGRHArea(b)
	if !ok || s != netip.MustParseAddr("10.0.0.1") || d != netip.MustParseAddr("10.0.0.2") || tc != 0x88 {
		t.Errorf("v4: %v %v %x %v", s, d, tc, ok)
	}
	v6 := make([]byte, 40)
	v6[0], v6[1] = 0x6A, 0xB0
	src, dst := netip.MustParseAddr("fd00::1").As16(), netip.MustParseAddr("fd00::2").As16()
	copy(v6[8:], src[:])
	copy(v6[24:], dst[:])
	s, d, tc, ok = cm.ParseGRHArea(v6)
	if !ok || s.String() != "fd00::1" || d.String() != "fd00::2" || tc != 0xAB {
		t.Errorf("v6: %v %v %x %v", s, d, tc, ok)
	}
	if _, _, _, ok := cm.ParseGRHArea(make([]byte, 40)); ok {
		t.Error("zero area accepted")
	}
	if _, _, _, ok := cm.ParseGRHArea(b[:39]); ok {
		t.Error("short area accepted")
	}
}

// TestGSIAttachedAgent registers a MAD class agent through
// Config.Attached (as an upper layer does on the devices of an
// rdmacm.Manager), gets its answer, and after Unregister gets the MAD
// layer's "unsupported method/attribute" again.
func TestGSIAttachedAgent(t *testing.T) {
	da, db := openRXE(t), openRXE(t)
	ga, err := cm.NewGSI(da, cm.GSIConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close()
	var gb *cm.GSI
	cb, err := cm.Attach(db, cm.Config{Attached: func(c *cm.CM, g *cm.GSI) {
		gb = g
		g.Register(mad.ClassDevMgt, 1, []mad.Method{mad.MethodGet}, func(m []byte, from cm.Addr) {
			r := bytes.Clone(m)
			mad.Header(r).SetMethod(mad.MethodGetResp)
			r[255] = 0x5a
			g.Send(r, from)
		})
	}}, cm.GSIConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if gb == nil || gb != cb.Port().(*cm.GSI) || gb.Device() != db {
		t.Fatal("Attached not called with the CM's GSI")
	}
	get := mad.AppendMAD(nil, mad.HeaderFields{BaseVersion: 1, MgmtClass: mad.ClassDevMgt, ClassVersion: 1,
		Method: mad.MethodGet}, &mad.ClassPortInfo{})
	resp, err := ga.Request(context.Background(), get, gsiAddr(db), 2*time.Second, 3)
	if err != nil || mad.Header(resp).Status() != 0 || resp[255] != 0x5a {
		t.Fatalf("agent answer: %v % x", err, resp)
	}
	gb.Unregister(mad.ClassDevMgt, 1)
	resp, err = ga.Request(context.Background(), get, gsiAddr(db), 2*time.Second, 3)
	if err != nil || mad.Header(resp).Status() != mad.StatusUnsupportedMethodAttr {
		t.Fatalf("after Unregister: %v % x", err, resp)
	}
}
