package lnet

// Forwarding (lnet/lnet/lib-move.c lnet_parse_forward_locked,
// lnet_post_routed_recv_locked, lnet_return_rx_credits_locked;
// router.c buffer pools; lnet-wire.md §8.3).
//
//	Driver ──► ni.Parse (not for us, routing on)
//	           │ take a router credit of the sending peer NI
//	           │   (peer_buffer_credits; short: wait FIFO on the peer's rtrq)
//	           │ take a buffer credit of the pool sized for the payload
//	           │   (tiny 0 B, small 1 page, large 1 MiB; short: wait FIFO on
//	           │   the pool)
//	           ▼
//	         Driver.Recv into the router buffer ──► ni.Finalize ──►
//	         finalize: pick the next hop (a peer on a local net, or the next
//	         gateway), keep the header's src/dest, send with tx credits
//	           ──► Driver.Send ──► ni.Finalize ──► finalize: return tx
//	         credits, then the buffer and the router credit (each release
//	         posts the next waiter), route_count/route_length
//
// Messages waiting for router credits or buffers hold the LND's receive
// context; an LND with EagerRecv is given the chance to free its receive
// buffer first. Nothing is dropped for lack of buffers: it waits.
//
// The pools are one CPU partition (softib has no CPTs): their sizes are
// Lustre's totals. Buffers are allocated when first needed and kept for
// reuse, so an idle router holds no payload memory.

