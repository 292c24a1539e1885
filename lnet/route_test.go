package lnet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

var (
	// A on tcp, router R on tcp and tcp1 (and o2ib), B on tcp1 (or o2ib).
	rtA   = lnetwire.MustParseNID("10.0.0.1@tcp")
	rtR0  = lnetwire.MustParseNID("10.0.0.2@tcp")
	rtR1  = lnetwire.MustParseNID("10.0.1.2@tcp1")
	rtR2  = lnetwire.MustParseNID("10.0.0.3@tcp") // second gateway
	rtR21 = lnetwire.MustParseNID("10.0.1.3@tcp1")
	rtB   = lnetwire.MustParseNID("10.0.1.9@tcp1")
	rtRib = lnetwire.MustParseNID("10.0.2.2@o2ib")
	rtBib = lnetwire.MustParseNID("10.0.2.9@o2ib")
	tcp   = mustNet("tcp")
	tcp1  = mustNet("tcp1")
	o2ib  = mustNet("o2ib")
)

// fastChecker makes the router checker quick for tests.
func fastChecker() lnet.Globals {
	g := lnet.DefaultGlobals()
	g.RouterPingTimeout = time.Second
	g.LiveRouterCheckInterval = 200 * time.Millisecond
	g.DeadRouterCheckInterval = 200 * time.Millisecond
	return g
}

// noChecker turns the router checker off (routes stay as added).
func noChecker() lnet.Globals {
	g := lnet.DefaultGlobals()
	g.LiveRouterCheckInterval = -1
	return g
}

// rtNode starts an instance with NIs on nids, every LND of nets, and
// discovery off: the routing tests count what crosses the router, which
// a discovery round before the first message would add to.
func rtNode(t testing.TB, lnds []lnd.LND, rc lnet.RouterConfig, g lnet.Globals, tun lnd.Tunables, nids ...lnetwire.NID) *lnet.Instance {
	t.Helper()
	cfg := lnet.Config{LNDs: lnds, Router: rc, Globals: g}
	for _, nid := range nids {
		cfg.Nets = append(cfg.Nets, lnet.NetConfig{Net: nid.Net(), Addr: nid.Addr(), Tunables: tun})
	}
	in, err := lnet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	in.SetDiscovery(false)
	return in
}

func addRoute(t testing.TB, in *lnet.Instance, net lnetwire.Net, gw lnetwire.NID, hops int, prio uint32) {
	t.Helper()
	if err := in.AddRoute(lnet.RouteConfig{Net: net, Gateway: gw, Hops: hops, Priority: prio}); err != nil {
		t.Fatalf("AddRoute %v via %v: %v", net, gw, err)
	}
}

// routedTrio is A - R - B on one in-memory network (tcp and tcp1 are both
// lndtest nets of the socklnd type).
type routedTrio struct {
	net     *lndtest.Network
	a, r, b *lnet.Instance
	eqA     *lnet.EQ
	eqB     *lnet.EQ
}

func newRoutedTrio(t testing.TB, rc lnet.RouterConfig, tun lnd.Tunables) *routedTrio {
	t.Helper()
	return newRoutedTrioG(t, rc, tun, fastChecker())
}

func newRoutedTrioG(t testing.TB, rc lnet.RouterConfig, tun lnd.Tunables, g lnet.Globals) *routedTrio {
	t.Helper()
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	rc.Enabled = true
	tr := &routedTrio{net: n,
		a: rtNode(t, l, lnet.RouterConfig{}, g, tun, rtA),
		r: rtNode(t, l, rc, g, tun, rtR0, rtR1),
		b: rtNode(t, l, lnet.RouterConfig{}, g, tun, rtB),
	}
	addRoute(t, tr.a, tcp1, rtR0, 1, 0)
	addRoute(t, tr.b, tcp, rtR1, 1, 0)
	tr.eqA, _ = tr.a.EQAlloc(4096, nil)
	tr.eqB, _ = tr.b.EQAlloc(4096, nil)
	return tr
}

// TestRoutedPutGet: PUT+ACK and GET+REPLY between two nets through a
// router, every size class (tiny, small and large buffers), with the
// end-to-end NIDs in the events and the router's counters.
func TestRoutedPutGet(t *testing.T) {
	for _, size := range []int{0, 1, 4096, 4097, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			tr := newRoutedTrioG(t, lnet.RouterConfig{}, lnd.Tunables{}, noChecker())
			testPutGet(t, tr.a, tr.b, tr.eqA, tr.eqB, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, size, 3)
			st := tr.r.Stats()
			// PUT, ACK, GET, REPLY forwarded.
			if st.RouteCount != 4 || st.RouteLength != uint64(2*size) || st.DropCount != 0 || st.MsgsAlloc != 0 {
				t.Fatalf("router stats %+v", st)
			}
			for _, p := range tr.r.RouterPools() {
				if p.Credits != p.NBuffers || p.Queued != 0 {
					t.Fatalf("pool %+v not back to full", p)
				}
			}
			for _, p := range tr.r.Peers() {
				if p.RtrCredits != p.MaxRtrCredits || p.TxCredits != p.MaxTxCredits {
					t.Fatalf("router peer %+v: credits not returned", p)
				}
			}
		})
	}
}

