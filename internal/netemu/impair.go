package netemu

import (
	"time"

	"softib/internal/stats"
)

// Dir selects one or both directions through the router.
type Dir uint8

// The directions; combine them with |.
const (
	AtoB Dir = 1 << iota // packets from A to B
	BtoA                 // packets from B to A
	Both = AtoB | BtoA
)

// String returns "AtoB", "BtoA", "Both" or "none".
func (d Dir) String() string {
	switch d {
	case AtoB:
		return "AtoB"
	case BtoA:
		return "BtoA"
	case Both:
		return "Both"
	}
	return "none"
}

// Filter selects the packets an Impairment applies to. The zero value
// matches every packet.
type Filter struct {
	// Proto is the IP protocol number (6 TCP, 17 UDP); 0 matches all.
	// For IPv6 it is compared with the first next header.
	Proto uint8
	// Port matches a TCP or UDP packet whose source or destination port
	// equals it (e.g. 4791 for RoCEv2); 0 matches all. Packets without
	// visible ports (non-first IPv4 fragments, IPv6 extension headers,
	// other protocols) never match a non-zero Port.
	Port uint16
}

// Impairment describes what the router does to the packets of one
// direction, in the spirit of tc-netem(8). Probabilities are in [0, 1]
// (0.1 = 10%); out-of-range values are clamped. The zero value forwards
// every packet at once, unchanged apart from the TTL.
//
// Per packet the router decides, in this order: loss; duplication (the
// copy is scheduled on its own, with its own delay, and is not
// corrupted); corruption; delay and jitter; rate; reordering.
type Impairment struct {
	// Loss is the probability that a packet is dropped.
	Loss float64
	// Duplicate is the probability that a packet is sent twice.
	Duplicate float64
	// Corrupt is the probability that one random byte after the IP
	// header is XORed with a random non-zero value. The receiver's
	// UDP/TCP checksum (or RoCE's ICRC) is then wrong.
	Corrupt float64
	// Reorder is the probability that a packet is held back until
	// ReorderGap packets that arrived after it have been sent (or until
	// ReorderHold has passed, so that a pause in traffic does not strand
	// it). Unlike netem this needs no Delay to take effect.
	Reorder float64
	// ReorderGap is how many later packets overtake a held one
	// (default 1: it swaps places with the next packet).
	ReorderGap int
	// ReorderHold bounds how long a packet is held for reordering
	// beyond its due time (default 10ms).
	ReorderHold time.Duration
	// Delay is added to every packet's transit.
	Delay time.Duration
	// Jitter varies the delay uniformly in [Delay-Jitter, Delay+Jitter]
	// (never below 0). As with netem, jitter alone reorders packets.
	Jitter time.Duration
	// Rate limits the direction to this many bits per second (counting
	// IP packets without Ethernet overhead); 0 is unlimited. Packets
	// queue behind each other, so Limit then decides tail drops.
	Rate int64
	// Limit is the most packets the direction may have queued (delayed,
	// rate-limited or held); further packets are dropped and counted as
	// Overflow. Default 1000, netem's default.
	Limit int
	// Match restricts the impairment to some packets; the others are
	// forwarded at once without any impairment.
	Match Filter
}

// Defaults of Impairment's zero fields.
const (
	DefaultReorderGap  = 1
	DefaultReorderHold = 10 * time.Millisecond
	DefaultLimit       = 1000
)

// withDefaults returns im with defaults filled in and values clamped.
func (im Impairment) withDefaults() Impairment {
	clamp := func(p *float64) {
		if !(*p > 0) { // also catches NaN
			*p = 0
		}
		*p = min(*p, 1)
	}
	clamp(&im.Loss)
	clamp(&im.Duplicate)
	clamp(&im.Corrupt)
	clamp(&im.Reorder)
	if im.ReorderGap <= 0 {
		im.ReorderGap = DefaultReorderGap
	}
	if im.ReorderHold <= 0 {
		im.ReorderHold = DefaultReorderHold
	}
	im.Delay = max(im.Delay, 0)
	im.Jitter = max(im.Jitter, 0)
	im.Rate = max(im.Rate, 0)
	if im.Limit <= 0 {
		im.Limit = DefaultLimit
	}
	return im
}

// DirStats counts what the router did in one direction.
type DirStats struct {
	Received   uint64 // IP packets taken off the ingress link (GSO segments counted singly)
	Forwarded  uint64 // packets sent on the egress link, duplicates included
	Dropped    uint64 // lost to Impairment.Loss
	Duplicated uint64 // extra copies made by Impairment.Duplicate
	Corrupted  uint64 // packets altered by Impairment.Corrupt
	Held       uint64 // packets held back by Impairment.Reorder
	Reordered  uint64 // packets sent after a packet that arrived later (hold or jitter)
	Overflow   uint64 // dropped because Impairment.Limit packets were queued
	TTLExpired uint64 // dropped because the TTL or hop limit ran out (no ICMP is sent)
	NoRoute    uint64 // dropped because the destination is not on the far side
	Malformed  uint64 // frames that were not well-formed IP, or GSO the router cannot split
	Ignored    uint64 // frames not addressed to the router's MAC, or not IP (e.g. ARP)
	Segmented  uint64 // GSO super-packets the router split into segments
	TxErrors   uint64 // packets the egress socket refused
	RxErrors   uint64 // failed reads from the ingress socket
	KernelDrop uint64 // frames the kernel dropped before the router read them (socket buffer full)
}

// Stats holds the counters of both directions.
type Stats struct {
	AtoB, BtoA DirStats
}

// counters are a direction's live counters; snapshot copies them.
type counters struct {
	Received, Forwarded, Dropped, Duplicated, Corrupted, Held, Reordered   stats.Counter
	Overflow, TTLExpired, NoRoute, Malformed, Ignored, Segmented, TxErrors stats.Counter
	RxErrors, KernelDrop                                                   stats.Counter
}

func (c *counters) snapshot() DirStats {
	return DirStats{
		Received: c.Received.Load(), Forwarded: c.Forwarded.Load(), Dropped: c.Dropped.Load(),
		Duplicated: c.Duplicated.Load(), Corrupted: c.Corrupted.Load(), Held: c.Held.Load(),
		Reordered: c.Reordered.Load(), Overflow: c.Overflow.Load(), TTLExpired: c.TTLExpired.Load(),
		NoRoute: c.NoRoute.Load(), Malformed: c.Malformed.Load(), Ignored: c.Ignored.Load(),
		Segmented: c.Segmented.Load(), TxErrors: c.TxErrors.Load(), RxErrors: c.RxErrors.Load(),
		KernelDrop: c.KernelDrop.Load(),
	}
}
