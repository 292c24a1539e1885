package lnet

// Multi-Rail peer model (lnet/lnet/peer.c; lnet-wire.md §8.4).
//
// A peer (lpeer, Lustre's struct lnet_peer) is one remote node, keyed by
// its primary NID. It has peer nets (peerNet, lnet_peer_net), one per
// LNet net it has NIDs on, and each peer net has peer NIs (peer,
// lnet_peer_ni): one per NID, each with its own tx and router credits,
// queues, aliveness, health value and statistics. Instance.peers maps
// every known NID to its peer NI; Instance.lpeers maps primary NIDs to
// peers. A peer NI always belongs to exactly one peer.
//
// A peer NI is "bound" to a local NI of its net (peer.ni): that NI's
// tunables size its credits and its driver answers aliveness queries.
// Any local NI on the same net may carry a message to it (the message's
// own ni); the peer NI's credits are shared by all of them, as in Lustre.
// A peer NI on a net with no local NI stays unbound (ni nil, no credits)
// until a send binds it.
//
// Peers come from three places:
//   - traffic (lnet_peer_ni_traffic_add): a NID we send to or hear from
//     that no peer has gets a new non-Multi-Rail peer of one NI;
//   - configuration (AddPeer/DelPeerNI: lnetctl peer add/del, YAML
//     "peer:"): PeerConfigured, Multi-Rail unless NonMR;
//   - discovery (discovery.go): the NIDs of a ping reply or push merged
//     into the peer (PeerDiscovered, PeerMultiRail from the feature bit).
//
// API for discovery and configuration (all with Instance.mu held):
//
//	in.peers[nid]                        any NID → its peer NI, or nil
//	in.lpeerLocked(nid) *lpeer           any NID → its peer, or nil
//	in.peerTrafficAddLocked(nid) *peer   find, or create as a traffic peer
//	in.peerAddLocked(prim, flags)        lnet_peer_add: new peer (or
//	                                     re-create a non-configured one)
//	in.peerAddNIDLocked(lp, nid, flags)  lnet_peer_add_nid: add or move a NID
//	in.peerDelNIDLocked(lp, nid, flags)  lnet_peer_del_nid
//	in.peerDelLocked(lp)                 lnet_peer_del: the whole peer
//	in.peerSetPrimaryLocked(lp, nid, f)  lnet_peer_set_primary_nid
//	in.peerMergeNIDsLocked(lp, prim, nids, flags)
//	                                     lnet_peer_merge_data's add/delete:
//	                                     make lp's NIDs exactly nids (moving
//	                                     NIDs from other non-configured peers)
//	                                     and prim its primary
//	lp.state (PeerState bits), lp.isMR(), lp.setMRLocked(), lp.eachNI(fn),
//	lp.nnis; p.lp, p.nsStatus (status the peer reported in its ping buffer)
//
// flags are PeerState bits: PeerConfigured marks a configuration change
// (which may modify configured peers; others may not: ErrPerm),
// PeerMultiRail asks for a Multi-Rail peer, PeerDiscovered and
// PeerLockPrimary are set on the peer.
//
// Exported: AddPeer, DelPeerNI, DelPeer, PeerList, Peers, PrimaryNID.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// MaxHealthValue is LNET_MAX_HEALTH_VALUE: the health of a local or peer
// NI with no recent failures.
const MaxHealthValue = 1000

// PeerState is a peer's lp_state bits, numbered as Lustre's LNET_PEER_*
// (lnetctl peer show -v prints them as "peer state").
type PeerState uint32

// Peer state bits (lib-types.h).
const (
	PeerMultiRail      PeerState = 1 << 0  // Multi-Rail aware
	PeerNoDiscovery    PeerState = 1 << 1  // the peer has discovery off, or we had when it answered
	PeerRouterEnabled  PeerState = 1 << 2  // it routes (no RTE_DISABLED bit)
	PeerConfigured     PeerState = 1 << 3  // configured (lnetctl, YAML)
	PeerDiscovered     PeerState = 1 << 4  // passed through discovery
	PeerRediscover     PeerState = 1 << 5  // examine again once discovery is on
	PeerDiscovering    PeerState = 1 << 6  // discovery in progress
	PeerDataPresent    PeerState = 1 << 7  // ping/push data waiting to be merged
	PeerNIDsUptodate   PeerState = 1 << 8  // our view of its NIDs is current
	PeerPingSent       PeerState = 1 << 9  // waiting for the REPLY to a ping
	PeerPushSent       PeerState = 1 << 10 // waiting for the ACK of a push
	PeerPingFailed     PeerState = 1 << 11
	PeerPushFailed     PeerState = 1 << 12
	PeerForcePing      PeerState = 1 << 13
	PeerForcePush      PeerState = 1 << 14
	PeerRtrNIForceDel  PeerState = 1 << 15 // delete even a router's primary
	PeerMarkDeletion   PeerState = 1 << 18
	PeerMarkDeleted    PeerState = 1 << 19
	PeerLockPrimary    PeerState = 1 << 20 // primary NID locked by the ULP
	PeerBadConfig      PeerState = 1 << 21
	peerDiscoveryFlags           = PeerDiscovering | PeerDataPresent | PeerPingSent | PeerPushSent | PeerPingFailed | PeerPushFailed
)