// TestRoutedEventNIDs: the receiver sees the originator (not the router)
// as initiator, and the router as the sender (previous hop).
func TestRoutedEventNIDs(t *testing.T) {
	tr := newRoutedTrio(t, lnet.RouterConfig{}, lnd.Tunables{})
	me, _ := tr.b.MEAttach(5, lnetwire.ProcessIDAny, 1, 0, lnet.Retain, lnet.InsAfter)
	tr.b.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: 1, Options: lnet.MDOpPut, EQ: tr.eqB}, lnet.AutoUnlink)
	h, _ := tr.a.MDBind(lnet.MD{Start: []byte("routed!!"), Threshold: 1, EQ: tr.eqA}, lnet.AutoUnlink)
	if err := tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, 5, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	ev := poll(t, tr.b, tr.eqB)
	if ev.Type != lnet.EventPut || ev.Initiator.NID != rtA || ev.Sender != rtR1 || ev.Target.NID != rtB {
		t.Fatalf("event %s sender %v", evStr(ev), ev.Sender)
	}
	if sev := poll(t, tr.a, tr.eqA); sev.Type != lnet.EventSend || sev.Status != nil || sev.Initiator.NID != rtA {
		t.Fatalf("send event %s", evStr(sev))
	}
}

// TestRoutedPing: lnetctl ping through a router; Dist counts the hop.
func TestRoutedPing(t *testing.T) {
	tr := newRoutedTrio(t, lnet.RouterConfig{}, lnd.Tunables{})
	res, err := tr.a.Ping(context.Background(), lnetwire.ProcessID{NID: rtB}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NIDs) != 1 || res.NIDs[0].NID != rtB {
		t.Fatalf("ping result %+v", res)
	}
	d, src, order, err := tr.a.Dist(rtB)
	// Order: after 0@lo and tcp (2 + 2 NIs), the first remote net.
	if err != nil || d != 2 || src != rtA || order != 4 {
		t.Fatalf("Dist(B) = %d %v %d %v, want 2 %v 4", d, src, order, err, rtA)
	}
	if d, _, _, err := tr.a.Dist(rtR0); err != nil || d != 1 {
		t.Fatalf("Dist(R) = %d %v", d, err)
	}
	if _, _, _, err := tr.a.Dist(lnetwire.MustParseNID("1.2.3.4@tcp9")); !errors.Is(err, lnet.ErrNoRoute) {
		t.Fatalf("Dist to an unrouted net: %v", err)
	}
	if tr.a.IsPeerLocal(rtB) {
		t.Fatal("a routed peer is not local")
	}
}

// TestRoutedTCPToO2IB: a router between two LND types moves payloads
// from one to the other.
func TestRoutedTCPToO2IB(t *testing.T) {
	sock := lndtest.New(lnetwire.SOCKLND)
	ib := lndtest.New(lnetwire.O2IBLND)
	g := noChecker() // testPutGet counts MDs: no ping MDs in between
	a := rtNode(t, []lnd.LND{sock.LND()}, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
	r := rtNode(t, []lnd.LND{sock.LND(), ib.LND()}, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtRib)
	b := rtNode(t, []lnd.LND{ib.LND()}, lnet.RouterConfig{}, g, lnd.Tunables{}, rtBib)
	addRoute(t, a, o2ib, rtR0, 1, 0)
	addRoute(t, b, tcp, rtRib, 1, 0)
	eqA, _ := a.EQAlloc(64, nil)
	eqB, _ := b.EQAlloc(64, nil)
	testPutGet(t, a, b, eqA, eqB, lnetwire.ProcessID{NID: rtBib, PID: b.PID()}, 1<<20, 2)
	// And the other way.
	eqA2, _ := a.EQAlloc(64, nil)
	eqB2, _ := b.EQAlloc(64, nil)
	testPutGet(t, b, a, eqB2, eqA2, lnetwire.ProcessID{NID: rtA, PID: a.PID()}, 100000, 1)
	if st := r.Stats(); st.RouteCount != 8 {
		t.Fatalf("router stats %+v", st)
	}
}

// TestRoutingDisabled: a node without routing drops messages not for it
// and says so in its ping features; the sender's routes through it go
// down after the router checker's ping.
func TestRoutingDisabled(t *testing.T) {
	tr := newRoutedTrio(t, lnet.RouterConfig{}, lnd.Tunables{})
	tr.r.SetRouter(lnet.RouterConfig{Enabled: false})
	res, err := tr.a.Ping(context.Background(), lnetwire.ProcessID{NID: rtR0}, 5*time.Second)
	if err != nil || res.Features&lnetwire.PingFeatRteDisabled == 0 {
		t.Fatalf("ping router: %+v %v (want RTE_DISABLED)", res, err)
	}
	waitFor(t, "route down", func() bool { rs := tr.a.Routes(); return len(rs) == 1 && !rs[0].Alive })
	h, _ := tr.a.MDBind(lnet.MD{Start: []byte("x"), Threshold: 1, EQ: tr.eqA}, lnet.AutoUnlink)
	tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: 12345}, 5, 1, 0, 0)
	if ev := poll(t, tr.a, tr.eqA); !errors.Is(ev.Status, lnet.ErrNoRoute) {
		t.Fatalf("send through a non-router: %s", evStr(ev))
	}
	tr.r.SetRouter(lnet.RouterConfig{Enabled: true})
	waitFor(t, "route up", func() bool { rs := tr.a.Routes(); return len(rs) == 1 && rs[0].Alive })
	// B has no route back through the disabled router's state, but a
	// message for B arriving at R while routing is off is dropped.
	tr.r.SetRouter(lnet.RouterConfig{Enabled: false})
	before := tr.r.Stats().DropCount
	h, _ = tr.a.MDBind(lnet.MD{Start: []byte("y"), Threshold: 1, EQ: tr.eqA}, lnet.AutoUnlink)
	tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: 12345}, 5, 1, 0, 0)
	poll(t, tr.a, tr.eqA)
	if st := tr.r.Stats(); st.DropCount != before+1 && !routesDown(tr.a) {
		t.Fatalf("router stats %+v", st)
	}
}

