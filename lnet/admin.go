package lnet

import (
	"slices"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Globals are the instance-wide settings (lnetctl global show/set).
type Globals struct {
	// LocalNIDDistZero makes Dist report 0 (not 1) for local NIDs, like
	// the lnet module's local_nid_dist_zero (default on).
	LocalNIDDistZero bool
	// TransactionTimeout is how long Ping waits when given no timeout
	// (lnet_transaction_timeout; default 150 s as in Lustre 2.16).
	TransactionTimeout time.Duration
	// MaxInterfaces bounds the NIDs in ping replies the instance accepts
	// (lnet_interfaces_max; default 200).
	MaxInterfaces int
	// ResponseTracking selects which operations get their ACK/REPLY
	// tracked against TransactionTimeout (TrackNone, TrackGet, TrackPut,
	// TrackBoth; lnet's response_tracking, default TrackBoth). See rsp.go.
	ResponseTracking int
	// DropAsymRoute drops messages that arrive through a router we would
	// not use to reach their source's net (lnet_drop_asym_route, default
	// off).
	DropAsymRoute bool
	// RouterPingTimeout is how long the router checker waits for a
	// gateway's ping reply (router_ping_timeout, default 50 s).
	RouterPingTimeout time.Duration
	// LiveRouterCheckInterval is how often an alive gateway is pinged
	// (alive_router_check_interval, formerly live_router_check_interval;
	// default 60 s; negative disables the checker).
	LiveRouterCheckInterval time.Duration
	// DeadRouterCheckInterval is how often a dead gateway is pinged to
	// see it come back (dead_router_check_interval, default 60 s).
	DeadRouterCheckInterval time.Duration

	// Health (health.go). A Globals literal that leaves these zero turns
	// health off as Lustre 2.12 did (no resends, no health decrement);
	// DefaultGlobals has Lustre 2.17's values.

	// RetryCount is how often a failed message is resent (retry_count,
	// default 2).
	RetryCount int
	// HealthSensitivity is what a failure takes off a health value and
	// a success adds back (health_sensitivity, default 100).
	HealthSensitivity int
	// RecoveryInterval is how often the recovery queues are walked
	// (recovery_interval, default 1 s; 0 takes the default).
	RecoveryInterval time.Duration
	// RecoveryLimit stops pinging a peer NI not heard from for this long
	// (recovery_limit; 0 never stops).
	RecoveryLimit time.Duration
	// MaxRecoveryPingInterval caps the backoff between recovery pings
	// (max_recovery_ping_interval, default 900 s; 0 takes the default).
	MaxRecoveryPingInterval time.Duration
}

// DefaultGlobals returns the settings a zero Config gets.
func DefaultGlobals() Globals {
	return Globals{LocalNIDDistZero: true, TransactionTimeout: 150 * time.Second, MaxInterfaces: 200, ResponseTracking: TrackBoth,
		RouterPingTimeout: 50 * time.Second, LiveRouterCheckInterval: 60 * time.Second, DeadRouterCheckInterval: 60 * time.Second,
		RetryCount: 2, HealthSensitivity: 100, RecoveryInterval: time.Second, MaxRecoveryPingInterval: 900 * time.Second}
}

// routerDefaults fills the router checker's zero durations.
func (g *Globals) routerDefaults() {
	d := DefaultGlobals()
	if g.RouterPingTimeout <= 0 {
		g.RouterPingTimeout = d.RouterPingTimeout
	}
	if g.LiveRouterCheckInterval == 0 {
		g.LiveRouterCheckInterval = d.LiveRouterCheckInterval
	}
	if g.DeadRouterCheckInterval <= 0 {
		g.DeadRouterCheckInterval = d.DeadRouterCheckInterval
	}
	// Health intervals of 0 are not meaningful: defaults.
	if g.RecoveryInterval <= 0 {
		g.RecoveryInterval = d.RecoveryInterval
	}
	if g.MaxRecoveryPingInterval <= 0 {
		g.MaxRecoveryPingInterval = d.MaxRecoveryPingInterval
	}
	g.RetryCount = max(0, g.RetryCount)
	g.HealthSensitivity = min(max(0, g.HealthSensitivity), MaxHealthValue)
}

// withDefaults fills zero fields. LocalNIDDistZero and ResponseTracking
// cannot be told apart from "unset", so a zero Globals means all defaults.
func (g Globals) withDefaults() Globals {
	if g == (Globals{}) {
		return DefaultGlobals()
	}
	d := DefaultGlobals()
	if g.TransactionTimeout <= 0 {
		g.TransactionTimeout = d.TransactionTimeout
	}
	if g.MaxInterfaces <= 0 {
		g.MaxInterfaces = d.MaxInterfaces
	}
	g.routerDefaults()
	return g
}

// Globals returns the current global settings.
func (in *Instance) Globals() Globals {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.globals
}

// SetGlobals replaces the global settings. Zero TransactionTimeout and
// MaxInterfaces take their defaults; ResponseTracking 0 means off, so
// start from DefaultGlobals() or Globals() to change one field.
func (in *Instance) SetGlobals(g Globals) {
	d := DefaultGlobals()
	if g.TransactionTimeout <= 0 {
		g.TransactionTimeout = d.TransactionTimeout
	}
	if g.MaxInterfaces <= 0 {
		g.MaxInterfaces = d.MaxInterfaces
	}
	g.routerDefaults()
	in.mu.Lock()
	in.globals = g
	in.kickRouterCheckerLocked()
	in.mu.Unlock()
}

// Stats are the instance counters (struct lnet_counters_common plus a few
// implementation ones).
type Stats struct {
	MsgsAlloc   uint64 // messages in use now
	MsgsMax     uint64 // most messages in use at once
	Errors      uint64 // messages that failed
	SendCount   uint64 // messages sent successfully
	RecvCount   uint64 // messages received and delivered
	RouteCount  uint64 // messages forwarded (route_count)
	DropCount   uint64 // messages dropped (unmatched, not for us, peer down)
	SendLength  uint64
	RecvLength  uint64
	RouteLength uint64 // payload bytes forwarded (route_length)
	DropLength  uint64
	Delayed     uint64 // PUTs that waited on a lazy portal
	// ResponseTimeouts counts ACKs/REPLYs that did not come within
	// TransactionTimeout (their MDs were unlinked).
	ResponseTimeouts uint64
	// RstAlloc is the number of response trackers in use (MDs waiting
	// for an ACK or REPLY; rst_alloc).
	RstAlloc uint64
	// Health are Lustre 2.17's health counters (health.go).
	Health HealthStats
	MEs    int // match entries attached now
	MDs    int // memory descriptors alive now (including the ping MD)
}

// Stats returns a snapshot of the counters (lnetctl stats show).
func (in *Instance) Stats() Stats {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := in.stats
	st.MDs = len(in.mds)
	for md := in.rsp.head; md != nil; md = md.rspNext {
		st.RstAlloc++
	}
	st.Health = in.mr.hstats
	st.Health.ResponseTimeoutCount = st.ResponseTimeouts
	return st
}

// ResetStats zeroes the counters except MsgsAlloc (lnetctl stats reset).
func (in *Instance) ResetStats() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.stats = Stats{MsgsAlloc: in.stats.MsgsAlloc, MsgsMax: in.stats.MsgsAlloc, MEs: in.stats.MEs}
	in.mr.hstats = HealthStats{}
}

