//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"softib/cm"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/mad"
)

// proc is one "process": an rxe device on addr and its own RDMA CM.
type proc struct {
	m   *rdmacm.Manager
	dev verbs.Device
}

func startProc(t *testing.T, addr netip.Addr) *proc {
	t.Helper()
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}})
	if err != nil {
		t.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddDevice(d); err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		d.Close()
	})
	return &proc{m: m, dev: d}
}

// kill ends the process as SIGKILL would: nothing is sent.
func (p *proc) kill() {
	p.m.Close()
	p.dev.Close()
}

// connectFrom starts connecting a new ID of p (at src) with a fresh RC
// QP to dst and returns the ID and its QP; the outcome comes on ch.
func connectFrom(t *testing.T, p *proc, ch *rdmacm.EventChannel, src netip.Addr, dst netip.AddrPort) (*rdmacm.ID, verbs.QP) {
	t.Helper()
	id, err := p.m.CreateID(ch, "client", rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(src, 0), dst, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, rdmacm.EventAddrResolved)
	if err := id.ResolveRoute(0); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, rdmacm.EventRouteResolved)
	cq := newCQ(t, id)
	qp, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: qpCap})
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	return id, qp
}

// outcome returns the next event on ch (hang guard only).
func outcome(t *testing.T, ch *rdmacm.EventChannel) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev.Ack()
	return ev
}

// acceptNext accepts the next CONNECT_REQUEST on ch with a fresh QP.
func acceptNext(t *testing.T, ch *rdmacm.EventChannel) *rdmacm.ID {
	t.Helper()
	s := expect(t, ch, rdmacm.EventConnectRequest).ID
	cq := newCQ(t, s)
	if _, err := s.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: qpCap}); err != nil {
		t.Fatal(err)
	}
	if err := s.Accept(&rdmacm.ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPeerRestartStale: the client process dies silently while its
// connection is ESTABLISHED at the server, and a new process on the same
// address (same GID and CA GUID, QPNs counting from the same start)
// connects again with the same QPN. The server's CM rejects it with
// STALE_CONN and disconnects the old connection: the server's ID gets
// DISCONNECTED. The client's retry (a new ID and QP) is accepted.
func TestPeerRestartStale(t *testing.T) {
	a, b := loopAddr(), loopAddr()
	srv := startProc(t, b)
	sch := rdmacm.NewEventChannel()
	lis, err := srv.m.CreateID(sch, "server", rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(b, 7174)
	if err := lis.BindAddr(dst); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(8); err != nil {
		t.Fatal(err)
	}

	cli := startProc(t, a)
	cch := rdmacm.NewEventChannel()
	_, qp1 := connectFrom(t, cli, cch, a, dst)
	old := acceptNext(t, sch)
	if ev := outcome(t, cch); ev.Type != rdmacm.EventEstablished {
		t.Fatalf("first connect: %v (status %d, %v)", ev.Type, ev.Status, ev.Err)
	}
	expect(t, sch, rdmacm.EventEstablished)
	oldQPN := qp1.QPN()

	cli.kill()
	cli2 := startProc(t, a)
	cch2 := rdmacm.NewEventChannel()
	id, qp := connectFrom(t, cli2, cch2, a, dst)
	ev := outcome(t, cch2)
	if qp.QPN() != oldQPN {
		t.Fatalf("restarted device gave QPN %#x, old one had %#x: the test needs the reuse", qp.QPN(), oldQPN)
	}
	var re *cm.RejectError
	if ev.Type != rdmacm.EventRejected || ev.Status != int(mad.RejStaleConn) || !errors.As(ev.Err, &re) {
		t.Fatalf("connect with a reused QPN: %v (status %d, %v), want REJECTED STALE_CONN", ev.Type, ev.Status, ev.Err)
	}
	// The server hears its old connection go down.
	dis := expect(t, sch, rdmacm.EventDisconnected)
	if dis.ID != old {
		t.Fatalf("DISCONNECTED on %p, want the old connection %p", dis.ID, old)
	}
	old.DestroyQP()
	if err := old.Destroy(); err != nil {
		t.Fatal(err)
	}
	id.DestroyQP()
	id.Destroy()

	// One retry gets through.
	connectFrom(t, cli2, cch2, a, dst)
	acceptNext(t, sch)
	if ev := outcome(t, cch2); ev.Type != rdmacm.EventEstablished {
		t.Fatalf("retry: %v (status %d, %v)", ev.Type, ev.Status, ev.Err)
	}
	expect(t, sch, rdmacm.EventEstablished)
}

// TestServerRestartStaleREP: the server process dies silently and comes
// back on the same address while the client still holds its connection
// ESTABLISHED. The client's next connect is answered by a REP naming the
// QPN the old server had; the client's CM refuses it (REJ STALE_CONN):
// the attempt ends UNREACHABLE with status STALE_CONN, the new server
// sees REJECTED, and the client's old connection is DISCONNECTED. The
// retry connects.
func TestServerRestartStaleREP(t *testing.T) {
	a, b := loopAddr(), loopAddr()
	dst := netip.AddrPortFrom(b, 7174)
	listen := func(p *proc) *rdmacm.EventChannel {
		ch := rdmacm.NewEventChannel()
		lis, err := p.m.CreateID(ch, "server", rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		if err := lis.BindAddr(dst); err != nil {
			t.Fatal(err)
		}
		if err := lis.Listen(8); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	cli := startProc(t, a)
	cch := rdmacm.NewEventChannel()
	srv := startProc(t, b)
	sch := listen(srv)
	old, _ := connectFrom(t, cli, cch, a, dst)
	s1 := acceptNext(t, sch)
	if ev := outcome(t, cch); ev.Type != rdmacm.EventEstablished {
		t.Fatalf("first connect: %v (status %d, %v)", ev.Type, ev.Status, ev.Err)
	}
	expect(t, sch, rdmacm.EventEstablished)
	oldQPN := s1.QP().QPN()

	srv.kill()
	srv2 := startProc(t, b)
	sch2 := listen(srv2)
	id, _ := connectFrom(t, cli, cch, a, dst)
	s2 := acceptNext(t, sch2)
	if s2.QP().QPN() != oldQPN {
		t.Fatalf("restarted server QPN %#x, old one %#x: the test needs the reuse", s2.QP().QPN(), oldQPN)
	}
	// The client's channel carries both the attempt's failure and the
	// old connection's disconnect, in either order.
	got := map[*rdmacm.ID]*rdmacm.Event{}
	for range 2 {
		ev := outcome(t, cch)
		got[ev.ID] = ev
	}
	if ev := got[id]; ev == nil || ev.Type != rdmacm.EventUnreachable || ev.Status != int(mad.RejStaleConn) {
		t.Fatalf("connect to the restarted server: %+v, want UNREACHABLE STALE_CONN", ev)
	}
	if ev := got[old]; ev == nil || ev.Type != rdmacm.EventDisconnected {
		t.Fatalf("old connection: %+v, want DISCONNECTED", ev)
	}
	if ev := expect(t, sch2, rdmacm.EventRejected); ev.Status != int(mad.RejStaleConn) {
		t.Errorf("restarted server: REJECTED status %d", ev.Status)
	}
	for _, x := range []*rdmacm.ID{old, id, s2} {
		x.DestroyQP()
		x.Destroy()
	}
	connectFrom(t, cli, cch, a, dst)
	acceptNext(t, sch2)
	if ev := outcome(t, cch); ev.Type != rdmacm.EventEstablished {
		t.Fatalf("retry: %v (status %d, %v)", ev.Type, ev.Status, ev.Err)
	}
	expect(t, sch2, rdmacm.EventEstablished)
}
