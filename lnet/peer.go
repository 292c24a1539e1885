package lnet

import (
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// peer is one peer NI (struct lnet_peer_ni): its credits, its queue of
// messages waiting for a credit, and its aliveness. Kept small: a node
// may know tens of thousands. Guarded by Instance.mu.
type peer struct {
	nid          lnetwire.NID
	ni           *netIface
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
	down          bool
}

// peerRetryInterval is how long a peer the LND reported dead fails new
// sends at once before one is let through to try again (a simplified
// lnet_peer_alive_locked; LNDs report recovery with NotifyPeer).
const peerRetryInterval = time.Second

// peerLocked finds or creates the peer NI for nid reached through ni.
func (in *Instance) peerLocked(nid lnetwire.NID, ni *netIface) *peer {
	p := in.peers[nid]
	if p != nil && p.ni == ni {
		return p
	}
	if p != nil {
		// The peer moved to another local NI (net re-added): start over
		// once the old entry is idle, else keep using it.
		if p.refs > 0 || p.txq.n > 0 || p.rtrq.n > 0 {
			return p
		}
	}
	c := int32(ni.ni.Tunables.PeerCredits)
	rc := peerBufferCreditsOf(ni)
	p = &peer{nid: nid, ni: ni, txCredits: c, minTxCredits: c, maxTxCredits: c,
		rtrCredits: rc, minRtrCredits: rc, maxRtrCredits: rc}
	in.peers[nid] = p
	return p
}

// aliveness reports whether aliveness tracking applies to p.
func (p *peer) aliveness() bool {
	return !p.ni.lo && p.ni.ni.Tunables.PeerTimeout > 0
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
	now := int64(time.Since(in.start))
	if now-p.downAt >= int64(peerRetryInterval) {
		p.downAt = now // let this one through; the next waits again
		return true
	}
	return false
}