func routesDown(in *lnet.Instance) bool {
	for _, r := range in.Routes() {
		if r.Alive {
			return false
		}
	}
	return true
}

func waitFor(t testing.TB, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRouterBufferExhaustion: many 1 MiB PUTs through a router with two
// large buffers: the rest wait (pool credits negative, low-water mark
// recorded), none is dropped, all arrive intact, and every credit comes
// back.
func TestRouterBufferExhaustion(t *testing.T) {
	const n = 40
	// No checker: no pings among the held messages.
	tr := newRoutedTrioG(t, lnet.RouterConfig{LargeBuffers: 2}, lnd.Tunables{PeerCredits: 16, PeerBufferCredits: 12}, noChecker())
	tr.net.Hold(true)
	const portal = 7
	sinks := make([][]byte, n)
	for i := range sinks {
		sinks[i] = make([]byte, 1<<20)
		me, _ := tr.b.MEAttach(portal, lnetwire.ProcessIDAny, uint64(i), 0, lnet.AutoUnlink, lnet.InsAfter)
		if _, err := tr.b.MDAttach(me, lnet.MD{Start: sinks[i], Threshold: 1, Options: lnet.MDOpPut, EQ: tr.eqB}, lnet.AutoUnlink); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		h, _ := tr.a.MDBind(lnet.MD{Start: pattern(1<<20, byte(i)), Threshold: 2, EQ: tr.eqA}, lnet.AutoUnlink)
		if err := tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, portal, uint64(i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A's 16 peer credits let 16 reach the wire; R takes 12 (its peer
	// buffer credits for A), two get buffers, ten wait for one.
	tr.net.Release(16)
	pools := tr.r.RouterPools()
	large := pools[2]
	if large.Name != "large" || large.NBuffers != 2 || large.Credits != -10 || large.Queued != 10 || large.MinCredits != -10 {
		t.Fatalf("large pool %+v", large)
	}
	var pa lnet.PeerInfo
	for _, p := range tr.r.Peers() {
		if p.NID == rtA {
			pa = p
		}
	}
	if pa.MaxRtrCredits != 12 || pa.RtrCredits != -4 || pa.MinRtrCredits != -4 {
		t.Fatalf("router's peer A %+v", pa)
	}
	// Let everything flow.
	deadline := time.Now().Add(20 * time.Second)
	acks := 0
	for acks < n {
		tr.net.Release(-1)
		for {
			ev, ok, _ := tr.eqA.Get()
			if !ok {
				break
			}
			if ev.Status != nil {
				t.Fatalf("sender event %s", evStr(ev))
			}
			if ev.Type == lnet.EventAck {
				acks++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stuck: %d ACKs, held %d, pools %+v", acks, tr.net.Held(), tr.r.RouterPools())
		}
		time.Sleep(time.Millisecond)
	}
	for i := range sinks {
		if !bytes.Equal(sinks[i], pattern(1<<20, byte(i))) {
			t.Fatalf("PUT %d corrupted", i)
		}
	}
	st := tr.r.Stats()
	if st.RouteCount != 2*n || st.DropCount != 0 || st.MsgsAlloc != 0 {
		t.Fatalf("router stats %+v", st)
	}
	for _, p := range tr.r.RouterPools() {
		if p.Credits != p.NBuffers || p.Queued != 0 {
			t.Fatalf("pool %+v not back to full", p)
		}
	}
	for _, p := range tr.r.Peers() {
		if p.RtrCredits != p.MaxRtrCredits || p.QueueLen != 0 {
			t.Fatalf("router peer %+v", p)
		}
	}
}

// TestRouterConcurrentPuts: concurrent senders on an asynchronous network
// through a router with few buffers: no drop, no deadlock.
func TestRouterConcurrentPuts(t *testing.T) {
	tr := newRoutedTrio(t, lnet.RouterConfig{LargeBuffers: 3, SmallBuffers: 2, TinyBuffers: 2}, lnd.Tunables{PeerCredits: 4})
	tr.net.SetAsync(true)
	const senders, each = 4, 8
	me, _ := tr.b.MEAttach(3, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	tr.b.MDAttach(me, lnet.MD{Start: make([]byte, 1<<20), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDTruncate}, lnet.Retain)
	var wg sync.WaitGroup
	errs := make(chan error, senders*each)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eq, _ := tr.a.EQAlloc(4*each, nil)
			for i := range each {
				size := []int{0, 100, 1 << 20}[(s+i)%3]
				h, _ := tr.a.MDBind(lnet.MD{Start: make([]byte, size), Threshold: 2, EQ: eq}, lnet.AutoUnlink)
				tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, 3, 0, 0, 0)
			}
			for range 2 * each {
				ev, _, err := tr.a.EQPoll([]*lnet.EQ{eq}, 20*time.Second)
				if err != nil || ev.Status != nil {
					errs <- fmt.Errorf("event %s: %v", evStr(ev), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, "router idle", func() bool { return tr.r.Stats().MsgsAlloc == 0 })
	if st := tr.r.Stats(); st.RouteCount != 2*senders*each || st.DropCount != 0 {
		t.Fatalf("router stats %+v", st)
	}
	for _, p := range tr.r.RouterPools() {
		if p.Credits != p.NBuffers {
			t.Fatalf("pool %+v", p)
		}
	}
}

// TestGatewaySelection: priority first, then hops, then round robin among
// equals; a dead gateway is skipped and traffic fails over; it comes back
// after its ping answers.
func TestGatewaySelection(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := fastChecker()
	// Live gateways are not pinged during the test: a ping in flight
	// holds one of the gateway's credits, and credits break ties before
	// round robin, so it would make the counts below depend on timing.
	// Dead gateways are still pinged every 200 ms, which brings r1 back.
	g.LiveRouterCheckInterval = time.Hour
	a := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
	r1 := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1)
	r2 := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR2, rtR21)
	b := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtB)
	addRoute(t, b, tcp, rtR1, 1, 0)
	addRoute(t, b, tcp, rtR21, 1, 0)
	eq, _ := a.EQAlloc(1024, nil)
	me, _ := b.MEAttach(4, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut}, lnet.Retain)
	send := func(k int) {
		t.Helper()
		for range k {
			h, _ := a.MDBind(lnet.MD{Start: []byte("abc"), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
			a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: b.PID()}, 4, 0, 0, 0)
			if ev := poll(t, a, eq); ev.Status != nil {
				t.Fatalf("send: %s", evStr(ev))
			}
			// The gateways' credits break ties before round robin (as
			// in Lustre): let them come back so that equal routes are
			// equal at the next choice.
			waitFor(t, "gateway credits back", func() bool {
				for _, p := range a.Peers() {
					if p.TxCredits != p.MaxTxCredits || p.QueueLen != 0 {
						return false
					}
				}
				return true
			})
		}
	}
	counts := func() (uint64, uint64) { return r1.Stats().RouteCount, r2.Stats().RouteCount }

	// Priority 0 beats 1.
	addRoute(t, a, tcp1, rtR0, 1, 1)
	addRoute(t, a, tcp1, rtR2, 1, 0)
	send(4)
	if c1, c2 := counts(); c1 != 0 || c2 != 4 {
		t.Fatalf("priority: r1 %d r2 %d", c1, c2)
	}
	// Same priority, fewer hops wins.
	a.DelRoute(tcp1, lnetwire.NIDAny)
	addRoute(t, a, tcp1, rtR0, 1, 0)
	addRoute(t, a, tcp1, rtR2, 2, 0)
	send(4)
	if c1, c2 := counts(); c1 != 4 || c2 != 4 {
		t.Fatalf("hops: r1 %d r2 %d", c1, c2)
	}
	// Equal routes: round robin.
	a.DelRoute(tcp1, rtR2)
	addRoute(t, a, tcp1, rtR2, 1, 0)
	send(10)
	if c1, c2 := counts(); c1 != 9 || c2 != 9 {
		t.Fatalf("round robin: r1 %d r2 %d", c1, c2)
	}
	// Gateway r1 dies: everything goes through r2, with no failed send
	// after the first one that found it dead.
	n.SetDown(rtR0, true)
	h, _ := a.MDBind(lnet.MD{Start: []byte("abc"), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
	a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: b.PID()}, 4, 0, 0, 0)
	poll(t, a, eq) // may fail: it was the one that found r1 dead
	waitFor(t, "r1 down", func() bool {
		for _, r := range a.Routes() {
			if r.Gateway == rtR0 {
				return !r.Alive
			}
		}
		return false
	})
	_, before := counts()
	send(6)
	if c1, c2 := counts(); c1 != 9 || c2 != before+6 {
		t.Fatalf("failover: r1 %d r2 %d (r2 before %d)", c1, c2, before)
	}
	// It comes back: the router checker's ping answers.
	n.SetDown(rtR0, false)
	waitFor(t, "r1 up", func() bool {
		for _, r := range a.Routes() {
			if r.Gateway == rtR0 {
				return r.Alive
			}
		}
		return false
	})
	c1, _ := counts()
	send(4)
	if c1b, _ := counts(); c1b != c1+2 {
		t.Fatalf("after recovery r1 forwarded %d of 4", c1b-c1)
	}
}

// TestRouteRemoteNetDown: a gateway whose ping reply shows its NI on the
// route's net down (or missing) does not carry single-hop routes.
func TestRouteRemoteNetDown(t *testing.T) {
	tr := newRoutedTrio(t, lnet.RouterConfig{}, lnd.Tunables{})
	// A route to a net R does not have, declared single hop: down once R
	// answers a ping (avoid_asym_router_failure).
	addRoute(t, tr.a, mustNet("tcp7"), rtR0, 1, 0)
	// The same net with an undefined hop count: multi-hop, stays up.
	addRoute(t, tr.a, mustNet("tcp8"), rtR0, lnet.UndefinedHops, 0)
	waitFor(t, "remote net state", func() bool {
		var ok7, ok8 bool
		for _, r := range tr.a.Routes() {
			switch r.Net.String() {
			case "tcp7":
				ok7 = !r.Alive && r.MultiHop && r.GatewayAlive
			case "tcp8":
				ok8 = r.Alive && r.MultiHop
			}
		}
		return ok7 && ok8
	})
	// R's tcp1 NI goes away: the route to tcp1 goes down.
	if err := tr.r.DelNet(tcp1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "tcp1 route down", func() bool {
		for _, r := range tr.a.Routes() {
			if r.Net == tcp1 {
				return !r.Alive
			}
		}
		return false
	})
}

// TestDropAsymRoute: with drop_asym_route, a message from a net we would
// not reach through the router it came from is dropped.
func TestDropAsymRoute(t *testing.T) {
	tr := newRoutedTrio(t, lnet.RouterConfig{}, lnd.Tunables{})
	g := tr.b.Globals()
	g.DropAsymRoute = true
	tr.b.SetGlobals(g)
	me, _ := tr.b.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	tr.b.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut, EQ: tr.eqB}, lnet.Retain)
	put := func() {
		h, _ := tr.a.MDBind(lnet.MD{Start: []byte("x"), Threshold: 1, EQ: tr.eqA}, lnet.AutoUnlink)
		tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, 5, 0, 0, 0)
		poll(t, tr.a, tr.eqA)
	}
	put() // symmetric: B routes tcp through R
	if ev := poll(t, tr.b, tr.eqB); ev.Type != lnet.EventPut {
		t.Fatalf("symmetric PUT: %s", evStr(ev))
	}
	// B now routes tcp through another (nonexistent) gateway only.
	tr.b.DelRoute(tcp, rtR1)
	addRoute(t, tr.b, tcp, lnetwire.MustParseNID("10.0.1.77@tcp1"), 1, 0)
	before := tr.b.Stats().DropCount
	put()
	waitFor(t, "asymmetric drop", func() bool { return tr.b.Stats().DropCount == before+1 })
}

