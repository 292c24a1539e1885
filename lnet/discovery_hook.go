package lnet

import "softib/wire/lnetwire"

// mergeDiscoveredLocked is where discovery (discovery.go) changes the
// peer model (peer.go): a ping reply or push of a Multi-Rail peer makes
// lp Multi-Rail with exactly the NIDs it advertised, its advertised
// primary first (lnet_peer_merge_data); NIDs known as other,
// non-configured peers move into lp. A non-Multi-Rail peer, a peer
// configured non-Multi-Rail, or any peer while our discovery is off
// keeps its NIDs (peers stay non-Multi-Rail). It records each NID's
// reported status and returns the peer owning the NIDs afterwards.
func (in *Instance) mergeDiscoveredLocked(lp *lpeer, features uint32, nis []lnetwire.PingNI) *lpeer {
	mr := features&lnetwire.PingFeatMultiRail != 0 && !in.disc.off &&
		!(lp.state&PeerConfigured != 0 && !lp.isMR())
	if mr {
		lp.setMRLocked()
		nids := make([]lnetwire.NID, len(nis))
		for i, e := range nis {
			nids[i] = e.NID
		}
		if err := in.peerMergeNIDsLocked(lp, nis[0].NID, nids, PeerDiscovered|PeerMultiRail); err != nil {
			in.log.Debug("lnet: discovery merge", "peer", lp.primary, "err", err)
		}
		if cur := in.lpeerLocked(nis[0].NID); cur != nil {
			lp = cur
		}
	}
	for _, e := range nis {
		if p := in.peers[e.NID]; p != nil && p.lp == lp {
			p.nsStatus = e.Status
		}
	}
	return lp
}

// initiatorNIDLocked is lnet_peer_primary_nid_locked for a received
// message: the primary NID of the peer owning src (src itself when no
// peer has it). Events report it as the initiator and MEs match against
// it, so a Multi-Rail peer is one initiator whichever of its NIDs it sent
// from, as in Lustre's lnet_parse (an ME for a kernel peer's primary NID
// takes its replies that arrive over another rail).
func (in *Instance) initiatorNIDLocked(src lnetwire.NID) lnetwire.NID {
	if p := in.peers[src]; p != nil && p.lp != nil {
		return p.lp.primary
	}
	return src
}
