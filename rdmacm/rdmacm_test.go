//go:build linux

package rdmacm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/verbstest"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/mad"
)

// loopAddr returns a loopback address unique to this test binary.
func loopAddr() netip.Addr { return testaddr.Next() }

// env is a manager with two rxe devices on loopback addresses.
type env struct {
	m      *rdmacm.Manager
	da, db verbs.Device
	a, b   netip.Addr
	net    *verbstest.Net // where the devices are
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvOn(t, verbstest.Loopback()) }

// newEnvOn is newEnv with the devices on n (loopback sockets or the
// simulated network).
func newEnvOn(tb testing.TB, n *verbstest.Net) *env {
	tb.Helper()
	e := &env{m: rdmacm.NewManager(rdmacm.Config{}), net: n}
	tb.Cleanup(func() { e.m.Close() })
	for _, p := range []*verbs.Device{&e.da, &e.db} {
		d := n.Open(tb, rxe.Config{})
		if err := e.m.AddDevice(d); err != nil {
			tb.Fatal(err)
		}
		*p = d
	}
	e.a = e.da.(*rxe.Device).Addr().Addr()
	e.b = e.db.(*rxe.Device).Addr().Addr()
	return e
}

// expect waits (with a generous hang guard) for the next event and
// checks its type.
func expect(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if e.Type != want {
		t.Fatalf("event %v (status %d, %v), want %v", e.Type, e.Status, e.Err, want)
	}
	e.Ack()
	return e
}

var qpCap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}

func newCQ(t *testing.T, id *rdmacm.ID) verbs.CQ {
	t.Helper()
	cq, err := id.Device().CreateCQ(verbs.CQAttr{CQE: 64})
	if err != nil {
		t.Fatal(err)
	}
	return cq
}

func waitWC(t *testing.T, cq verbs.CQ) verbs.WC { t.Helper(); return verbstest.WaitOne(t, cq) }

// clientTo resolves an address and route to dst on a new ID.
func clientTo(t *testing.T, e *env, ch *rdmacm.EventChannel, ps rdmacm.PortSpace, dst netip.AddrPort) *rdmacm.ID {
	t.Helper()
	id, err := e.m.CreateID(ch, "client", ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(e.a, 0), dst, time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, rdmacm.EventAddrResolved)
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, rdmacm.EventRouteResolved)
	return id
}

func TestConnectAcceptDisconnect(t *testing.T) { connectAcceptDisconnect(t, newEnv(t)) }

