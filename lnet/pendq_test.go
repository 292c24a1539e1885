package lnet_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// Discovery on first send (lnet_initiate_peer_discovery and the peer's
// pending queue, lp_dc_pendq): a PUT or GET to a peer discovery has not
// brought up to date waits while the peer is discovered and leaves
// after the round, or fails with the round's error.

// pendqPortal is the portal B's sink listens on.
const pendqPortal = 5

// pendqSink attaches an ME on in's pendqPortal taking PUTs of any match
// bits, with its events on eq.
func pendqSink(t *testing.T, in *lnet.Instance, eq *lnet.EQ) {
	t.Helper()
	me, err := in.MEAttach(pendqPortal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf,
		Options: lnet.MDOpPut | lnet.MDTruncate, EQ: eq}, lnet.Retain); err != nil {
		t.Fatal(err)
	}
}

// pendqPut PUTs 8 bytes from in to target with match bits bits, an ACK
// asked for; the MD's events go to eq.
func pendqPut(t *testing.T, in *lnet.Instance, eq *lnet.EQ, target lnetwire.ProcessID, bits uint64) {
	t.Helper()
	h, err := in.MDBind(lnet.MD{Start: make([]byte, 8), Threshold: 2, EQ: eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, target, pendqPortal, bits, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// pendqRig is A and B, both with discovery on, on one in-memory network;
// B sinks PUTs on pendqPortal.
type pendqRig struct {
	n        *lndtest.Network
	a, b     *lnet.Instance
	eqA, eqB *lnet.EQ
}

func newPendqRig(t *testing.T) *pendqRig {
	r := &pendqRig{n: lndtest.New(lnetwire.SOCKLND)}
	r.a = newDiscInstance(t, r.n, nidA, lnd.Tunables{})
	r.b = newDiscInstance(t, r.n, nidB, lnd.Tunables{})
	r.eqA, _ = r.a.EQAlloc(64, nil)
	r.eqB, _ = r.b.EQAlloc(64, nil)
	pendqSink(t, r.b, r.eqB)
	return r
}

func (r *pendqRig) idB() lnetwire.ProcessID { return lnetwire.ProcessID{NID: nidB, PID: r.b.PID()} }

// TestPendqHeldThenReleasedInOrder: three PUTs to a peer not yet
// discovered wait (nothing of them is on the network, no event) while
// the discovery ping is held in the network; once the ping is answered
// the round ends (the peer is discovered, Multi-Rail, NIDs up to date)
// and the PUTs leave in the order they were sent, each ACKed.
func TestPendqHeldThenReleasedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPendqRig(t)
		r.n.Hold(true)
		for bits := uint64(1); bits <= 3; bits++ {
			pendqPut(t, r.a, r.eqA, r.idB(), bits)
		}
		synctest.Wait()
		if got := r.n.Held(); got != 1 {
			t.Fatalf("%d messages on the network, want only the discovery ping", got)
		}
		if evs := drain(t, r.eqA); len(evs) != 0 {
			t.Fatalf("events while discovery runs: %v", types(evs))
		}
		st, _, ok := r.a.PeerDiscoveryState(nidB)
		if !ok || st&lnet.PeerDiscovering == 0 {
			t.Fatalf("peer state %#x (known %v), want DISCOVERING", st, ok)
		}
		if s := r.a.DiscoveryStats(); s.MsgsHeld != 3 || s.RoundsOnSend != 1 {
			t.Fatalf("A stats %+v: want 3 held, 1 round", s)
		}

		r.n.Hold(false)
		r.n.Release(-1)
		synctest.Wait()
		var bits []uint64
		for _, ev := range drain(t, r.eqB) {
			if ev.Type == lnet.EventPut && ev.Status == nil {
				bits = append(bits, ev.MatchBits)
			}
		}
		if len(bits) != 3 || bits[0] != 1 || bits[1] != 2 || bits[2] != 3 {
			t.Fatalf("B received match bits %v, want [1 2 3]", bits)
		}
		var sends, acks int
		for _, ev := range drain(t, r.eqA) {
			if ev.Status != nil {
				t.Fatalf("A event %s failed", evStr(ev))
			}
			switch ev.Type {
			case lnet.EventSend:
				sends++
				if ev.Initiator.NID != nidA {
					t.Errorf("SEND event initiator %v, want %v", ev.Initiator.NID, nidA)
				}
			case lnet.EventAck:
				acks++
			}
		}
		if sends != 3 || acks != 3 {
			t.Fatalf("A: %d SEND and %d ACK events, want 3 each", sends, acks)
		}
		st, lastErr, _ := r.a.PeerDiscoveryState(nidB)
		want := lnet.PeerDiscovered | lnet.PeerNIDsUptodate | lnet.PeerMultiRail
		if st&want != want || st&lnet.PeerDiscovering != 0 || lastErr != nil {
			t.Fatalf("after the round: state %#x err %v", st, lastErr)
		}
		// Up to date now: the next PUT leaves at once.
		r.n.Hold(true)
		pendqPut(t, r.a, r.eqA, r.idB(), 4)
		synctest.Wait()
		if got, s := r.n.Held(), r.a.DiscoveryStats(); got != 1 || s.MsgsHeld != 3 || s.Rounds != 1 {
			t.Fatalf("PUT to an up-to-date peer: %d on the network, stats %+v", got, s)
		}
		r.n.Hold(false)
		r.n.Release(-1)
		synctest.Wait()
	})
}

