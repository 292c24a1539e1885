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

// discoveryPair is A (tcp) and B (tcp and tcp1) on one in-memory network
// per net; A has no tcp1 NI, so B's tcp1 NID is known to A only through
// discovery.
func discoveryPair(t *testing.T) (a, b *lnet.Instance, nidB2 lnetwire.NID) {
	n := lndtest.New(lnetwire.SOCKLND)
	a = newDiscInstance(t, n, nidA, lnd.Tunables{})
	b = newDiscInstance(t, n, nidB, lnd.Tunables{})
	nidB2 = lnetwire.MustParseNID("10.0.1.2@tcp1")
	if err := b.AddNet(lnet.NetConfig{Net: nidB2.Net(), Addr: nidB2.Addr()}); err != nil {
		t.Fatal(err)
	}
	return a, b, nidB2
}

// TestDiscoveryStateMachine: a round pings, merges, pushes; the peer's
// state bits say so afterwards (DISCOVERED | NIDS_UPTODATE | MULTI_RAIL,
// no DISCOVERING/PING_SENT/PUSH_SENT); B got A's push and knows A as a
// discovered Multi-Rail peer; a second discover without force sends no
// push (B has A's buffer), with force it does.
func TestDiscoveryStateMachine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, nidB2 := discoveryPair(t)
		if !a.DiscoveryEnabled() {
			t.Fatal("discovery is off by default")
		}
		r, err := a.Discover(context.Background(), nidB, false)
		if err != nil || r.Primary != nidB || !r.MultiRail || len(r.NIDs) != 2 || r.NIDs[1] != nidB2 {
			t.Fatalf("discover %+v %v", r, err)
		}
		want := lnet.PeerDiscovered | lnet.PeerNIDsUptodate | lnet.PeerMultiRail
		busy := lnet.PeerDiscovering | lnet.PeerPingSent | lnet.PeerPushSent | lnet.PeerPingFailed | lnet.PeerPushFailed
		st, lastErr, ok := a.PeerDiscoveryState(nidB2)
		if !ok || st&want != want || st&busy != 0 || lastErr != nil {
			t.Fatalf("state %#x (%v) %v", st, ok, lastErr)
		}
		synctest.Wait()
		if s := a.DiscoveryStats(); s.Rounds != 1 || s.PushesSent != 1 {
			t.Fatalf("A stats %+v", s)
		}
		if s := b.DiscoveryStats(); s.PushesReceived != 1 {
			t.Fatalf("B stats %+v", s)
		}
		if p, ok := b.PeerOf(nidA); !ok || !p.MultiRail || p.State&lnet.PeerDiscovered == 0 {
			t.Fatalf("B's peer A: %+v %v", p, ok)
		}
		if _, err := a.Discover(context.Background(), nidB, false); err != nil {
			t.Fatal(err)
		}
		if s := a.DiscoveryStats(); s.Rounds != 2 || s.PushesSent != 1 {
			t.Fatalf("second round pushed again: %+v", s)
		}
		if _, err := a.Discover(context.Background(), nidB, true); err != nil {
			t.Fatal(err)
		}
		if s := a.DiscoveryStats(); s.PushesSent != 2 {
			t.Fatalf("forced round did not push: %+v", s)
		}
		// PrimaryNID of the secondary: up to date, no new round.
		if p := a.PrimaryNID(nidB2); p != nidB {
			t.Fatalf("PrimaryNID(%v) = %v", nidB2, p)
		}
		if s := a.DiscoveryStats(); s.Rounds != 3 {
			t.Fatalf("PrimaryNID of an up-to-date peer ran a round: %+v", s)
		}
	})
}

// TestDiscoveryPushOnNIChange: when B's NIs change it pushes its new
// buffer to the Multi-Rail peers that have its old one; A's peer follows
// (the NID goes, then comes back).
func TestDiscoveryPushOnNIChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, nidB2 := discoveryPair(t)
		if _, err := b.Discover(context.Background(), nidA, false); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Discover(context.Background(), nidB, false); err != nil {
			t.Fatal(err)
		}
		if err := b.DelNet(nidB2.Net()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p, ok := a.PeerOf(nidB); !ok || len(p.NIs) != 1 {
			t.Fatalf("after B's DelNet: %+v", p)
		}
		if err := b.AddNet(lnet.NetConfig{Net: nidB2.Net(), Addr: nidB2.Addr()}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p, ok := a.PeerOf(nidB2); !ok || p.Primary != nidB || len(p.NIs) != 2 {
			t.Fatalf("after B's AddNet: %+v %v", p, ok)
		}
		if s := b.DiscoveryStats(); s.PushesSent < 2 || s.PushesFailed != 0 {
			t.Fatalf("B stats %+v", s)
		}
	})
}