import (
	"fmt"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Router buffer pool defaults (router.c LNET_NRB_*): totals of all CPTs.
const (
	DefaultTinyRouterBuffers  = 2048
	DefaultSmallRouterBuffers = 16384
	DefaultLargeRouterBuffers = 1024
	// rtrPageSize is PAGE_SIZE: a small buffer holds one page.
	rtrPageSize = 4096
)

// Router pool indexes (LNET_TINY_BUF_IDX...).
const (
	poolTiny = iota
	poolSmall
	poolLarge
	nPools
)

var poolNames = [nPools]string{"tiny", "small", "large"}

// RouterConfig is the router's configuration (lnetctl set routing,
// tiny_buffers, small_buffers, large_buffers; the lnet module's
// tiny_router_buffers, small_router_buffers, large_router_buffers).
type RouterConfig struct {
	// Enabled turns forwarding on (routing: enable).
	Enabled bool
	// TinyBuffers, SmallBuffers and LargeBuffers size the pools; 0 takes
	// Lustre's defaults (2048, 16384, 1024).
	TinyBuffers, SmallBuffers, LargeBuffers int
}

func (rc RouterConfig) withDefaults() RouterConfig {
	if rc.TinyBuffers <= 0 {
		rc.TinyBuffers = DefaultTinyRouterBuffers
	}
	if rc.SmallBuffers <= 0 {
		rc.SmallBuffers = DefaultSmallRouterBuffers
	}
	if rc.LargeBuffers <= 0 {
		rc.LargeBuffers = DefaultLargeRouterBuffers
	}
	return rc
}

// PoolInfo is one router buffer pool (lnetctl routing show: npages,
// nbuffers, credits, mincredits).
type PoolInfo struct {
	Name       string // "tiny", "small", "large"
	NPages     int
	NBuffers   int
	Credits    int // free buffers; negative: messages waiting
	MinCredits int // low-water mark
	Queued     int // messages waiting for a buffer
}

// rtrPool is lnet_rtrbufpool.
type rtrPool struct {
	npages     int
	nbuffers   int
	credits    int
	minCredits int
	msgs       msgQueue // waiting for a buffer
	free       [][]byte // buffers kept for reuse
}

func (p *rtrPool) size() int { return p.npages * rtrPageSize }

// routerState is the forwarding side. Guarded by Instance.mu.
type routerState struct {
	cfg   RouterConfig // with defaults applied
	on    bool
	pools [nPools]rtrPool
	// statusTimer runs updateNIStatus every second while routing is on.
	statusTimer *time.Timer
}

func (rs *routerState) init(rc RouterConfig) {
	rs.cfg = rc.withDefaults()
	rs.pools[poolTiny].npages = 0
	rs.pools[poolSmall].npages = 1
	rs.pools[poolLarge].npages = (MTU + rtrPageSize - 1) / rtrPageSize
	n := [nPools]int{rs.cfg.TinyBuffers, rs.cfg.SmallBuffers, rs.cfg.LargeBuffers}
	for i := range rs.pools {
		p := &rs.pools[i]
		p.nbuffers, p.credits, p.minCredits = n[i], n[i], n[i]
	}
	rs.on = rc.Enabled
}

// poolFor is lnet_msg2bufpool: the smallest pool whose buffers hold n.
func (rs *routerState) poolFor(n int) int {
	for i := range rs.pools {
		if n <= rs.pools[i].size() {
			return i
		}
	}
	return poolLarge
}

// SetRouter changes the router configuration at run time (lnetctl set
// routing / *_buffers). Growing a pool lets waiting messages go at once;
// shrinking it lets buffers in use drain. Turning routing off drops the
// messages waiting for router buffers or credits (as Lustre does) and
// makes later ones be dropped; messages already forwarding complete.
func (in *Instance) SetRouter(rc RouterConfig) {
	rc = rc.withDefaults()
	var ps pendings
	var dropped msgQueue
	in.mu.Lock()
	rs := &in.router
	n := [nPools]int{rc.TinyBuffers, rc.SmallBuffers, rc.LargeBuffers}
	for i := range rs.pools {
		p := &rs.pools[i]
		delta := n[i] - p.nbuffers
		p.nbuffers = n[i]
		p.credits += delta
		if delta > 0 {
			// lnet_rtrpool_adjust_bufs restarts the low-water mark
			// of a pool it adds buffers to.
			p.minCredits = p.credits
		} else {
			p.minCredits = min(p.minCredits, p.credits)
		}
		for ; delta > 0 && p.msgs.n > 0; delta-- {
			m := p.msgs.pop()
			in.grantBufferLocked(m, p)
			addRecvLocked(&ps, m)
		}
		if len(p.free) > p.nbuffers {
			p.free = p.free[:p.nbuffers]
		}
	}
	wasOn := rs.on
	rs.cfg = rc
	rs.on = rc.Enabled
	if wasOn && !rs.on {
		for i := range rs.pools {
			p := &rs.pools[i]
			for m := p.msgs.pop(); m != nil; m = p.msgs.pop() {
				m.rxNI.calls.Add(1)
				dropped.push(m)
			}
		}
		for _, p := range in.peers {
			for m := p.rtrq.pop(); m != nil; m = p.rtrq.pop() {
				m.rxNI.calls.Add(1)
				dropped.push(m)
			}
		}
	}
	if wasOn != rs.on {
		if rs.on {
			in.startNIStatusLocked()
		} else {
			for _, ni := range in.nis {
				ni.statusDown = false
			}
		}
		in.updatePingLocked()
	}
	in.mu.Unlock()
	in.runPending(&ps)
	in.dropRouted(&dropped, ErrDropped)
}

// Router returns the router configuration.
func (in *Instance) Router() RouterConfig {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.router.cfg
}

// RouterPools returns the buffer pools (lnetctl routing show).
func (in *Instance) RouterPools() []PoolInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]PoolInfo, nPools)
	for i := range in.router.pools {
		p := &in.router.pools[i]
		out[i] = PoolInfo{Name: poolNames[i], NPages: p.npages, NBuffers: p.nbuffers,
			Credits: p.credits, MinCredits: p.minCredits, Queued: p.msgs.n}
	}
	return out
}

// peerBufferCreditsOf is lnet_peer_buffer_credits: the NI's
// peer_buffer_credits tunable, else its peer_credits.
func peerBufferCreditsOf(ni *netIface) int32 {
	if c := ni.ni.Tunables.PeerBufferCredits; c > 0 {
		return int32(c)
	}
	return int32(ni.ni.Tunables.PeerCredits)
}

