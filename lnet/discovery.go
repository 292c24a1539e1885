package lnet

// Dynamic peer discovery (Lustre's peer.c discovery half): ping a peer
// to learn its NIDs and feature bits, push our own ping buffer to
// Multi-Rail peers, and take in the pushes peers send us. The peer model
// (peers with several peer NIs, selection) is in peer.go; discovery keeps
// its state in the lpeer's discovery fields and state bits and changes a
// peer's NIDs only through mergeDiscoveredLocked (discovery_hook.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"softib/wire/lnetwire"
)

// pushSlots is how many pushes one push-target MD holds before it is
// used up and replaced; two MDs are attached at any time so a push
// arriving while one is replaced still finds a buffer.
const pushSlots = 16

// discState is the instance's discovery state.
type discState struct {
	off bool // discovery: 0 (DiscoveryOff or DiscoveryQuiet)
	// quiet is DiscoveryQuiet: off, and no discovery ping either.
	quiet bool
	// toggling is set while SetDiscoveryMode swaps the ping buffer: the
	// new buffer is not pushed because of its new sequence number
	// (Lustre flips the feature bit in place and pushes only when
	// discovery is turned off).
	toggling bool
	push     map[uint64]struct{}            // attached push-target MDs by cookie
	pend     map[lnetwire.NID]chan struct{} // pushes to peers in flight
	// stats counts discovery work (lnetctl stats show has no such
	// counters; DiscoveryStats exposes them to tests and the daemon).
	stats DiscoveryStats
}

// disc returns lp's discovery state, allocating it.
func (lp *lpeer) disc() *peerDisc {
	if lp.dc == nil {
		lp.dc = &peerDisc{}
	}
	return lp.dc
}

// DiscoveryStats counts discovery work.
type DiscoveryStats struct {
	Rounds         uint64 // discovery rounds completed (either result)
	PingsFailed    uint64 // rounds ended by a failed ping
	PushesSent     uint64 // pushes of our ping buffer acknowledged
	PushesFailed   uint64 // pushes not acknowledged
	PushesReceived uint64 // pushes peers sent us, merged
	PushesDropped  uint64 // pushes not understood or not allowed
	RoundsOnSend   uint64 // rounds started for a held message (discovery on first send)
	MsgsHeld       uint64 // messages that waited for a discovery round
}

// DiscoverResult is what `lnetctl discover NID` prints for one NID.
type DiscoverResult struct {
	Primary   lnetwire.NID
	MultiRail bool
	// NIDs are the peer's NIDs, primary first.
	NIDs []lnetwire.NID
	// State is the peer's LNET_PEER_* bits after the round.
	State PeerState
}

func (d *discState) init() {
	d.push = make(map[uint64]struct{})
	d.pend = make(map[lnetwire.NID]chan struct{})
}

// DiscoveryMode is an Instance's peer discovery setting.
type DiscoveryMode uint8

const (
	// DiscoveryOn is dynamic discovery (lnetctl set discovery 1, the
	// default): a message to a peer that is not up to date waits while
	// the peer is pinged (and pushed our buffer), and the reply makes a
	// Multi-Rail peer with all the NIDs it lists.
	DiscoveryOn DiscoveryMode = iota
	// DiscoveryOff is Lustre's discovery off (lnetctl set discovery 0,
	// lnet_peer_discovery_disabled): a message to a peer that is not up
	// to date still waits for one ping of it (lnet_discover_peer_locked
	// stops after one attempt when discovery is disabled), and a failed
	// ping fails it. The reply marks the peer NO_DISCOVERY, records its
	// feature bits, sequence and the status of the NIDs already known,
	// but adds or removes no NID and never makes the peer Multi-Rail
	// (lnet_peer_merge_data); nothing is pushed to it unless forced
	// (lnetctl discover --force to a peer configured Multi-Rail). The
	// peer is then up to date: later messages go at once.
	DiscoveryOff
	// DiscoveryQuiet is DiscoveryOff without that ping: no discovery
	// traffic at all, messages never wait. A softib extension for tests
	// whose LND answers no ping or that count every message;
	// SetDiscovery(false) selects it.
	DiscoveryQuiet
)