// TestPendqDiscoveryFails: when the discovery ping is not answered the
// held PUTs fail with the discovery error (a timeout) once the round
// ends: none reaches B, none is reported sent or ACKed, and the peer
// records the error. B would have taken the PUTs: only discovery failed.
func TestPendqDiscoveryFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPendqRig(t)
		// Lose every REPLY: the ping times out (transaction_timeout).
		r.n.SetFilter(func(h *lnetwire.Header) lndtest.Action {
			if h.Type == lnetwire.MsgREPLY {
				return lndtest.Drop
			}
			return lndtest.Deliver
		})
		for bits := uint64(1); bits <= 2; bits++ {
			pendqPut(t, r.a, r.eqA, r.idB(), bits)
		}
		synctest.Wait()
		if evs := drain(t, r.eqA); len(evs) != 0 {
			t.Fatalf("events while discovery runs: %v", types(evs))
		}
		// Fake time runs on past the ping's timeout (transaction_timeout).
		time.Sleep(r.a.Globals().TransactionTimeout + time.Second)
		synctest.Wait()
		var sendFails int
		for _, ev := range drain(t, r.eqA) {
			if ev.Status == nil {
				t.Fatalf("A event %s reports success", evStr(ev))
			}
			if ev.Type == lnet.EventAck {
				t.Fatalf("ACK event for a PUT that never left: %s", evStr(ev))
			}
			if ev.Type == lnet.EventSend {
				sendFails++
				if !errors.Is(ev.Status, lnet.ErrTimeout) {
					t.Errorf("SEND status %v, want the discovery timeout", ev.Status)
				}
			}
		}
		if sendFails != 2 {
			t.Fatalf("%d failed SEND events, want 2", sendFails)
		}
		for _, ev := range drain(t, r.eqB) {
			if ev.Type == lnet.EventPut {
				t.Fatalf("B received a PUT: %s", evStr(ev))
			}
		}
		st, lastErr, _ := r.a.PeerDiscoveryState(nidB)
		if st&lnet.PeerPingFailed == 0 || st&(lnet.PeerDiscovering|lnet.PeerNIDsUptodate) != 0 || lastErr == nil {
			t.Fatalf("peer state %#x err %v", st, lastErr)
		}
		// Sent: the ping's GET only (no payload); failed: the two PUTs.
		if s := r.a.Stats(); s.SendCount != 1 || s.SendLength != 0 || s.Errors != 2 || s.MsgsAlloc != 0 {
			t.Fatalf("A stats %+v: want only the ping sent, both PUTs failed, no message left", s)
		}
		// The next PUT starts a new round (the peer is not up to date),
		// which succeeds once REPLYs get through again.
		r.n.SetFilter(nil)
		pendqPut(t, r.a, r.eqA, r.idB(), 3)
		synctest.Wait()
		if s := r.a.DiscoveryStats(); s.RoundsOnSend != 2 || s.Rounds != 2 {
			t.Fatalf("A stats %+v: want a second round", s)
		}
		evs := drain(t, r.eqB)
		if len(evs) != 1 || evs[0].Type != lnet.EventPut || evs[0].MatchBits != 3 {
			t.Fatalf("B events after the second round: %v", types(evs))
		}
	})
}