// parseForwardLocked takes a message that is not for this node
// (lnet_parse, !for_me, routing on) and unlocks. It never fails: from
// here Recv is always called for private.
func (in *Instance) parseForwardLocked(ni *netIface, hdr *lnetwire.Header, from lnetwire.NID, private any, rdmaReq bool) {
	m := in.allocMsgLocked()
	m.rx = true
	m.routing = true
	m.ni = ni
	m.rxNI = ni
	m.from = from
	m.private = private
	m.rdmaReq = rdmaReq
	m.Hdr = *hdr
	m.Type = hdr.Type
	m.Msg.Target = lnetwire.ProcessID{NID: hdr.DestNID, PID: hdr.DestPID}
	p := in.peerLocked(from, ni)
	p.refs++
	m.rxPeer = p
	m.rtrPool = in.router.poolFor(int(hdr.PayloadLength))

	// Short of a credit: let the LND free its receive buffer before the
	// message waits (lnet_ni_eager_recv).
	if p.rtrCredits <= 0 || in.router.pools[m.rtrPool].credits <= 0 {
		if er, ok := ni.drv.(lnd.EagerReceiver); ok {
			// The call count stays taken until m is queued or dropped, so
			// the NI cannot finish shutting down in between.
			ni.calls.Add(1)
			in.mu.Unlock()
			np, err := er.EagerRecv(m.private, &m.Msg)
			in.mu.Lock()
			if err == nil {
				m.private = np
				m.rxDelayed = true
			}
			if err != nil || ni.down {
				in.stats.DropCount++
				in.stats.DropLength += uint64(hdr.PayloadLength)
				ni.dropCount++
				in.releaseRxPeerLocked(m)
				private := m.private
				in.freeMsgLocked(m)
				in.mu.Unlock()
				in.dropRx(ni, private, int(hdr.PayloadLength)) // ends the call
				return
			}
			ni.calls.Done() // ni is not down and mu is held: stopNI will find m
		}
	}
	if !in.routedRecvLocked(m) {
		in.mu.Unlock()
		return
	}
	ni.calls.Add(1)
	in.mu.Unlock()
	in.recvRouted(m)
}

// routedRecvLocked is lnet_post_routed_recv_locked: take the sending
// peer's router credit, then a buffer credit; false means m waits on a
// queue, true that it has a buffer and may be received now.
func (in *Instance) routedRecvLocked(m *message) bool {
	p := m.rxPeer
	if !m.peerRtrCredit {
		m.peerRtrCredit = true
		p.rtrCredits--
		p.minRtrCredits = min(p.minRtrCredits, p.rtrCredits)
		if p.rtrCredits < 0 {
			m.rxDelayed = true
			p.rtrq.push(m)
			return false
		}
	}
	pool := &in.router.pools[m.rtrPool]
	if !m.rtrCredit {
		m.rtrCredit = true
		pool.credits--
		pool.minCredits = min(pool.minCredits, pool.credits)
		if pool.credits < 0 {
			m.rxDelayed = true
			pool.msgs.push(m)
			return false
		}
	}
	in.grantBufferLocked(m, pool)
	return true
}

// grantBufferLocked hands m a buffer of pool (its credit is taken).
func (in *Instance) grantBufferLocked(m *message, pool *rtrPool) {
	n := int(m.Hdr.PayloadLength)
	if n == 0 {
		m.rtrBuf = nil
		return
	}
	var b []byte
	if k := len(pool.free); k > 0 {
		b = pool.free[k-1]
		pool.free[k-1] = nil
		pool.free = pool.free[:k-1]
	} else {
		b = make([]byte, pool.size())
	}
	m.rtrBuf = b
}

