package udptest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// ShardPolicy is how a shard group (ListenShards) spreads datagrams over
// its endpoints.
type ShardPolicy int

const (
	// ShardByFlow sends every datagram of a source address to the same
	// shard, picked by a stable hash of the source, as Linux's
	// SO_REUSEPORT group picks a socket by the 4-tuple (the destination
	// is the group's address for all of them).
	ShardByFlow ShardPolicy = iota
	// ShardSpray picks a shard per datagram from the network's seeded
	// random stream, so a flow's datagrams land on every shard and a
	// consumer's shards race each other for one flow's packets: for
	// testing that per-flow state survives datagrams arriving through a
	// shard other than the flow's usual one (the case of a peer that
	// changes its source port).
	ShardSpray
)

// shardGroup is the set of endpoints of a ListenShards call.
type shardGroup struct {
	eps    []*Endpoint
	policy ShardPolicy
	rng    *rand.Rand // ShardSpray's stream; under the network lock
}

// pick returns the shard for a datagram from src. Called with the
// network lock held.
func (g *shardGroup) pick(src netip.AddrPort) *Endpoint {
	if g.policy == ShardSpray {
		return g.eps[g.rng.IntN(len(g.eps))]
	}
	return g.eps[addrHash(src)%uint64(len(g.eps))]
}

// ListenShards attaches k endpoints that share addr, the simulated form
// of udp.ListenShards: datagrams to addr go to one of them as policy
// says. A zero port picks a free one. Each endpoint is read and closed on
// its own; closing the first detaches the address (the others then get
// nothing more), and a datagram the policy sends to a closed shard is
// dropped and counted in Stats.Overflow.
func (n *Network) ListenShards(addr netip.AddrPort, k int, policy ShardPolicy) ([]*Endpoint, error) {
	if k < 1 {
		return nil, fmt.Errorf("udptest: listen %v: %d shards", addr, k)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	first, err := n.listenLocked(addr)
	if err != nil {
		return nil, err
	}
	g := &shardGroup{
		eps:    make([]*Endpoint, k),
		policy: policy,
		rng:    rand.New(rand.NewPCG(n.seed, addrHash(first.addr)^0x5ead)),
	}
	g.eps[0] = first
	for i := 1; i < k; i++ {
		g.eps[i] = &Endpoint{
			net:    n,
			addr:   first.addr,
			notify: make(chan struct{}, 1),
			done:   make(chan struct{}),
		}
	}
	for _, ep := range g.eps {
		ep.group = g
	}
	n.shards = append(n.shards, g.eps[1:]...)
	return g.eps, nil
}
