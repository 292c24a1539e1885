package lnet

import (
	"testing"
	"time"

	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// TestForwardedRevivesGateway: a message a dead gateway forwards to us,
// or through us to the next hop, makes it alive (lnet_parse); with
// discovery off here its routes to the message's source net come back
// at once, with discovery on (and a Multi-Rail, discovering gateway)
// they wait for its next ping reply. A - R - B - C on tcp, tcp1, tcp2;
// R and B route; no router checker runs, so only the messages decide.
func TestForwardedRevivesGateway(t *testing.T) {
	var (
		a, r0, r1    = lnetwire.MustParseNID("10.3.0.1@tcp"), lnetwire.MustParseNID("10.3.0.2@tcp"), lnetwire.MustParseNID("10.3.1.2@tcp1")
		b1, b2, cNID = lnetwire.MustParseNID("10.3.1.3@tcp1"), lnetwire.MustParseNID("10.3.2.3@tcp2"), lnetwire.MustParseNID("10.3.2.9@tcp2")
	)
	n := lndtest.New(lnetwire.SOCKLND)
	g := DefaultGlobals()
	g.LiveRouterCheckInterval = -1
	node := func(router bool, nids ...lnetwire.NID) *Instance {
		cfg := Config{LNDs: []lnd.LND{n.LND()}, Router: RouterConfig{Enabled: router}, Globals: g}
		for _, nid := range nids {
			cfg.Nets = append(cfg.Nets, NetConfig{Net: nid.Net(), Addr: nid.Addr()})
		}
		in, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		in.SetDiscovery(false)
		return in
	}
	inA, inR, inB, inC := node(false, a), node(true, r0, r1), node(true, b1, b2), node(false, cNID)
	route := func(in *Instance, net string, gw lnetwire.NID) {
		t.Helper()
		nt, err := lnetwire.ParseNet(net)
		if err != nil {
			t.Fatal(err)
		}
		if err := in.AddRoute(RouteConfig{Net: nt, Gateway: gw, Hops: 1}); err != nil {
			t.Fatal(err)
		}
	}
	route(inA, "tcp1", r0)
	route(inA, "tcp2", r0)
	route(inR, "tcp2", b1)
	route(inB, "tcp", r1)
	route(inC, "tcp", b2)
	route(inC, "tcp1", b2)
	sink := func(in *Instance) *EQ {
		eq, _ := in.EQAlloc(64, nil)
		me, _ := in.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), Retain, InsAfter)
		in.MDAttach(me, MD{Start: make([]byte, 8), Threshold: ThreshInf, Options: MDOpPut, EQ: eq}, Retain)
		return eq
	}
	eqB, eqC := sink(inB), sink(inC)
	// kill marks B's gateway R1 dead with its routes, as a failed ping
	// would; features are those of its last ping reply.
	kill := func(features uint32) {
		inB.mu.Lock()
		gw := inB.routes.gateways[r1]
		gw.alive, gw.features = false, features
		for _, rt := range gw.routes {
			rt.alive = false
		}
		inB.mu.Unlock()
	}
	state := func() (gwAlive, routeAlive bool) {
		for _, ri := range inB.Routes() {
			if ri.Gateway == r1 {
				return ri.GatewayAlive, ri.Alive
			}
		}
		t.Fatal("B has no route through R1")
		return
	}
	send := func(to lnetwire.NID, pid lnetwire.PID, eq *EQ, in *Instance) {
		t.Helper()
		h, _ := inA.MDBind(MD{Start: []byte("x"), Threshold: 1}, AutoUnlink)
		if err := inA.Put(lnetwire.NIDAny, h, AckReqNo, lnetwire.ProcessID{NID: to, PID: pid}, 5, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		ev, _, err := in.EQPoll([]*EQ{eq}, 10*time.Second)
		if err != nil || ev.Type != EventPut {
			t.Fatalf("PUT to %v: %v %v", to, ev.Type, err)
		}
	}
	for _, c := range []struct {
		name      string
		discOn    bool
		features  uint32
		to        lnetwire.NID
		wantRoute bool
	}{
		{"to B, discovery off", false, 0, b1, true},
		{"through B to C, discovery off", false, 0, cNID, true},
		{"to B, discovery on, gateway discovering", true, lnetwire.PingFeatMultiRail | lnetwire.PingFeatDiscovery, b1, false},
		{"to B, discovery on, gateway not discovering", true, lnetwire.PingFeatMultiRail, b1, true},
		{"through B to C, discovery on, gateway discovering", true, lnetwire.PingFeatMultiRail | lnetwire.PingFeatDiscovery, cNID, false},
	} {
		inB.mu.Lock()
		inB.disc.off = !c.discOn
		inB.mu.Unlock()
		kill(c.features)
		if gw, rt := state(); gw || rt {
			t.Fatalf("%s: R1 not dead before the message (gateway %v, route %v)", c.name, gw, rt)
		}
		if c.to == cNID {
			send(c.to, inC.PID(), eqC, inC)
		} else {
			send(c.to, inB.PID(), eqB, inB)
		}
		if gw, rt := state(); !gw || rt != c.wantRoute {
			t.Errorf("%s: after R1 forwarded a message: gateway alive %v (want true), route to tcp alive %v (want %v)", c.name, gw, rt, c.wantRoute)
		}
	}
}

