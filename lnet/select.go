package lnet

// Multi-Rail path selection (lib-move.c lnet_select_pathway and its
// send cases; lnet-wire.md §8.4).
//
// Given the destination NID (and, when the caller fixed it, the source
// NID), a send picks the local NI to send from and the peer NI to send to:
//
//   - own NIDs and 0@lo go through the loopback NI;
//   - a response (ACK, REPLY) goes back from the NI its request came in
//     on, to the peer NI it came from (or the gateway it came through);
//   - a source NID fixed by the caller (LNetPut/LNetGet's self) is kept,
//     and so is the destination NID: the rest of an RPC uses the same
//     pair (SRC_SPEC cases);
//   - a non-Multi-Rail peer is always sent the NID asked for, from the
//     local NI it first talked to on that net (its preferred NID), so it
//     sees one source (SRC_ANY_*_NMR_DST; recovery pings are treated so);
//   - for a Multi-Rail peer every NI counts: first the best of its peer
//     nets that we have a local net on (peer-net health, UDSP priority,
//     local-net health and priority, then round robin), then the best
//     local NI on that net (lnet_get_best_ni: not fatal, health, UDSP
//     priority, credits, round robin), then the best of the peer's NIs on
//     it (lnet_select_peer_ni: health, UDSP priority, preferred NIDs,
//     credits, round robin). A Multi-Rail peer with no local net is
//     reached through a router: its best routable peer net and peer NI
//     become the final destination (the header's dest NID), and the
//     gateway is chosen as in route.go, its own NIs by health, queued
//     bytes and credits.
//
// Round robin uses sequence numbers bumped on every send, as
// lnet_handle_send does: the peer's lp_send_seq is copied to the chosen
// peer net and peer NI, a global counter to the chosen local net and NI,
// so the least recently used of equals comes next.

