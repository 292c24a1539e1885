package rxe

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"softib/udp"
	"softib/verbs"
	"softib/wire/roce"
)

// RoCEv2 congestion signalling (IBTA RoCEv2 annex A17.9) with a
// DCQCN-style reaction point (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015; the parameters are those
// of NVIDIA's ConnectX firmware, mlx5's RoCE congestion control, with
// their defaults: see ECNConfig). Linux rxe has none of it, so it is off
// by default (Config.ECN) and, off, changes nothing on the wire. On:
//
//   - Every RoCE packet the device sends carries ECT(0) in the ECN field
//     of its IPv4 TOS / IPv6 traffic class; the DSCP bits stay those of
//     the QP's or AH's traffic class (tclass.go). The ICRC masks the
//     field, so nothing else changes.
//   - Notification point. The device's sockets report each datagram's
//     traffic class (udp.Config.RecvTOS). A packet that arrives with CE
//     (ECN 11b) is counted (np_ecn_marked_roce_packets) and, on an RC,
//     UC or UD QP, makes the QP send a CNP (BTH opcode 0x81,
//     wire/roce/cnp.go) to the QP that sent the marked packet, at most
//     one per ECNConfig.MinTimeBetweenCNPs (np_cnp_sent). A CNP's
//     DestQP names the QP that is to slow down, the one that sent the
//     marked packet: for RC and UC that is the connected peer QP at the
//     QP's
//     destination address; for UD it is the source QP in the packet's
//     DETH, at the IP source address of the datagram and the RoCEv2 UDP
//     port (this device's own, 4791 unless configured otherwise: a source
//     port is no RoCEv2 listener). CE on any packet of the QP counts,
//     requests and responses alike, as on mlx5: the peer cannot tell
//     which of its packets met the congestion. CNPs go out on the
//     response lane (never rate-limited), with the QP's class (a UD QP
//     has none of its own: the default class, plus ECT(0)).
//   - Reaction point. A CNP for an RC, UC or UD QP (rp_cnp_handled)
//     starts, or feeds, the QP's DCQCN rate limiter, which paces the
//     requester: request packets only (ACKs, NAKs and RDMA READ
//     responses are not limited, as on ConnectX, whose rate limiter sits
//     on the send queue). The limiter costs nothing until the first CNP
//     and switches itself off again once the rate has recovered to
//     MaxRate.
//
// UD. NVIDIA documents DCQCN per flow, and its flow is the QP ("The CNP
// specifically identifies the flow (Queue Pair) experiencing congestion",
// DOCA SDK, "DCQCN CC Algorithm"), with no transport left out; the only
// place a UD datagram names the QP that sent it is its DETH. So a
// CE-marked UD datagram gets a CNP to its DETH source QP, and a CNP for a
// UD QP feeds that QP's limiter. (No stored NVIDIA text says in so many
// words what ConnectX does for UD; this is what the CNP's definition and
// the per-QP reaction point give.) A UD QP talks to many peers, so its
// one limiter paces all its sends, whichever AH they use (a congested
// path slows the QP's datagrams to uncongested peers too, as with a
// ConnectX QP), and its one CNP interval is shared by its senders: the
// first CE mark of each interval, from whichever sender, gets the CNP;
// marking is proportional to each sender's share of the congested queue,
// and so are its CNPs. No per-destination or per-sender state is kept
// (the data path allocates nothing). Multicast datagrams are not looked
// at: the group sockets (mcast.go) read no traffic class, so they are
// never CE here and a group's senders get no CNPs (what a ConnectX does
// for them is not documented). The GSI QP (QP1, MADs) neither sends nor
// takes CNPs: a CNP for it is counted in bad_qp_type, as is one for a QP
// of another type (XRC, raw).
//
// A CNP that arrives at a device with ECN off is counted in
// rp_cnp_ignored and dropped. Linux rxe drops opcode 0x81 (its opcode
// table has no entry for it: rxe_rcv's header checks fail) without a
// counter.
//
// Peers. ECN is a property of the path and the two ends: a router marks
// CE only on ECT packets, so softib sends a CNP only to a peer whose
// packets carried ECT, that is a peer that asked for ECN. A Linux rxe peer
// sends the ECN bits of its address vector's traffic class: with a class
// whose low bits are 0 (the default) its packets are Not-ECT, never
// marked, and it never receives a CNP from softib. Only an application
// that sets ECT bits in a kernel rxe QP's traffic class could make a
// marking router CE-mark them; kernel rxe then drops softib's CNPs (and
// softib's rate limiter never runs, since rxe sends none). softib packets
// that kernel rxe receives with ECT(0) are accepted as any other (the
// ICRC masks the field): TestECNInteropKernelRxe checks that on the QEMU
// guest.
//
// Everything runs under QP.mu, in the QP's processing round, from the
// round's clock (Device.now): deadlines, no timers of its own. The
// limiter's next send time is one of the QP's engine deadlines
// (QP.nextDeadline), so a throttled requester sleeps in the QP's timer
// and its round resumes it; nothing busy-waits.