// TestDiscoveryOff: with discovery off nothing is sent, the peer stays
// non-Multi-Rail with the NID it is known by, PrimaryNID answers without
// discovery, and the ping buffer drops the DISCOVERY bit (Multi-Rail
// stays, as Lustre's). A failed ping fails the round with PING_FAILED.
func TestDiscoveryOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, nidB2 := discoveryPair(t)
		a.SetDiscovery(false)
		r, err := a.Discover(context.Background(), nidB, false)
		if err != nil || r.MultiRail || len(r.NIDs) != 1 {
			t.Fatalf("discover with discovery off: %+v %v", r, err)
		}
		if p := a.PrimaryNID(nidB2); p != nidB2 {
			t.Fatalf("PrimaryNID with discovery off = %v", p)
		}
		if s := a.DiscoveryStats(); s.Rounds != 0 {
			t.Fatalf("rounds ran: %+v", s)
		}
		res, err := b.Ping(context.Background(), lnetwire.ProcessID{NID: nidA, PID: lnetwire.PIDAny}, time.Second)
		if err != nil || res.Features&lnetwire.PingFeatDiscovery != 0 || res.Features&lnetwire.PingFeatMultiRail == 0 {
			t.Fatalf("A's ping buffer: %#x %v", res.Features, err)
		}
		a.SetDiscovery(true)
		// An unreachable NID: the round fails.
		dead := lnetwire.MustParseNID("10.0.0.99@tcp")
		if _, err := a.Discover(context.Background(), dead, false); err == nil {
			t.Fatal("discovery of a dead NID succeeded")
		}
		st, lastErr, ok := a.PeerDiscoveryState(dead)
		if !ok || st&lnet.PeerPingFailed == 0 || st&lnet.PeerDiscovering != 0 || lastErr == nil {
			t.Fatalf("dead peer state %#x %v %v", st, lastErr, ok)
		}
		if _, err := a.Discover(context.Background(), lnetwire.NIDAny, false); !errors.Is(err, lnet.ErrInvalid) {
			t.Fatalf("discover NIDAny: %v", err)
		}
	})
}

// TestPushFromNonMRDropped: a push whose buffer lacks the Multi-Rail bit
// is dropped and counted, as Lustre's lnet_peer_push_event does.
func TestPushFromNonMRDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, lnd.Tunables{})
		info := lnetwire.PingInfo{Features: lnetwire.PingFeatNIStatus, PID: 12345, NIs: []lnetwire.PingNI{
			{NID: lnetwire.NIDLo0, Status: 1}, {NID: nidA, Status: lnetwire.PingStatusUp}}}
		h, err := p.a.MDBind(lnet.MD{Start: info.Append(nil), Threshold: 2, EQ: p.eqA}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, p.idB(), lnet.ReservedPortal, lnetwire.PingMatchBits, 0, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if s := p.b.DiscoveryStats(); s.PushesDropped != 1 || s.PushesReceived != 0 {
			t.Fatalf("B stats %+v", s)
		}
		if pd, ok := p.b.PeerOf(nidA); ok && pd.MultiRail {
			t.Fatalf("a non-MR push made A Multi-Rail: %+v", pd)
		}
	})
}

// TestMRInitiatorIsPrimary: a PUT from a Multi-Rail peer's secondary NID
// matches an ME for the peer's primary NID, and its event names the
// primary as initiator (lnet_parse's lnet_peer_primary_nid_locked), so
// replies arriving over either rail reach the same MEs; its source is the
// secondary NID it was sent from.
func TestMRInitiatorIsPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := lndtest.New(lnetwire.SOCKLND)
		a := newDiscInstance(t, n, nidA, lnd.Tunables{})
		b := newDiscInstance(t, n, nidB, lnd.Tunables{})
		nidA2, nidB2 := lnetwire.MustParseNID("10.0.1.1@tcp1"), lnetwire.MustParseNID("10.0.1.2@tcp1")
		if err := a.AddNet(lnet.NetConfig{Net: nidA2.Net(), Addr: nidA2.Addr()}); err != nil {
			t.Fatal(err)
		}
		if err := b.AddNet(lnet.NetConfig{Net: nidB2.Net(), Addr: nidB2.Addr()}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Discover(context.Background(), nidB, false); err != nil {
			t.Fatal(err)
		}
		eq, err := a.EQAlloc(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		me, err := a.MEAttach(7, lnetwire.ProcessID{NID: nidB, PID: b.PID()}, 1, 0, lnet.Retain, lnet.InsAfter)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut, EQ: eq}, lnet.Retain); err != nil {
			t.Fatal(err)
		}
		h, err := b.MDBind(lnet.MD{Start: []byte("rail2"), Threshold: 1}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(nidB2, h, lnet.AckReqNo, lnetwire.ProcessID{NID: nidA2, PID: a.PID()}, 7, 1, 0, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		evs := drain(t, eq)
		if len(evs) != 1 || evs[0].Type != lnet.EventPut || evs[0].Initiator.NID != nidB || evs[0].Sender != nidB2 {
			t.Fatalf("events %v", evs)
		}
		// Source is the NID it was sent from (ev->source), not the primary.
		if evs[0].Source != nidB2 {
			t.Fatalf("event source %v, want %v", evs[0].Source, nidB2)
		}
	})
}

