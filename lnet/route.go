package lnet

// Route table and gateway selection (lnet/lnet/router.c, lib-move.c
// lnet_find_route_locked; lnet-wire.md §8.3).
//
// A route says "net N is reached through gateway G (a NID on one of our
// nets), H hops away, priority P". Routes are grouped per remote net
// (remoteNet, Lustre's lnet_remotenet) and per gateway (gateway, the
// lnet_peer with lp_rtr_refcount > 0). All of it is guarded by
// Instance.mu; the router checker (rtrcheck.go) changes gateway and route
// aliveness, AddRoute/DelRoute the table.

import (
	"fmt"
	"slices"
	"time"

	"softib/wire/lnetwire"
)

// UndefinedHops is LNET_UNDEFINED_HOPS: a route added without a hop
// count. It ranks (and counts in Dist) as one hop.
const UndefinedHops = -1

// MaxHops is the largest hop count a route may have.
const MaxHops = 255

// RouteConfig is one route (lnetctl route add).
type RouteConfig struct {
	// Net is the remote network.
	Net lnetwire.Net
	// Gateway is the router's NID on one of this node's nets.
	Gateway lnetwire.NID
	// Hops is 1..255, or UndefinedHops (0 is taken as UndefinedHops).
	Hops int
	// Priority ranks routes: 0 is the highest (lower is preferred).
	Priority uint32
}

// RouteInfo is a route as lnetctl route show -v prints it.
type RouteInfo struct {
	RouteConfig
	// Alive is the route's state: the gateway is alive and, for a
	// single-hop route, advertised an NI up on Net (avoid_asym_router_failure).
	Alive bool
	// MultiHop says no ping reply of the gateway has listed an NI on Net
	// yet, or its last one listed none (route show -v "type").
	MultiHop bool
	// GatewayAlive is the gateway's own state (lp_alive).
	GatewayAlive bool
	// LastPing is when the gateway last answered a router-checker ping
	// (zero: never).
	LastPing time.Time
}

// remoteNet is lnet_remotenet: the routes to one remote net.
type remoteNet struct {
	net    lnetwire.Net
	routes []*route
}

// route is lnet_route.
type route struct {
	net       lnetwire.Net
	gw        *gateway
	hops      int // UndefinedHops or 1..255
	priority  uint32
	seq       uint64 // round-robin stamp (lr_seq)
	alive     bool   // lr_alive: from the gateway's ping reply
	singleHop bool   // the gateway's last ping reply listed an NI on net (lr_single_hop)
	gwIdx     int    // index in gw.routes, for removal in O(1)
}

// effHops is the hop count used for ranking and LNetDist.
func (r *route) effHops() int {
	if r.hops == UndefinedHops {
		return 1
	}
	return r.hops
}

// gateway is a peer used as a router by at least one route.
type gateway struct {
	nid      lnetwire.NID
	routes   []*route
	alive    bool  // lp_alive
	pinging  bool  // a router-checker ping is in flight
	nextPing int64 // ns since Instance.start
	lastPing int64 // ns since Instance.start of the last good reply; 0 never
	features uint32
}

// routeTable is the Instance's routing state for sending (as an
// endpoint or as a router choosing its next hop). Guarded by Instance.mu.
type routeTable struct {
	nets     map[lnetwire.Net]*remoteNet
	order    []lnetwire.Net // remote nets in the order first added (LNetDist order)
	gateways map[lnetwire.NID]*gateway
}

