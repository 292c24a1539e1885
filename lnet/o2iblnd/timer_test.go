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

// TestTxTimeout: a PUT_REQ the peer never answers (its lazy portal holds
// the message) times out after the tunable timeout; the connection is
// closed ("Timed out tx/RDMA") and the PUT fails with a timeout.
func TestTxTimeout(t *testing.T) { sim(t, 114, testTxTimeout) }

func testTxTimeout(t *testing.T) {
	a := newNode(t, o2iblnd.Config{Timeout: 500 * time.Millisecond})
	b := newNode(t, o2iblnd.Config{})
	putGet(t, a, b, 100, 1, 1)
	if err := b.in.SetLazyPortal(e2ePortal + 1); err != nil {
		t.Fatal(err)
	}
	h, err := a.in.MDBind(lnet.MD{Start: make([]byte, 64<<10), Threshold: 1, EQ: a.eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, b.id(), e2ePortal+1, 5, 0, 0); err != nil {
		t.Fatal(err)
	}
	ev := poll(t, a)
	if ev.Type != lnet.EventSend || !errors.Is(ev.Status, lnd.ErrTimeout) {
		t.Fatalf("event %v status %v, want a SEND timeout", ev.Type, ev.Status)
	}
	if a.drv().Stats().TxTimeouts.Load() == 0 {
		t.Fatal("no timeout counted")
	}
	waitFor(t, "connection closed", func() bool { return a.drv().Conns(b.nid) == 0 })
	b.in.ClearLazyPortal(e2ePortal + 1)
	// The next message reconnects.
	waitFor(t, "reconnect", func() bool {
		putExpectFailOrOK(t, a, b)
		return a.drv().Conns(b.nid) > 0
	})
	putGet(t, a, b, 200<<10, 2, 1)
}

// TestKeepalive: an idle connection carries keepalive NOOPs both ways,
// and the peer's last-heard time moves on.
func TestKeepalive(t *testing.T) { sim(t, 115, testKeepalive) }

func testKeepalive(t *testing.T) {
	cfg := o2iblnd.Config{Keepalive: 50 * time.Millisecond}
	a, b := newNode(t, cfg), newNode(t, cfg)
	putGet(t, a, b, 10, 1, 1)
	first := a.drv().Query(b.nid)
	if first.IsZero() {
		t.Fatal("peer never heard from")
	}
	waitFor(t, "keepalives", func() bool {
		return a.drv().Stats().Keepalives.Load() >= 2 && b.drv().Stats().Keepalives.Load() >= 2 &&
			a.drv().Stats().RxNoops.Load() >= 2
	})
	if !a.drv().Query(b.nid).After(first) {
		t.Fatal("last-heard time did not move with keepalives")
	}
	if a.drv().Query(lnetwire.MustParseNID("1.2.3.4@o2ib")) != (time.Time{}) {
		t.Fatal("unknown peer has a last-heard time")
	}
}