func connectAcceptDisconnect(t *testing.T, e *env) {
	sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	lis, err := e.m.CreateID(sch, "server", rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := lis.BindAddr(netip.AddrPortFrom(e.b, 7174)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(8); err != nil {
		t.Fatal(err)
	}
	c := clientTo(t, e, cch, rdmacm.PSTCP, netip.AddrPortFrom(e.b, 7174))
	if p := c.Path(); p.LocalLID != 0xFFFF || p.RemoteGID != mad.GIDFromIP(e.b) {
		t.Errorf("path %+v", p)
	}
	ccq := newCQ(t, c)
	cqp, err := c.CreateQP(nil, &verbs.QPInitAttr{SendCQ: ccq, RecvCQ: ccq, Cap: qpCap})
	if err != nil {
		t.Fatal(err)
	}
	if cqp.State() != verbs.QPStateInit || cqp.Type() != verbs.QPTypeRC {
		t.Fatalf("client QP %v %v", cqp.State(), cqp.Type())
	}
	pd := bytes.Repeat([]byte{0xC0}, mad.ConnectPrivateDataMax)
	if err := c.Connect(&rdmacm.ConnParam{PrivateData: append(pd, 1)}); !errors.Is(err, rdmacm.ErrPrivateDataTooLong) {
		t.Fatalf("57-byte connect: %v", err)
	}
	if err := c.Connect(&rdmacm.ConnParam{PrivateData: pd, ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	req := expect(t, sch, rdmacm.EventConnectRequest)
	s := req.ID
	if req.ListenID != lis || s.Context() != "server" || !bytes.Equal(req.Conn.PrivateData[:56], pd) ||
		req.Conn.QPNum != cqp.QPN() || req.Conn.RetryCount != 7 || req.Conn.ResponderResources != 1 {
		t.Fatalf("CONNECT_REQUEST %+v", req.Conn)
	}
	if s.LocalAddr() != netip.AddrPortFrom(e.b, 7174) || s.RemoteAddr() != c.LocalAddr() || c.LocalAddr().Port() == 0 {
		t.Errorf("addresses: server %v↔%v, client %v", s.LocalAddr(), s.RemoteAddr(), c.LocalAddr())
	}
	scq := newCQ(t, s)
	sqp, err := s.CreateQP(nil, &verbs.QPInitAttr{SendCQ: scq, RecvCQ: scq, Cap: qpCap})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := s.PD().RegMR(make([]byte, 256), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 256)}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Accept(&rdmacm.ConnParam{PrivateData: make([]byte, 197)}); !errors.Is(err, rdmacm.ErrPrivateDataTooLong) {
		t.Fatalf("197-byte accept: %v", err)
	}
	if err := s.Accept(&rdmacm.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1,
		InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	est := expect(t, cch, rdmacm.EventEstablished)
	if string(est.Conn.PrivateData[:7]) != "welcome" || est.Conn.QPNum != sqp.QPN() {
		t.Errorf("ESTABLISHED %+v", est.Conn)
	}
	expect(t, sch, rdmacm.EventEstablished)
	if cqp.State() != verbs.QPStateRTS || sqp.State() != verbs.QPStateRTS {
		t.Fatalf("QP states %v %v", cqp.State(), sqp.State())
	}

	cmr, err := c.PD().RegMR([]byte("through rdmacm"), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cqp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{cmr.SGE(0, 14)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, ccq); wc.Status != verbs.WCSuccess {
		t.Fatalf("send %+v", wc)
	}
	if wc := waitWC(t, scq); wc.Status != verbs.WCSuccess || string(mr.Buf()[:14]) != "through rdmacm" {
		t.Fatalf("recv %+v %q", wc, mr.Buf()[:14])
	}

	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	expect(t, sch, rdmacm.EventDisconnected)
	if err := s.Disconnect(); err != nil { // answers with the DREP
		t.Fatal(err)
	}
	expect(t, cch, rdmacm.EventDisconnected)
	expect(t, cch, rdmacm.EventTimewaitExit)
	expect(t, sch, rdmacm.EventTimewaitExit)
	if c.State() != rdmacm.StateDisconnect || s.State() != rdmacm.StateDisconnect {
		t.Errorf("states %v %v", c.State(), s.State())
	}
	for _, id := range []*rdmacm.ID{c, s, lis} {
		id.DestroyQP()
		if err := id.Destroy(); err != nil {
			t.Error(err)
		}
	}
	// The port is free again.
	again, _ := e.m.CreateID(sch, nil, rdmacm.PSTCP)
	if err := again.BindAddr(netip.AddrPortFrom(e.b, 7174)); err != nil {
		t.Errorf("rebind: %v", err)
	}
}

func TestRejectAndUnreachable(t *testing.T) { sim(t, 2, rejectAndUnreachable) }

func rejectAndUnreachable(t *testing.T, e *env) {
	sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	lis, _ := e.m.CreateID(sch, nil, rdmacm.PSTCP)
	if err := lis.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 987)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	// A second bind of the port conflicts.
	dup, _ := e.m.CreateID(sch, nil, rdmacm.PSTCP)
	if err := dup.BindAddr(netip.AddrPortFrom(e.a, 987)); !errors.Is(err, rdmacm.ErrAddrInUse) {
		t.Errorf("dup bind: %v", err)
	}
	c := clientTo(t, e, cch, rdmacm.PSTCP, netip.AddrPortFrom(e.b, 987))
	if err := c.Connect(&rdmacm.ConnParam{QPNum: 0x1234, PrivateData: []byte("let me in")}); err != nil {
		t.Fatal(err)
	}
	req := expect(t, sch, rdmacm.EventConnectRequest)
	var pde *rdmacm.PrivateDataError
	if err := req.ID.Reject(make([]byte, 149)); !errors.As(err, &pde) || pde.Max != 148 || pde.Op != "reject" {
		t.Fatalf("149-byte reject: %v", err)
	}
	if err := req.ID.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	rej := expect(t, cch, rdmacm.EventRejected)
	if rej.Status != int(mad.RejConsumerDefined) || string(rej.Conn.PrivateData[:7]) != "go away" {
		t.Errorf("REJECTED status %d pd %q", rej.Status, rej.Conn.PrivateData[:7])
	}
	req.ID.Destroy()
	c.Destroy()

	// Nobody listens on port 988: the IB CM rejects with "invalid service ID".
	c2 := clientTo(t, e, cch, rdmacm.PSTCP, netip.AddrPortFrom(e.b, 988))
	if err := c2.Connect(&rdmacm.ConnParam{QPNum: 0x1235}); err != nil {
		t.Fatal(err)
	}
	if r := expect(t, cch, rdmacm.EventRejected); r.Status != int(mad.RejInvalidServiceID) {
		t.Errorf("status %d", r.Status)
	}

	// Resolution failures.
	c3, _ := e.m.CreateID(cch, nil, rdmacm.PSTCP)
	if err := c3.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("[fd00::9]:1"), time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, cch, rdmacm.EventAddrError)
	if err := c3.ResolveAddr(netip.MustParseAddrPort("192.0.2.1:0"), netip.AddrPortFrom(e.b, 1), time.Second); !errors.Is(err, rdmacm.ErrNoDevice) {
		t.Errorf("foreign source: %v", err)
	}
	if err := c3.Connect(&rdmacm.ConnParam{}); !errors.Is(err, rdmacm.ErrState) {
		t.Errorf("connect unresolved: %v", err)
	}
}

func TestBacklog(t *testing.T) { sim(t, 3, backlog) }

func backlog(t *testing.T, e *env) {
	sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	lis, _ := e.m.CreateID(sch, nil, rdmacm.PSTCP)
	if err := lis.BindAddr(netip.AddrPortFrom(e.b, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(1); err != nil {
		t.Fatal(err)
	}
	c1 := clientTo(t, e, cch, rdmacm.PSTCP, netip.AddrPortFrom(e.b, 5000))
	if err := c1.Connect(&rdmacm.ConnParam{QPNum: 0x100}); err != nil {
		t.Fatal(err)
	}
	first := expect(t, sch, rdmacm.EventConnectRequest)
	c2 := clientTo(t, e, cch, rdmacm.PSTCP, netip.AddrPortFrom(e.b, 5000))
	if err := c2.Connect(&rdmacm.ConnParam{QPNum: 0x101}); err != nil {
		t.Fatal(err)
	}
	if r := expect(t, cch, rdmacm.EventRejected); r.ID != c2 || r.Status != int(mad.RejConsumerDefined) {
		t.Errorf("over backlog: %+v", r)
	}
	// Accepting without a QP (qp_num given) frees the slot: CONNECT_RESPONSE
	// on the active side, which has no QP either.
	if err := first.ID.Accept(&rdmacm.ConnParam{QPNum: 0x200}); err != nil {
		t.Fatal(err)
	}
	resp := expect(t, cch, rdmacm.EventConnectResponse)
	if resp.Conn.QPNum != 0x200 {
		t.Errorf("response %+v", resp.Conn)
	}
	if err := c1.Establish(); err != nil {
		t.Fatal(err)
	}
	expect(t, sch, rdmacm.EventEstablished)
	c3 := clientTo(t, e, cch, rdmacm.PSTCP, netip.AddrPortFrom(e.b, 5000))
	if err := c3.Connect(&rdmacm.ConnParam{QPNum: 0x102}); err != nil {
		t.Fatal(err)
	}
	expect(t, sch, rdmacm.EventConnectRequest)
}

func TestUD(t *testing.T) { sim(t, 4, udConnect) }

func udConnect(t *testing.T, e *env) {
	sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	lis, _ := e.m.CreateID(sch, nil, rdmacm.PSUDP)
	if lis.QPType() != verbs.QPTypeUD {
		t.Fatal("PS_UDP is not UD")
	}
	if err := lis.BindAddr(netip.AddrPortFrom(e.b, 4000)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	c := clientTo(t, e, cch, rdmacm.PSUDP, netip.AddrPortFrom(e.b, 4000))
	ccq := newCQ(t, c)
	cqp, err := c.CreateQP(nil, &verbs.QPInitAttr{SendCQ: ccq, RecvCQ: ccq, Cap: qpCap})
	if err != nil {
		t.Fatal(err)
	}
	if cqp.State() != verbs.QPStateRTS {
		t.Fatalf("UD QP %v", cqp.State())
	}
	if err := c.Connect(&rdmacm.ConnParam{PrivateData: make([]byte, 181)}); !errors.Is(err, rdmacm.ErrPrivateDataTooLong) {
		t.Fatalf("181-byte UD resolve: %v", err)
	}
	if err := c.Connect(&rdmacm.ConnParam{PrivateData: make([]byte, 180)}); err != nil {
		t.Fatal(err)
	}
	req := expect(t, sch, rdmacm.EventConnectRequest)
	if len(req.UD.PrivateData) != 180 {
		t.Errorf("UD private data %d bytes", len(req.UD.PrivateData))
	}
	scq := newCQ(t, req.ID)
	sqp, err := req.ID.CreateQP(nil, &verbs.QPInitAttr{SendCQ: scq, RecvCQ: scq, Cap: qpCap})
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := req.ID.PD().RegMR(make([]byte, 256), verbs.AccessLocalWrite)
	if _, err := sqp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 256)}}}); err != nil {
		t.Fatal(err)
	}
	if err := req.ID.Accept(nil); err != nil {
		t.Fatal(err)
	}
	est := expect(t, cch, rdmacm.EventEstablished)
	if est.UD.QPNum != sqp.QPN() || est.UD.QKey != mad.RDMAUDPQKey || est.UD.AH.GRH.DGID != verbs.GIDFromAddr(e.b) {
		t.Fatalf("UD param %+v", est.UD)
	}
	ah, err := c.PD().CreateAH(&est.UD.AH)
	if err != nil {
		t.Fatal(err)
	}
	cmr, _ := c.PD().RegMR([]byte("datagram"), verbs.AccessLocalWrite)
	if _, err := cqp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{cmr.SGE(0, 8)}, AH: ah, RemoteQPN: est.UD.QPNum, RemoteQKey: est.UD.QKey}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, ccq)
	if wc := waitWC(t, scq); wc.Status != verbs.WCSuccess || string(mr.Buf()[40:48]) != "datagram" {
		t.Fatalf("UD recv %+v %q", wc, mr.Buf()[40:48])
	}
	// A rejected UD resolve is unreachable.
	c2 := clientTo(t, e, cch, rdmacm.PSUDP, netip.AddrPortFrom(e.b, 4000))
	if err := c2.Connect(&rdmacm.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	r2 := expect(t, sch, rdmacm.EventConnectRequest)
	if err := r2.ID.Reject(nil); err != nil {
		t.Fatal(err)
	}
	if u := expect(t, cch, rdmacm.EventUnreachable); u.Status != int(mad.SIDRReject) {
		t.Errorf("status %d", u.Status)
	}
}