// payloadKeeper is an LND that can leave a forwarded payload in kernel
// memory (socklnd: a pipe filled by splice(2)) instead of copying it into
// the router buffer, and send it from there on its own NIs, so that the
// router copies no payload byte (Lustre's ksocklnd copies once, into the
// router buffer's pages, and sends those pages without copying). The
// kept payload rides in lnd.Msg.LNDPrivate from the receiving driver to
// the sending one; the message still holds its router buffer and
// credits, so pools, credits and queueing are unchanged.
type payloadKeeper interface {
	// RecvKept is Recv that may keep the payload rather than fill dst.
	RecvKept(private any, msg *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error
	// KeepsFor reports whether tx can send a payload this driver kept.
	KeepsFor(tx lnd.Driver) bool
	// Materialize copies a kept payload into dst and frees it (no-op
	// when msg has none).
	Materialize(msg *lnd.Msg, dst lnd.IOV) error
	// ReleaseKept frees a kept payload that was not sent (no-op when
	// msg has none).
	ReleaseKept(msg *lnd.Msg)
}

// keepMinPayload is the smallest forwarded payload offered to a
// payloadKeeper (socklnd applies its own threshold too).
const keepMinPayload = 64 << 10

// recvRouted receives m's payload into its router buffer (lnet_ni_recv);
// the caller did m.rxNI.calls.Add(1).
func (in *Instance) recvRouted(m *message) {
	ni := m.rxNI
	n := int(m.Hdr.PayloadLength)
	var dst lnd.IOV
	if n > 0 {
		m.rtrFrag[0] = m.rtrBuf[:n]
		dst = lnd.IOV{Frags: m.rtrFrag[:], Len: n}
	}
	var err error
	if k, ok := ni.drv.(payloadKeeper); ok && n >= keepMinPayload && in.keepsFor(m, k) {
		err = k.RecvKept(m.private, &m.Msg, m.rxDelayed, dst, n)
	} else {
		err = ni.drv.Recv(m.private, &m.Msg, m.rxDelayed, dst, n)
	}
	ni.calls.Done()
	if err != nil {
		in.finalize(m, err)
	}
}

// keepsFor predicts whether the NI that will send m on can take the
// payload as k keeps it: the first NI on the destination's net, or on
// the gateway's net of the first live route to it. A wrong guess costs a
// copy (forwardLocked materializes), never a wrong payload.
func (in *Instance) keepsFor(m *message, k payloadKeeper) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	net := m.Hdr.DestNID.Net()
	ni := in.firstNIOnLocked(net)
	if ni == nil {
		if rn := in.routes.nets[net]; rn != nil {
			for _, r := range rn.routes {
				if in.routeAliveLocked(r) {
					ni = in.firstNIOnLocked(r.gw.nid.Net())
					break
				}
			}
		}
	}
	return ni != nil && k.KeepsFor(ni.drv)
}

// materializeLocked copies a payload the receiving LND kept into the
// router buffer when the NI chosen to send it on cannot take it as kept
// (a route changed since keepsFor guessed). Rare: the copy under the
// lock is the receive copy a kept payload saved.
func (in *Instance) materializeLocked(m *message, tx *netIface) error {
	if m.Msg.LNDPrivate == nil {
		return nil
	}
	k, ok := m.rxNI.drv.(payloadKeeper)
	if !ok || k.KeepsFor(tx.drv) {
		return nil
	}
	return k.Materialize(&m.Msg, m.Payload)
}