// TestAddRouteRules: lnet_add_route's argument checks.
func TestAddRouteRules(t *testing.T) {
	tr := newRoutedTrio(t, lnet.RouterConfig{}, lnd.Tunables{})
	for _, c := range []struct {
		rc   lnet.RouteConfig
		want error
	}{
		{lnet.RouteConfig{Net: tcp, Gateway: rtR0}, lnet.ErrInvalid},                                   // gateway on the remote net
		{lnet.RouteConfig{Net: tcp1, Gateway: rtR0, Hops: 256}, lnet.ErrInvalid},                       // hops
		{lnet.RouteConfig{Net: mustNet("lo"), Gateway: rtR0}, lnet.ErrInvalid},                         // loopback
		{lnet.RouteConfig{Net: tcp1, Gateway: rtR0}, lnet.ErrNetExists},                                // duplicate
		{lnet.RouteConfig{Net: tcp1, Gateway: lnetwire.MustParseNID("1.1.1.1@o2ib")}, lnet.ErrNoRoute}, // gateway not local
		{lnet.RouteConfig{Net: mustNet("tcp9"), Gateway: lnetwire.MustParseNID("1.1.1.1@tcp1")}, lnet.ErrNoRoute},
	} {
		if err := tr.a.AddRoute(c.rc); !errors.Is(err, c.want) {
			t.Errorf("AddRoute(%+v) = %v, want %v", c.rc, err, c.want)
		}
	}
	// A route to a local net is refused with EEXIST.
	if err := tr.r.AddRoute(lnet.RouteConfig{Net: tcp1, Gateway: rtA}); !errors.Is(err, lnet.ErrNetExists) {
		t.Errorf("route to a local net: %v", err)
	}
	if err := tr.a.DelRoute(tcp1, rtR2); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("DelRoute of a missing route: %v", err)
	}
	if err := tr.a.DelRoute(tcp1, rtR0); err != nil || len(tr.a.Routes()) != 0 {
		t.Errorf("DelRoute: %v %v", err, tr.a.Routes())
	}
}