// AddRoute adds a route (lnet_add_route). It fails with ErrInvalid for
// bad arguments (gateway on the remote net, hops out of 1..255, loopback),
// ErrNetExists when net is a local net or the route exists, and
// ErrNoRoute when the gateway is not on a local net.
func (in *Instance) AddRoute(rc RouteConfig) error {
	if rc.Hops == 0 {
		rc.Hops = UndefinedHops
	}
	gwNet := rc.Gateway.Net()
	if rc.Gateway == lnetwire.NIDAny || rc.Gateway == lnetwire.NIDLo0 || rc.Gateway.Addr() == 0 ||
		rc.Net.Type() == lnetwire.LOLND || gwNet == rc.Net ||
		(rc.Hops != UndefinedHops && (rc.Hops < 1 || rc.Hops > MaxHops)) {
		return fmt.Errorf("%w: route to %v via %v hops %d", ErrInvalid, rc.Net, rc.Gateway, rc.Hops)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ErrClosed
	}
	if in.localNetLocked(rc.Net) {
		return fmt.Errorf("%w: %v is a local net", ErrNetExists, rc.Net)
	}
	if !in.localNetLocked(gwNet) {
		return fmt.Errorf("%w: gateway %v: no local NI on %v", ErrNoRoute, rc.Gateway, gwNet)
	}
	rt := &in.routes
	if rt.nets == nil {
		rt.nets = make(map[lnetwire.Net]*remoteNet)
		rt.gateways = make(map[lnetwire.NID]*gateway)
	}
	rn := rt.nets[rc.Net]
	if rn != nil && slices.ContainsFunc(rn.routes, func(r *route) bool { return r.gw.nid == rc.Gateway }) {
		return fmt.Errorf("%w: route to %v via %v", ErrNetExists, rc.Net, rc.Gateway)
	}
	if rn == nil {
		rn = &remoteNet{net: rc.Net}
		rt.nets[rc.Net] = rn
		rt.order = append(rt.order, rc.Net)
	}
	now := int64(time.Since(in.start))
	gw := rt.gateways[rc.Gateway]
	if gw == nil {
		// check_routers_before_use=0: a new gateway is assumed alive and
		// pinged at once to learn its remote nets.
		gw = &gateway{nid: rc.Gateway, alive: true, nextPing: now}
		rt.gateways[rc.Gateway] = gw
	} else {
		// A known gateway is checked again at once, so that its ping
		// reply judges the new route (lnet_add_route_to_rnet sets the
		// gateway's lpn_next_ping to now); a ping in flight judges it
		// when it returns.
		gw.nextPing = min(gw.nextPing, now)
	}
	// singleHop stays false until a ping reply shows the gateway has an
	// NI on net: Lustre's lr_single_hop starts zeroed, and route show -v
	// says "multi-hop" until then.
	r := &route{net: rc.Net, gw: gw, hops: rc.Hops, priority: rc.Priority, alive: true}
	// A newcomer starts level with the others so round robin includes it.
	for _, o := range rn.routes {
		r.seq = max(r.seq, o.seq)
	}
	rn.routes = append(rn.routes, r)
	r.gwIdx = len(gw.routes)
	gw.routes = append(gw.routes, r)
	in.kickRouterCheckerLocked()
	return nil
}

// DelRoute removes routes (lnet_del_route): the one to net via gw, every
// route via gw when net is 0, or every route to net when gw is NIDAny.
// It fails with ErrNoEnt when nothing matched. The cost is linear in the
// routes removed (plus one pass over the remote nets when several nets
// lose their last route), so emptying a table of 10,000 routes one call
// at a time is not quadratic.
func (in *Instance) DelRoute(net lnetwire.Net, gw lnetwire.NID) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	rt := &in.routes
	n, emptied := 0, 0
	delIn := func(rn *remoteNet) {
		rn.routes = slices.DeleteFunc(rn.routes, func(r *route) bool {
			if gw != lnetwire.NIDAny && r.gw.nid != gw {
				return false
			}
			n++
			r.gw.removeRoute(r)
			if len(r.gw.routes) == 0 {
				delete(rt.gateways, r.gw.nid)
			}
			return true
		})
		if len(rn.routes) == 0 {
			delete(rt.nets, rn.net)
			emptied++
		}
	}
	switch {
	case net != 0:
		if rn := rt.nets[net]; rn != nil {
			delIn(rn)
		}
	case gw != lnetwire.NIDAny:
		if g := rt.gateways[gw]; g != nil {
			for _, r := range slices.Clone(g.routes) {
				delIn(rt.nets[r.net])
			}
		}
	default:
		for _, x := range rt.order {
			delIn(rt.nets[x])
		}
	}
	switch {
	case emptied == 1 && net != 0:
		if i := slices.Index(rt.order, net); i >= 0 {
			rt.order = slices.Delete(rt.order, i, i+1)
		}
	case emptied > 0:
		rt.order = slices.DeleteFunc(rt.order, func(x lnetwire.Net) bool { return rt.nets[x] == nil })
	}
	if n == 0 {
		return ErrNoEnt
	}
	return nil
}

