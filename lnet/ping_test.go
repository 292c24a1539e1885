package lnet_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

func TestPing(t *testing.T) {
	p := newPair(t, lnd.Tunables{})
	res, err := p.a.Ping(context.Background(), lnetwire.ProcessID{NID: nidB, PID: lnetwire.PIDAny}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NIDs) != 1 || res.NIDs[0].NID != nidB || res.NIDs[0].Status != lnetwire.PingStatusUp ||
		res.Target.PID != p.b.PID() || res.Features&lnetwire.PingFeatNIStatus == 0 || res.RTT < 0 {
		t.Fatalf("ping result %+v", res)
	}
	if got := p.a.PrimaryNID(nidB); got != nidB {
		t.Fatalf("PrimaryNID %v", got)
	}
	// The responder MD survives any number of pings.
	for range 3 {
		if _, err := p.a.Ping(context.Background(), p.idB(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if st := p.a.Stats(); st.MsgsAlloc != 0 || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Pinging ourselves goes over 0@lo.
	self, err := p.a.Ping(context.Background(), lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: p.a.PID()}, time.Second*10)
	if err != nil || len(self.NIDs) != 1 || self.NIDs[0].NID != nidA {
		t.Fatalf("self ping %+v %v", self, err)
	}
	// An unreachable peer fails at once with the LND's error.
	p.net.SetDown(nidB, true)
	if _, err := p.a.Ping(context.Background(), p.idB(), 10*time.Second); !errors.Is(err, lnet.ErrPeerDown) {
		t.Fatalf("ping down peer: %v", err)
	}
}

// TestPingTimeout: a GET that is lost gets no REPLY; Ping gives up after
// its timeout (virtual time) and unlinks its MD.
func TestPingTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := lndtest.New(lnetwire.SOCKLND)
		a := newInstance(t, n, nidA, lnd.Tunables{})
		newInstance(t, n, nidB, lnd.Tunables{})
		n.SetFilter(func(h *lnetwire.Header) lndtest.Action {
			if h.Type == lnetwire.MsgGET {
				return lndtest.Drop
			}
			return lndtest.Deliver
		})
		start := time.Now()
		_, err := a.Ping(context.Background(), lnetwire.ProcessID{NID: nidB, PID: 12345}, 5*time.Second)
		if !errors.Is(err, lnet.ErrTimeout) || time.Since(start) != 5*time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
		// Default timeout: the global transaction timeout.
		a.SetGlobals(lnet.Globals{LocalNIDDistZero: true, TransactionTimeout: 7 * time.Second})
		start = time.Now()
		if _, err := a.Ping(context.Background(), lnetwire.ProcessID{NID: nidB, PID: 12345}, 0); !errors.Is(err, lnet.ErrTimeout) || time.Since(start) != 7*time.Second {
			t.Fatalf("default timeout: %v after %v", err, time.Since(start))
		}
	})
}

func TestPingInfoUpdates(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := newDiscInstance(t, n, nidA, lnd.Tunables{})
	b := newDiscInstance(t, n, nidB, lnd.Tunables{})
	nidB2 := lnetwire.MustParseNID("10.0.1.2@tcp1")
	n2 := lndtest.New(lnetwire.O2IBLND)
	_ = n2
	// A second NI on another net of the same LND type shows up in pings.
	if err := b.AddNet(lnet.NetConfig{Net: nidB2.Net(), Addr: nidB2.Addr()}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Ping(context.Background(), lnetwire.ProcessID{NID: nidB, PID: 12345}, 10*time.Second)
	if err != nil || len(res.NIDs) != 2 || res.NIDs[0].NID != nidB || res.NIDs[1].NID != nidB2 {
		t.Fatalf("ping %+v %v", res, err)
	}
	// A ping alone changes no peer; discovery makes both NIDs one peer,
	// after which PrimaryNID of the second (unreachable from a: no NI on
	// tcp1) answers from what discovery learned.
	if res.Features&(lnetwire.PingFeatMultiRail|lnetwire.PingFeatDiscovery) != lnetwire.PingFeatMultiRail|lnetwire.PingFeatDiscovery {
		t.Fatalf("features %#x: want Multi-Rail and discovery", res.Features)
	}
	if r, err := a.Discover(context.Background(), nidB, false); err != nil || !r.MultiRail || r.Primary != nidB || len(r.NIDs) != 2 {
		t.Fatalf("discover %+v %v", r, err)
	}
	if a.PrimaryNID(nidB2) != nidB {
		t.Fatalf("PrimaryNID(%v) = %v, want %v", nidB2, a.PrimaryNID(nidB2), nidB)
	}
	if err := b.DelNet(nidB2.Net()); err != nil {
		t.Fatal(err)
	}
	res, err = a.Ping(context.Background(), lnetwire.ProcessID{NID: nidB, PID: 12345}, 10*time.Second)
	if err != nil || len(res.NIDs) != 1 {
		t.Fatalf("after DelNet %+v %v", res, err)
	}
}