// TestPendqDiscoveryOff: with discovery off a first PUT leaves at once:
// nothing waits and no round runs.
func TestPendqDiscoveryOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPendqRig(t)
		r.a.SetDiscovery(false)
		r.n.Hold(true)
		pendqPut(t, r.a, r.eqA, r.idB(), 1)
		synctest.Wait()
		if got := r.n.Held(); got != 1 {
			t.Fatalf("%d messages on the network, want the PUT", got)
		}
		if s := r.a.DiscoveryStats(); s.MsgsHeld != 0 || s.Rounds != 0 || s.RoundsOnSend != 0 {
			t.Fatalf("A stats %+v", s)
		}
		r.n.Hold(false)
		r.n.Release(-1)
		synctest.Wait()
		if evs := drain(t, r.eqB); len(evs) != 1 || evs[0].Type != lnet.EventPut {
			t.Fatalf("B events %v", types(evs))
		}
	})
}

// TestPendqResponsesAndReservedPortal: B (discovery on) has never
// discovered A (discovery off, so A pushes nothing): B's ACK to A's PUT,
// its REPLY to A's GET and its own ping of A (a GET on the reserved
// portal) all leave without waiting for a discovery of A.
func TestPendqResponsesAndReservedPortal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := lndtest.New(lnetwire.SOCKLND)
		a := newInstance(t, n, nidA, lnd.Tunables{})
		b := newDiscInstance(t, n, nidB, lnd.Tunables{})
		eqA, _ := a.EQAlloc(64, nil)
		eqB, _ := b.EQAlloc(64, nil)
		me, err := b.MEAttach(pendqPortal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf,
			Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDTruncate, EQ: eqB}, lnet.Retain); err != nil {
			t.Fatal(err)
		}
		idB := lnetwire.ProcessID{NID: nidB, PID: b.PID()}
		pendqPut(t, a, eqA, idB, 1)
		h, err := a.MDBind(lnet.MD{Start: make([]byte, 8), Threshold: 2, EQ: eqA}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Get(lnetwire.NIDAny, h, idB, pendqPortal, 2, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got := map[lnet.EventType]int{}
		for _, ev := range drain(t, eqA) {
			if ev.Status != nil {
				t.Fatalf("A event %s failed", evStr(ev))
			}
			got[ev.Type]++
		}
		if got[lnet.EventAck] != 1 || got[lnet.EventReply] != 1 {
			t.Fatalf("A events %v: want B's ACK and REPLY", got)
		}
		if _, err := b.Ping(t.Context(), lnetwire.ProcessID{NID: nidA, PID: lnetwire.PIDAny}, 0); err != nil {
			t.Fatal(err)
		}
		if s := b.DiscoveryStats(); s.MsgsHeld != 0 || s.Rounds != 0 {
			t.Fatalf("B stats %+v: a response or reserved-portal message waited", s)
		}
		if st, _, _ := b.PeerDiscoveryState(nidA); st&(lnet.PeerDiscovered|lnet.PeerDiscovering) != 0 {
			t.Fatalf("B's peer A state %#x: discovered after all", st)
		}
	})
}