// TestRouterNoNextHop: a message the router has no next hop for is
// dropped (counted), and its buffer and credits come back.
func TestRouterNoNextHop(t *testing.T) {
	// No router checker: its pings of the gateway are messages of the
	// router too, and one in flight made MsgsAlloc below non-zero.
	tr := newRoutedTrioG(t, lnet.RouterConfig{}, lnd.Tunables{}, noChecker())
	addRoute(t, tr.a, mustNet("tcp5"), rtR0, 1, 0)
	eq, _ := tr.a.EQAlloc(8, nil)
	h, _ := tr.a.MDBind(lnet.MD{Start: []byte("x"), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
	tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: lnetwire.MustParseNID("9.9.9.9@tcp5"), PID: 12345}, 5, 0, 0, 0)
	poll(t, tr.a, eq)
	waitFor(t, "router drop", func() bool { return tr.r.Stats().DropCount == 1 })
	if st := tr.r.Stats(); st.RouteCount != 0 || st.MsgsAlloc != 0 {
		t.Fatalf("router stats %+v", st)
	}
	for _, p := range tr.r.RouterPools() {
		if p.Credits != p.NBuffers {
			t.Fatalf("pool %+v", p)
		}
	}
}

func mustNet(s string) lnetwire.Net {
	n, err := lnetwire.ParseNet(s)
	if err != nil {
		panic(err)
	}
	return n
}