func TestDeviceRemoval(t *testing.T) { sim(t, 5, deviceRemoval) }

func deviceRemoval(t *testing.T, e *env) {
	ch := rdmacm.NewEventChannel()
	lis, _ := e.m.CreateID(ch, nil, rdmacm.PSTCP)
	if err := lis.BindAddr(netip.AddrPortFrom(e.b, 6000)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	if err := e.m.RemoveDevice(e.db); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, rdmacm.EventDeviceRemoval)
	if lis.State() != rdmacm.StateDeviceRemoval {
		t.Errorf("state %v", lis.State())
	}
	if err := e.m.RemoveDevice(e.db); !errors.Is(err, rdmacm.ErrNoDevice) {
		t.Errorf("second removal: %v", err)
	}
}

func TestTables(t *testing.T) {
	for s := rdmacm.StateIdle; s <= rdmacm.StateDestroying; s++ {
		if s.String() == "" {
			t.Error("empty state name")
		}
	}
	for ev := rdmacm.EventAddrResolved; ev <= rdmacm.EventTimewaitExit; ev++ {
		if ev.String() == "" {
			t.Error("empty event name")
		}
	}
	if rdmacm.EventType(99).String() != "EventType(99)" || rdmacm.State(99).String() != "State(99)" {
		t.Error("unknown names")
	}
	if !rdmacm.CanTransition(rdmacm.StateRouteResolved, rdmacm.StateConnect) ||
		rdmacm.CanTransition(rdmacm.StateIdle, rdmacm.StateConnect) || rdmacm.CanTransition(99, 0) {
		t.Error("transition table")
	}
	err := error(&rdmacm.PrivateDataError{Op: "connect", Len: 57, Max: 56})
	if !errors.Is(err, rdmacm.ErrPrivateDataTooLong) || err.Error() == "" {
		t.Error("PrivateDataError")
	}
	ch := rdmacm.NewEventChannel()
	ch.Close()
	if _, err := ch.GetEvent(context.Background()); !errors.Is(err, rdmacm.ErrClosed) {
		t.Errorf("closed channel: %v", err)
	}
}