// Peer-model errors (Lustre's errnos in parentheses).
var (
	// ErrPerm: a non-configuration change to a configured peer, or
	// clearing Multi-Rail (EPERM).
	ErrPerm = errors.New("lnet: operation not permitted on this peer")
	// ErrNotUniq: a second NID on one net of a non-Multi-Rail peer
	// (ENOTUNIQ).
	ErrNotUniq = errors.New("lnet: a non-Multi-Rail peer has one NID per net")
	// ErrNotPrimary: the NID given as primary is not the peer's primary
	// NID (ENODEV).
	ErrNotPrimary = errors.New("lnet: not the peer's primary NID")
	// ErrPeerExists: the NID is configured for another peer (EEXIST).
	ErrPeerExists = errors.New("lnet: NID configured for another peer")
)

// peer is one peer NI (struct lnet_peer_ni): its credits, its queue of
// messages waiting for a credit, its aliveness, health and statistics.
// Kept small: a node may know tens of thousands. Guarded by Instance.mu.
type peer struct {
	nid          lnetwire.NID
	ni           *netIface // bound local NI (nil: none on its net yet)
	lp           *lpeer    // the peer it belongs to
	txq          msgQueue
	txqnob       int64 // bytes of messages holding or waiting for a credit
	lastAlive    int64 // ns since Instance.start; 0 never
	downAt       int64 // ns since Instance.start when marked down
	refs         int32 // messages using the peer
	txCredits    int32
	minTxCredits int32
	maxTxCredits int32
	// Router credits (peer_buffer_credits): messages from this peer NI
	// being forwarded; negative while messages wait on rtrq.
	rtrCredits    int32
	minRtrCredits int32
	maxRtrCredits int32
	rtrq          msgQueue

	// Multi-Rail selection (lib-move.c lnet_select_peer_ni).
	health      int32  // lpni_healthv, 0..MaxHealthValue
	seq         uint32 // lpni_seq: round robin among the net's peer NIs
	selPriority uint32 // lpni_sel_priority (UDSP; 0 is the best)
	nsStatus    uint32 // status the peer reported for this NID (ping buffer)
	down        bool
	nonMRPref   bool // prefNIDs holds the NID a non-MR peer talked to
	// prefNIDs are the local NIDs preferred for sending to this peer NI
	// (UDSP, or for a non-MR peer the local NID it first talked to).
	prefNIDs []lnetwire.NID

	// Statistics (lnet_element_stats: lnetctl peer show -v).
	sendCount, recvCount, dropCount uint64
	// hs holds health statistics and recovery state; allocated at the
	// first failure, so healthy peers do not pay for it.
	hs *peerHealth
}

// peerHealth is a peer NI's lnet_health_remote_stats and recovery-ping
// state (lpni_recovery, lpni_next_ping, lpni_ping_count; health.go).
type peerHealth struct {
	dropped, timeout, error, networkTimeout uint64
	queued                                  bool  // on the recovery queue
	pending                                 bool  // a recovery ping is out
	nextPing                                int64 // ns since Instance.start
	pingCount                               uint32
}

// healthState returns p's health state, allocating it.
func (p *peer) healthState() *peerHealth {
	if p.hs == nil {
		p.hs = new(peerHealth)
	}
	return p.hs
}

// peerNet is lnet_peer_net: a peer's NIs on one net.
type peerNet struct {
	net         lnetwire.Net
	seq         uint32  // lpn_seq: round robin among the peer's nets
	selPriority uint32  // lpn_sel_priority (UDSP)
	nis         []*peer // the primary NID first if it is on this net
	ni0         [1]*peer
}

// lpeer is a peer (struct lnet_peer): one remote node with all its NIDs.
type lpeer struct {
	primary lnetwire.NID
	state   PeerState
	nnis    int32
	nets    []*peerNet // the primary NID's net first
	// primLockTS orders PeerLockPrimary claims (lp_prim_lock_ts).
	primLockTS int64
	// sendSeq is lp_send_seq: round robin over the peer's nets and NIs.
	sendSeq uint32
	// features are the feature bits of its last ping reply or push.
	features uint32
	// dc is discovery's state (discovery.go), nil until it is needed.
	dc *peerDisc
	// net0 and nets0 hold the first peer net without more allocations:
	// most peers have one.
	net0  peerNet
	nets0 [1]*peerNet
}

