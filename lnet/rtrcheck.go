package lnet

// Router checker (router.c lnet_check_routers, lnet_router_discovery_ping_reply,
// lnet_router_discovery_complete; lnet_notify for gateways).
//
// Every gateway is pinged (an ordinary LNet ping: GET on the reserved
// portal) every Globals.LiveRouterCheckInterval while alive and every
// DeadRouterCheckInterval while dead, waiting RouterPingTimeout for the
// reply. No reply: the gateway and its routes are down. A reply: the
// gateway is alive; a reply with the RTE_DISABLED feature bit makes all
// its routes down (it does not forward); otherwise a route whose gateway
// listed an NI on the route's net (single hop) is up only if one of those
// NIs has status UP, and a route through a gateway without an NI on the
// net (multi-hop) is up (avoid_asym_router_failure=1).
//
// Between pings the LNDs' connection news (NotifyPeer) also move a
// gateway: a failed connection marks it dead at once (auto_down), so its
// routes are not chosen until a ping answers again; an established one
// marks it alive. Received messages the gateway forwarded mark it alive.
//
// One timer, reset to the earliest due ping, drives it; each ping runs on
// its own goroutine. State changes happen under Instance.mu.

import (
	"context"
	"sync"
	"time"

	"softib/wire/lnetwire"
)

// rtrChecker is the pinger's scheduling state. Guarded by Instance.mu
// except ctx/cancel (set in New) and wg.
type rtrChecker struct {
	timer  *time.Timer
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // pings in flight
}

// kickRouterCheckerLocked (re)arms the timer for the earliest gateway
// ping due.
func (in *Instance) kickRouterCheckerLocked() {
	if in.closed || in.rc.ctx == nil || in.globals.LiveRouterCheckInterval < 0 {
		return
	}
	next := int64(-1)
	for _, gw := range in.routes.gateways {
		if gw.pinging {
			continue
		}
		if next < 0 || gw.nextPing < next {
			next = gw.nextPing
		}
	}
	if next < 0 {
		return
	}
	delay := max(0, time.Duration(next-int64(time.Since(in.start))))
	if in.rc.timer == nil {
		in.rc.timer = time.AfterFunc(delay, in.checkRouters)
		return
	}
	in.rc.timer.Reset(delay)
}

// checkRouters starts the pings that are due (lnet_check_routers).
func (in *Instance) checkRouters() {
	in.mu.Lock()
	if in.closed || in.globals.LiveRouterCheckInterval < 0 {
		in.mu.Unlock()
		return
	}
	now := int64(time.Since(in.start))
	var due []lnetwire.NID
	for _, gw := range in.routes.gateways {
		if !gw.pinging && gw.nextPing <= now {
			gw.pinging = true
			due = append(due, gw.nid)
		}
	}
	timeout := in.globals.RouterPingTimeout
	ctx := in.rc.ctx
	in.rc.wg.Add(len(due))
	in.kickRouterCheckerLocked()
	in.mu.Unlock()
	for _, nid := range due {
		go in.pingGateway(ctx, nid, timeout)
	}
}

// pingGateway pings one gateway and records the outcome.
func (in *Instance) pingGateway(ctx context.Context, nid lnetwire.NID, timeout time.Duration) {
	defer in.rc.wg.Done()
	res, err := in.Ping(ctx, lnetwire.ProcessID{NID: nid, PID: lnetwire.PIDLustre}, timeout)
	in.mu.Lock()
	defer in.mu.Unlock()
	gw := in.routes.gateways[nid]
	if gw == nil || in.closed {
		return
	}
	gw.pinging = false
	in.gatewayPingedLocked(gw, res, err)
	in.kickRouterCheckerLocked()
}

// gatewayPingedLocked applies a router-checker ping outcome.
func (in *Instance) gatewayPingedLocked(gw *gateway, res PingResult, err error) {
	now := int64(time.Since(in.start))
	if err != nil {
		if gw.alive {
			in.log.Warn("lnet: gateway down", "gateway", gw.nid, "err", err)
		}
		gw.alive = false
		for _, r := range gw.routes {
			r.alive = false
		}
		gw.nextPing = now + int64(in.globals.DeadRouterCheckInterval)
		return
	}
	if !gw.alive {
		in.log.Info("lnet: gateway up", "gateway", gw.nid)
	}
	gw.alive = true
	gw.lastPing = now
	gw.nextPing = now + int64(in.globals.LiveRouterCheckInterval)
	in.judgeRoutesLocked(gw, res.Features, res.NIDs)
}

// judgeRoutesLocked sets the state of gw's routes from its ping buffer
// (a ping reply or a push: lnet_router_discovery_ping_reply): all down
// when it says routing is off (RTE_DISABLED); a single-hop route up only
// when the buffer lists an NI on the route's net as up
// (avoid_asym_router_failure); a multi-hop one up.
func (in *Instance) judgeRoutesLocked(gw *gateway, features uint32, nids []lnetwire.PingNI) {
	gw.features = features
	if features&lnetwire.PingFeatRteDisabled != 0 {
		// "being used as a gateway but routing feature is not turned on"
		for _, r := range gw.routes {
			r.alive = false
		}
		return
	}
	for _, r := range gw.routes {
		single, up := false, false
		for _, e := range nids {
			if e.NID.Net() == r.net {
				single = true
				if e.Status == lnetwire.PingStatusUp {
					up = true
					break
				}
			}
		}
		r.singleHop = single
		if r.hops == 1 || single {
			r.alive = up
		} else {
			r.alive = true
		}
	}
}

// forwardedFromLocked applies a received message whose source is on
// another net than from, the node that sent it to us: from forwarded it,
// so if from is a gateway of ours it is alive (lnet_parse, for messages
// to us and to forward alike). When discovery is off here or on the
// gateway (not Multi-Rail, or no DISCOVERY bit in its last ping reply:
// lnet_is_discovery_disabled) its routes to the source's net are up again
// at once; otherwise they wait for its next ping reply.
func (in *Instance) forwardedFromLocked(from lnetwire.NID, srcNet lnetwire.Net) {
	gw := in.routes.gateways[from]
	if gw == nil || gw.alive {
		return
	}
	gw.alive = true
	in.log.Info("lnet: gateway up (it forwarded a message)", "gateway", from)
	if in.disc.off || gw.features&lnetwire.PingFeatMultiRail == 0 || gw.features&lnetwire.PingFeatDiscovery == 0 {
		for _, r := range gw.routes {
			if r.net == srcNet {
				r.alive = true
			}
		}
	}
}

// notifyGatewayLocked applies an LND's news about a peer NI that is a
// gateway (lnet_notify with reset): dead at once, alive again when a
// connection is made; a dead gateway is pinged after
// DeadRouterCheckInterval at the latest.
func (in *Instance) notifyGatewayLocked(nid lnetwire.NID, alive bool) {
	gw := in.routes.gateways[nid]
	if gw == nil || gw.alive == alive {
		return
	}
	gw.alive = alive
	if !alive {
		in.log.Warn("lnet: gateway down (LND)", "gateway", nid)
		gw.nextPing = min(gw.nextPing, int64(time.Since(in.start))+int64(in.globals.DeadRouterCheckInterval))
		in.kickRouterCheckerLocked()
	}
}