// ECN field values (RFC 3168): the low two bits of the IPv4 TOS byte or
// the IPv6 traffic class.
const (
	ecnMask = 0x03
	ecnECT0 = 0x02
	ecnCE   = 0x03
)

// ECNConfig configures RoCEv2 congestion signalling (Config.ECN). The
// zero value is off; with Enable set, zero fields take the defaults,
// NVIDIA's DCQCN parameter defaults for ConnectX-4 and later (the names
// in brackets are mlx5's congestion-control parameters, as in
// /sys/class/net/<if>/ecn/roce_rp and roce_np), and a value out of
// range fails Open.
//
// Sources of the defaults: NVIDIA DOCA SDK documentation, "DCQCN CC
// Parameters" (networking-docs.nvidia.com/doca/archive/3-4-0/
// dcqcn-cc-parameters, "supported by NVIDIA ConnectX-4 and later"):
// dce_tcp_g 1019, dce_tcp_rtt 1 µs, initial_alpha_value 1023,
// rate_to_set_on_first_cnp 0, rpg_min_dec_fac 50 %, rpg_min_rate
// 1 Mb/s, rpg_gd 11 (the cut is α/2^(11−10) = α/2 of the rate),
// rate_reduce_monitor_period 4 µs. The rate-increase and notification
// point values are those ConnectX-5/-6 firmware reports as its
// configuration (mlxconfig query, the NVConfig names of the same page:
// RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, RPG_THRESHOLD 1,
// RPG_MAX_RATE 0, RPG_AI_RATE 5, RPG_HAI_RATE 50, MIN_TIME_BETWEEN_CNPS
// 4, CLAMP_TGT_RATE False, CLAMP_TGT_RATE_AFTER_TIME_INC True; one
// ConnectX-5 firmware, 16.27, reported MIN_TIME_BETWEEN_CNPS 2). Each
// default below matched those; what the comparison changed is the
// target-rate clamp (ClampTargetRate).
type ECNConfig struct {
	// Enable turns ECN marking, CNPs and the DCQCN rate limiter on.
	Enable bool
	// MinTimeBetweenCNPs is the least time between two CNPs one QP
	// sends [min_time_between_cnps] (default 4 µs).
	MinTimeBetweenCNPs time.Duration
	// MaxRate is the rate, in bits per second, at which the limiter
	// starts on a first CNP and switches off again when it recovers to
	// it [rpg_max_rate; 0 there means line rate] (default 100 Gb/s: a
	// software device has no line rate; a first CNP halves the rate from
	// here and further CNPs, at most one cut per RateReducePeriod, bring
	// it down to the rate the path sustains within microseconds).
	MaxRate float64
	// FirstCNPRate, when not 0, is the rate (bits/s) a first CNP sets
	// instead of cutting MaxRate [rate_to_set_on_first_cnp] (default 0).
	FirstCNPRate float64
	// MinRate is the lowest rate the limiter goes to [rpg_min_rate]
	// (default 1 Mb/s).
	MinRate float64
	// MinDecFactor bounds one cut: the new rate is at least this
	// fraction of the old [rpg_min_dec_fac, in %] (default 0.5).
	MinDecFactor float64
	// RateReducePeriod is the least time between two rate cuts
	// [rate_reduce_monitor_period] (default 4 µs).
	RateReducePeriod time.Duration
	// ClampTargetRate makes every rate cut set the target rate to the
	// current rate before cutting [clamp_tgt_rate] (default false, as on
	// ConnectX). Off, a cut clamps the target only when the rate
	// increase timer expired since the previous cut
	// [clamp_tgt_rate_after_time_inc, which is always on here, its
	// ConnectX default]; CNPs in quick succession then leave the target
	// at the rate before the congestion, which recovery climbs back to.
	// (The DCQCN paper clamps on every cut: ClampTargetRate true.)
	ClampTargetRate bool
	// AlphaG is the alpha smoothing factor [dce_tcp_g / 1024]: each
	// AlphaPeriod alpha becomes AlphaG×alpha, plus (1−AlphaG) if a CNP
	// arrived in the period (default 1019/1024).
	AlphaG float64
	// AlphaPeriod is alpha's update period [dce_tcp_rtt] (default 1 µs).
	AlphaPeriod time.Duration
	// InitialAlpha is alpha at a QP's first CNP [initial_alpha_value /
	// 1024] (default 1023/1024).
	InitialAlpha float64
	// TimeReset is the rate-increase timer [rpg_time_reset] (default
	// 300 µs).
	TimeReset time.Duration
	// ByteReset is the rate-increase byte counter [rpg_byte_reset]
	// (default 32767 bytes).
	ByteReset int
	// Threshold is the number of timer or byte-counter expiries of fast
	// recovery before additive increase [rpg_threshold] (default 1).
	Threshold int
	// AIRate is the additive increase step in bits/s [rpg_ai_rate]
	// (default 5 Mb/s).
	AIRate float64
	// HAIRate is the hyper increase step in bits/s [rpg_hai_rate]
	// (default 50 Mb/s).
	HAIRate float64
	// Burst is how many bytes a throttled QP may send at once (default
	// 64 KiB: a batch of MTU packets can still leave as one GSO send).
	Burst int

	// sendCE (tests only, export_test) makes the device send CE instead
	// of ECT(0): a path that marks every packet, on loopback.
	sendCE bool
}