// String returns the mode's name.
func (m DiscoveryMode) String() string {
	switch m {
	case DiscoveryOn:
		return "on"
	case DiscoveryOff:
		return "off"
	case DiscoveryQuiet:
		return "quiet"
	}
	return fmt.Sprintf("DiscoveryMode(%d)", uint8(m))
}

// SetDiscovery is SetDiscoveryMode(DiscoveryOn) or, for false,
// SetDiscoveryMode(DiscoveryQuiet) (no discovery traffic at all; lnetctl
// set discovery 0 is DiscoveryOff, which still pings a new peer once).
func (in *Instance) SetDiscovery(on bool) {
	m := DiscoveryQuiet
	if on {
		m = DiscoveryOn
	}
	_ = in.SetDiscoveryMode(m) // a known mode: cannot fail
}

// SetDiscoveryMode sets peer discovery on or off (lnetctl set discovery
// 0|1, lnet_peer_discovery_disabled; see the modes). Turning discovery
// off clears the DISCOVERY feature bit of our ping buffer and pushes the
// buffer to the Multi-Rail peers, so they stop discovering us; turning
// it on sets the bit and pushes nothing (as Lustre's discovery_set). The
// peers' states are left alone: a peer discovered while off stays
// non-Multi-Rail until it is discovered again (lnetctl discover, or a
// push from it). An unknown mode is refused with ErrInvalid.
func (in *Instance) SetDiscoveryMode(m DiscoveryMode) error {
	if m > DiscoveryQuiet {
		return fmt.Errorf("%w: discovery mode %v", ErrInvalid, m)
	}
	in.mu.Lock()
	off := m != DiscoveryOn
	in.disc.quiet = m == DiscoveryQuiet
	if in.disc.off == off {
		in.mu.Unlock()
		return nil
	}
	in.disc.off = off
	in.disc.toggling = true
	in.updatePingLocked()
	in.disc.toggling = false
	var targets []lnetwire.NID
	if off {
		targets = in.pushTargetsLocked(true)
	}
	in.mu.Unlock()
	in.pushAsync(targets)
	return nil
}

// DiscoveryMode returns the discovery setting.
func (in *Instance) DiscoveryMode() DiscoveryMode {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case !in.disc.off:
		return DiscoveryOn
	case in.disc.quiet:
		return DiscoveryQuiet
	}
	return DiscoveryOff
}

// DiscoveryEnabled is LNetGetPeerDiscoveryStatus: whether dynamic
// discovery is on.
func (in *Instance) DiscoveryEnabled() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return !in.disc.off
}

// DiscoveryStats returns the discovery counters.
func (in *Instance) DiscoveryStats() DiscoveryStats {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.disc.stats
}

// PeerDiscoveryState returns the LNET_PEER_* bits and the last discovery
// error of the peer owning nid; ok is false for an unknown NID.
func (in *Instance) PeerDiscoveryState(nid lnetwire.NID) (state PeerState, lastErr error, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	lp := in.lpeerLocked(nid)
	if lp == nil {
		return 0, nil, false
	}
	return lp.state, lp.disc().err, true
}

// PrimaryNID is LNetPrimaryNID: the primary NID of the peer owning nid.
// Unless discovery is off or the peer is up to date, it discovers the
// peer first and waits for that (up to TransactionTimeout); a peer that
// cannot be discovered keeps the primary NID known so far (nid itself
// for a new peer), as Lustre returns the NID it was given.
func (in *Instance) PrimaryNID(nid lnetwire.NID) lnetwire.NID {
	return in.PrimaryNIDContext(context.Background(), nid)
}