// forwardLocked turns a routed message whose payload has arrived into
// its send to the next hop (lnet_send with msg_routing set): a peer on
// the destination's net if we have one, else the best gateway. The
// header keeps the originator's source and the final destination.
func (in *Instance) forwardLocked(m *message) (sendResult, error) {
	n := int(m.Hdr.PayloadLength)
	m.rx = false
	m.Payload = lnd.IOV{}
	if n > 0 {
		m.Payload = lnd.IOV{Frags: m.rtrFrag[:], Len: n}
	}
	m.Sink = lnd.IOV{} // a forwarded GET's reply comes back as a message
	dst := m.Hdr.DestNID
	m.ni = nil
	if in.byNID[dst] != nil || dst == lnetwire.NIDLo0 {
		return sendFail, fmt.Errorf("%w: forwarding to local %v", ErrInvalid, dst)
	}
	if m.retries == 0 {
		m.deadline = in.nowNS() + int64(in.globals.TransactionTimeout)
	}
	nextHop := dst
	ni := in.bestNILocked(dst.Net())
	if ni != nil {
		if p, pni := in.mrForwardLocked(dst); p != nil {
			// The originator's choice is not alive: another NI of
			// the same Multi-Rail peer (Lustre's MR forwarding).
			dst, ni = p.nid, pni
			m.Hdr.DestNID = dst
			nextHop = dst
		}
	}
	if ni == nil {
		gw, gni, err := in.routeLocked(m, dst.Net(), 0)
		if err != nil {
			m.dropped = true
			return sendFail, err
		}
		nextHop, ni = gw, gni
	}
	if err := in.materializeLocked(m, ni); err != nil {
		m.dropped = true
		return sendFail, err
	}
	m.ni = ni
	m.peer = in.peerLocked(nextHop, ni)
	m.peer.refs++
	// lnet_handle_send's round robin counts forwarded sends too, so a
	// router spreads them over its NIs on the next hop's net.
	in.bumpSeqLocked(m.peer, ni)
	pid := m.Hdr.DestPID
	if nextHop != dst {
		pid = lnetwire.PIDLustre // msg_target_is_router
	}
	m.Msg.Target = lnetwire.ProcessID{NID: nextHop, PID: pid}
	return in.postSendLocked(m)
}

// mrForwardLocked is lnet_select_pathway's mr_forwarding_allowed for the
// final hop of a forwarded message: when the peer NI the originator chose
// (dst, on one of our nets) belongs to a Multi-Rail peer and is not alive
// (health below the maximum, router_sensitivity 100%, or reported down
// in its ping buffer), it returns the peer's best other NI on a local net
// and our NI to it. nil: keep dst.
func (in *Instance) mrForwardLocked(dst lnetwire.NID) (*peer, *netIface) {
	p := in.peers[dst]
	if p == nil || p.lp == nil || !p.lp.isMR() || (p.health >= MaxHealthValue && p.nsStatus != lnetwire.PingStatusDown) {
		return nil, nil
	}
	pn := in.bestLocalPeerNetLocked(p.lp)
	if pn == nil {
		return nil, nil
	}
	ni := in.bestNILocked(pn.net)
	best := bestPeerNI(pn, ni)
	if ni == nil || best == nil || best == p {
		return nil, nil
	}
	return best, ni
}

// fwdResendable reports whether a forwarded message whose send failed
// can be sent again: its payload is in our router buffer (or it has
// none), not kept by the receiving LND, whose kept bytes a failed send
// may have consumed.
func (m *message) fwdResendable() bool {
	return m.routing && !m.rx && m.Msg.LNDPrivate == nil && (m.rtrBuf != nil || m.Hdr.PayloadLength == 0)
}

// returnRxCreditsLocked is lnet_return_rx_credits_locked: give back m's
// buffer and router credit, posting the next waiter of each queue; the
// released messages are added to out for recvRouted.
func (in *Instance) returnRxCreditsLocked(m *message, out *pendings) {
	if m.Msg.LNDPrivate != nil && m.rxNI != nil {
		// Not sent from where the receiving LND kept it (dropped).
		if k, ok := m.rxNI.drv.(payloadKeeper); ok {
			k.ReleaseKept(&m.Msg)
		}
	}
	if m.rtrCredit {
		m.rtrCredit = false
		pool := &in.router.pools[m.rtrPool]
		if m.rtrBuf != nil {
			if len(pool.free) < min(pool.nbuffers, maxCachedRtrBufs(m.rtrPool)) {
				pool.free = append(pool.free, m.rtrBuf)
			}
			m.rtrBuf = nil
		}
		pool.credits++
		if pool.credits <= 0 {
			if next := pool.msgs.pop(); next != nil {
				in.grantBufferLocked(next, pool)
				addRecvLocked(out, next)
			}
		}
	}
	if m.peerRtrCredit {
		m.peerRtrCredit = false
		p := m.rxPeer
		p.rtrCredits++
		if next := p.rtrq.pop(); next != nil {
			if in.routedRecvLocked(next) {
				addRecvLocked(out, next)
			}
		}
	}
	in.releaseRxPeerLocked(m)
}