// TestGatewayPushJudgesRoutes: a push from a gateway judges its routes
// at once, as its ping reply would (lnet_peer_merge_data calls the router
// callback for both): a single-hop route follows the status of the
// gateway's NI on the route's net, RTE_DISABLED takes every route down.
func TestGatewayPushJudgesRoutes(t *testing.T) {
	a := lnetwire.MustParseNID("10.4.0.1@tcp")
	r0, r1 := lnetwire.MustParseNID("10.4.0.2@tcp"), lnetwire.MustParseNID("10.4.1.2@tcp1")
	g := DefaultGlobals()
	g.LiveRouterCheckInterval = -1 // no pings: only the pushes decide
	in, err := New(Config{LNDs: []lnd.LND{lndtest.New(lnetwire.SOCKLND).LND()}, Globals: g,
		Nets: []NetConfig{{Net: a.Net(), Addr: a.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	tcp1, tcp7 := r1.Net(), lnetwire.MustParseNID("10.4.7.2@tcp7").Net()
	for _, net := range []lnetwire.Net{tcp1, tcp7} {
		if err := in.AddRoute(RouteConfig{Net: net, Gateway: r0, Hops: 1}); err != nil {
			t.Fatal(err)
		}
	}
	seq := uint32(1)
	push := func(features, tcp1Status uint32) {
		seq++
		info := lnetwire.PingInfo{Features: lnetwire.PingFeatBase | lnetwire.PingFeatNIStatus | lnetwire.PingFeatMultiRail | lnetwire.PingFeatDiscovery | features,
			PID: 12345, NIs: []lnetwire.PingNI{{NID: lnetwire.NIDLo0, Status: seq}, {NID: r0, Status: lnetwire.PingStatusUp}, {NID: r1, Status: tcp1Status}}}
		in.pushReceived(lnetwire.ProcessID{NID: r0, PID: 12345}, info.Append(nil), false)
	}
	alive := func() map[lnetwire.Net]bool {
		m := map[lnetwire.Net]bool{}
		for _, ri := range in.Routes() {
			m[ri.Net] = ri.Alive
		}
		return m
	}
	for _, c := range []struct {
		name         string
		features     uint32
		tcp1         uint32
		want1, want7 bool
	}{
		{"tcp1 NI up", 0, lnetwire.PingStatusUp, true, false},
		{"tcp1 NI down", 0, lnetwire.PingStatusDown, false, false},
		{"tcp1 NI up again", 0, lnetwire.PingStatusUp, true, false},
		{"routing disabled", lnetwire.PingFeatRteDisabled, lnetwire.PingStatusUp, false, false},
		{"routing enabled", 0, lnetwire.PingStatusUp, true, false},
	} {
		push(c.features, c.tcp1)
		if got := alive(); got[tcp1] != c.want1 || got[tcp7] != c.want7 {
			t.Errorf("after a push with %s: route to tcp1 alive %v (want %v), to tcp7 %v (want %v)", c.name, got[tcp1], c.want1, got[tcp7], c.want7)
		}
	}
}