// PrimaryNIDContext is PrimaryNID bounded by ctx as well.
func (in *Instance) PrimaryNIDContext(ctx context.Context, nid lnetwire.NID) lnetwire.NID {
	if nid == lnetwire.NIDLo0 || nid == lnetwire.NIDAny {
		return nid
	}
	in.mu.Lock()
	if in.byNID[nid] != nil {
		in.mu.Unlock()
		return nid
	}
	lp := in.lpeerLocked(nid)
	if in.disc.off || (lp != nil && lp.state&PeerNIDsUptodate != 0 && lp.disc().wait == nil) ||
		(lp != nil && lp.state&PeerLockPrimary != 0) {
		p := in.knownPrimaryLocked(nid)
		in.mu.Unlock()
		return p
	}
	in.mu.Unlock()
	if _, err := in.discover(ctx, nid, false); err != nil {
		in.log.Debug("lnet: primary NID: discovery failed", "nid", nid, "err", err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.knownPrimaryLocked(nid)
}

// knownPrimaryLocked is the primary NID known for nid without discovery.
func (in *Instance) knownPrimaryLocked(nid lnetwire.NID) lnetwire.NID {
	if lp := in.lpeerLocked(nid); lp != nil {
		return lp.primary
	}
	return nid
}

// Discover is `lnetctl discover NID` (lnet_discover): it runs a discovery
// round for the peer owning nid (ping; push our buffer to a Multi-Rail
// peer that lacks it, or always with force) and returns what is known
// of the peer afterwards. With DiscoveryOff the round is the one ping
// the kernel still sends (the peer keeps its NIDs, not Multi-Rail unless
// configured so); with DiscoveryQuiet nothing is sent.
func (in *Instance) Discover(ctx context.Context, nid lnetwire.NID, force bool) (DiscoverResult, error) {
	if nid == lnetwire.NIDAny || nid == lnetwire.NIDLo0 {
		return DiscoverResult{}, ErrInvalid
	}
	return in.discover(ctx, nid, force)
}

func (in *Instance) discover(ctx context.Context, nid lnetwire.NID, force bool) (DiscoverResult, error) {
	for {
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			return DiscoverResult{}, ErrClosed
		}
		if in.disc.quiet {
			// The peer is looked up (created if new), as lnet_discover
			// does, and reported as it is; nothing is sent.
			if in.lpeerLocked(nid) == nil && in.byNID[nid] == nil {
				in.peerTrafficAddLocked(nid)
			}
			r := in.discResultLocked(nid)
			in.mu.Unlock()
			return r, nil
		}
		lp := in.lpeerLocked(nid)
		if lp != nil && lp.disc().wait != nil {
			// A round is running (another caller, or a push being
			// merged): wait for it, then run our own so the result is
			// fresh.
			w := lp.disc().wait
			in.mu.Unlock()
			select {
			case <-w:
			case <-ctx.Done():
				return DiscoverResult{}, ctx.Err()
			}
			continue
		}
		if lp == nil {
			lp = in.peerTrafficAddLocked(nid).lp
		}
		w := make(chan struct{})
		lp.disc().wait = w
		lp.disc().queued = false
		lp.state = lp.state&^(PeerNIDsUptodate|PeerPingFailed|PeerPushFailed) | PeerDiscovering | PeerPingSent
		if force {
			lp.state |= PeerForcePing | PeerForcePush
		}
		lp.disc().err = nil
		in.mu.Unlock()

		err := in.discoverRound(ctx, nid, lp)

		in.mu.Lock()
		in.disc.stats.Rounds++
		// The merge may have moved nid to another peer: the round's
		// outcome goes on the peer that owns nid now, and the waiters
		// and held messages of the old one are released.
		cur := in.lpeerLocked(nid)
		var held msgQueue
		for _, x := range []*lpeer{lp, cur} {
			if x == nil {
				continue
			}
			x.takeHeldLocked(&held)
			x.state &^= PeerDiscovering | PeerPingSent | PeerPushSent | PeerForcePing | PeerForcePush
			x.disc().err = err
			if err == nil {
				x.state |= PeerDiscovered | PeerNIDsUptodate
				x.state &^= PeerRediscover
			}
		}
		if lp.disc().wait == w { // else peerDelLocked closed it
			lp.disc().wait = nil
			close(w)
		}
		r := in.discResultLocked(nid)
		if err != nil {
			err = fmt.Errorf("discover %v: %w", nid, err)
		}
		// The held messages go (or fail) before the lock is let go, so
		// none sent after the round overtakes them.
		ps := in.releaseHeldLocked(&held, err)
		in.mu.Unlock()
		runSends(in, ps)
		return r, err
	}
}

// uptodate is lnet_peer_is_uptodate_locked without its push check (our
// buffer reaches Multi-Rail peers through pushAfterChangeLocked):
// discovered, NIDs up to date, nothing running, forced or to redo.
func (lp *lpeer) uptodate() bool {
	const busy = PeerDiscovering | PeerForcePing | PeerForcePush | PeerRediscover
	return lp.state&busy == 0 && lp.state&(PeerDiscovered|PeerNIDsUptodate) == PeerDiscovered|PeerNIDsUptodate
}

// gwDiscoveryLocked is lnet_peer_gw_discovery: the router checker is
// pinging one of lp's NIDs as a gateway (softib's router checker pings
// where Lustre's discovers, LNET_PEER_RTR_DISCOVERY), so messages to it
// do not wait for a discovery of their own.
func (in *Instance) gwDiscoveryLocked(lp *lpeer) bool {
	if len(in.routes.gateways) == 0 {
		return false
	}
	pinging := false
	lp.eachNI(func(p *peer) {
		if gw := in.routes.gateways[p.nid]; gw != nil && gw.pinging {
			pinging = true
		}
	})
	return pinging
}

// holdForDiscoveryLocked is lnet_initiate_peer_discovery with
// lnet_peer_queue_message: a PUT or GET to a peer that is not up to date
// waits on the peer's pending queue (lp_dc_pendq) while the peer is
// discovered; a round is started unless one runs or is about to. When the
// round ends the message is sent with the peer's NIDs known (selection
// runs then), or finalized with the round's error
// (lnet_peer_discovery_complete). Responses and the reserved portal's
// ping and push traffic never wait (lnet_msg_discovery: discovery needs
// them), nor do forwarded messages, recovery pings, messages to a
// gateway the router checker is pinging, or anything with
// DiscoveryQuiet. With DiscoveryOff a message waits as with discovery on:
// the round is then a ping only (see DiscoveryOff).
func (in *Instance) holdForDiscoveryLocked(m *message) bool {
	if in.disc.quiet || in.closed || m.routing || m.recovery || isResponse(m) || reservedMsg(m) {
		return false
	}
	dst := m.Hdr.DestNID
	if dst == lnetwire.NIDLo0 || dst == lnetwire.NIDAny || in.byNID[dst] != nil || in.rc.ctx.Err() != nil {
		return false
	}
	lp := in.peerTrafficAddLocked(dst).lp
	if lp == nil || lp.uptodate() || in.gwDiscoveryLocked(lp) {
		return false
	}
	dc := lp.disc()
	dc.pendq.push(m)
	in.disc.stats.MsgsHeld++
	if dc.wait != nil || dc.queued {
		return true // the running (or starting) round releases it
	}
	dc.queued = true
	in.disc.stats.RoundsOnSend++
	in.rc.wg.Add(1)
	go in.discoverHeld(lp, dst)
	return true
}

// holdForGatewayLocked is the gateway half of lnet_handle_find_routed_path:
// with the router checker off (it would discover the gateways otherwise),
// a routed message whose gateway is not up to date undoes its selection
// (dst is the destination NID it was sent to) and waits for a discovery
// of the gateway, so the route can use all of the gateway's NIDs; it is
// selected again when the round ends. The same messages as in
// holdForDiscoveryLocked never wait.
func (in *Instance) holdForGatewayLocked(m *message, dst lnetwire.NID) bool {
	if in.globals.LiveRouterCheckInterval >= 0 || in.disc.quiet || in.closed || m.ni == nil || m.ni.lo ||
		m.routing || m.recovery || isResponse(m) || reservedMsg(m) || in.rc.ctx.Err() != nil {
		return false
	}
	gw := m.Msg.Target.NID
	if gw == m.Hdr.DestNID || m.peer == nil || m.peer.lp == nil {
		return false // not routed
	}
	lp := m.peer.lp
	if lp.uptodate() || in.gwDiscoveryLocked(lp) {
		return false
	}
	// Undo what selection did to m (lnet_initiate_peer_discovery's
	// msg_txpeer = NULL): the next selection starts afresh.
	m.peer.refs--
	m.peer, m.ni = nil, nil
	m.Hdr.DestNID = dst
	m.Msg.Target = lnetwire.ProcessID{NID: dst, PID: m.Hdr.DestPID}
	if m.Type == lnetwire.MsgGET && m.md != nil {
		m.Sink = m.md.iov(0, int(m.Hdr.SinkLength)) // routing cleared it
	}
	dc := lp.disc()
	dc.pendq.push(m)
	in.disc.stats.MsgsHeld++
	if dc.wait != nil || dc.queued {
		return true
	}
	dc.queued = true
	in.disc.stats.RoundsOnSend++
	in.rc.wg.Add(1)
	go in.discoverHeld(lp, gw)
	return true
}

// discoverHeld runs the discovery round a held message started. A round
// that ran on lp released lp's queue; one that did not (the instance
// closed, discovery was turned off, or nid had moved to another peer
// whose round released that peer's queue instead) leaves lp queued: its
// messages are sent again (or failed with the error) here.
func (in *Instance) discoverHeld(lp *lpeer, nid lnetwire.NID) {
	defer in.rc.wg.Done()
	_, err := in.discover(in.rc.ctx, nid, false)
	if err != nil {
		in.log.Debug("lnet: discovery on send failed", "nid", nid, "err", err)
	}
	in.mu.Lock()
	var ps []pending
	if dc := lp.disc(); dc.queued {
		dc.queued = false
		var held msgQueue
		lp.takeHeldLocked(&held)
		ps = in.releaseHeldLocked(&held, err)
	}
	in.mu.Unlock()
	runSends(in, ps)
}

// takeHeldLocked moves lp's held messages to q, in order.
func (lp *lpeer) takeHeldLocked(q *msgQueue) {
	if lp.dc == nil {
		return
	}
	for m := lp.dc.pendq.pop(); m != nil; m = lp.dc.pendq.pop() {
		q.push(m)
	}
}

// releaseHeldLocked is the resend half of lnet_peer_discovery_complete:
// with dcErr nil each held message goes through sendLocked again, in
// order (selection now sees the peer's NIDs; a message whose NID moved
// to a peer that is not up to date waits again); else each is failed
// with dcErr, without resends. The caller acts on the results after
// unlocking (runSends).
func (in *Instance) releaseHeldLocked(q *msgQueue, dcErr error) []pending {
	var out []pending
	for m := q.pop(); m != nil; m = q.pop() {
		if dcErr != nil {
			m.noResend = true
			out = append(out, pending{m: m, r: sendFail, err: dcErr})
			continue
		}
		r, err := in.sendLocked(m, m.srcParam)
		if err == nil && m.hasEvent && m.ev.Type == EventSend && m.Hdr.SrcNID != 0 {
			m.ev.Initiator.NID = m.Hdr.SrcNID // as Put and Get record it
		}
		out = append(out, pending{m: m, r: r, err: err})
	}
	return out
}

// runSends acts on releaseHeldLocked's results, without the lock.
func runSends(in *Instance, ps []pending) {
	for _, p := range ps {
		in.afterSend(p.m, p.r, p.err)
	}
}

// discoverRound pings nid, merges the reply and pushes our buffer when
// the peer needs it. lp is marked Discovering by the caller.
func (in *Instance) discoverRound(ctx context.Context, nid lnetwire.NID, lp *lpeer) error {
	res, err := in.Ping(ctx, lnetwire.ProcessID{NID: nid, PID: lnetwire.PIDLustre}, 0)
	in.mu.Lock()
	lp.state &^= PeerPingSent
	if err != nil {
		lp.state |= PeerPingFailed
		in.disc.stats.PingsFailed++
		in.mu.Unlock()
		return err
	}
	force := lp.state&PeerForcePush != 0
	if cur := in.mergeLocked(lp, res.Features, res.Seq, res.NIDs); cur != nil {
		lp = cur
	}
	// lnet_peer_needs_push: a forced push goes to a Multi-Rail peer even
	// with discovery off (only a peer configured Multi-Rail is one then).
	push := lp.isMR() && (force || !in.disc.off && seqBefore(lp.disc().nodeSeqno, in.ping.seq))
	if push {
		lp.state |= PeerPushSent
	}
	in.mu.Unlock()
	if !push {
		return nil
	}
	seq, err := in.pushTo(ctx, nid)
	in.mu.Lock()
	defer in.mu.Unlock()
	lp.state &^= PeerPushSent
	if err != nil {
		lp.state |= PeerPushFailed
		in.disc.stats.PushesFailed++
		return fmt.Errorf("push: %w", err)
	}
	in.disc.stats.PushesSent++
	if seqBefore(lp.disc().nodeSeqno, seq) {
		lp.disc().nodeSeqno = seq
	}
	return nil
}

// seqBefore reports a < b for ping sequence numbers (wrapping).
func seqBefore(a, b uint32) bool { return int32(a-b) < 0 }

// discResultLocked reports the peer owning nid as lnetctl discover does.
func (in *Instance) discResultLocked(nid lnetwire.NID) DiscoverResult {
	lp := in.lpeerLocked(nid)
	if lp == nil {
		return DiscoverResult{Primary: nid, NIDs: []lnetwire.NID{nid}}
	}
	r := DiscoverResult{Primary: lp.primary, State: lp.state, MultiRail: lp.isMR()}
	lp.eachNI(func(p *peer) { r.NIDs = append(r.NIDs, p.nid) })
	return r
}

// mergeLocked takes in a peer's ping buffer (from a ping reply or a
// push; lnet_peer_merge_data): its features, sequence and NIDs (primary
// first, 0@lo omitted). It returns the peer that owns the NIDs now.
func (in *Instance) mergeLocked(lp *lpeer, features, seq uint32, nis []lnetwire.PingNI) *lpeer {
	if len(nis) == 0 {
		return lp
	}
	lp.features = features
	lp.disc().peerSeqno = seq
	// NO_DISCOVERY: the peer has discovery off, or we have
	// (lnet_discovery_event_reply).
	if features&lnetwire.PingFeatDiscovery == 0 || in.disc.off {
		lp.state |= PeerNoDiscovery
	} else {
		lp.state &^= PeerNoDiscovery
	}
	if features&lnetwire.PingFeatRteDisabled == 0 {
		lp.state |= PeerRouterEnabled
	} else {
		lp.state &^= PeerRouterEnabled
	}
	return in.mergeDiscoveredLocked(lp, features, nis)
}

// pushTo PUTs our ping buffer to nid's push target (portal 0, the ping
// match bits, as Lustre's lnet_peer_send_push) and waits for the ACK.
// It returns the sequence number of the buffer pushed.
func (in *Instance) pushTo(ctx context.Context, nid lnetwire.NID) (uint32, error) {
	in.mu.Lock()
	info := in.pingInfoLocked()
	seq := in.ping.seq
	to := in.globals.TransactionTimeout
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	events := make(chan Event, 2)
	h, err := in.MDBind(MD{Start: info.Append(nil), Threshold: 2, Handler: func(ev *Event) {
		select {
		case events <- *ev:
		default:
		}
	}}, AutoUnlink)
	if err != nil {
		return 0, err
	}
	if err := in.Put(lnetwire.NIDAny, h, AckReqYes, lnetwire.ProcessID{NID: nid, PID: lnetwire.PIDLustre},
		ReservedPortal, lnetwire.PingMatchBits, 0, 0); err != nil {
		_ = in.MDUnlink(h)
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			_ = in.MDUnlink(h)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, ErrTimeout
			}
			return 0, ctx.Err()
		case ev := <-events:
			if ev.Status != nil {
				_ = in.MDUnlink(h)
				return 0, ev.Status
			}
			if ev.Type == EventAck {
				if ev.MLength == 0 && info.Len() > 0 {
					// The peer has no push target (not Multi-Rail
					// capable after all): it dropped the buffer.
					return 0, fmt.Errorf("%w: %v took none of the pushed buffer", ErrDropped, nid)
				}
				return seq, nil
			}
		}
	}
}