// TestRouterDisableDropsQueued: turning routing off drops the messages
// waiting for router buffers (as Lustre does); the one being forwarded
// completes; every credit comes back and nothing leaks. Closing the
// router with messages queued also cleans up.
func TestRouterDisableDropsQueued(t *testing.T) {
	tr := newRoutedTrioG(t, lnet.RouterConfig{LargeBuffers: 1}, lnd.Tunables{}, noChecker())
	tr.net.Hold(true)
	for i := range 6 {
		h, _ := tr.a.MDBind(lnet.MD{Start: pattern(1<<20, byte(i)), Threshold: 1, EQ: tr.eqA}, lnet.AutoUnlink)
		tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, 3, 0, 0, 0)
	}
	tr.net.Release(6)
	if p := tr.r.RouterPools()[2]; p.Queued != 5 || p.Credits != -5 {
		t.Fatalf("large pool %+v", p)
	}
	tr.r.SetRouter(lnet.RouterConfig{Enabled: false, LargeBuffers: 1})
	tr.net.Hold(false)
	tr.net.Release(-1)
	waitFor(t, "router idle", func() bool { return tr.r.Stats().MsgsAlloc == 0 })
	st := tr.r.Stats()
	if st.RouteCount != 1 || st.DropCount != 5 {
		t.Fatalf("router stats %+v", st)
	}
	if p := tr.r.RouterPools()[2]; p.Queued != 0 || p.Credits != 1 {
		t.Fatalf("large pool %+v", p)
	}
	for _, p := range tr.r.Peers() {
		if p.RtrCredits != p.MaxRtrCredits {
			t.Fatalf("peer %+v", p)
		}
	}

	// Queued messages at Close.
	tr.r.SetRouter(lnet.RouterConfig{Enabled: true, LargeBuffers: 1})
	tr.net.Hold(true)
	for i := range 4 {
		h, _ := tr.a.MDBind(lnet.MD{Start: pattern(1<<20, byte(i)), Threshold: 1, EQ: tr.eqA}, lnet.AutoUnlink)
		tr.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: tr.b.PID()}, 3, 0, 0, 0)
	}
	tr.net.Release(4)
	if p := tr.r.RouterPools()[2]; p.Queued != 3 {
		t.Fatalf("large pool %+v", p)
	}
	done := make(chan struct{})
	go func() { tr.r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("router Close hangs with queued messages")
	}
	if st := tr.r.Stats(); st.MsgsAlloc != 0 {
		t.Fatalf("router leaked messages: %+v", st)
	}
	tr.net.Hold(false)
	tr.net.Release(-1)
}

