package lnet_test

import (
	"context"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// TestDistRouteOrder: LNetDist's order for a routed NID is the one
// Lustre's LNetDist gives: 2 + the number of local NIs, plus the net's
// place among the remote nets of its own bucket of the remote-net hash
// (lnet_net2rnethash: (net number + LND type) mod 64 at the default
// rnet_htable_size), not among all remote nets. tcp1 and tcp2 hash to
// different buckets and share an order; tcp65 shares tcp1's bucket and
// comes after it. Deleting tcp1's route moves tcp65 up.
func TestDistRouteOrder(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := rtNode(t, []lnd.LND{n.LND()}, lnet.RouterConfig{}, noChecker(), lnd.Tunables{}, rtA)
	for _, net := range []string{"tcp1", "tcp2", "tcp65"} {
		addRoute(t, a, mustNet(net), rtR0, 1, 0)
	}
	order := func(nid string) int {
		t.Helper()
		d, src, o, err := a.Dist(lnetwire.MustParseNID(nid))
		if err != nil || d != 2 || src != rtA {
			t.Fatalf("Dist(%s) = %d %v %d %v, want 2 %v", nid, d, src, o, err, rtA)
		}
		return o
	}
	// 0@lo and tcp: orders 2 and 3; remote nets start at 4.
	if o1, o2, o65 := order("10.9.0.1@tcp1"), order("10.9.0.1@tcp2"), order("10.9.0.1@tcp65"); o1 != 4 || o2 != 4 || o65 != 5 {
		t.Fatalf("orders tcp1 %d tcp2 %d tcp65 %d, want 4 4 5", o1, o2, o65)
	}
	if err := a.DelRoute(mustNet("tcp1"), lnetwire.NIDAny); err != nil {
		t.Fatal(err)
	}
	if o := order("10.9.0.1@tcp65"); o != 4 {
		t.Fatalf("order of tcp65 after tcp1's route went: %d, want 4", o)
	}
}

// mrRouter is A - R - B where R has two NIs on B's net tcp1.
type mrRouter struct {
	a, r, b  *lnet.Instance
	eqA, eqB *lnet.EQ
}

var rtR1b = lnetwire.MustParseNID("10.0.1.4@tcp1") // R's second NI on tcp1

func newMRRouter(t *testing.T, gb lnet.Globals) *mrRouter {
	t.Helper()
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := noChecker()
	x := &mrRouter{
		a: rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA),
		r: rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1, rtR1b),
		b: rtNode(t, l, lnet.RouterConfig{}, gb, lnd.Tunables{}, rtB),
	}
	addRoute(t, x.a, tcp1, rtR0, 1, 0)
	addRoute(t, x.b, tcp, rtR1, 1, 0)
	x.eqA, _ = x.a.EQAlloc(64, nil)
	x.eqB, _ = x.b.EQAlloc(64, nil)
	me, _ := x.b.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	x.b.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut, EQ: x.eqB}, lnet.Retain)
	return x
}

// puts sends n PUTs from A to B, one at a time, and counts the NIDs
// they arrived from (the event's sender: R's NI that forwarded it). A
// PUT dropped by B fails the test.
func (x *mrRouter) puts(t *testing.T, n int) map[lnetwire.NID]int {
	t.Helper()
	senders := map[lnetwire.NID]int{}
	for i := range n {
		h, _ := x.a.MDBind(lnet.MD{Start: []byte("x"), Threshold: 1, EQ: x.eqA}, lnet.AutoUnlink)
		if err := x.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: x.b.PID()}, 5, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		if ev := poll(t, x.a, x.eqA); ev.Status != nil {
			t.Fatalf("PUT %d: %s", i, evStr(ev))
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			ev, _, err := x.b.EQPoll([]*lnet.EQ{x.eqB}, 10*time.Millisecond)
			if err == nil {
				senders[ev.Sender]++
				break
			}
			if st := x.b.Stats(); st.DropCount != 0 {
				t.Fatalf("B dropped PUT %d (received so far from %v)", i, senders)
			}
			if time.Now().After(deadline) {
				t.Fatalf("PUT %d never arrived (router %+v)", i, x.r.Stats())
			}
		}
	}
	return senders
}

// TestRouterForwardRoundRobin: a router with two NIs on the next hop's
// net takes them in turn for the messages it forwards, as Lustre's
// lnet_handle_send bumps the chosen NI's sequence for every send,
// forwarded ones included (lnet_get_best_ni then prefers the other).
func TestRouterForwardRoundRobin(t *testing.T) {
	x := newMRRouter(t, noChecker())
	if s := x.puts(t, 6); s[rtR1] != 3 || s[rtR1b] != 3 {
		t.Fatalf("PUTs arrived from %v: want 3 from each of R's tcp1 NIDs", s)
	}
}