// TestPortSpaceIB connects in RDMA_PS_IB with nil parameters (librdmacm
// defaults) and checks the service ID on the listener side.
func TestPortSpaceIB(t *testing.T) { sim(t, 6, portSpaceIB) }

func portSpaceIB(t *testing.T, e *env) {
	sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	lis, _ := e.m.CreateID(sch, nil, rdmacm.PSIB)
	if lis.QPType() != verbs.QPTypeRC {
		t.Fatal("PS_IB is not RC")
	}
	if err := lis.BindAddr(netip.AddrPortFrom(e.b, 0)); err != nil { // ephemeral
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	port := lis.LocalAddr().Port()
	if port < 32768 {
		t.Fatalf("ephemeral port %d", port)
	}
	c := clientTo(t, e, cch, rdmacm.PSIB, netip.AddrPortFrom(e.b, port))
	ccq := newCQ(t, c)
	if _, err := c.CreateQP(nil, &verbs.QPInitAttr{SendCQ: ccq, RecvCQ: ccq, Cap: qpCap}); err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(nil); err != nil {
		t.Fatal(err)
	}
	req := expect(t, sch, rdmacm.EventConnectRequest)
	if req.Conn.RetryCount != 7 || req.Conn.ResponderResources == 0 || req.ID.LocalAddr().Port() != port {
		t.Errorf("request %+v at %v", req.Conn, req.ID.LocalAddr())
	}
	scq := newCQ(t, req.ID)
	if _, err := req.ID.CreateQP(nil, &verbs.QPInitAttr{SendCQ: scq, RecvCQ: scq, Cap: qpCap}); err != nil {
		t.Fatal(err)
	}
	if err := req.ID.Accept(nil); err != nil {
		t.Fatal(err)
	}
	est := expect(t, cch, rdmacm.EventEstablished)
	expect(t, sch, rdmacm.EventEstablished)
	if est.Conn.RNRRetryCount != 7 {
		t.Errorf("established %+v", est.Conn)
	}
	a, _, err := c.InitQPAttr(verbs.QPStateRTS)
	if err != nil || a.RetryCnt != 7 || a.MaxRdAtomic == 0 {
		t.Errorf("RTS attrs %+v %v", a, err)
	}
}

// TestStateTableShape checks that every state can be destroyed and that
// DESTROYING is final.
func TestStateTableShape(t *testing.T) {
	for s := rdmacm.StateIdle; s < rdmacm.StateDestroying; s++ {
		if !rdmacm.CanTransition(s, rdmacm.StateDestroying) {
			t.Errorf("%v cannot be destroyed", s)
		}
		if rdmacm.CanTransition(rdmacm.StateDestroying, s) {
			t.Errorf("DESTROYING → %v", s)
		}
	}
}

// TestWildcardListen listens on every device, including one added after
// the listen.
func TestWildcardListen(t *testing.T) { sim(t, 7, wildcardListen) }

func wildcardListen(t *testing.T, e *env) {
	sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	lis, _ := e.m.CreateID(sch, nil, rdmacm.PSTCP)
	if err := lis.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 8000)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	d := e.net.Open(t, rxe.Config{})
	if err := e.m.AddDevice(d); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []netip.Addr{e.b, d.Addr().Addr()} {
		c := clientTo(t, e, cch, rdmacm.PSTCP, netip.AddrPortFrom(dst, 8000))
		if err := c.Connect(&rdmacm.ConnParam{QPNum: 0x42}); err != nil {
			t.Fatal(err)
		}
		req := expect(t, sch, rdmacm.EventConnectRequest)
		if req.ID.LocalAddr() != netip.AddrPortFrom(dst, 8000) || req.ID.Device() == nil {
			t.Errorf("request at %v", req.ID.LocalAddr())
		}
		if err := req.ID.Reject(nil); err != nil {
			t.Fatal(err)
		}
		expect(t, cch, rdmacm.EventRejected)
	}
}

// TestTOSAndMigrate checks rdma_set_option(TOS) and rdma_migrate_id.
func TestTOSAndMigrate(t *testing.T) { sim(t, 8, tOSAndMigrate) }

func tOSAndMigrate(t *testing.T, e *env) {
	ch1, ch2 := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	c, _ := e.m.CreateID(ch1, nil, rdmacm.PSTCP)
	c.SetTOS(0x60)
	if err := c.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(e.b, 9), time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch1, rdmacm.EventAddrResolved)
	if err := c.Migrate(ch2); err != nil {
		t.Fatal(err)
	}
	if err := c.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch2, rdmacm.EventRouteResolved)
	if c.Path().TrafficClass != 0x60 {
		t.Errorf("traffic class %#x", c.Path().TrafficClass)
	}
	if ch1.TryGetEvent() != nil {
		t.Error("event on the old channel")
	}
	if err := c.Migrate(nil); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Errorf("nil channel: %v", err)
	}
}