// Defaults (see ECNConfig).
const (
	defMinTimeBetweenCNPs = 4 * time.Microsecond
	defMaxRate            = 100e9
	defMinRate            = 1e6
	defMinDecFactor       = 0.5
	defRateReducePeriod   = 4 * time.Microsecond
	defAlphaG             = 1019.0 / 1024
	defAlphaPeriod        = time.Microsecond
	defInitialAlpha       = 1023.0 / 1024
	defTimeReset          = 300 * time.Microsecond
	defByteReset          = 32767
	defThreshold          = 1
	defAIRate             = 5e6
	defHAIRate            = 50e6
	defBurst              = 64 << 10
)

// withDefaults fills zero fields and checks the rest.
func (c *ECNConfig) withDefaults() error {
	if !c.Enable {
		if *c != (ECNConfig{}) {
			return fmt.Errorf("rxe: ECN parameters set without ECN.Enable: %w", verbs.ErrInvalidArgument)
		}
		return nil
	}
	dur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	num := func(p *float64, d float64) {
		if *p == 0 {
			*p = d
		}
	}
	dur(&c.MinTimeBetweenCNPs, defMinTimeBetweenCNPs)
	dur(&c.RateReducePeriod, defRateReducePeriod)
	dur(&c.AlphaPeriod, defAlphaPeriod)
	dur(&c.TimeReset, defTimeReset)
	num(&c.MaxRate, defMaxRate)
	num(&c.MinRate, defMinRate)
	num(&c.MinDecFactor, defMinDecFactor)
	num(&c.AlphaG, defAlphaG)
	num(&c.InitialAlpha, defInitialAlpha)
	num(&c.AIRate, defAIRate)
	num(&c.HAIRate, defHAIRate)
	if c.ByteReset == 0 {
		c.ByteReset = defByteReset
	}
	if c.Threshold == 0 {
		c.Threshold = defThreshold
	}
	if c.Burst == 0 {
		c.Burst = defBurst
	}
	bad := func(what string, v any) error {
		return fmt.Errorf("rxe: ECN %s %v out of range: %w", what, v, verbs.ErrInvalidArgument)
	}
	switch {
	case c.MinTimeBetweenCNPs < 0:
		return bad("MinTimeBetweenCNPs", c.MinTimeBetweenCNPs)
	case c.RateReducePeriod < 0:
		return bad("RateReducePeriod", c.RateReducePeriod)
	case c.AlphaPeriod < 0:
		return bad("AlphaPeriod", c.AlphaPeriod)
	case c.TimeReset < 0:
		return bad("TimeReset", c.TimeReset)
	case !(c.MinRate > 0) || !(c.MaxRate >= c.MinRate) || math.IsInf(c.MaxRate, 0):
		return bad("MinRate/MaxRate", [2]float64{c.MinRate, c.MaxRate})
	case c.FirstCNPRate < 0 || c.FirstCNPRate > c.MaxRate:
		return bad("FirstCNPRate", c.FirstCNPRate)
	case !(c.MinDecFactor > 0 && c.MinDecFactor <= 1):
		return bad("MinDecFactor", c.MinDecFactor)
	case !(c.AlphaG > 0 && c.AlphaG < 1):
		return bad("AlphaG", c.AlphaG)
	case !(c.InitialAlpha > 0 && c.InitialAlpha <= 1):
		return bad("InitialAlpha", c.InitialAlpha)
	case c.ByteReset < 0:
		return bad("ByteReset", c.ByteReset)
	case c.Threshold < 0:
		return bad("Threshold", c.Threshold)
	case !(c.AIRate >= 0) || !(c.HAIRate >= 0) || math.IsInf(c.AIRate+c.HAIRate, 0):
		return bad("AIRate/HAIRate", [2]float64{c.AIRate, c.HAIRate})
	case c.Burst < 0:
		return bad("Burst", c.Burst)
	}
	return nil
}