// peerDisc is a peer's discovery state (Lustre's lp_* discovery fields),
// owned by discovery.go, which may add fields here.
type peerDisc struct {
	peerSeqno     uint32 // lp_peer_seqno: its ping buffer's sequence
	nodeSeqno     uint32 // lp_node_seqno: our sequence it acked
	nodeSeqnoSent uint32 // lp_node_seqno_sent
	err           error  // lp_dc_error: the last discovery's outcome
	wait          chan struct{}
	// pendq holds the messages sent to the peer while it is discovered
	// (lp_dc_pendq); queued is set from the moment a held message starts
	// a round (discoverHeld) until that round begins, so later messages
	// join the queue instead of starting another.
	pendq  msgQueue
	queued bool
}

// isMR reports whether the peer is Multi-Rail.
func (lp *lpeer) isMR() bool { return lp.state&PeerMultiRail != 0 }

// setMRLocked marks the peer Multi-Rail (the flag is never cleared on a
// peer that has NIs on one net, which would be invalid; peerAddNIDLocked
// refuses that). Preferred NIDs learned while it was non-MR are dropped.
func (lp *lpeer) setMRLocked() {
	if lp.isMR() {
		return
	}
	lp.state |= PeerMultiRail
	lp.eachNI(func(p *peer) {
		if p.nonMRPref {
			p.nonMRPref = false
			p.prefNIDs = nil
		}
	})
}

// eachNI calls fn for every peer NI, by net, primary first.
func (lp *lpeer) eachNI(fn func(*peer)) {
	for _, pn := range lp.nets {
		for _, p := range pn.nis {
			fn(p)
		}
	}
}

// netOf returns the peer net on net, or nil.
func (lp *lpeer) netOf(net lnetwire.Net) *peerNet {
	for _, pn := range lp.nets {
		if pn.net == net {
			return pn
		}
	}
	return nil
}

// peerRetryInterval is how long a peer the LND reported dead fails new
// sends at once before one is let through to try again (a simplified
// lnet_peer_alive_locked; LNDs report recovery with NotifyPeer).
const peerRetryInterval = time.Second

// lpeerLocked returns the peer owning nid, or nil.
func (in *Instance) lpeerLocked(nid lnetwire.NID) *lpeer {
	if p := in.peers[nid]; p != nil {
		return p.lp
	}
	return nil
}

// newPeerNILocked allocates a peer NI, bound to the first up local NI on
// its net if there is one.
func (in *Instance) newPeerNILocked(nid lnetwire.NID) *peer {
	p := &peer{nid: nid, health: MaxHealthValue, selPriority: maxSelPriority}
	if ni := in.firstNIOnLocked(nid.Net()); ni != nil {
		in.bindPeerNILocked(p, ni)
	}
	return p
}

// bindPeerNILocked binds an idle p to ni and sizes its credits from ni's
// tunables.
func (in *Instance) bindPeerNILocked(p *peer, ni *netIface) {
	c := int32(ni.ni.Tunables.PeerCredits)
	rc := peerBufferCreditsOf(ni)
	p.ni = ni
	p.txCredits, p.minTxCredits, p.maxTxCredits = c, c, c
	p.rtrCredits, p.minRtrCredits, p.maxRtrCredits = rc, rc, rc
}

// idle reports whether no message uses or waits on p.
func (p *peer) idle() bool { return p.refs == 0 && p.txq.n == 0 && p.rtrq.n == 0 }

// newLpeerLocked registers an empty peer with primary prim.
func (in *Instance) newLpeerLocked(prim lnetwire.NID, state PeerState) *lpeer {
	lp := &lpeer{primary: prim, state: state}
	in.lpeers[prim] = lp
	return lp
}

// attachPeerNILocked puts p into lp (lnet_peer_attach_peer_ni), taking it
// from its previous peer; a peer left without NIs is forgotten.
func (in *Instance) attachPeerNILocked(lp *lpeer, p *peer) {
	if p.lp == lp {
		return
	}
	if p.lp != nil {
		in.detachPeerNILocked(p)
	}
	pn := lp.netOf(p.nid.Net())
	if pn == nil {
		if lp.net0.net == 0 && len(lp.net0.nis) == 0 {
			pn = &lp.net0
			pn.nis = pn.ni0[:0]
		} else {
			pn = &peerNet{}
			pn.nis = pn.ni0[:0]
		}
		pn.net = p.nid.Net()
		pn.selPriority = maxSelPriority
		if lp.nets == nil {
			lp.nets = lp.nets0[:0]
		}
		if p.nid == lp.primary {
			lp.nets = slices.Insert(lp.nets, 0, pn)
		} else {
			lp.nets = append(lp.nets, pn)
		}
	}
	if p.nid == lp.primary {
		pn.nis = slices.Insert(pn.nis, 0, p)
	} else {
		pn.nis = append(pn.nis, p)
	}
	p.lp = lp
	lp.nnis++
	in.peers[p.nid] = p
	if lp.isMR() && p.nonMRPref {
		p.nonMRPref, p.prefNIDs = false, nil
	}
	if len(in.mr.udsp) > 0 {
		in.applyUDSPToPeerNILocked(p)
	}
}