// pushTargetsLocked lists the peers that should get our ping buffer:
// Multi-Rail peers discovery has seen (only those with an older buffer
// of ours unless force).
func (in *Instance) pushTargetsLocked(force bool) []lnetwire.NID {
	if in.disc.off && !force {
		return nil
	}
	var out []lnetwire.NID
	for _, lp := range in.lpeers {
		if !lp.isMR() || lp.state&PeerDiscovered == 0 {
			continue
		}
		if !force && !seqBefore(lp.disc().nodeSeqno, in.ping.seq) {
			continue
		}
		out = append(out, lp.primary)
	}
	slices.Sort(out)
	return out
}

// pushAsync pushes our ping buffer to each target in the background (our
// NIs changed, or discovery was turned off); one push per peer at a
// time, and a push that ends with our buffer newer than the one pushed
// is followed by another.
func (in *Instance) pushAsync(targets []lnetwire.NID) {
	for _, nid := range targets {
		in.mu.Lock()
		if in.closed || in.rc.ctx.Err() != nil || in.disc.pend[nid] != nil {
			in.mu.Unlock()
			continue
		}
		done := make(chan struct{})
		in.disc.pend[nid] = done
		in.rc.wg.Add(1)
		in.mu.Unlock()
		go func() {
			defer in.rc.wg.Done()
			seq, err := in.pushTo(in.rc.ctx, nid)
			in.mu.Lock()
			delete(in.disc.pend, nid)
			close(done)
			again := false
			if lp := in.lpeerLocked(nid); lp != nil {
				lp.disc().nodeSeqnoSent = seq
				if err != nil {
					lp.state |= PeerPushFailed
					in.disc.stats.PushesFailed++
				} else {
					lp.state &^= PeerPushFailed
					in.disc.stats.PushesSent++
					if seqBefore(lp.disc().nodeSeqno, seq) {
						lp.disc().nodeSeqno = seq
					}
					again = seqBefore(lp.disc().nodeSeqno, in.ping.seq) && !in.disc.off
				}
			}
			in.mu.Unlock()
			if err != nil {
				in.log.Debug("lnet: push failed", "peer", nid, "err", err)
			}
			if again {
				in.pushAsync([]lnetwire.NID{nid})
			}
		}()
	}
}