// TestPendqGatewayPingedByRouterChecker: while the router checker's
// ping of a gateway is out, a PUT to that gateway's NID leaves at once
// (lnet_peer_gw_discovery); with the checker off the same PUT waits for
// a discovery round of its own.
func TestPendqGatewayPingedByRouterChecker(t *testing.T) {
	for _, checker := range []bool{true, false} {
		name := map[bool]string{true: "checker", false: "nochecker"}[checker]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := lndtest.New(lnetwire.SOCKLND)
				l := []lnd.LND{n.LND()}
				g := fastChecker()
				if !checker {
					g = noChecker()
				}
				n.Hold(true) // the checker's ping stays out
				a := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
				r := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1)
				a.SetDiscovery(true)
				eqA, _ := a.EQAlloc(64, nil)
				eqR, _ := r.EQAlloc(64, nil)
				pendqSink(t, r, eqR)
				addRoute(t, a, tcp1, rtR0, 1, 0)
				synctest.Wait()
				before := n.Held()
				pendqPut(t, a, eqA, lnetwire.ProcessID{NID: rtR0, PID: r.PID()}, 1)
				synctest.Wait()
				s := a.DiscoveryStats()
				if checker && (before != 1 || n.Held() != 2 || s.MsgsHeld != 0) {
					t.Fatalf("gateway being pinged: %d then %d on the network, stats %+v; want the PUT sent at once", before, n.Held(), s)
				}
				if !checker && (before != 0 || n.Held() != 1 || s.MsgsHeld != 1) {
					t.Fatalf("no checker: %d then %d on the network, stats %+v; want the PUT held behind a discovery ping", before, n.Held(), s)
				}
				n.Hold(false)
				n.Release(-1)
				synctest.Wait()
				if evs := drain(t, eqR); len(evs) != 1 || evs[0].Type != lnet.EventPut {
					t.Fatalf("R events %v", types(evs))
				}
			})
		})
	}
}

// TestPendqGatewayDiscoveredWithCheckerOff: with the router checker off,
// a routed PUT first waits for the discovery of its destination (pinged
// through the router), then, routed, for the discovery of its gateway
// (lnet_handle_find_routed_path), and arrives; the gateway is then a
// discovered Multi-Rail peer with both its NIDs. The next PUT waits for
// nothing.
func TestPendqGatewayDiscoveredWithCheckerOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newRoutedTrioG(t, lnet.RouterConfig{}, lnd.Tunables{}, noChecker())
		for _, in := range []*lnet.Instance{tr.a, tr.r, tr.b} {
			in.SetDiscovery(true)
		}
		pendqSink(t, tr.b, tr.eqB)
		idB := lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}
		pendqPut(t, tr.a, tr.eqA, idB, 1)
		synctest.Wait()
		if s := tr.a.DiscoveryStats(); s.RoundsOnSend != 2 || s.Rounds != 2 || s.MsgsHeld != 2 {
			t.Fatalf("A stats %+v: want the PUT held for B, then for the gateway", s)
		}
		st, lastErr, ok := tr.a.PeerDiscoveryState(rtR0)
		want := lnet.PeerDiscovered | lnet.PeerNIDsUptodate | lnet.PeerMultiRail
		if !ok || st&want != want || lastErr != nil {
			t.Fatalf("gateway state %#x err %v (known %v)", st, lastErr, ok)
		}
		if p, _ := tr.a.PeerOf(rtR1); p.Primary != rtR0 || len(p.NIs) != 2 {
			t.Fatalf("A's gateway peer %+v: want both of R's NIDs", p)
		}
		if evs := drain(t, tr.eqB); len(evs) != 1 || evs[0].Type != lnet.EventPut || evs[0].Status != nil {
			t.Fatalf("B events %v", types(evs))
		}
		for _, ev := range drain(t, tr.eqA) {
			if ev.Status != nil {
				t.Fatalf("A event %s failed", evStr(ev))
			}
		}
		pendqPut(t, tr.a, tr.eqA, idB, 2)
		synctest.Wait()
		if s := tr.a.DiscoveryStats(); s.MsgsHeld != 2 || s.Rounds != 2 {
			t.Fatalf("A stats %+v: the second PUT waited", s)
		}
		if evs := drain(t, tr.eqB); len(evs) != 1 || evs[0].MatchBits != 2 {
			t.Fatalf("B events after the second PUT %v", types(evs))
		}
	})
}