// TestRouterChain: A (tcp) - R1 (tcp, tcp1) - R2 (tcp1, tcp2) - B (tcp2):
// a routed message goes through two routers; A's route through R1 is
// multi-hop (R1 has no NI on tcp2) and stays up; Dist counts the hops.
func TestRouterChain(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := fastChecker()
	var (
		a   = lnetwire.MustParseNID("10.0.0.1@tcp")
		r10 = lnetwire.MustParseNID("10.0.0.2@tcp")
		r11 = lnetwire.MustParseNID("10.0.1.2@tcp1")
		r21 = lnetwire.MustParseNID("10.0.1.3@tcp1")
		r22 = lnetwire.MustParseNID("10.0.2.3@tcp2")
		b   = lnetwire.MustParseNID("10.0.2.9@tcp2")
	)
	tcp2 := mustNet("tcp2")
	ia := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, a)
	ir1 := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, r10, r11)
	ir2 := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, r21, r22)
	ib := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, b)
	addRoute(t, ia, tcp1, r10, 1, 0)
	addRoute(t, ia, tcp2, r10, 2, 0)
	addRoute(t, ir1, tcp2, r21, 1, 0)
	addRoute(t, ir2, tcp, r11, 1, 0)
	addRoute(t, ib, tcp1, r22, 1, 0)
	addRoute(t, ib, tcp, r22, 2, 0)
	// Every checker has a ping reply from each of its gateways (the
	// route types come from them), and every route is up.
	waitFor(t, "every gateway pinged, every route up", func() bool {
		for _, in := range []*lnet.Instance{ia, ir1, ir2, ib} {
			for _, r := range in.Routes() {
				if r.LastPing.IsZero() || !r.Alive {
					return false
				}
			}
		}
		return true
	})
	for _, r := range ia.Routes() {
		if r.Net == tcp2 && !r.MultiHop {
			t.Fatalf("A's route to tcp2 via R1 is not multi-hop: %+v", r)
		}
	}
	if d, _, _, err := ia.Dist(b); err != nil || d != 3 {
		t.Fatalf("Dist(B) = %d, %v; want 3", d, err)
	}
	// testPutGet counts B's MDs: no checker pings from here on.
	for _, in := range []*lnet.Instance{ia, ib} {
		in.SetGlobals(noChecker())
	}
	// Left: the ping MD and the two push-target MDs of each.
	waitFor(t, "pings done", func() bool { return ia.Stats().MDs == 3 && ib.Stats().MDs == 3 })
	eqA, _ := ia.EQAlloc(64, nil)
	eqB, _ := ib.EQAlloc(64, nil)
	testPutGet(t, ia, ib, eqA, eqB, lnetwire.ProcessID{NID: b, PID: ib.PID()}, 300000, 2)
	if c1, c2 := ir1.Stats().RouteCount, ir2.Stats().RouteCount; c1 < 4 || c2 < 4 {
		t.Fatalf("route counts R1 %d R2 %d", c1, c2)
	}
	if _, err := ia.Ping(context.Background(), lnetwire.ProcessID{NID: b}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRouterNIStatus: a router reports an NI down in its ping replies
// when no node pinged it for router_ping_timeout + the live interval, so
// single-hop routes to that net through it go down; a ping on that net
// brings it back up.
func TestRouterNIStatus(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := fastChecker()
	g.RouterPingTimeout = 300 * time.Millisecond
	a := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
	rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1)
	b := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtB)
	addRoute(t, a, tcp1, rtR0, 1, 0)
	// Nobody pings R on tcp1: after 0.5 s (+ the 1 s tick) R says so.
	waitFor(t, "route down", func() bool { return routesDown(a) })
	res, err := a.Ping(context.Background(), lnetwire.ProcessID{NID: rtR0}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.NIDs {
		want := lnetwire.PingStatusUp // tcp: A's pings keep it up
		if e.NID == rtR1 {
			want = lnetwire.PingStatusDown
		}
		if e.Status != want {
			t.Fatalf("R reports %v status %#x, want %#x", e.NID, e.Status, want)
		}
	}
	// B's router checker pings R on tcp1: up again, and A's route too.
	addRoute(t, b, tcp, rtR1, 1, 0)
	waitFor(t, "route up", func() bool { rs := a.Routes(); return len(rs) == 1 && rs[0].Alive })
}