// removeRoute unlinks r from gw.routes (whose order does not matter).
func (gw *gateway) removeRoute(r *route) {
	last := len(gw.routes) - 1
	moved := gw.routes[last]
	gw.routes[r.gwIdx] = moved
	moved.gwIdx = r.gwIdx
	gw.routes[last] = nil
	gw.routes = gw.routes[:last]
}

// Routes lists the route table, by remote net in the order added, each
// net's routes in the order added.
func (in *Instance) Routes() []RouteInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []RouteInfo
	for _, net := range in.routes.order {
		for _, r := range in.routes.nets[net].routes {
			ri := RouteInfo{
				RouteConfig:  RouteConfig{Net: r.net, Gateway: r.gw.nid, Hops: r.hops, Priority: r.priority},
				Alive:        in.routeAliveLocked(r),
				MultiHop:     !r.singleHop,
				GatewayAlive: r.gw.alive,
			}
			if r.gw.lastPing > 0 {
				ri.LastPing = in.start.Add(time.Duration(r.gw.lastPing))
			}
			out = append(out, ri)
		}
	}
	return out
}

// localNetLocked reports whether an NI is up on net.
func (in *Instance) localNetLocked(net lnetwire.Net) bool {
	for _, ni := range in.nis {
		if ni.net() == net && !ni.down {
			return true
		}
	}
	return false
}

// routeAliveLocked is lnet_is_route_alive: the gateway is alive, we
// still have an NI on its net, and its ping reply did not say the route
// is down.
func (in *Instance) routeAliveLocked(r *route) bool {
	return r.gw.alive && r.alive && in.bestNILocked(r.gw.nid.Net()) != nil
}

// findRouteLocked is lnet_find_route_locked: among the alive routes to
// net (through a gateway on srcNet, unless srcNet is 0) pick one through
// a preferred router of the final destination dst (UDSP --dst --rte),
// then the lowest priority value, then the fewest hops, then the gateway with the fewest
// queued bytes and the most credits, then round robin. The winner's
// sequence is bumped so equals take turns.
func (in *Instance) findRouteLocked(net, srcNet lnetwire.Net, dst lnetwire.NID) *route {
	rn := in.routes.nets[net]
	if rn == nil {
		return nil
	}
	var best *route
	var bestQnob int64
	var bestCred, bestHealth int32
	var bestPref bool
	var lastSeq uint64
	for _, r := range rn.routes {
		if !in.routeAliveLocked(r) || (srcNet != 0 && r.gw.nid.Net() != srcNet) {
			continue
		}
		lastSeq = max(lastSeq, r.seq)
		health, qnob, cred := in.gatewayLoadLocked(r.gw, srcNet)
		pref := in.preferredRouterLocked(dst, r.gw) // UDSP --dst --rte
		if best != nil {
			switch {
			case pref != bestPref:
				if !pref {
					continue
				}
			case r.priority > best.priority:
				continue
			case r.priority == best.priority:
				switch {
				case r.effHops() > best.effHops():
					continue
				case r.effHops() == best.effHops():
					// lnet_compare_gw_lpnis: health, queued bytes, then
					// credits, then the route used least recently.
					if health < bestHealth || (health == bestHealth && (qnob > bestQnob ||
						(qnob == bestQnob && cred < bestCred) ||
						(qnob == bestQnob && cred == bestCred && r.seq >= best.seq))) {
						continue
					}
				}
			}
		}
		best, bestHealth, bestQnob, bestCred, bestPref = r, health, qnob, cred, pref
	}
	if best != nil {
		best.seq = lastSeq + 1
	}
	return best
}

// gatewayLoadLocked returns the health, queued bytes and free credits of
// the gateway's best peer NI on srcNet (select.go bestGatewayNILocked;
// an unused gateway: healthy, nothing queued, full credits).
func (in *Instance) gatewayLoadLocked(gw *gateway, srcNet lnetwire.Net) (int32, int64, int32) {
	if p := in.peers[in.bestGatewayNILocked(gw.nid, srcNet)]; p != nil && p.ni != nil {
		return p.health, p.txqnob, p.txCredits
	}
	if ni := in.bestNILocked(gw.nid.Net()); ni != nil {
		return MaxHealthValue, 0, int32(ni.ni.Tunables.PeerCredits)
	}
	return 0, 0, 0
}

