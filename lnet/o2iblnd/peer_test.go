package o2iblnd_test

import (
	"errors"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/wire/lnetwire"
)

// putExpectFail PUTs to r and expects the SEND event to fail.
func putExpectFail(t *testing.T, s, r *node, bits uint64) error {
	t.Helper()
	h, err := s.in.MDBind(lnet.MD{Start: make([]byte, 10), Threshold: 1, EQ: s.eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.id(), e2ePortal, bits, 0, 0); err != nil {
		return err // refused up front (peer known dead)
	}
	ev := poll(t, s)
	if ev.Type != lnet.EventSend || ev.Status == nil {
		t.Fatalf("PUT to a dead peer: %v status %v", ev.Type, ev.Status)
	}
	return ev.Status
}

// waitFor polls cond until it holds (hang guard only).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPeerRestart: the peer's LNet goes away (its device stays), sends
// to it fail with error events; a new instance comes up on the same
// address with a new incarnation, and the next PUT/GET reconnects
// through a STALE reject (our CONNREQ names the old incarnation).
func TestPeerRestart(t *testing.T) { sim(t, 104, testPeerRestart) }

func testPeerRestart(t *testing.T) {
	devA, mA, addrA := newDevice(t)
	devB, mB, addrB := newDevice(t)
	a := newNodeOn(t, devA, mA, addrA, o2iblnd.Config{})
	b := newNodeOn(t, devB, mB, addrB, o2iblnd.Config{})
	putGet(t, a, b, 5000, 1, 1)
	oldInc := b.drv().Incarnation()
	b.in.Close()
	waitFor(t, "connection to close", func() bool { return a.drv().Conns(b.nid) == 0 })
	if err := putExpectFail(t, a, b, 2); !errors.Is(err, lnd.ErrPeerDown) && !errors.Is(err, lnet.ErrNoRoute) {
		t.Fatalf("PUT to the closed peer failed with %v", err)
	}
	// The restart takes a moment (fake time in the bubble): the new
	// incarnation is the start time in microseconds.
	time.Sleep(time.Millisecond)
	b2 := newNodeOn(t, devB, mB, addrB, o2iblnd.Config{})
	if b2.drv().Incarnation() == oldInc {
		t.Fatal("same incarnation after restart")
	}
	// The core may hold the peer down for a moment; retry until through.
	waitFor(t, "reconnect", func() bool {
		if a.drv().Conns(b2.nid) > 0 {
			return true
		}
		putExpectFailOrOK(t, a, b2)
		return a.drv().Conns(b2.nid) > 0
	})
	putGet(t, a, b2, 300<<10, 3, 1)
	putGet(t, b2, a, 100, 4, 1)
	if a.drv().Stats().RejectsRecv[lnetwire.KibRejConnStale].Load() == 0 {
		t.Error("no STALE reject seen on the reconnect")
	}
}

// putExpectFailOrOK sends one PUT without ACK and drains its event.
func putExpectFailOrOK(t *testing.T, s, r *node) {
	t.Helper()
	h, err := s.in.MDBind(lnet.MD{Start: make([]byte, 10), Threshold: 1, EQ: s.eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.id(), e2ePortal, 77, 0, 0); err != nil {
		return
	}
	poll(t, s)
}

// TestClosePeerReconnect: a connection torn down under traffic fails
// what it held, then the next message reconnects.
func TestClosePeerReconnect(t *testing.T) { sim(t, 105, testClosePeerReconnect) }

func testClosePeerReconnect(t *testing.T) {
	a, b := newNode(t, o2iblnd.Config{}), newNode(t, o2iblnd.Config{})
	putGet(t, a, b, 1000, 1, 1)
	a.drv().ClosePeer(b.nid)
	waitFor(t, "both sides to drop the connection", func() bool {
		return a.drv().Conns(b.nid) == 0 && b.drv().Conns(a.nid) == 0
	})
	waitFor(t, "reconnect", func() bool {
		putExpectFailOrOK(t, a, b)
		return a.drv().Conns(b.nid) > 0
	})
	putGet(t, a, b, 1<<20, 2, 1)
	if a.drv().Stats().ConnsEstablished.Load() < 2 {
		t.Fatal("no second connection")
	}
}