// detachPeerNILocked takes p out of its peer (it stays in Instance.peers
// unless the caller removes it). The peer goes when it has no NIs left.
func (in *Instance) detachPeerNILocked(p *peer) {
	lp := p.lp
	if lp == nil {
		return
	}
	p.lp = nil
	lp.nnis--
	for i, pn := range lp.nets {
		if j := slices.Index(pn.nis, p); j >= 0 {
			pn.nis = slices.Delete(pn.nis, j, j+1)
			if len(pn.nis) == 0 {
				lp.nets = slices.Delete(lp.nets, i, i+1)
				*pn = peerNet{} // net0 can be reused
			}
			break
		}
	}
	if lp.nnis == 0 && in.lpeers[lp.primary] == lp {
		delete(in.lpeers, lp.primary)
		lp.state |= PeerMarkDeleted
	}
}

// removePeerNILocked forgets p (lnet_peer_ni_del_locked). A peer NI that
// messages still use cannot vanish under them: it is left as a traffic
// peer of its own, as the next message to its NID would recreate it.
func (in *Instance) removePeerNILocked(p *peer) {
	in.detachPeerNILocked(p)
	if !p.idle() {
		lp := in.newLpeerLocked(p.nid, 0)
		in.attachPeerNILocked(lp, p)
		return
	}
	delete(in.peers, p.nid)
	in.unqueueRecoveryLocked(p)
}

// peerTrafficAddLocked returns nid's peer NI, creating it as a new
// non-Multi-Rail peer of one NI when unknown (lnet_peer_ni_traffic_add).
func (in *Instance) peerTrafficAddLocked(nid lnetwire.NID) *peer {
	if p := in.peers[nid]; p != nil {
		return p
	}
	p := in.newPeerNILocked(nid)
	lp := in.lpeers[nid]
	if lp == nil {
		lp = in.newLpeerLocked(nid, 0)
	}
	in.attachPeerNILocked(lp, p)
	return p
}

// peerLocked finds or creates the peer NI for nid and makes sure it is
// bound to a usable local NI on its net (ni when it has none, or when its
// NI went down while it was idle).
func (in *Instance) peerLocked(nid lnetwire.NID, ni *netIface) *peer {
	p := in.peerTrafficAddLocked(nid)
	if p.ni == ni {
		return p
	}
	if p.ni == nil || (p.ni.down && p.idle()) {
		in.bindPeerNILocked(p, ni)
	}
	return p
}

// peerAddLocked is lnet_peer_add: create a peer with primary prim. An
// existing configured peer with that primary is left as it is (an
// attempt to change its Multi-Rail flag is ErrPerm, a different primary
// ErrPeerExists); a peer created by traffic or discovery is re-created.
func (in *Instance) peerAddLocked(prim lnetwire.NID, flags PeerState) (*lpeer, error) {
	p := in.peers[prim]
	if p != nil && p.lp != nil {
		lp := p.lp
		switch {
		case lp.state&PeerConfigured != 0:
			if lp.primary != prim {
				return nil, fmt.Errorf("%w: %v belongs to %v", ErrPeerExists, prim, lp.primary)
			}
			if (lp.state^flags)&PeerMultiRail != 0 {
				return nil, fmt.Errorf("%w: Multi-Rail flag of %v differs", ErrPerm, prim)
			}
			return lp, nil
		case lp.state&PeerLockPrimary != 0:
			return nil, fmt.Errorf("%w: %v is locked to primary %v", ErrPeerExists, prim, lp.primary)
		case flags&(PeerLockPrimary|PeerConfigured) == 0 && lp.primary == prim:
			return nil, fmt.Errorf("%w: peer %v", ErrPeerExists, prim)
		}
		// Re-create as configured: the NID keeps its peer NI (credits,
		// statistics); the old peer's other NIs are deleted.
		in.detachPeerNILocked(p)
		in.peerDelLocked(lp)
	}
	if o := in.lpeers[prim]; o != nil {
		in.peerDelLocked(o)
	}
	lp := in.newLpeerLocked(prim, 0)
	if p == nil {
		p = in.newPeerNILocked(prim)
	}
	in.attachPeerNILocked(lp, p)
	in.peerSetFlagsLocked(lp, flags)
	return lp, nil
}

// peerSetFlagsLocked applies the flags of an attach (configured,
// Multi-Rail, primary lock).
func (in *Instance) peerSetFlagsLocked(lp *lpeer, flags PeerState) {
	lp.state |= flags & (PeerConfigured | PeerDiscovered)
	if flags&PeerMultiRail != 0 {
		lp.setMRLocked()
	}
	if flags&PeerLockPrimary != 0 && lp.state&PeerLockPrimary == 0 {
		lp.state |= PeerLockPrimary
		lp.primLockTS = time.Now().UnixNano()
	}
}