import (
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// maxSelPriority is LNET_MAX_SELECTION_PRIORITY: no UDSP priority.
const maxSelPriority = ^uint32(0)

// mrState is the instance-wide Multi-Rail state: round-robin counters,
// per local net selection data, the health counters and recovery
// (health.go) and the UDSP rules (udsp.go). Guarded by Instance.mu.
type mrState struct {
	netSeq uint32                     // ln_net_seq
	nets   map[lnetwire.Net]*localNet // by local net
	hstats HealthStats                // lnet_counters_health
	clock  func() time.Time           // time source (tests replace it)
	rec    recoveryState              // health.go
	udsp   []*udspRule                // udsp.go, in index order
	// rteRules: some UDSP rule is a router rule (udsp.go
	// preferredRouterLocked; route choice skips the check without).
	rteRules bool
}

// localNet is the selection state of one local net (struct lnet_net's
// net_seq and net_sel_priority).
type localNet struct {
	seq         uint32
	selPriority uint32
}

// niMR is a local NI's selection and health state (struct lnet_ni's
// ni_seq, ni_sel_priority, ni_healthv, ni_fatal_error_on, ni_hstats,
// recovery fields).
type niMR struct {
	// sick is MaxHealthValue minus the health value, so that a new NI
	// (zero) is fully healthy.
	sick        int32
	seq         uint32
	selPriority uint32 // UDSP; maxSelPriority when none (see niPrio)
	prioSet     bool
	fatal       bool // the LND reported the link down (ni_fatal_error_on)
	hs          niHealthStats
	rec         niRecovery // health.go
}

func (h *niMR) health() int32 { return MaxHealthValue - h.sick }

func (h *niMR) prio() uint32 {
	if !h.prioSet {
		return maxSelPriority
	}
	return h.selPriority
}

// now returns the instance's time (a fake clock in tests).
func (in *Instance) now() time.Time {
	if in.mr.clock != nil {
		return in.mr.clock()
	}
	return time.Now()
}

// nowNS is now as ns since Instance.start.
func (in *Instance) nowNS() int64 { return int64(in.now().Sub(in.start)) }

// localNetLockedOf returns the selection state of local net n.
func (in *Instance) localNetOf(n lnetwire.Net) *localNet {
	ln := in.mr.nets[n]
	if ln == nil {
		if in.mr.nets == nil {
			in.mr.nets = make(map[lnetwire.Net]*localNet)
		}
		ln = &localNet{selPriority: maxSelPriority}
		in.mr.nets[n] = ln
	}
	return ln
}

// usable reports whether ni can carry a new message.
func (ni *netIface) usable() bool { return ni.ready && !ni.down && !ni.lo }

// netHealthLocked is lnet_get_net_healthv_locked: the best health of the
// usable NIs on net; ok is false when there is none.
func (in *Instance) netHealthLocked(net lnetwire.Net) (h int32, ok bool) {
	for _, ni := range in.nis {
		if ni.usable() && ni.net() == net {
			h, ok = max(h, ni.mr.health()), true
		}
	}
	return h, ok
}

// bestNILocked is lnet_get_best_ni over the usable NIs on net: not
// fatal, then health, then UDSP priority, then the most tx credits, then
// the least recently used. nil when net has none. (One NUMA node: every
// NI is at the same distance, so numa_range has nothing to choose.)
func (in *Instance) bestNILocked(net lnetwire.Net) *netIface {
	var best *netIface
	for _, ni := range in.nis {
		if !ni.usable() || ni.net() != net {
			continue
		}
		if best == nil || niBetter(ni, best) {
			best = ni
		}
	}
	return best
}

// niBetter reports whether a beats b in lnet_get_best_ni's order.
func niBetter(a, b *netIface) bool {
	if a.mr.fatal != b.mr.fatal {
		return !a.mr.fatal
	}
	if ha, hb := a.mr.health(), b.mr.health(); ha != hb {
		return ha > hb
	}
	if pa, pb := a.mr.prio(), b.mr.prio(); pa != pb {
		return pa < pb
	}
	if a.txCredits != b.txCredits {
		return a.txCredits > b.txCredits
	}
	return a.mr.seq < b.mr.seq
}

// peerNIBetter reports whether a beats b in lnet_select_peer_ni's order
// when sending from ni (nil: no local NI chosen yet).
func peerNIBetter(a, b *peer, ni *netIface) bool {
	if a.health != b.health {
		return a.health > b.health
	}
	if a.selPriority != b.selPriority {
		return a.selPriority < b.selPriority
	}
	if ni != nil {
		pa, pb := a.prefers(ni.nid()), b.prefers(ni.nid())
		if pa != pb {
			return pa
		}
	}
	if a.txCredits != b.txCredits {
		return a.txCredits > b.txCredits
	}
	return a.seq < b.seq
}

// prefers reports whether nid is one of p's preferred local NIDs.
func (p *peer) prefers(nid lnetwire.NID) bool {
	for _, n := range p.prefNIDs {
		if n == nid {
			return true
		}
	}
	return false
}

// netHealth is lpn_healthv: the best health of the peer net's NIs.
func (pn *peerNet) health() int32 {
	var h int32
	for _, p := range pn.nis {
		h = max(h, p.health)
	}
	return h
}

// bestPeerNILocked is lnet_select_peer_ni over the peer NIs of pn.
func bestPeerNI(pn *peerNet, ni *netIface) *peer {
	var best *peer
	for _, p := range pn.nis {
		if best == nil || peerNIBetter(p, best, ni) {
			best = p
		}
	}
	return best
}

// bestLocalPeerNetLocked is lnet_find_best_ni_on_local_net's choice of
// peer net: among lp's nets that we have a usable NI on, the best peer
// net health, UDSP priority, local net health and priority, then round
// robin over peer nets and local nets.
func (in *Instance) bestLocalPeerNetLocked(lp *lpeer) *peerNet {
	var best *peerNet
	var bestNetH int32
	var bestLN *localNet
	for _, pn := range lp.nets {
		nh, ok := in.netHealthLocked(pn.net)
		if !ok {
			continue
		}
		ln := in.localNetOf(pn.net)
		if best != nil {
			if h, bh := pn.health(), best.health(); h != bh {
				if h < bh {
					continue
				}
			} else if pn.selPriority != best.selPriority {
				if pn.selPriority > best.selPriority {
					continue
				}
			} else if nh != bestNetH {
				if nh < bestNetH {
					continue
				}
			} else if ln.selPriority != bestLN.selPriority {
				if ln.selPriority > bestLN.selPriority {
					continue
				}
			} else if pn.seq != best.seq {
				if pn.seq > best.seq {
					continue
				}
			} else if bestLN.seq <= ln.seq {
				continue
			}
		}
		best, bestNetH, bestLN = pn, nh, ln
	}
	return best
}

// bestRoutedPeerNetLocked is lnet_handle_find_routed_path's choice of a
// remote peer net for a Multi-Rail peer with no local net: among the
// nets we have routes to, the best health, UDSP priority, then round
// robin.
func (in *Instance) bestRoutedPeerNetLocked(lp *lpeer) *peerNet {
	var best *peerNet
	for _, pn := range lp.nets {
		if in.routes.nets[pn.net] == nil {
			continue
		}
		if best != nil {
			if h, bh := pn.health(), best.health(); h != bh {
				if h < bh {
					continue
				}
			} else if pn.selPriority != best.selPriority {
				if pn.selPriority > best.selPriority {
					continue
				}
			} else if best.seq <= pn.seq {
				continue
			}
		}
		best = pn
	}
	return best
}

// preferredNILocked is lnet_find_existing_preferred_best_ni: the usable
// local NI a non-MR peer's NIs on p's net prefer, or nil.
func (in *Instance) preferredNILocked(p *peer) *netIface {
	if p.lp == nil {
		return nil
	}
	pn := p.lp.netOf(p.nid.Net())
	if pn == nil {
		return nil
	}
	for _, q := range pn.nis {
		for _, nid := range q.prefNIDs {
			if ni := in.byNID[nid]; ni != nil && ni.usable() {
				return ni
			}
		}
	}
	return nil
}

// setNonMRPrefLocked is lnet_set_non_mr_pref_nid: the first local NI a
// request to a non-MR peer NI goes out on becomes its preferred NID.
func (in *Instance) setNonMRPrefLocked(p *peer, ni *netIface, m *message) {
	if p.lp == nil || p.lp.isMR() || isResponse(m) || len(p.prefNIDs) > 0 || ni == nil || ni.lo {
		return
	}
	p.prefNIDs = append(p.prefNIDs, ni.nid())
	p.nonMRPref = true
}

// isResponse reports whether m answers a request (ACK, REPLY).
func isResponse(m *message) bool {
	return m.Type == lnetwire.MsgACK || m.Type == lnetwire.MsgREPLY
}

// reservedMsg is lnet_reserved_msg: ping and push traffic, which may
// leave from any NI even to a non-MR peer.
func reservedMsg(m *message) bool {
	return (m.Type == lnetwire.MsgPUT || m.Type == lnetwire.MsgGET) && m.Hdr.Portal == ReservedPortal
}

// selectPathLocked is lnet_select_pathway: it sets m.ni, m.peer, the
// header's src (and, for Multi-Rail peers, dest) NID and the LND target.
// self is the source NID the caller asked for (NIDAny: any).
func (in *Instance) selectPathLocked(m *message, self lnetwire.NID) error {
	dst := m.Hdr.DestNID
	var ni *netIface
	var p *peer // next hop
	nextHop := dst
	switch {
	case dst == lnetwire.NIDLo0 || in.byNID[dst] != nil:
		ni = in.lo
		nextHop = lnetwire.NIDLo0
		m.Hdr.SrcNID = dst
	case isResponse(m) && m.ni != nil && !m.ni.lo && m.ni.net() == dst.Net():
		// Back the way the request came.
		ni = m.ni
		if m.from != 0 {
			nextHop = m.from
		}
		m.Hdr.SrcNID = ni.nid()
	case self != lnetwire.NIDAny:
		// Source specified: keep the source and the destination NID.
		ni = in.byNID[self]
		if ni == nil {
			return ErrInvalid
		}
		if ni.net() != dst.Net() {
			var err error
			if nextHop, _, err = in.routeLocked(m, dst.Net(), ni.net()); err != nil {
				return err
			}
		}
		in.setNonMRPrefLocked(in.peerTrafficAddLocked(dst), ni, m)
		m.Hdr.SrcNID = ni.nid()
	default:
		var err error
		if ni, p, nextHop, err = in.selectAnyLocked(m, dst); err != nil {
			return err
		}
		m.Hdr.SrcNID = ni.nid()
	}
	if ni == nil || ni.down {
		return lnd.ErrShutdown
	}
	m.ni = ni
	if p == nil || p.nid != nextHop {
		p = in.peerLocked(nextHop, ni)
	} else if p.ni == nil || (p.ni.down && p.idle()) {
		in.bindPeerNILocked(p, ni)
	}
	m.peer = p
	p.refs++
	trackNextHopLocked(m)
	in.bumpSeqLocked(p, ni)
	pid := m.Hdr.DestPID
	if nextHop != m.Hdr.DestNID && !ni.lo {
		pid = lnetwire.PIDLustre // the target is a router
		m.Sink = lnd.IOV{}       // its REPLY comes back as a message
	}
	m.Msg.Target = lnetwire.ProcessID{NID: nextHop, PID: pid}
	return nil
}

// selectAnyLocked handles the SRC_ANY send cases of a request: it returns
// the local NI, the next-hop peer NI (nil: look it up by nextHop) and the
// next hop's NID, and may change the header's dest NID (Multi-Rail peer).
func (in *Instance) selectAnyLocked(m *message, dst lnetwire.NID) (*netIface, *peer, lnetwire.NID, error) {
	lpni := in.peerTrafficAddLocked(dst)
	lp := lpni.lp
	if lp == nil || !lp.isMR() || m.recovery {
		// Non-MR peer (or a recovery ping of this very NI): the NID
		// asked for, from its preferred local NI.
		var ni *netIface
		if !reservedMsg(m) && !m.recovery {
			ni = in.preferredNILocked(lpni)
		}
		if ni == nil || ni.net() != dst.Net() {
			ni = in.bestNILocked(dst.Net())
		}
		if ni != nil {
			in.setNonMRPrefLocked(lpni, ni, m)
			return ni, lpni, dst, nil
		}
		pref := in.preferredNILocked(lpni)
		var srcNet lnetwire.Net
		if pref != nil {
			srcNet = pref.net()
		}
		gw, gni, err := in.routeLocked(m, dst.Net(), srcNet)
		if err != nil {
			return nil, nil, 0, err
		}
		in.setNonMRPrefLocked(lpni, gni, m)
		in.bumpFinalSeqLocked(lpni)
		return gni, nil, gw, nil
	}
	if isResponse(m) && in.bestNILocked(dst.Net()) == nil {
		// A routed response to a Multi-Rail peer: to the NID given,
		// through the gateway the request came from (Lustre sends it
		// with the receiving NI as source and msg_from as router, so
		// lnet_handle_find_routed_path picks no other peer net or NI).
		gw, gni, err := in.routeLocked(m, dst.Net(), 0)
		if err != nil {
			return nil, nil, 0, err
		}
		return gni, nil, gw, nil
	}
	// Multi-Rail peer: a local net first.
	if pn := in.bestLocalPeerNetLocked(lp); pn != nil {
		ni := in.bestNILocked(pn.net)
		if best := bestPeerNI(pn, ni); ni != nil && best != nil {
			m.Hdr.DestNID = best.nid
			return ni, best, best.nid, nil
		}
	}
	// Routed: the best remote peer net and peer NI are the final
	// destination; the route's gateway the next hop.
	pn := in.bestRoutedPeerNetLocked(lp)
	if pn == nil {
		return nil, nil, 0, ErrNoRoute
	}
	final := bestPeerNI(pn, nil)
	m.Hdr.DestNID = final.nid
	gw, gni, err := in.routeLocked(m, final.nid.Net(), 0)
	if err != nil {
		return nil, nil, 0, err
	}
	in.bumpFinalSeqLocked(final)
	return gni, nil, gw, nil
}

// bumpSeqLocked is lnet_handle_send's round-robin bookkeeping for the
// chosen peer NI and local NI.
func (in *Instance) bumpSeqLocked(p *peer, ni *netIface) {
	if lp := p.lp; lp != nil {
		lp.sendSeq++
		if pn := lp.netOf(p.nid.Net()); pn != nil {
			pn.seq = lp.sendSeq
		}
		p.seq = lp.sendSeq
	}
	if ni != nil && !ni.lo {
		in.mr.netSeq++
		in.localNetOf(ni.net()).seq = in.mr.netSeq
		ni.mr.seq = in.mr.netSeq
	}
}

// bumpFinalSeqLocked advances the round robin of a routed message's
// final destination peer NI.
func (in *Instance) bumpFinalSeqLocked(p *peer) {
	if lp := p.lp; lp != nil {
		lp.sendSeq++
		if pn := lp.netOf(p.nid.Net()); pn != nil {
			pn.seq = lp.sendSeq
		}
		p.seq = lp.sendSeq
	}
}

// bestGatewayNILocked is the gateway half of lnet_find_route_locked: of
// the gateway peer's NIs on srcNet (any local net when srcNet is 0), the
// healthiest, then the fewest queued bytes, then the most credits
// (lnet_compare_gw_lpnis); gwNID itself when the gateway is not a known
// Multi-Rail peer.
func (in *Instance) bestGatewayNILocked(gwNID lnetwire.NID, srcNet lnetwire.Net) lnetwire.NID {
	lp := in.lpeerLocked(gwNID)
	if lp == nil || lp.nnis <= 1 {
		return gwNID
	}
	var best *peer
	lp.eachNI(func(p *peer) {
		if (srcNet != 0 && p.nid.Net() != srcNet) || in.bestNILocked(p.nid.Net()) == nil {
			return
		}
		if best == nil || gwNIBetter(p, best) {
			best = p
		}
	})
	if best == nil {
		return gwNID
	}
	return best.nid
}

// gwNIBetter is lnet_compare_gw_lpnis: health, queued bytes, credits.
func gwNIBetter(a, b *peer) bool {
	if a.health != b.health {
		return a.health > b.health
	}
	if a.txqnob != b.txqnob {
		return a.txqnob < b.txqnob
	}
	return a.txCredits > b.txCredits
}