// pushTargetSlot is the size of one pushed ping buffer we accept: a
// buffer with max_interfaces NIs plus 0@lo.
func (in *Instance) pushTargetSlot() int {
	return lnetwire.PingInfoHdrSize + lnetwire.PingInfoEntrySize*(in.globals.MaxInterfaces+1)
}

// startPushTarget attaches the push target: MEs on the reserved portal
// matching the ping bits from anyone, behind the ping ME, whose MDs take
// PUTs only (lnet_push_target_init). Each MD holds pushSlots pushes
// (MDMaxSize), so an event's bytes stay put until read; a used-up MD is
// replaced from its unlink event, and two are attached so a push finds a
// buffer meanwhile.
func (in *Instance) startPushTarget() error {
	for {
		in.mu.Lock()
		n, stop := len(in.disc.push), in.closed
		in.mu.Unlock()
		if n >= 2 || stop {
			return nil
		}
		if err := in.addPushMD(); err != nil {
			return err
		}
	}
}

func (in *Instance) addPushMD() error {
	me, err := in.MEAttach(ReservedPortal, lnetwire.ProcessIDAny, lnetwire.PingMatchBits, 0, AutoUnlink, InsAfter)
	if err != nil {
		return err
	}
	in.mu.Lock()
	slot := in.pushTargetSlot()
	in.mu.Unlock()
	h, err := in.MDAttach(me, MD{Start: make([]byte, slot*pushSlots), Threshold: ThreshInf, MaxSize: slot,
		Options: MDOpPut | MDMaxSize | MDTruncate, Handler: in.pushEvent}, AutoUnlink)
	if err != nil {
		_ = in.MEUnlink(me)
		return err
	}
	in.mu.Lock()
	in.disc.push[h.Cookie] = struct{}{}
	in.mu.Unlock()
	return nil
}