// peerAddNIDLocked is lnet_peer_add_nid: give lp the NID nid. A NID of
// another peer moves over (its peer NI keeps credits and statistics)
// unless it was configured for that peer (ErrPeerExists); if it was that
// peer's primary NID, the rest of that peer is deleted. Non-configuration
// changes to a configured peer are ErrPerm, as is a non-MR add to a
// Multi-Rail peer; a second NID on one net of a non-MR peer is
// ErrNotUniq.
func (in *Instance) peerAddNIDLocked(lp *lpeer, nid lnetwire.NID, flags PeerState) error {
	if flags&PeerConfigured == 0 && lp.state&PeerConfigured != 0 {
		return fmt.Errorf("%w: %v is configured", ErrPerm, lp.primary)
	}
	if flags&PeerMultiRail != 0 {
		lp.setMRLocked()
	} else if lp.isMR() {
		return fmt.Errorf("%w: %v is Multi-Rail", ErrPerm, lp.primary)
	}
	p := in.peers[nid]
	if p != nil && p.lp == lp {
		return nil
	}
	if pn := lp.netOf(nid.Net()); pn != nil && !lp.isMR() {
		return fmt.Errorf("%w: %v already has %v on %v", ErrNotUniq, lp.primary, pn.nis[0].nid, nid.Net())
	}
	if p != nil && p.lp != nil {
		lp2 := p.lp
		if lp2.state&PeerConfigured != 0 {
			return fmt.Errorf("%w: %v is configured for %v", ErrPeerExists, nid, lp2.primary)
		}
		if lp2.primary == nid {
			if lp2.state&PeerLockPrimary != 0 && lp2.nnis > 1 {
				lp2.state |= PeerBadConfig
				lp.state |= PeerBadConfig
				in.log.Error("lnet: peer NID is already locked with another peer", "peer", lp.primary, "nid", nid, "other", lp2.primary)
				return nil
			}
			if lp2.state&PeerLockPrimary != 0 && (lp.state&PeerLockPrimary == 0 || lp2.primLockTS < lp.primLockTS) {
				// The NID locked earliest stays the primary.
				delete(in.lpeers, lp.primary)
				lp.primary = nid
				in.lpeers[nid] = lp
				lp.primLockTS = lp2.primLockTS
				lp.state |= PeerLockPrimary
			}
			in.detachPeerNILocked(p)
			in.peerDelLocked(lp2)
		}
	}
	if p == nil {
		p = in.newPeerNILocked(nid)
	}
	in.attachPeerNILocked(lp, p)
	in.peerSetFlagsLocked(lp, flags)
	return nil
}

// peerDelNIDLocked is lnet_peer_del_nid: take nid from lp. The primary
// NID goes only when it is the last (ErrBusy), unless flags has
// PeerRtrNIForceDel, which makes the next NID primary; a locked primary
// never goes (ErrPerm). Non-configuration changes to a configured peer
// are ErrPerm.
func (in *Instance) peerDelNIDLocked(lp *lpeer, nid lnetwire.NID, flags PeerState) error {
	if flags&PeerConfigured == 0 && lp.state&PeerConfigured != 0 {
		return fmt.Errorf("%w: %v is configured", ErrPerm, lp.primary)
	}
	if lp.state&PeerLockPrimary != 0 && nid == lp.primary {
		return fmt.Errorf("%w: primary %v is locked", ErrPerm, nid)
	}
	p := in.peers[nid]
	if p == nil {
		return fmt.Errorf("%w: %v", ErrNoEnt, nid)
	}
	if p.lp != lp {
		return fmt.Errorf("%w: %v is not a NID of %v", ErrInvalid, nid, lp.primary)
	}
	if nid == lp.primary && lp.nnis != 1 {
		if flags&PeerRtrNIForceDel == 0 {
			return fmt.Errorf("%w: %v is the primary NID of a peer with other NIDs", ErrBusy, nid)
		}
		var next lnetwire.NID
		lp.eachNI(func(q *peer) {
			if next == 0 && q != p {
				next = q.nid
			}
		})
		in.peerSetPrimaryRawLocked(lp, next)
	}
	in.removePeerNILocked(p)
	return nil
}

// peerDelLocked is lnet_peer_del: forget the peer and its NIs.
func (in *Instance) peerDelLocked(lp *lpeer) {
	var nis []*peer
	lp.eachNI(func(p *peer) { nis = append(nis, p) })
	for _, p := range nis {
		in.removePeerNILocked(p)
	}
	if in.lpeers[lp.primary] == lp {
		delete(in.lpeers, lp.primary)
	}
	lp.state |= PeerMarkDeleted
	if lp.dc != nil && lp.dc.wait != nil {
		close(lp.dc.wait)
		lp.dc.wait = nil
	}
}

// peerSetPrimaryLocked is lnet_peer_set_primary_nid: make nid lp's
// primary (unless the primary is locked) and one of its NIDs.
func (in *Instance) peerSetPrimaryLocked(lp *lpeer, nid lnetwire.NID, flags PeerState) error {
	if lp.primary == nid {
		return nil
	}
	old := lp.primary
	if lp.state&PeerLockPrimary == 0 {
		in.peerSetPrimaryRawLocked(lp, nid)
	}
	if err := in.peerAddNIDLocked(lp, nid, flags); err != nil {
		in.peerSetPrimaryRawLocked(lp, old)
		if lp.state&(PeerConfigured|PeerLockPrimary) != 0 {
			return nil
		}
		return err
	}
	in.peerOrderPrimaryLocked(lp)
	return nil
}