// addRecvLocked queues a routed message that got its buffer for
// recvRouted after unlocking.
func addRecvLocked(out *pendings, m *message) {
	m.rxNI.calls.Add(1)
	out.add(pending{m: m, recv: true})
}

// maxCachedRtrBufs bounds the idle buffers a pool keeps (1 MiB each for
// the large pool).
func maxCachedRtrBufs(pool int) int {
	if pool == poolLarge {
		return 64
	}
	return 1024
}

// releaseRxPeerLocked drops m's reference on the peer it came from.
func (in *Instance) releaseRxPeerLocked(m *message) {
	if m.rxPeer != nil {
		m.rxPeer.refs--
		m.rxPeer = nil
	}
}

// dropRouted drops messages taken off router queues
// (lnet_drop_routed_msgs_locked): the LND discards each payload, and the
// message is finalized. The caller took m.rxNI.calls.Add(1) for each.
func (in *Instance) dropRouted(q *msgQueue, status error) {
	for m := q.pop(); m != nil; m = q.pop() {
		ni, private, rlen := m.rxNI, m.private, int(m.Hdr.PayloadLength)
		m.dropped = true
		_ = ni.drv.Recv(private, nil, true, lnd.IOV{}, rlen)
		ni.calls.Done()
		in.finalize(m, status)
	}
}

// niStatusPeriod is how often a router re-judges its NIs' status (the
// router checker's one-second tick).
const niStatusPeriod = time.Second

// startNIStatusLocked starts the NI status tick of a router: every NI
// counts as just pinged.
func (in *Instance) startNIStatusLocked() {
	now := int64(time.Since(in.start))
	for _, ni := range in.nis {
		ni.lastPinged = now
	}
	if in.router.statusTimer == nil {
		in.router.statusTimer = time.AfterFunc(niStatusPeriod, in.updateNIStatus)
		return
	}
	in.router.statusTimer.Reset(niStatusPeriod)
}

// updateNIStatus is lnet_update_ni_status_locked: a router reports the
// NIs of a net down in its ping replies when no other node pinged any NI
// of that net for RouterPingTimeout + LiveRouterCheckInterval (its peers'
// router checkers ping every live interval; Lustre keeps the time per
// net, net_last_alive), so that their routes through it to that net go
// down (avoid_asym_router_failure). A ping arriving on an NI marks that
// NI up again (pingedLocked).
func (in *Instance) updateNIStatus() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || !in.router.on {
		return
	}
	g := in.globals
	if g.LiveRouterCheckInterval > 0 {
		limit := int64(time.Since(in.start)) - int64(g.RouterPingTimeout+g.LiveRouterCheckInterval)
		changed := false
		for _, ni := range in.nis {
			if ni.lo || ni.statusDown || ni.lastPinged >= limit || in.netPingedSinceLocked(ni.net(), limit) {
				continue
			}
			ni.statusDown = true
			changed = true
			in.log.Warn("lnet: no ping on NI for the router checker's time: reporting it down", "ni", ni.nid())
		}
		if changed {
			in.updatePingLocked()
		}
	}
	in.router.statusTimer.Reset(niStatusPeriod)
}

// netPingedSinceLocked reports whether an NI on net was pinged after t
// (the net's net_last_alive is later than t).
func (in *Instance) netPingedSinceLocked(net lnetwire.Net, t int64) bool {
	for _, ni := range in.nis {
		if ni.net() == net && ni.lastPinged >= t {
			return true
		}
	}
	return false
}

// pingedLocked records a ping (a GET on the reserved portal from another
// node) arriving on ni of a router (lnet_parse's net_last_alive); an NI
// reported down is up again, in the reply to this very ping.
func (in *Instance) pingedLocked(ni *netIface, hdr *lnetwire.Header) {
	if !in.router.on || ni.lo || hdr.Type != lnetwire.MsgGET || hdr.Portal != ReservedPortal || in.byNID[hdr.SrcNID] != nil {
		return
	}
	ni.lastPinged = int64(time.Since(in.start))
	if ni.statusDown {
		ni.statusDown = false
		in.updatePingLocked()
	}
}