// NetInfo describes one NI (lnetctl net show -v; /sys/kernel/debug/lnet/nis).
type NetInfo struct {
	NID        lnetwire.NID
	Net        lnetwire.Net
	LND        string // "tcp", "o2ib", "lo"
	Status     string // "up" or "down"
	Interfaces []string
	Tunables   lnd.Tunables
	// TxCredits is the free NI credits (negative: messages queued),
	// MinTxCredits its low-water mark, MaxTxCredits the configured total.
	TxCredits    int
	MinTxCredits int
	MaxTxCredits int
	Queued       int // messages waiting for an NI credit
	SendCount    uint64
	RecvCount    uint64
	DropCount    uint64
	// Health (net show -v "health stats"): the health value, whether the
	// LND reported a fatal error, the local failure counts, and the
	// recovery pings (count of the current recovery, next one).
	Health                                          int
	FatalError                                      bool
	Interrupts, Dropped, Aborted, NoRoute, Timeouts uint64
	Errors                                          uint64
	PingCount                                       uint32
	NextPing                                        time.Time
	// SelPriority is the UDSP selection priority (-1: none).
	SelPriority int64
}

// Nets lists the NIs, 0@lo first.
func (in *Instance) Nets() []NetInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]NetInfo, 0, len(in.nis))
	for _, ni := range in.nis {
		st := "up"
		if ni.down || !ni.ready {
			st = "down"
		}
		out = append(out, NetInfo{
			NID: ni.nid(), Net: ni.net(), LND: ni.net().Type().String(), Status: st,
			Interfaces: slices.Clone(ni.cfg.Interfaces), Tunables: ni.ni.Tunables,
			TxCredits: ni.txCredits, MinTxCredits: ni.minTxCredits, MaxTxCredits: ni.maxTxCredits,
			Queued: ni.txq.n, SendCount: ni.sendCount, RecvCount: ni.recvCount, DropCount: ni.dropCount,
		})
		info := &out[len(out)-1]
		h := &ni.mr
		info.Health, info.FatalError = int(h.health()), h.fatal
		info.Interrupts, info.Dropped, info.Aborted = h.hs.interrupt, h.hs.dropped, h.hs.aborted
		info.NoRoute, info.Timeouts, info.Errors = h.hs.noRoute, h.hs.timeout, h.hs.error
		info.PingCount = h.rec.pingCount
		if h.rec.queued {
			info.NextPing = in.start.Add(time.Duration(h.rec.nextPing))
		}
		info.SelPriority = -1
		if h.prioSet {
			info.SelPriority = int64(h.selPriority)
		}
	}
	return out
}