// peerSetPrimaryRawLocked renames lp in Instance.lpeers.
func (in *Instance) peerSetPrimaryRawLocked(lp *lpeer, nid lnetwire.NID) {
	if in.lpeers[lp.primary] == lp {
		delete(in.lpeers, lp.primary)
	}
	lp.primary = nid
	if o := in.lpeers[nid]; o != nil && o != lp && o.nnis == 0 {
		delete(in.lpeers, nid)
	}
	in.lpeers[nid] = lp
}

// peerOrderPrimaryLocked moves the primary NID's net and peer NI first.
func (in *Instance) peerOrderPrimaryLocked(lp *lpeer) {
	for i, pn := range lp.nets {
		if j := slices.IndexFunc(pn.nis, func(p *peer) bool { return p.nid == lp.primary }); j >= 0 {
			p := pn.nis[j]
			pn.nis = slices.Insert(slices.Delete(pn.nis, j, j+1), 0, p)
			lp.nets = slices.Insert(slices.Delete(lp.nets, i, i+1), 0, pn)
			return
		}
	}
}

// peerMergeNIDsLocked is the add/delete part of lnet_peer_merge_data:
// lp's NIDs become exactly nids (NIDs already in other, non-configured
// peers move over; NIDs of lp not in nids are deleted) and prim (one of
// nids) its primary unless locked. flags: PeerDiscovered, plus
// PeerMultiRail when the peer said so. Errors from configured peers are
// skipped (configuration overrides discovery), as Lustre does; the first
// one is returned for the log.
func (in *Instance) peerMergeNIDsLocked(lp *lpeer, prim lnetwire.NID, nids []lnetwire.NID, flags PeerState) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, nid := range nids {
		if in.peers[nid] == nil || in.peers[nid].lp != lp {
			keep(in.peerAddNIDLocked(lp, nid, flags))
		}
	}
	var gone []lnetwire.NID
	lp.eachNI(func(p *peer) {
		if !slices.Contains(nids, p.nid) && p.nid != lnetwire.NIDLo0 {
			gone = append(gone, p.nid)
		}
	})
	if in.isGatewayPeerLocked(lp) {
		// A router may change its primary NID: the upper layers do not
		// rely on it.
		flags |= PeerRtrNIForceDel
	}
	if slices.Contains(nids, prim) && lp.primary != prim {
		keep(in.peerSetPrimaryLocked(lp, prim, flags))
	}
	for _, nid := range gone {
		keep(in.peerDelNIDLocked(lp, nid, flags))
	}
	lp.state |= flags & PeerDiscovered
	in.peerOrderPrimaryLocked(lp)
	return first
}

// aliveness reports whether aliveness tracking applies to p.
func (p *peer) aliveness() bool {
	return p.ni != nil && !p.ni.lo && p.ni.ni.Tunables.PeerTimeout > 0
}

// setPeerAliveLocked records what an LND (or a received message) says.
func (in *Instance) setPeerAliveLocked(p *peer, alive bool, when time.Time) {
	t := int64(when.Sub(in.start))
	if alive {
		p.down = false
		p.lastAlive = max(p.lastAlive, t, 1) // 0 means never
		return
	}
	if t < p.lastAlive {
		return // older news than the last sign of life
	}
	if !p.down {
		p.down = true
		p.downAt = t
	}
}

// peerAliveLocked decides whether to try sending to p now.
func (in *Instance) peerAliveLocked(p *peer) bool {
	if !p.down || !p.aliveness() {
		return true
	}
	if q, ok := p.ni.drv.(lnd.PeerQuerier); ok {
		if last := q.Query(p.nid); !last.IsZero() && int64(last.Sub(in.start)) > p.downAt {
			p.down = false
			p.lastAlive = int64(last.Sub(in.start))
			return true
		}
	}
	now := in.nowNS()
	if now-p.downAt >= int64(peerRetryInterval) {
		p.downAt = now // let this one through; the next waits again
		return true
	}
	return false
}

// PeerConfig is one configured peer (lnetctl peer add; YAML "peer:").
type PeerConfig struct {
	// Primary is the peer's primary NID.
	Primary lnetwire.NID
	// NIDs are its other NIDs (the primary may be repeated).
	NIDs []lnetwire.NID
	// NonMR makes a non-Multi-Rail peer (--non_mr): one NID per net.
	NonMR bool
	// LockPrimary keeps Primary as the primary NID whatever discovery
	// learns (--lock_prim).
	LockPrimary bool
}