// prepareECN checks and defaults c.ECN at Open and asks the socket Open
// creates for the received traffic class. A given Conn (udptest) reports
// none: its packets are never CE, so the notification point stays idle.
func (c *Config) prepareECN(uc *udp.Config) error {
	if c.DeviceConfig.ECN {
		c.ECN.Enable = true // verbs.DeviceConfig.ECN: on, with the defaults
	}
	if err := c.ECN.withDefaults(); err != nil {
		return err
	}
	if c.ECN.Enable {
		uc.RecvTOS = true
	}
	return nil
}

// markECT gives a packet to be sent the ECT(0) codepoint when ECN is on
// (called by QP.finish for every packet a QP builds).
func (q *QP) markECT(p *packet) {
	if c := &q.dev.cfg.ECN; c.Enable {
		mark := uint8(ecnECT0)
		if c.sendCE {
			mark = ecnCE
		}
		p.cls.tos = p.cls.tos&^ecnMask | mark
	}
}

// congestion is a QP's notification- and reaction-point state, made at
// the QP's first CE-marked packet or CNP (QP.cc; guarded by QP.mu).
type congestion struct {
	// Notification point.
	cnpSent bool  // a CNP has been sent (lastCNP is valid)
	lastCNP int64 // when the last CNP went out

	// Reaction point (DCQCN); rate values in bits per second.
	rp rateLimiter
}

// rateLimiter is DCQCN's reaction point for one QP: alpha, the current
// and target rates, the rate-increase timer and byte counter, and a
// token bucket that paces the requester at the current rate. All times
// are the device clock's nanoseconds; it never reads a clock itself, so
// a test drives it with any sequence of times.
type rateLimiter struct {
	cfg *ECNConfig

	active bool    // limiting: a CNP came and the rate has not recovered
	rc, rt float64 // current and target rate
	alpha  float64

	alphaAt  int64 // end of the current alpha period
	cnpAlpha bool  // a CNP arrived in the current alpha period
	cut      bool  // lastCut is valid
	lastCut  int64 // the last rate cut

	timerAt int64 // next rate-increase timer expiry
	tCount  int   // timer expiries since the last cut
	bytes   int   // bytes sent since the last byte-counter expiry
	bCount  int   // byte-counter expiries since the last cut

	tokens float64 // bytes that may be sent now (negative: debt)
	tokAt  int64   // when tokens was last refilled

	// Statistics for tests and introspection.
	cuts    int
	held    int     // sends admit refused (the requester waited)
	minRate float64 // lowest rc since activation
}