// PeerInfo is one row of the peer table (/proc/sys/lnet/peers: nid refs
// state last max rtr min tx min queue).
type PeerInfo struct {
	NID   lnetwire.NID
	NI    lnetwire.NID // local NI used to reach it
	Refs  int          // messages using the peer, plus the table's own
	State string       // "up", "down", or "NA" when aliveness is off
	// LastAlive is when it was last heard from (zero: never).
	LastAlive    time.Time
	MaxTxCredits int // peer_credits
	TxCredits    int // free (negative: messages queued)
	MinTxCredits int // low-water mark
	QueueBytes   int64
	QueueLen     int
	PrimaryNID   lnetwire.NID
	// Router credits (peer_buffer_credits) of messages from this peer
	// being forwarded: the configured total, free (negative: messages
	// waiting) and the low-water mark (the "rtr" and "min" columns).
	MaxRtrCredits int
	RtrCredits    int
	MinRtrCredits int
}

// Peers returns the peer table sorted by NID.
func (in *Instance) Peers() []PeerInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]PeerInfo, 0, len(in.peers))
	for _, p := range in.peers {
		if p.ni == nil {
			continue // not reachable directly (a remote peer's NID): no credits
		}
		st := "up"
		switch {
		case !p.aliveness():
			st = "NA"
		case p.down:
			st = "down"
		}
		pi := PeerInfo{
			NID: p.nid, Refs: int(p.refs) + 1, State: st,
			MaxTxCredits: int(p.maxTxCredits), TxCredits: int(p.txCredits), MinTxCredits: int(p.minTxCredits),
			QueueBytes: p.txqnob, QueueLen: p.txq.n, PrimaryNID: p.nid,
			MaxRtrCredits: int(p.maxRtrCredits), RtrCredits: int(p.rtrCredits), MinRtrCredits: int(p.minRtrCredits),
		}
		if p.lastAlive > 0 {
			pi.LastAlive = in.start.Add(time.Duration(p.lastAlive))
		}
		if p.ni != nil {
			pi.NI = p.ni.nid()
		}
		if p.lp != nil {
			pi.PrimaryNID = p.lp.primary
		}
		if prim, ok := in.primary[p.nid]; ok && pi.PrimaryNID == p.nid {
			pi.PrimaryNID = prim
		}
		out = append(out, pi)
	}
	slices.SortFunc(out, func(a, b PeerInfo) int {
		switch {
		case a.NID < b.NID:
			return -1
		case a.NID > b.NID:
			return 1
		}
		return 0
	})
	return out
}