// TestDropAsymRouteMRGateway: with drop_asym_route, a message forwarded
// by a Multi-Rail router from another of its NIDs than the one the route
// names is not asymmetric: Lustre's lnet_parse looks the sender's NID up
// as a peer NI and checks the routes of its peer (lp_routes), so any NID
// of the gateway peer counts. B routes tcp through R's first tcp1 NI and
// knows both as one peer; R forwards from each in turn.
func TestDropAsymRouteMRGateway(t *testing.T) {
	g := noChecker()
	g.DropAsymRoute = true
	x := newMRRouter(t, g)
	if err := x.b.AddPeer(lnet.PeerConfig{Primary: rtR1, NIDs: []lnetwire.NID{rtR1b}}); err != nil {
		t.Fatal(err)
	}
	if s := x.puts(t, 6); s[rtR1b] == 0 || s[rtR1] == 0 {
		t.Fatalf("PUTs arrived from %v: want some from each of R's tcp1 NIDs", s)
	}
}

// TestRouterPoolGrowResetsMin: growing a router buffer pool restarts its
// low-water mark at the new credit count (lnet_rtrpool_adjust_bufs sets
// rbp_mincredits = rbp_credits when it adds buffers), so `lnetctl
// routing show` reports mincredits of the new pool, not of the old one.
func TestRouterPoolGrowResetsMin(t *testing.T) {
	tr := newRoutedTrioG(t, lnet.RouterConfig{LargeBuffers: 2}, lnd.Tunables{}, noChecker())
	testPutGet(t, tr.a, tr.b, tr.eqA, tr.eqB, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, 1<<20, 1)
	large := func() lnet.PoolInfo { return tr.r.RouterPools()[2] }
	if p := large(); p.NBuffers != 2 || p.Credits != 2 || p.MinCredits != 1 {
		t.Fatalf("large pool after a routed 1 MiB PUT and GET: %+v, want 2 buffers, 2 credits, min 1", p)
	}
	tr.r.SetRouter(lnet.RouterConfig{Enabled: true, LargeBuffers: 8})
	if p := large(); p.NBuffers != 8 || p.Credits != 8 || p.MinCredits != 8 {
		t.Fatalf("large pool grown to 8: %+v, want min 8", p)
	}
	// Shrinking lowers the credits at once here (softib allocates
	// buffers lazily), and the mark with them.
	tr.r.SetRouter(lnet.RouterConfig{Enabled: true, LargeBuffers: 3})
	if p := large(); p.NBuffers != 3 || p.Credits != 3 || p.MinCredits != 3 {
		t.Fatalf("large pool shrunk to 3: %+v", p)
	}
}

// TestRouterNIStatusPerNet: a router judges silence per net, as Lustre's
// lnet_update_ni_status_locked does with net_last_alive: an NI nobody
// pings stays up while another NI of its net is pinged, and all of a
// net's NIs go down when none of them was. R has two NIs on tcp1, of
// which B's router checker pings one, and one on tcp2 that nobody pings.
func TestRouterNIStatusPerNet(t *testing.T) {
	rtR2 := lnetwire.MustParseNID("10.0.3.2@tcp2")
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := fastChecker()
	g.RouterPingTimeout = 300 * time.Millisecond
	a := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
	rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1, rtR1b, rtR2)
	b := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtB)
	addRoute(t, a, tcp1, rtR0, 1, 0)
	addRoute(t, b, tcp, rtR1, 1, 0)
	status := map[lnetwire.NID]uint32{}
	waitFor(t, "R to report tcp2 down", func() bool {
		res, err := a.Ping(context.Background(), lnetwire.ProcessID{NID: rtR0}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.NIDs {
			status[e.NID] = e.Status
		}
		return status[rtR2] == lnetwire.PingStatusDown
	})
	for _, nid := range []lnetwire.NID{rtR0, rtR1, rtR1b} {
		if status[nid] != lnetwire.PingStatusUp {
			t.Errorf("R reports %v status %#x, want up (its net is pinged)", nid, status[nid])
		}
	}
}