// TestUDSPRouteRule: a UDSP router rule (lnetctl udsp add --dst X --rte Y)
// makes routed messages to the peer NIs matching X take a route through
// a gateway matching Y ahead of a better-priority route (lnet_find_route_locked's
// preferred router); a rule for another destination, or one whose --rte
// matches no gateway, changes nothing, and deleting the rule restores
// the priority order.
func TestUDSPRouteRule(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := fastChecker()
	g.LiveRouterCheckInterval = time.Hour
	a := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
	r1 := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1)
	r2 := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR2, rtR21)
	b := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtB)
	addRoute(t, b, tcp, rtR1, 1, 0)
	addRoute(t, b, tcp, rtR21, 1, 0)
	addRoute(t, a, tcp1, rtR0, 1, 0) // the better route
	addRoute(t, a, tcp1, rtR2, 1, 5)
	eq, _ := a.EQAlloc(64, nil)
	me, _ := b.MEAttach(4, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut}, lnet.Retain)
	send := func(k int) {
		t.Helper()
		for range k {
			h, _ := a.MDBind(lnet.MD{Start: []byte("abc"), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
			a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: rtB, PID: b.PID()}, 4, 0, 0, 0)
			if ev := poll(t, a, eq); ev.Status != nil {
				t.Fatalf("send: %s", evStr(ev))
			}
		}
	}
	check := func(what string, w1, w2 uint64) {
		t.Helper()
		if c1, c2 := r1.Stats().RouteCount, r2.Stats().RouteCount; c1 != w1 || c2 != w2 {
			t.Fatalf("%s: r1 forwarded %d, r2 %d; want %d, %d", what, c1, c2, w1, w2)
		}
	}
	send(2)
	check("priority", 2, 0)
	for _, bad := range []lnet.UDSPRule{
		{Dst: "10.0.1.9@tcp1", Rte: "10.0.0.3@tcp"},                      // a priority rule
		{Rte: "10.0.0.3@tcp", Preferred: true},                           // no --dst
		{Src: "10.0.0.1@tcp", Rte: "10.0.0.3@tcp", Preferred: true},      // --src with --rte
		{Dst: "10.0.1.9@tcp1", Rte: "10.0.0.[9-3]@tcp", Preferred: true}, // bad range
	} {
		if err := a.AddUDSP(bad, -1); !errors.Is(err, lnet.ErrInvalid) {
			t.Errorf("AddUDSP(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	// Rules for another destination and for no existing gateway.
	if err := a.AddUDSP(lnet.UDSPRule{Dst: "10.0.1.8@tcp1", Rte: "10.0.0.3@tcp", Preferred: true}, -1); err != nil {
		t.Fatal(err)
	}
	if err := a.AddUDSP(lnet.UDSPRule{Dst: "*@tcp1", Rte: "10.0.0.[50-60]@tcp", Preferred: true}, -1); err != nil {
		t.Fatal(err)
	}
	send(2)
	check("rules that do not apply", 4, 0)
	// The router rule for B: r2 despite its worse priority.
	if err := a.AddUDSP(lnet.UDSPRule{Dst: "10.0.1.[5-9]@tcp1", Rte: "10.0.0.3@tcp", Preferred: true}, -1); err != nil {
		t.Fatal(err)
	}
	send(3)
	check("preferred router", 4, 3)
	if got := a.UDSPs(); len(got) != 3 || got[2].Rte != "10.0.0.3@tcp" || !got[2].Preferred {
		t.Fatalf("UDSPs %+v", got)
	}
	if err := a.DelUDSP(2); err != nil {
		t.Fatal(err)
	}
	send(2)
	check("rule deleted", 6, 3)
}

// TestRouterResendMRForwarding: a router whose forward to the final peer
// NI fails resends the message (health resends for forwarded messages, as
// lnet_health_check with msg_routing), to another NI of that Multi-Rail
// peer since the one the originator chose is no longer alive (MR
// forwarding): every PUT arrives, the originator sees no error, and the
// router's health counters show the resends.
func TestRouterResendMRForwarding(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	l := []lnd.LND{n.LND()}
	g := noChecker()
	b1, b2 := rtB, lnetwire.MustParseNID("10.0.1.10@tcp1")
	a := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, rtA)
	r := rtNode(t, l, lnet.RouterConfig{Enabled: true}, g, lnd.Tunables{}, rtR0, rtR1)
	b := rtNode(t, l, lnet.RouterConfig{}, g, lnd.Tunables{}, b1, b2)
	addRoute(t, a, tcp1, rtR0, 1, 0)
	addRoute(t, b, tcp, rtR1, 1, 0)
	if err := r.AddPeer(lnet.PeerConfig{Primary: b1, NIDs: []lnetwire.NID{b2}}); err != nil {
		t.Fatal(err)
	}
	eqA, _ := a.EQAlloc(64, nil)
	eqB, _ := b.EQAlloc(64, nil)
	me, _ := b.MEAttach(4, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut, EQ: eqB}, lnet.Retain)
	n.SetDown(b1, true)
	const k = 5
	for i := range k {
		h, _ := a.MDBind(lnet.MD{Start: []byte("abc"), Threshold: 1, EQ: eqA}, lnet.AutoUnlink)
		if err := a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: b1, PID: b.PID()}, 4, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		if ev := poll(t, a, eqA); ev.Status != nil {
			t.Fatalf("PUT %d: %s", i, evStr(ev))
		}
		if ev := poll(t, b, eqB); ev.Type != lnet.EventPut || ev.Status != nil || ev.Target.NID != b2 || ev.Initiator.NID != rtA {
			t.Fatalf("PUT %d at B: %s", i, evStr(ev))
		}
	}
	st := r.HealthStats()
	if st.ResendCount == 0 || st.SuccessfulResends == 0 || st.FailedResends != 0 {
		t.Fatalf("router health stats %+v", st)
	}
	if rs := r.Stats(); rs.RouteCount != k {
		t.Fatalf("router forwarded %d, want %d (stats %+v)", rs.RouteCount, k, rs)
	}
}