// TestPendqDiscoveryOffPingsOnce: with DiscoveryOff (lnetctl set
// discovery 0) the first PUTs to a new peer still wait for one ping of it
// (as Lustre's kernel), then leave in order; no push goes and the peer is
// up to date: the next PUT leaves at once. A PUT to a peer whose ping
// fails fails with it.
func TestPendqDiscoveryOffPingsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPendqRig(t)
		if err := r.a.SetDiscoveryMode(lnet.DiscoveryOff); err != nil {
			t.Fatal(err)
		}
		r.n.Hold(true)
		pendqPut(t, r.a, r.eqA, r.idB(), 1)
		pendqPut(t, r.a, r.eqA, r.idB(), 2)
		synctest.Wait()
		if got, s := r.n.Held(), r.a.DiscoveryStats(); got != 1 || s.MsgsHeld != 2 || s.RoundsOnSend != 1 {
			t.Fatalf("%d messages on the network, stats %+v; want only the ping, 2 PUTs held", got, s)
		}
		r.n.Hold(false)
		r.n.Release(-1)
		synctest.Wait()
		var bits []uint64
		for _, ev := range drain(t, r.eqB) {
			if ev.Type == lnet.EventPut && ev.Status == nil {
				bits = append(bits, ev.MatchBits)
			}
		}
		if len(bits) != 2 || bits[0] != 1 || bits[1] != 2 {
			t.Fatalf("B received match bits %v, want [1 2]", bits)
		}
		st, _, _ := r.a.PeerDiscoveryState(nidB)
		want := lnet.PeerDiscovered | lnet.PeerNIDsUptodate | lnet.PeerNoDiscovery
		if st&want != want || st&lnet.PeerMultiRail != 0 {
			t.Fatalf("B's state %#x", st)
		}
		if s, sb := r.a.DiscoveryStats(), r.b.DiscoveryStats(); s.PushesSent != 0 || sb.PushesReceived != 0 || s.Rounds != 1 {
			t.Fatalf("stats A %+v B %+v: want one round, no push", s, sb)
		}
		r.n.Hold(true)
		pendqPut(t, r.a, r.eqA, r.idB(), 3)
		synctest.Wait()
		if got, s := r.n.Held(), r.a.DiscoveryStats(); got != 1 || s.MsgsHeld != 2 || s.Rounds != 1 {
			t.Fatalf("PUT to the pinged peer: %d on the network, stats %+v", got, s)
		}
		r.n.Hold(false)
		r.n.Release(-1)
		synctest.Wait()
		drain(t, r.eqA)

		dead := lnetwire.ProcessID{NID: lnetwire.MustParseNID("10.0.0.99@tcp"), PID: r.b.PID()}
		pendqPut(t, r.a, r.eqA, dead, 4)
		synctest.Wait()
		failed := false
		for _, ev := range drain(t, r.eqA) {
			if ev.Type == lnet.EventSend && ev.Status != nil {
				failed = true
			}
		}
		if s := r.a.DiscoveryStats(); !failed || s.PingsFailed != 1 {
			t.Fatalf("PUT to an unreachable peer: failed %v, stats %+v", failed, s)
		}
	})
}