// pushEvent handles the events of the push target: a push arrived
// (lnet_push_target_event_handler), or an MD is used up.
func (in *Instance) pushEvent(ev *Event) {
	if ev.Type == EventPut && ev.Status == nil {
		b := ev.MD.Start[ev.Offset : ev.Offset+ev.MLength]
		in.pushReceived(ev.Initiator, b, ev.RLength > ev.MLength)
	}
	if ev.Unlinked {
		in.mu.Lock()
		delete(in.disc.push, ev.MDHandle.Cookie)
		in.mu.Unlock()
		if err := in.startPushTarget(); err != nil && !errors.Is(err, ErrClosed) {
			in.log.Warn("lnet: cannot re-arm the push target", "err", err)
		}
	}
}

// pushReceived merges a peer's pushed ping buffer (lnet_peer_push_event
// and lnet_peer_data_present): the peer's new NIDs replace the old.
func (in *Instance) pushReceived(from lnetwire.ProcessID, b []byte, truncated bool) {
	info, err := lnetwire.ParsePingInfo(b)
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case truncated:
		err = fmt.Errorf("more than max_interfaces (%d) NIDs", in.globals.MaxInterfaces)
	case err == nil && info.Features&lnetwire.PingFeatNIStatus == 0:
		err = errors.New("no NI status feature")
	case err == nil && info.Features&lnetwire.PingFeatMultiRail == 0:
		// A non-Multi-Rail peer is not supposed to push.
		err = errors.New("push from a non-Multi-Rail peer")
	}
	if err != nil {
		in.disc.stats.PushesDropped++
		in.log.Warn("lnet: push dropped", "from", from, "err", err)
		return
	}
	in.disc.stats.PushesReceived++
	var seq uint32
	var nis []lnetwire.PingNI
	for _, e := range info.NIs {
		if e.NID == lnetwire.NIDLo0 {
			seq = e.Status
			continue
		}
		nis = append(nis, e)
	}
	if len(nis) == 0 {
		return
	}
	lp := in.lpeerLocked(from.NID)
	if lp == nil {
		lp = in.lpeerLocked(nis[0].NID)
	}
	if lp == nil && in.disc.off {
		// With discovery off a push only refreshes a known peer's
		// features and NID statuses (mergeLocked keeps its NIDs).
		return
	}
	if lp == nil {
		lp = in.peerTrafficAddLocked(from.NID).lp
	}
	if lp.disc().peerSeqno != 0 && seqBefore(seq, lp.disc().peerSeqno) {
		return // older than what we have
	}
	lp = in.mergeLocked(lp, info.Features, seq, nis)
	lp.state |= PeerDiscovered | PeerNIDsUptodate
	// A gateway's push says what its ping reply would: its routes are
	// judged on it at once (lnet_peer_merge_data calls the router
	// callback for pushes as for replies).
	// Judging is idempotent, so a gateway both among the peer's NIDs and
	// the push's source may be judged twice.
	lp.eachNI(func(p *peer) {
		if gw := in.routes.gateways[p.nid]; gw != nil {
			in.judgeRoutesLocked(gw, info.Features, nis)
		}
	})
	if gw := in.routes.gateways[from.NID]; gw != nil {
		in.judgeRoutesLocked(gw, info.Features, nis)
	}
}

// pushAfterChangeLocked schedules pushes of our new ping buffer to the
// peers that have an older one (our NIs changed). Called with mu held
// from updatePingLocked; the pushes run outside the lock.
func (in *Instance) pushAfterChangeLocked() {
	if in.disc.off || in.disc.toggling || in.closed || in.rc.ctx.Err() != nil {
		return
	}
	targets := in.pushTargetsLocked(false)
	if len(targets) == 0 {
		return
	}
	// updatePingLocked runs under mu: start the pushes from a goroutine.
	in.rc.wg.Add(1)
	go func() {
		defer in.rc.wg.Done()
		in.pushAsync(targets)
	}()
}