// onCNP is a CNP's effect at time now: alpha rises at the end of the
// period, and the rate is cut unless it was cut less than
// RateReducePeriod ago; the target rate becomes the current rate first
// if ClampTargetRate is set or the timer raised the rate since the last
// cut.
func (r *rateLimiter) onCNP(now int64) {
	c := r.cfg
	r.advance(now)
	if !r.active {
		r.active = true
		r.rc = c.MaxRate
		if c.FirstCNPRate > 0 {
			r.rc = c.FirstCNPRate
		}
		r.rt = r.rc
		r.alpha = c.InitialAlpha
		r.alphaAt = now + int64(c.AlphaPeriod)
		r.cnpAlpha = false
		r.tokens, r.tokAt = float64(c.Burst), now
		r.bytes, r.tCount, r.bCount = 0, 0, 0
		r.minRate = r.rc
		r.cut = false
		if c.FirstCNPRate > 0 {
			// The first CNP sets the rate; later ones cut it.
			r.cut, r.lastCut = true, now
			r.tCount, r.bCount = 0, 0
			r.timerAt = now + int64(c.TimeReset)
			r.cnpAlpha = true
			return
		}
	}
	r.cnpAlpha = true
	if r.cut && now-r.lastCut < int64(c.RateReducePeriod) {
		return
	}
	if c.ClampTargetRate || r.tCount > 0 {
		r.rt = r.rc // clamp_tgt_rate, clamp_tgt_rate_after_time_inc
	}
	r.rc = max(r.rc*max(1-r.alpha/2, c.MinDecFactor), c.MinRate)
	r.cut, r.lastCut = true, now
	r.tCount, r.bCount, r.bytes = 0, 0, 0
	r.timerAt = now + int64(c.TimeReset)
	r.cuts++
	r.minRate = min(r.minRate, r.rc)
}

// advance applies the alpha periods and rate-increase timer expiries up
// to now (in closed form for alpha, one step per expiry for the rate,
// ending early once the rate is back at MaxRate).
func (r *rateLimiter) advance(now int64) {
	if !r.active {
		return
	}
	c := r.cfg
	if p := int64(c.AlphaPeriod); now >= r.alphaAt {
		if r.cnpAlpha {
			r.alpha = c.AlphaG*r.alpha + (1 - c.AlphaG)
			r.cnpAlpha = false
			r.alphaAt += p
		}
		if now >= r.alphaAt {
			k := (now-r.alphaAt)/p + 1
			r.alpha *= math.Pow(c.AlphaG, float64(k))
			r.alphaAt += k * p
		}
	}
	if !r.cut {
		return
	}
	for r.active && now >= r.timerAt {
		r.timerAt += int64(c.TimeReset)
		r.tCount++
		r.increase()
	}
}

// increase is one rate-increase event (a timer or byte-counter expiry):
// fast recovery while both counts are below Threshold, hyper increase
// once both are above it, additive increase in between; the current
// rate then moves halfway to the target.
func (r *rateLimiter) increase() {
	c := r.cfg
	f := c.Threshold
	switch {
	case max(r.tCount, r.bCount) < f:
	case min(r.tCount, r.bCount) > f:
		r.rt += float64(min(r.tCount, r.bCount)-f) * c.HAIRate
	default:
		r.rt += c.AIRate
	}
	r.rt = min(r.rt, c.MaxRate)
	r.rc = (r.rt + r.rc) / 2
	if r.rc >= c.MaxRate*(1-1e-9) {
		// Recovered: the limiter switches off until the next CNP.
		r.active = false
		r.rc, r.rt = c.MaxRate, c.MaxRate
	}
}

// admit reports whether the requester may send a packet of n bytes at
// now, and if so charges it (tokens and the byte counter). A QP without
// an active limiter is always admitted.
func (r *rateLimiter) admit(now int64, n int) bool {
	if !r.active {
		return true
	}
	r.advance(now)
	if !r.active {
		return true
	}
	r.refill(now)
	if r.tokens < 0 {
		r.held++
		return false
	}
	r.tokens -= float64(n)
	if br := r.cfg.ByteReset; br > 0 {
		r.bytes += n
		for r.active && r.bytes >= br {
			r.bytes -= br
			r.bCount++
			r.increase()
		}
	}
	return true
}

// refill adds the tokens earned at the current rate since the last
// refill, up to Burst.
func (r *rateLimiter) refill(now int64) {
	if d := now - r.tokAt; d > 0 {
		r.tokens = min(r.tokens+float64(d)*r.rc/8e9, float64(r.cfg.Burst))
		r.tokAt = now
	}
}

