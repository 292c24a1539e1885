package lnet_test

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

func putStatus(t *testing.T, in *lnet.Instance, eq *lnet.EQ, to lnetwire.ProcessID) error {
	t.Helper()
	h, _ := in.MDBind(lnet.MD{Start: []byte{1}, Threshold: 1, EQ: eq}, lnet.AutoUnlink)
	if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, to, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	ev, ok, err := eq.Get()
	if !ok || err != nil || ev.Type != lnet.EventSend {
		t.Fatalf("no SEND event (%v %v)", ok, err)
	}
	return ev.Status
}

// TestPeerAliveness: a peer the LND reported dead fails sends at once for
// a retry interval, then one send is tried; success brings it back.
func TestPeerAliveness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := lndtest.New(lnetwire.SOCKLND)
		a := newInstance(t, n, nidA, lnd.Tunables{})
		newInstance(t, n, nidB, lnd.Tunables{})
		eq, _ := a.EQAlloc(8, nil)
		b := lnetwire.ProcessID{NID: nidB, PID: 12345}
		if err := putStatus(t, a, eq, b); err != nil {
			t.Fatal(err)
		}
		n.SetDown(nidB, true)
		if err := putStatus(t, a, eq, b); !errors.Is(err, lnd.ErrPeerDown) {
			t.Fatalf("send to dead peer: %v", err)
		}
		n.SetDown(nidB, false)
		before := a.Stats().DropCount
		if err := putStatus(t, a, eq, b); !errors.Is(err, lnet.ErrPeerDown) || a.Stats().DropCount != before+1 {
			t.Fatalf("within the retry interval: %v", err)
		}
		if st := peerInfo(t, a, nidB).State; st != "down" {
			t.Fatalf("state %s", st)
		}
		time.Sleep(time.Second)
		if err := putStatus(t, a, eq, b); err != nil {
			t.Fatalf("retry after the interval: %v", err)
		}
		if st := peerInfo(t, a, nidB).State; st != "up" {
			t.Fatalf("state %s after a delivered send", st)
		}
		if err := putStatus(t, a, eq, b); err != nil {
			t.Fatal(err)
		}
	})
}

// queryLND is rawLND plus lnd.PeerQuerier.
type queryLND struct {
	rawLND
	qmu  sync.Mutex
	last time.Time
}

func (q *queryLND) Startup(ni *lnd.NI) (lnd.Driver, error) {
	q.ni = ni
	return q, nil
}

func (q *queryLND) Query(lnetwire.NID) time.Time {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	return q.last
}

func TestPeerQuery(t *testing.T) {
	q := &queryLND{}
	me := lnetwire.MustParseNID("5@gni")
	peer := lnetwire.ProcessID{NID: lnetwire.MustParseNID("6@gni"), PID: 12345}
	in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{q}, Nets: []lnet.NetConfig{{Net: me.Net(), Addr: me.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	in.SetDiscovery(false) // the fake LND answers no discovery ping: the PUTs go at once
	eq, _ := in.EQAlloc(8, nil)
	if err := putStatus(t, in, eq, peer); err != nil { // creates the peer
		t.Fatal(err)
	}
	q.ni.NotifyPeer(peer.NID, false, time.Now())
	if err := putStatus(t, in, eq, peer); !errors.Is(err, lnet.ErrPeerDown) {
		t.Fatalf("down peer: %v", err)
	}
	// An alive notice newer than the death notice revives it.
	q.ni.NotifyPeer(peer.NID, true, time.Now())
	if err := putStatus(t, in, eq, peer); err != nil {
		t.Fatalf("after alive notice: %v", err)
	}
	q.ni.NotifyPeer(peer.NID, false, time.Now())
	q.qmu.Lock()
	q.last = time.Now().Add(time.Millisecond)
	q.qmu.Unlock()
	if err := putStatus(t, in, eq, peer); err != nil {
		t.Fatalf("Query reports it alive: %v", err)
	}
	if pi := peerInfo(t, in, peer.NID); pi.State != "up" {
		t.Fatalf("peer %+v", pi)
	}
}