// routeLocked picks the next hop for m to the remote net: a response
// (ACK, REPLY) goes back through the gateway its request came from when
// that is a known gateway (lnet_handle_find_routed_path with rtr_nid);
// otherwise findRouteLocked chooses. srcNet restricts the gateway's net
// (the caller fixed the local NI). It returns the gateway's NID and the
// local NI to reach it on.
func (in *Instance) routeLocked(m *message, net, srcNet lnetwire.Net) (lnetwire.NID, *netIface, error) {
	if !m.routing && m.from != 0 && m.ni != nil && !m.ni.lo && !m.ni.down && m.ni.net() == m.from.Net() {
		if gw := in.routes.gateways[m.from]; gw != nil && (srcNet == 0 || srcNet == m.from.Net()) {
			return m.from, m.ni, nil
		}
	}
	r := in.findRouteLocked(net, srcNet, m.Hdr.DestNID)
	if r == nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrNoRoute, net)
	}
	// A Multi-Rail gateway: its best NI (select.go).
	gwNID := in.bestGatewayNILocked(r.gw.nid, srcNet)
	ni := in.bestNILocked(gwNID.Net())
	if srcNet != 0 {
		ni = in.firstNIOnLocked(srcNet)
	}
	if ni == nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrNoRoute, net)
	}
	return gwNID, ni, nil
}

// firstNIOnLocked returns the first up NI on net.
func (in *Instance) firstNIOnLocked(net lnetwire.Net) *netIface {
	for _, ni := range in.nis {
		if ni.net() == net && !ni.down && ni.ready {
			return ni
		}
	}
	return nil
}

// rnetHashBits is ln_remote_nets_hbits for the default rnet_htable_size
// (128): order_base_2(128) - 1.
const rnetHashBits = 6

// rnetHash is lnet_net2rnethash's bucket index: LNetDist's order of a
// remote net counts only the nets of its own bucket.
func rnetHash(n lnetwire.Net) int {
	return (int(n.Num()) + int(n.Type())) & (1<<rnetHashBits - 1)
}

// distRouteLocked is the routed part of LNetDist: hops + 1 of the
// shortest route to net, the source NID (first NI on that route's
// gateway net) and the order: after the local NIs, the net's place in
// its hash bucket of remote nets (Lustre walks that bucket's list,
// nets in the order first added), so remote nets in different buckets
// share an order.
func (in *Instance) distRouteLocked(net lnetwire.Net, order int) (int, lnetwire.NID, int, bool) {
	h := rnetHash(net)
	for _, n := range in.routes.order {
		if n != net {
			if rnetHash(n) == h {
				order++
			}
			continue
		}
		var shortest *route
		for _, r := range in.routes.nets[n].routes {
			if shortest == nil || r.effHops() < shortest.effHops() {
				shortest = r
			}
		}
		var src lnetwire.NID
		if ni := in.firstNIOnLocked(shortest.gw.nid.Net()); ni != nil {
			src = ni.nid()
		}
		return shortest.effHops() + 1, src, order, true
	}
	return 0, 0, 0, false
}

// asymRouteLocked reports whether a message from src that arrived
// through the peer from (a router) came over a route we would not use to
// reach src's net (lnet_parse's drop_asym_route check). As in Lustre,
// where routes hang off the gateway's peer (lp_routes), a route through
// any NID of from's peer counts: a Multi-Rail router may forward from
// another of its NIDs than the one a route names.
func (in *Instance) asymRouteLocked(src, from lnetwire.NID) bool {
	// The net's few routes, not the gateway's (thousands on a big table).
	rn := in.routes.nets[src.Net()]
	if rn == nil {
		return true
	}
	lp := in.lpeerLocked(from)
	return !slices.ContainsFunc(rn.routes, func(r *route) bool {
		return r.gw.nid == from || (lp != nil && in.lpeerLocked(r.gw.nid) == lp)
	})
}