// deadline is when a throttled requester may send again (0: it is not
// throttled): when the token debt is paid at the current rate.
func (r *rateLimiter) deadline() int64 {
	if !r.active || r.tokens >= 0 {
		return 0
	}
	return r.tokAt + int64(math.Ceil(-r.tokens*8e9/r.rc))
}

// ccState returns the QP's congestion state, making it on first use
// (mu held).
func (q *QP) ccState() *congestion {
	if q.cc == nil {
		q.cc = &congestion{rp: rateLimiter{cfg: &q.dev.cfg.ECN}}
	}
	return q.cc
}

// onPacketClass is the notification point's look at a received packet
// of the QP (mu held, in handle): CE on an RC, UC or UD QP's packet
// sends a CNP to the QP that sent it, at most one per
// MinTimeBetweenCNPs.
func (q *QP) onPacketClass(p *packet, now int64) {
	if p.cls.tos&ecnMask != ecnCE || !q.dev.cfg.ECN.Enable || p.op == roce.CNP {
		return
	}
	q.dev.stats.NPECNMarked.Inc()
	q.stats.NPECNMarked.Inc()
	gap := int64(q.dev.cfg.ECN.MinTimeBetweenCNPs)
	switch q.typ {
	case verbs.QPTypeRC, verbs.QPTypeUC:
		if q.ccState().cnpDue(now, gap) {
			q.sendCNP(q.attr.DestQPN, q.dst)
		}
	case verbs.QPTypeUD:
		// The receive checks let only UD opcodes (all with a DETH) and
		// CNPs reach a UD QP.
		if p.op.Transport() == roce.TransportUD && q.ccState().cnpDue(now, gap) {
			src := roce.DETH(p.ext(roce.HdrDETH)).SrcQP()
			q.sendCNP(src, netip.AddrPortFrom(p.addr.Addr().Unmap(), q.dev.laddr.Port()))
		}
	}
}

// cnpDue reports whether a CE mark at now sends a CNP: none was sent in
// the last gap nanoseconds. If so it records now as the CNP's time.
func (c *congestion) cnpDue(now, gap int64) bool {
	if c.cnpSent && now-c.lastCNP < gap {
		return false
	}
	c.cnpSent, c.lastCNP = true, now
	return true
}

// sendCNP queues a CNP for QP dqpn at dst on the response lane (mu
// held).
func (q *QP) sendCNP(dqpn uint32, dst netip.AddrPort) {
	p, pay := q.newPacket(roce.CNP, 0, dqpn, roce.CNPPayloadSize, dst, false, false)
	roce.BTH(p.buf[:roce.BTHSize]).SetBECN(true)
	clear(pay)
	q.finish(p)
	q.respTx.add(q, p)
	q.dev.stats.NPCNPSent.Inc()
	q.stats.NPCNPSent.Inc()
}

// onCNP is the reaction point's CNP (mu held, in handle; the receive
// checks let CNPs through to RC, UC and UD QPs only): it feeds the QP's
// rate limiter, or is counted and dropped when ECN is off.
func (q *QP) onCNP(now int64) {
	if !q.dev.cfg.ECN.Enable {
		q.dev.stats.RPCNPIgnored.Inc()
		q.stats.RPCNPIgnored.Inc()
		return
	}
	q.dev.stats.RPCNPHandled.Inc()
	q.stats.RPCNPHandled.Inc()
	q.ccState().rp.onCNP(now)
}

// ccAdmit is the requester's gate before a packet of w (mu held): true
// when the QP is not throttled, or it may send now; false leaves the
// packet for the round after ccDeadline.
func (q *QP) ccAdmit(w *sendWQE, now int64) bool {
	if q.cc == nil || !q.cc.rp.active {
		return true
	}
	n := roce.BTHSize + roce.ICRCSize
	if w.opcode != verbs.WRRDMARead && !w.isReadAtomic() {
		n += int(min(uint32(q.mtu), w.length-w.off))
	}
	return q.cc.rp.admit(now, n)
}

// ccDeadline is when a throttled requester may send again (0: none), one
// of the QP's engine deadlines (QP.nextDeadline).
func (q *QP) ccDeadline() int64 {
	if q.cc == nil {
		return 0
	}
	return q.cc.rp.deadline()
}

// ECN returns the device's congestion-signalling configuration, defaults
// filled in (Enable false: off).
func (d *Device) ECN() ECNConfig { return d.cfg.ECN }