// AddPeer configures a peer (lnet_user_add_peer_ni for the primary, then
// for each NID). Adding NIDs to a configured peer extends it. Errors:
// ErrInvalid (bad NIDs), ErrPerm (the Multi-Rail flag differs from the
// configured peer's), ErrPeerExists (a NID configured for another peer),
// ErrNotUniq (two NIDs on one net of a non-MR peer).
func (in *Instance) AddPeer(pc PeerConfig) error {
	bad := func(n lnetwire.NID) bool {
		return n == lnetwire.NIDAny || n == 0 || n == lnetwire.NIDLo0 || n.Net().Type() == lnetwire.LOLND
	}
	if bad(pc.Primary) {
		return fmt.Errorf("%w: primary NID %v", ErrInvalid, pc.Primary)
	}
	for _, n := range pc.NIDs {
		if bad(n) {
			return fmt.Errorf("%w: NID %v", ErrInvalid, n)
		}
	}
	flags := PeerConfigured
	if !pc.NonMR {
		flags |= PeerMultiRail
	}
	if pc.LockPrimary {
		flags |= PeerLockPrimary
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ErrClosed
	}
	if in.byNID[pc.Primary] != nil {
		return fmt.Errorf("%w: %v is a local NID", ErrInvalid, pc.Primary)
	}
	lp, err := in.peerAddLocked(pc.Primary, flags)
	if err != nil {
		return err
	}
	if lp.primary != pc.Primary {
		return fmt.Errorf("%w: %v is not the primary of %v", ErrNotPrimary, pc.Primary, lp.primary)
	}
	for _, n := range pc.NIDs {
		if n == pc.Primary {
			continue
		}
		if in.byNID[n] != nil {
			return fmt.Errorf("%w: %v is a local NID", ErrInvalid, n)
		}
		if err := in.peerAddNIDLocked(lp, n, flags&^PeerLockPrimary); err != nil {
			return err
		}
	}
	return nil
}

// DelPeerNI is lnet_del_peer_ni (lnetctl peer del --prim_nid P [--nid N]):
// with nid NIDAny (or nid == P) the whole peer goes, else only nid.
// ErrNoEnt: unknown prim; ErrNotPrimary: prim is not the primary; ErrBusy:
// the peer is a gateway of a route. A peer whose primary NID is locked
// keeps it: only its other NIDs go.
func (in *Instance) DelPeerNI(prim, nid lnetwire.NID) error {
	if prim == lnetwire.NIDAny || prim == 0 {
		return ErrInvalid
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	lp := in.lpeerLocked(prim)
	if lp == nil {
		return fmt.Errorf("%w: peer %v", ErrNoEnt, prim)
	}
	if lp.primary != prim {
		return fmt.Errorf("%w: %v (the primary is %v)", ErrNotPrimary, prim, lp.primary)
	}
	if in.isGatewayPeerLocked(lp) {
		return fmt.Errorf("%w: %v is a router", ErrBusy, prim)
	}
	flags := PeerConfigured | lp.state&PeerMultiRail
	if nid == lnetwire.NIDAny || nid == 0 || nid == lp.primary {
		if lp.state&PeerLockPrimary != 0 {
			var others []lnetwire.NID
			lp.eachNI(func(p *peer) {
				if p.nid != lp.primary {
					others = append(others, p.nid)
				}
			})
			for _, n := range others {
				_ = in.peerDelNIDLocked(lp, n, flags)
			}
			lp.state &^= PeerNIDsUptodate
			return nil
		}
		in.peerDelLocked(lp)
		return nil
	}
	return in.peerDelNIDLocked(lp, nid, flags)
}

// isGatewayPeerLocked reports whether any NID of lp is a route's gateway.
func (in *Instance) isGatewayPeerLocked(lp *lpeer) bool {
	gw := false
	lp.eachNI(func(p *peer) {
		if in.routes.gateways[p.nid] != nil {
			gw = true
		}
	})
	return gw
}

// DelPeer forgets an idle peer NI and tells its LND. It fails with
// ErrBusy while messages use it. A Multi-Rail peer loses that NID only
// (its primary NID: the whole peer).
func (in *Instance) DelPeer(nid lnetwire.NID) error {
	in.mu.Lock()
	p := in.peers[nid]
	if p == nil {
		in.mu.Unlock()
		return ErrNoEnt
	}
	if !p.idle() {
		in.mu.Unlock()
		return ErrBusy
	}
	if lp := p.lp; lp != nil && lp.primary == nid && lp.nnis > 1 {
		in.peerDelLocked(lp)
	} else {
		in.removePeerNILocked(p)
	}
	delete(in.primary, nid)
	ni := p.ni
	ok := ni != nil && !ni.down
	if ok {
		ni.calls.Add(1)
	}
	in.mu.Unlock()
	if ok {
		if n, is := ni.drv.(lnd.PeerDownNotifier); is {
			n.NotifyPeerDown(nid)
		}
		ni.calls.Done()
	}
	return nil
}

// unbindNILocked handles the peer NIs bound to ni when ni stops
// (lnet_peer_net_del / lnet_peer_table_cleanup): messages waiting on them
// through ni fail (appended to failed) and routed messages received on ni
// are handed back (routed; the caller took rxNI.calls for each). A peer
// NI moves to another up NI of the net; failing that, traffic peers (and
// non-Multi-Rail discovered ones) are forgotten and configured or
// Multi-Rail discovered ones stay, unbound.
func (in *Instance) unbindNILocked(ni *netIface, failed, routed *msgQueue) {
	for _, p := range in.peers {
		for m := p.txq.removeIf(func(m *message) bool { return m.ni == ni }); m != nil; {
			next := m.next
			failed.push(m)
			m = next
		}
		for m := p.rtrq.removeIf(func(m *message) bool { return m.rxNI == ni }); m != nil; {
			next := m.next
			m.rxNI.calls.Add(1)
			routed.push(m)
			m = next
		}
		if p.ni != ni {
			continue
		}
		if other := in.firstNIOnLocked(ni.net()); other != nil && other != ni {
			p.ni = other
			continue
		}
		// A peer discovered with discovery off is not Multi-Rail and
		// knows only its traffic NIDs: it goes as a traffic peer does
		// (Lustre's lnet_peer_table_cleanup_locked deletes every peer NI
		// of the net; a kept one would keep the down state the closing
		// connections gave it).
		if lp := p.lp; lp != nil && (lp.state&PeerConfigured != 0 || lp.state&PeerDiscovered != 0 && lp.isMR()) {
			p.ni = nil
			continue
		}
		in.detachPeerNILocked(p)
		delete(in.peers, p.nid)
	}
}

// PeerDetail is one peer as lnetctl peer show prints it.
type PeerDetail struct {
	Primary   lnetwire.NID
	MultiRail bool
	State     PeerState // lp_state bits ("peer state")
	NIs       []PeerNIDetail
}

// PeerNIDetail is one peer NI of lnetctl peer show -v.
type PeerNIDetail struct {
	NID lnetwire.NID
	// State is "up", "down", or "NA" when aliveness is not tracked.
	State string
	// Credits as in the peers table (max_ni_tx_credits,
	// available_tx_credits, min_tx_credits, available_rtr_credits,
	// min_rtr_credits) and the bytes queued (tx_q_num_of_buf).
	MaxTxCredits, TxCredits, MinTxCredits int
	RtrCredits, MinRtrCredits             int
	QueueBytes                            int64
	Refs                                  int
	SendCount, RecvCount, DropCount       uint64
	// Health is the health value (0..MaxHealthValue); the rest are
	// lnet_health_remote_stats and the recovery ping state.
	Health                                  int
	Dropped, Timeout, Error, NetworkTimeout uint64
	PingCount                               uint32
	NextPing                                time.Time // zero: none planned
	// SelPriority is the UDSP selection priority, PrefNIDs the preferred
	// local NIDs.
	SelPriority uint32
	PrefNIDs    []lnetwire.NID
}

// PeerList returns the peers sorted by primary NID (lnetctl peer show).
func (in *Instance) PeerList() []PeerDetail {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]PeerDetail, 0, len(in.lpeers))
	for _, lp := range in.lpeers {
		if lp.primary == lnetwire.NIDLo0 {
			continue // the loopback NI's peer entry
		}
		out = append(out, in.peerDetailLocked(lp))
	}
	slices.SortFunc(out, func(a, b PeerDetail) int { return cmpNID(a.Primary, b.Primary) })
	return out
}