// TestMRMatchSecondaryNID: an ME posted for a Multi-Rail peer's secondary
// NID (as lnet_selftest posts its reply and bulk MEs for the NID a console
// group names) takes a PUT whose initiator is the peer's primary NID
// (lnet_try_match_md's same-peer fallback), on a unique portal too; an
// ME for a NID of another peer does not.
func TestMRMatchSecondaryNID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := lndtest.New(lnetwire.SOCKLND)
		a := newDiscInstance(t, n, nidA, lnd.Tunables{})
		b := newDiscInstance(t, n, nidB, lnd.Tunables{})
		nidC := lnetwire.MustParseNID("10.0.0.3@tcp")
		newDiscInstance(t, n, nidC, lnd.Tunables{})
		nidA2, nidB2 := lnetwire.MustParseNID("10.0.1.1@tcp1"), lnetwire.MustParseNID("10.0.1.2@tcp1")
		if err := a.AddNet(lnet.NetConfig{Net: nidA2.Net(), Addr: nidA2.Addr()}); err != nil {
			t.Fatal(err)
		}
		if err := b.AddNet(lnet.NetConfig{Net: nidB2.Net(), Addr: nidB2.Addr()}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Discover(context.Background(), nidB, false); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Discover(context.Background(), nidC, false); err != nil {
			t.Fatal(err)
		}
		eq, err := a.EQAlloc(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Unique portal 8: exact initiator, no ignore bits. One ME for
		// B's secondary NID, one for C's NID, both with B's match bits.
		for _, nid := range []lnetwire.NID{nidC, nidB2} {
			me, err := a.MEAttach(8, lnetwire.ProcessID{NID: nid, PID: b.PID()}, 5, 0, lnet.Retain, lnet.InsAfter)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut, EQ: eq, UserPtr: nid}, lnet.Retain); err != nil {
				t.Fatal(err)
			}
		}
		h, err := b.MDBind(lnet.MD{Start: []byte("primary"), Threshold: 1}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(nidB, h, lnet.AckReqNo, lnetwire.ProcessID{NID: nidA, PID: a.PID()}, 8, 5, 0, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		evs := drain(t, eq)
		if len(evs) != 1 || evs[0].Type != lnet.EventPut || evs[0].Initiator.NID != nidB || evs[0].MD.UserPtr != nidB2 {
			t.Fatalf("events %v", evs)
		}
	})
}

// TestDiscoveryOffKernel: with DiscoveryOff (lnetctl set discovery 0) a
// discover is the one ping Lustre's kernel still sends: B answers, A
// records B's features (NO_DISCOVERY: ours is off) and marks it
// discovered and up to date, but keeps the one NID it knew (B's tcp1 NID
// stays unknown), does not make it Multi-Rail and pushes nothing;
// PrimaryNID asks nothing. An unknown mode is refused.
func TestDiscoveryOffKernel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, nidB2 := discoveryPair(t)
		if err := a.SetDiscoveryMode(lnet.DiscoveryOff); err != nil {
			t.Fatal(err)
		}
		if m := a.DiscoveryMode(); m != lnet.DiscoveryOff || a.DiscoveryEnabled() {
			t.Fatalf("mode %v, enabled %v", m, a.DiscoveryEnabled())
		}
		r, err := a.Discover(context.Background(), nidB, false)
		if err != nil || r.MultiRail || len(r.NIDs) != 1 || r.NIDs[0] != nidB {
			t.Fatalf("discover with discovery off: %+v %v", r, err)
		}
		want := lnet.PeerDiscovered | lnet.PeerNIDsUptodate | lnet.PeerNoDiscovery
		st, lastErr, _ := a.PeerDiscoveryState(nidB)
		if st&want != want || st&lnet.PeerMultiRail != 0 || lastErr != nil {
			t.Fatalf("B's state %#x %v, want DISCOVERED|NIDS_UPTODATE|NO_DISCOVERY, not MULTI_RAIL", st, lastErr)
		}
		if _, _, ok := a.PeerDiscoveryState(nidB2); ok {
			t.Fatal("B's tcp1 NID became known with discovery off")
		}
		if p := a.PrimaryNID(nidB2); p != nidB2 {
			t.Fatalf("PrimaryNID with discovery off = %v", p)
		}
		synctest.Wait()
		if s := a.DiscoveryStats(); s.Rounds != 1 || s.PushesSent != 0 {
			t.Fatalf("A stats %+v: want one round (the ping), no push", s)
		}
		if s := b.DiscoveryStats(); s.PushesReceived != 0 {
			t.Fatalf("B stats %+v: got a push", s)
		}
		if err := a.SetDiscoveryMode(lnet.DiscoveryMode(7)); !errors.Is(err, lnet.ErrInvalid) {
			t.Fatalf("unknown mode: %v", err)
		}
	})
}