// TestAddRouteRechecksGateway: a route added through a gateway already in
// use is judged by a router check at once (lnet_add_route_to_rnet sets
// the gateway's next ping to now), not at the next live interval: a
// single-hop route to a net the gateway does not have goes down.
func TestAddRouteRechecksGateway(t *testing.T) {
	g := fastChecker()
	g.LiveRouterCheckInterval = time.Hour // no periodic ping during the test
	tr := newRoutedTrioG(t, lnet.RouterConfig{}, lnd.Tunables{}, g)
	waitFor(t, "first ping of R", func() bool { rs := tr.a.Routes(); return len(rs) == 1 && !rs[0].LastPing.IsZero() })
	addRoute(t, tr.a, mustNet("tcp7"), rtR0, 1, 0)
	waitFor(t, "route to tcp7 down", func() bool {
		for _, r := range tr.a.Routes() {
			if r.Net == mustNet("tcp7") {
				return !r.Alive && r.GatewayAlive
			}
		}
		return false
	})
}

// TestRouteTypeBeforePing: a new route is "multi-hop" in route show -v
// until a ping reply of its gateway lists an NI on the route's net, as
// Lustre's lr_single_hop, which starts zeroed; a gateway that never
// answers leaves it so. The reply of a gateway with an NI on the net
// makes it single-hop.
func TestRouteTypeBeforePing(t *testing.T) {
	tr := newRoutedTrioG(t, lnet.RouterConfig{}, lnd.Tunables{}, noChecker())
	addRoute(t, tr.a, tcp1, rtR2, 1, 0) // nobody has this NID
	for _, r := range tr.a.Routes() {
		if !r.MultiHop {
			t.Fatalf("route %v via %v before any ping reply: single-hop", r.Net, r.Gateway)
		}
	}
	g := fastChecker()
	g.LiveRouterCheckInterval = time.Hour
	tr.a.SetGlobals(g)
	waitFor(t, "R's ping reply", func() bool {
		for _, r := range tr.a.Routes() {
			if r.Gateway == rtR0 && !r.LastPing.IsZero() {
				return !r.MultiHop
			}
		}
		return false
	})
}

// TestRoutedResponseKeepsDest: an ACK to a routed PUT goes to the NID the
// PUT came from, back through the gateway it came through, even when the
// initiator is a Multi-Rail peer with NIDs on other routed nets: Lustre
// sends a response with the receiving NI as its source and the request's
// previous hop as the router (lnet_send(ni_nid, msg, msg_from)), so
// lnet_handle_find_routed_path keeps the destination NID and picks no
// other peer net.
func TestRoutedResponseKeepsDest(t *testing.T) {
	rtR2x := lnetwire.MustParseNID("10.0.3.2@tcp2")
	rtB2 := lnetwire.MustParseNID("10.0.3.9@tcp2")
	tcp2 := mustNet("tcp2")
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := noChecker()
	a := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
	rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1, rtR2x)
	b := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtB, rtB2)
	addRoute(t, a, tcp1, rtR0, 1, 0)
	addRoute(t, a, tcp2, rtR0, 1, 0)
	addRoute(t, b, tcp, rtR1, 1, 0)
	addRoute(t, b, tcp, rtR2x, 1, 0)
	if err := a.AddPeer(lnet.PeerConfig{Primary: rtB, NIDs: []lnetwire.NID{rtB2}}); err != nil {
		t.Fatal(err)
	}
	eqA, _ := a.EQAlloc(64, nil)
	eqB, _ := b.EQAlloc(64, nil)
	me, _ := a.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	a.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut, EQ: eqA}, lnet.Retain)
	for i := range 4 {
		h, _ := b.MDBind(lnet.MD{Start: []byte("x"), Threshold: 2, EQ: eqB}, lnet.AutoUnlink)
		src := rtB // twice from each NID of B, in an order round robin would not follow
		if i == 1 || i == 2 {
			src = rtB2
		}
		if err := b.Put(src, h, lnet.AckReqYes, lnetwire.ProcessID{NID: rtA, PID: a.PID()}, 5, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		var ack lnet.Event
		for ack.Type != lnet.EventAck {
			ack = poll(t, b, eqB)
			if ack.Status != nil {
				t.Fatalf("PUT %d from %v: %s", i, src, evStr(ack))
			}
		}
		ev := poll(t, a, eqA)
		if ev.Source != src {
			t.Fatalf("PUT %d: A saw source %v, want %v", i, ev.Source, src)
		}
		// The ACK came to src's net: through R's NI on that net.
		want := rtR1
		if src.Net() == tcp2 {
			want = rtR2x
		}
		if ack.Sender != want {
			t.Fatalf("ACK of PUT %d from %v came through %v, want %v (to the NID the PUT came from)", i, src, ack.Sender, want)
		}
	}
}