// PeerOf returns the peer owning nid (lnetctl peer show --nid).
func (in *Instance) PeerOf(nid lnetwire.NID) (PeerDetail, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	lp := in.lpeerLocked(nid)
	if lp == nil {
		return PeerDetail{}, false
	}
	return in.peerDetailLocked(lp), true
}

func cmpNID(a, b lnetwire.NID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (in *Instance) peerDetailLocked(lp *lpeer) PeerDetail {
	d := PeerDetail{Primary: lp.primary, MultiRail: lp.isMR(), State: lp.state}
	lp.eachNI(func(p *peer) {
		st := "up"
		switch {
		case !p.aliveness():
			st = "NA"
		case p.down:
			st = "down"
		}
		nd := PeerNIDetail{
			NID: p.nid, State: st,
			MaxTxCredits: int(p.maxTxCredits), TxCredits: int(p.txCredits), MinTxCredits: int(p.minTxCredits),
			RtrCredits: int(p.rtrCredits), MinRtrCredits: int(p.minRtrCredits), QueueBytes: p.txqnob,
			Refs: int(p.refs) + 1, SendCount: p.sendCount, RecvCount: p.recvCount, DropCount: p.dropCount,
			Health: int(p.health), SelPriority: p.selPriority, PrefNIDs: slices.Clone(p.prefNIDs),
		}
		if h := p.hs; h != nil {
			nd.Dropped, nd.Timeout, nd.Error, nd.NetworkTimeout = h.dropped, h.timeout, h.error, h.networkTimeout
			nd.PingCount = h.pingCount
			if h.queued && h.nextPing > 0 {
				nd.NextPing = in.start.Add(time.Duration(h.nextPing))
			}
		}
		d.NIs = append(d.NIs, nd)
	})
	return d
}