// TestSetDiscoveryToggle: turning discovery off on a running node pushes
// the buffer (DISCOVERY bit cleared) to the Multi-Rail peers, which then
// mark us NO_DISCOVERY; turning it on again sets the bit and pushes
// nothing (Lustre's discovery_set). Our own peer states are untouched:
// B stays a discovered Multi-Rail peer with both NIDs.
func TestSetDiscoveryToggle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, nidB2 := discoveryPair(t)
		if _, err := a.Discover(context.Background(), nidB, false); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if s := b.DiscoveryStats(); s.PushesReceived != 1 {
			t.Fatalf("B stats after discovery %+v", s)
		}
		feat := func() uint32 {
			res, err := b.Ping(context.Background(), lnetwire.ProcessID{NID: nidA, PID: lnetwire.PIDAny}, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			return res.Features
		}
		a.SetDiscoveryMode(lnet.DiscoveryOff)
		synctest.Wait()
		if s := b.DiscoveryStats(); s.PushesReceived != 2 {
			t.Fatalf("B stats after A turned discovery off %+v: want the push", s)
		}
		if p, ok := b.PeerOf(nidA); !ok || p.State&lnet.PeerNoDiscovery == 0 {
			t.Fatalf("B's peer A after the push: %+v %v, want NO_DISCOVERY", p, ok)
		}
		if f := feat(); f&lnetwire.PingFeatDiscovery != 0 {
			t.Fatalf("A's features %#x with discovery off", f)
		}
		want := lnet.PeerDiscovered | lnet.PeerNIDsUptodate | lnet.PeerMultiRail
		if st, _, _ := a.PeerDiscoveryState(nidB2); st&want != want {
			t.Fatalf("A's peer B after turning off: %#x", st)
		}
		a.SetDiscoveryMode(lnet.DiscoveryOn)
		synctest.Wait()
		if s := b.DiscoveryStats(); s.PushesReceived != 2 {
			t.Fatalf("B stats after A turned discovery on %+v: want no push", s)
		}
		if f := feat(); f&lnetwire.PingFeatDiscovery == 0 {
			t.Fatalf("A's features %#x with discovery on", f)
		}
		if st, _, _ := a.PeerDiscoveryState(nidB2); st&want != want {
			t.Fatalf("A's peer B after turning on: %#x", st)
		}
	})
}

// TestDiscoveryOffPeerGoesWithNet: a peer pinged with discovery off is
// not Multi-Rail and knows only its traffic NID, so deleting our net
// forgets it as a traffic peer (Lustre deletes the net's peer NIs); a
// Multi-Rail peer discovered with discovery on stays.
func TestDiscoveryOffPeerGoesWithNet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := lndtest.New(lnetwire.SOCKLND)
		a := newDiscInstance(t, n, nidA, lnd.Tunables{})
		b := newDiscInstance(t, n, nidB, lnd.Tunables{})
		nidB2 := lnetwire.MustParseNID("10.0.1.2@tcp1")
		if err := b.AddNet(lnet.NetConfig{Net: nidB2.Net(), Addr: nidB2.Addr()}); err != nil {
			t.Fatal(err)
		}
		nidC := lnetwire.MustParseNID("10.0.0.3@tcp")
		newInstance(t, n, nidC, lnd.Tunables{})
		if _, err := a.Discover(context.Background(), nidB, false); err != nil {
			t.Fatal(err)
		}
		a.SetDiscoveryMode(lnet.DiscoveryOff)
		if _, err := a.Discover(context.Background(), nidC, false); err != nil {
			t.Fatal(err)
		}
		if err := a.DelNet(nidA.Net()); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.PeerOf(nidC); ok {
			t.Error("the peer pinged with discovery off outlived our net")
		}
		if p, ok := a.PeerOf(nidB2); !ok || !p.MultiRail {
			t.Errorf("the Multi-Rail peer: %+v %v, want kept", p, ok)
		}
	})
}
