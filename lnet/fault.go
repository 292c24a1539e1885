package lnet

// Fault injection (Lustre's net_fault.c; lnetctl fault drop|delay,
// lctl net_drop_add / net_delay_add): rules that select messages by
// source, destination and local NID, portal and message type, and drop
// them on receipt or hold them back (on receipt or before the LND send)
// for a latency. A rule fires on 1 in Rate of the messages it matches,
// or on one message per Interval.
//
// A drop rule with a health error mask acts on the send side instead
// (lnet_send_error_simulation, which Lustre's LNDs call before sending):
// the message fails with one of the selected health statuses, and health
// and resend handle it as a real failure of that class.
//
// Hooks: parse (recv.go) calls faultDropRxLocked before it looks at a
// message and faultDelayRxLocked before it delivers one addressed to us
// (a held message is received as delayed, after the driver's EagerRecv);
// postSendLocked (msg.go) calls faultTxLocked when a message got its
// credits; stopNI calls faultFlushNI. With no rules each hook is one
// length test.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// FaultKind tells drop rules from delay rules.
type FaultKind uint8

// Fault rule kinds.
const (
	FaultDrop  FaultKind = iota // net_drop_add: drop on receipt
	FaultDelay                  // net_delay_add: hold back, then go on
)

func (k FaultKind) String() string {
	if k == FaultDelay {
		return "delay"
	}
	return "drop"
}

// Message type bits of FaultRule.MsgMask (LNET_*_BIT: 1 << message type).
const (
	FaultACK   uint32 = 1 << lnetwire.MsgACK
	FaultPUT   uint32 = 1 << lnetwire.MsgPUT
	FaultGET   uint32 = 1 << lnetwire.MsgGET
	FaultREPLY uint32 = 1 << lnetwire.MsgREPLY
	// FaultAllTypes is what a zero MsgMask selects.
	FaultAllTypes = FaultACK | FaultPUT | FaultGET | FaultREPLY
)

// Health status bits of FaultRule.HealthError (lnetctl.h HSTATUS_*_BIT:
// 1 << enum lnet_msg_hstatus, in Lustre's numbering).
const (
	FaultLocalInterrupt uint32 = 1 << 1
	FaultLocalDropped   uint32 = 1 << 2
	FaultLocalAborted   uint32 = 1 << 3
	FaultLocalNoRoute   uint32 = 1 << 4
	FaultLocalError     uint32 = 1 << 5
	FaultLocalTimeout   uint32 = 1 << 6
	FaultRemoteError    uint32 = 1 << 7
	FaultRemoteDropped  uint32 = 1 << 8
	FaultRemoteTimeout  uint32 = 1 << 9
	FaultNetworkTimeout uint32 = 1 << 10
	// FaultHealthRandom picks any failure status (HSTATUS_RANDOM).
	FaultHealthRandom uint32 = 0xFFFFFFFF
)

// faultHealthEnd is HSTATUS_END: one past the last status bit.
const faultHealthEnd = 11

// faultHealthNames are lnetctl's --health_error names, by bit.
var faultHealthNames = [...]string{"", "local_interrupt", "local_dropped", "local_aborted", "local_no_route",
	"local_error", "local_timeout", "remote_error", "remote_dropped", "remote_timeout", "network_timeout"}

// faultHealthStatus maps Lustre's lnet_msg_hstatus numbers onto ours.
var faultHealthStatus = [...]healthStatus{hsOK, hsLocalInterrupt, hsLocalDropped, hsLocalAborted, hsLocalNoRoute,
	hsLocalError, hsLocalTimeout, hsRemoteError, hsRemoteDropped, hsRemoteTimeout, hsNetworkTimeout}

// ParseFaultHealthError adds the bit of an lnetctl --health_error name
// (local_interrupt, ..., network_timeout, or random) to mask.
func ParseFaultHealthError(name string, mask uint32) (uint32, error) {
	if strings.EqualFold(name, "random") {
		return FaultHealthRandom, nil
	}
	for i, n := range faultHealthNames {
		if n != "" && strings.EqualFold(name, n) {
			return mask | 1<<i, nil
		}
	}
	return mask, fmt.Errorf("%w: unknown health error %q", ErrInvalid, name)
}

// FaultRule is a drop or delay rule (struct lnet_fault_attr).
type FaultRule struct {
	Kind FaultKind
	// Src, Dst select the message's source and final destination NIDs
	// (from its header); Local the NID of the NI it arrives on (drop
	// rules only). lnetwire.NIDAny matches every NID; a NID whose address
	// is all ones (FaultNetWildcard, "*@tcp") every NID of its net.
	Src, Dst, Local lnetwire.NID
	// PortalMask selects PUTs and GETs by portal (bit p for portal p; 0:
	// any portal). With a portal filter only PUT and GET can match.
	PortalMask uint64
	// MsgMask selects message types (FaultPUT | ...; 0: all).
	MsgMask uint32
	// Rate: the rule fires on one message, at a random position, in each
	// run of Rate messages it matches. Exactly one of Rate and Interval
	// is set.
	Rate uint32
	// Interval: the rule fires on one message at a random time in each
	// interval (whole seconds, as Lustre).
	Interval time.Duration
	// Latency is how long a delay rule holds a message (whole seconds,
	// > 0). Drop rules have none.
	Latency time.Duration
	// DropAll drops every message the rule matches (drop rules).
	DropAll bool
	// Random drops each matched message with probability 1/2 (drop rules,
	// with Interval).
	Random bool
	// HealthError, when set on a drop rule, makes it a send-side rule:
	// the messages it takes fail with one of these health statuses
	// (Fault*; FaultHealthRandom: any) instead of being dropped on
	// receipt.
	HealthError uint32
}

// FaultNetWildcard returns the NID that selects every address of net in
// a rule ("*@net", 255.255.255.255@net).
func FaultNetWildcard(net lnetwire.Net) lnetwire.NID {
	return lnetwire.MakeNID(net, 0xFFFFFFFF)
}

// ParseFaultNID parses a rule's NID: "*" (any), "*@net" (any address of
// net) or a NID.
func ParseFaultNID(s string) (lnetwire.NID, error) {
	s = strings.TrimSpace(s)
	if s == "*" || s == "" {
		return lnetwire.NIDAny, nil
	}
	if rest, ok := strings.CutPrefix(s, "*@"); ok {
		net, err := lnetwire.ParseNet(rest)
		if err != nil {
			return 0, err
		}
		return FaultNetWildcard(net), nil
	}
	return lnetwire.ParseNID(s)
}

// FaultStats are a rule's counters (struct lnet_fault_stat).
type FaultStats struct {
	Count uint64 // messages the rule matched (fs_count)
	// Messages dropped or delayed, by type.
	Put, Ack, Get, Reply uint64
	// Fired is ds_dropped (drop rules) or ls_delayed (delay rules).
	Fired uint64
}

// FaultRuleInfo is a rule with its counters (lnetctl fault show).
type FaultRuleInfo struct {
	FaultRule
	Stats FaultStats
}

// faultRule is a rule's live state. Guarded by Instance.mu.
type faultRule struct {
	FaultRule
	stats    FaultStats
	fireAt   uint64    // rate: the matched-message count that fires
	fireTime time.Time // interval: when the next message fires
	timeBase time.Time // interval: start of the next window
	held     msgQueue  // delay: messages held, in release order
	timer    *time.Timer
}

// faultState holds the rules (the_lnet.ln_drop_rules/ln_delay_rules).
type faultState struct {
	drop  []*faultRule // newest first, as Lustre's list_add
	delay []*faultRule // oldest first
	rng   *rand.Rand
	// now is the clock (time.Now; tests may replace it).
	now func() time.Time
}

func (f *faultState) init() {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(rand.Uint32())
	}
	f.rng = rand.New(rand.NewChaCha8(seed))
	f.now = time.Now
}

// below returns a random number in [0, n) (n > 0).
func (f *faultState) below(n uint64) uint64 { return f.rng.Uint64N(n) }

// validate checks and normalises a rule as lnet_drop_rule_add /
// lnet_delay_rule_add and lnet_fault_attr_validate do.
func (r *FaultRule) validate() error {
	if (r.Rate == 0) == (r.Interval == 0) {
		return fmt.Errorf("%w: give either a rate or an interval, not both", ErrInvalid)
	}
	if r.Interval < 0 || r.Interval%time.Second != 0 {
		return fmt.Errorf("%w: interval %v is not a whole number of seconds", ErrInvalid, r.Interval)
	}
	switch r.Kind {
	case FaultDrop:
		if r.Latency != 0 {
			return fmt.Errorf("%w: a drop rule has no latency", ErrInvalid)
		}
		if r.Random && r.Interval == 0 {
			return fmt.Errorf("%w: a random drop rule needs an interval", ErrInvalid)
		}
	case FaultDelay:
		if r.Latency <= 0 || r.Latency%time.Second != 0 {
			return fmt.Errorf("%w: delay latency must be a whole number of seconds > 0 (got %v)", ErrInvalid, r.Latency)
		}
		if r.DropAll || r.Random || r.HealthError != 0 {
			return fmt.Errorf("%w: drop_all, random and health_error are drop rule options", ErrInvalid)
		}
		if r.Local != 0 && r.Local != lnetwire.NIDAny {
			return fmt.Errorf("%w: a delay rule has no local NID", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: fault kind %d", ErrInvalid, r.Kind)
	}
	for _, n := range []*lnetwire.NID{&r.Src, &r.Dst, &r.Local} {
		if *n == 0 {
			*n = lnetwire.NIDAny
		}
	}
	if r.HealthError != FaultHealthRandom && r.HealthError&^((1<<faultHealthEnd)-2) != 0 {
		return fmt.Errorf("%w: health error mask %#x", ErrInvalid, r.HealthError)
	}
	if r.MsgMask&^FaultAllTypes != 0 {
		return fmt.Errorf("%w: message mask %#x", ErrInvalid, r.MsgMask)
	}
	if r.MsgMask == 0 {
		r.MsgMask = FaultAllTypes
	}
	if r.PortalMask != 0 {
		// Only PUT and GET carry a portal.
		r.MsgMask &= FaultPUT | FaultGET
		if r.MsgMask == 0 {
			return fmt.Errorf("%w: a portal filter selects PUT and GET only", ErrInvalid)
		}
	}
	return nil
}

// AddFaultRule adds a drop or delay rule (LNET_CTL_DROP_ADD,
// LNET_CTL_DELAY_ADD).
func (in *Instance) AddFaultRule(r FaultRule) error {
	if err := r.validate(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ErrClosed
	}
	fr := &faultRule{FaultRule: r}
	in.fault.armLocked(fr)
	if r.Kind == FaultDrop {
		in.fault.drop = slices.Insert(in.fault.drop, 0, fr)
	} else {
		in.fault.delay = append(in.fault.delay, fr)
	}
	return nil
}

// armLocked picks the rule's first firing point (and clears its
// counters), as rule add and reset do.
func (f *faultState) armLocked(fr *faultRule) {
	fr.stats = FaultStats{}
	if fr.Interval != 0 {
		now := f.now()
		secs := uint64(fr.Interval / time.Second)
		fr.timeBase = now.Add(fr.Interval)
		fr.fireTime = now.Add(time.Duration(f.below(secs)) * time.Second)
		return
	}
	if fr.Rate == 2 {
		fr.fireAt = 0 // the first matched message fires (Lustre's special case)
	} else {
		fr.fireAt = f.below(uint64(fr.Rate))
	}
}

// DelFaultRules deletes the rules of kind whose source and destination
// are src and dst (NIDAny: any), as lnetctl fault drop|delay del; it
// returns how many went. Messages a deleted delay rule holds go on at
// once.
func (in *Instance) DelFaultRules(kind FaultKind, src, dst lnetwire.NID) int {
	in.mu.Lock()
	list := &in.fault.drop
	if kind == FaultDelay {
		list = &in.fault.delay
	}
	var gone []*faultRule
	*list = slices.DeleteFunc(*list, func(fr *faultRule) bool {
		if (src == lnetwire.NIDAny || fr.Src == src) && (dst == lnetwire.NIDAny || fr.Dst == dst) {
			gone = append(gone, fr)
			return true
		}
		return false
	})
	var release msgQueue
	for _, fr := range gone {
		if fr.timer != nil {
			fr.timer.Stop()
		}
		for m := fr.held.pop(); m != nil; m = fr.held.pop() {
			release.push(m)
		}
	}
	in.mu.Unlock()
	in.releaseHeld(&release)
	return len(gone)
}

// ResetFaultRules zeroes the counters of every rule of kind and picks
// new firing points (lnetctl fault drop|delay reset).
func (in *Instance) ResetFaultRules(kind FaultKind) {
	in.mu.Lock()
	defer in.mu.Unlock()
	list := in.fault.drop
	if kind == FaultDelay {
		list = in.fault.delay
	}
	for _, fr := range list {
		in.fault.armLocked(fr)
	}
}

// FaultRules lists the rules of kind with their counters, in Lustre's
// list order (lnetctl fault drop|delay show).
func (in *Instance) FaultRules(kind FaultKind) []FaultRuleInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	list := in.fault.drop
	if kind == FaultDelay {
		list = in.fault.delay
	}
	out := make([]FaultRuleInfo, 0, len(list))
	for _, fr := range list {
		out = append(out, FaultRuleInfo{FaultRule: fr.FaultRule, Stats: fr.stats})
	}
	return out
}

// faultNIDMatch is lnet_fault_nid_match.
func faultNIDMatch(rule, nid lnetwire.NID) bool {
	if rule == lnetwire.NIDAny || rule == nid {
		return true
	}
	return rule.Net() == nid.Net() && rule.Addr() == 0xFFFFFFFF
}

// match is lnet_fault_attr_match. portal is -1 for ACK and REPLY.
func (fr *faultRule) match(h *lnetwire.Header, local lnetwire.NID) bool {
	if !faultNIDMatch(fr.Src, h.SrcNID) || !faultNIDMatch(fr.Dst, h.DestNID) ||
		(local != lnetwire.NIDAny && !faultNIDMatch(fr.Local, local)) {
		return false
	}
	if fr.MsgMask&(1<<h.Type) == 0 {
		return false
	}
	if fr.PortalMask != 0 {
		if h.Type != lnetwire.MsgPUT && h.Type != lnetwire.MsgGET {
			return false
		}
		if h.Portal >= 64 || fr.PortalMask&(1<<h.Portal) == 0 {
			return false
		}
	}
	return true
}

// fireLocked decides whether a matched message is the one the rule acts
// on (the rate/interval part of drop_rule_match and delay_rule_match),
// and counts it.
func (f *faultState) fireLocked(fr *faultRule, t lnetwire.MsgType) bool {
	var fire bool
	switch {
	case fr.DropAll:
		fire = true
	case fr.Random:
		fire = f.below(uint64(fr.Interval/time.Second)) >= uint64(fr.Interval/time.Second)/2
	case fr.Interval != 0:
		fr.stats.Count++
		now := f.now()
		fire = !now.Before(fr.fireTime)
		if fire {
			if now.After(fr.timeBase) {
				fr.timeBase = now
			}
			secs := uint64(fr.Interval / time.Second)
			fr.fireTime = fr.timeBase.Add(time.Duration(f.below(secs)) * time.Second)
			fr.timeBase = fr.timeBase.Add(fr.Interval)
		}
	default:
		fire = fr.stats.Count == fr.fireAt
		fr.stats.Count++
		if fr.stats.Count%uint64(fr.Rate) == 0 {
			fr.fireAt = fr.stats.Count + f.below(uint64(fr.Rate))
		}
	}
	if !fire {
		return false
	}
	switch t {
	case lnetwire.MsgPUT:
		fr.stats.Put++
	case lnetwire.MsgACK:
		fr.stats.Ack++
	case lnetwire.MsgGET:
		fr.stats.Get++
	case lnetwire.MsgREPLY:
		fr.stats.Reply++
	}
	fr.stats.Fired++
	return true
}

// faultDropRxLocked is lnet_drop_rule_match on receipt: whether a drop
// rule takes the message arriving on ni with header h.
func (in *Instance) faultDropRxLocked(h *lnetwire.Header, ni *netIface) bool {
	if len(in.fault.drop) == 0 {
		return false
	}
	for _, fr := range in.fault.drop {
		if fr.HealthError == 0 && fr.match(h, ni.nid()) && in.fault.fireLocked(fr, h.Type) {
			in.log.Debug("lnet: fault: dropping to simulate message loss", "src", h.SrcNID, "dst", h.DestNID, "type", h.Type)
			return true
		}
	}
	return false
}

// faultDelayRuleLocked is lnet_delay_rule_match_locked's matching: the
// delay rule that takes m (counted), or nil.
func (in *Instance) faultDelayRuleLocked(m *message) *faultRule {
	if len(in.fault.delay) == 0 {
		return nil
	}
	for _, fr := range in.fault.delay {
		if fr.match(&m.Hdr, lnetwire.NIDAny) && in.fault.fireLocked(fr, m.Hdr.Type) {
			return fr
		}
	}
	return nil
}

// faultHoldLocked puts m on fr's queue until its latency passes.
func (in *Instance) faultHoldLocked(fr *faultRule, m *message) {
	m.faultAt = in.fault.now().Add(fr.Latency)
	m.faultHeld = true
	fr.held.push(m)
	if fr.timer == nil {
		fr.timer = time.AfterFunc(fr.Latency, func() { in.faultRelease(fr) })
	} else if fr.held.n == 1 {
		fr.timer.Reset(fr.Latency)
	}
}

// faultDelayRxLocked holds back a received message addressed to us when
// a delay rule takes it, and then unlocks (it returns false, still
// locked, otherwise). The driver first gets the chance to copy the
// payload aside (EagerRecv), as for a lazy portal: a sender may complete
// as soon as Parse returns.
func (in *Instance) faultDelayRxLocked(m *message) bool {
	fr := in.faultDelayRuleLocked(m)
	if fr == nil {
		return false
	}
	if er, ok := m.ni.drv.(lnd.EagerReceiver); ok {
		ni := m.ni
		ni.calls.Add(1)
		in.mu.Unlock()
		np, err := er.EagerRecv(m.private, &m.Msg)
		ni.calls.Done()
		in.mu.Lock()
		if err != nil || ni.down {
			_ = in.dropMsgLocked(m) // unlocks
			return true
		}
		m.private = np
	}
	in.faultHoldLocked(fr, m)
	in.mu.Unlock()
	return true
}

// faultTxLocked is the send-side hook, for a message that got its
// credits: a health-error drop rule fails it (sendFail), a delay rule
// holds it (sendQueued); otherwise it returns sendReady and the message
// goes to its LND.
func (in *Instance) faultTxLocked(m *message) (sendResult, error) {
	if len(in.fault.drop) != 0 && !m.ni.lo {
		for _, fr := range in.fault.drop {
			if fr.HealthError == 0 || !fr.match(&m.Hdr, lnetwire.NIDAny) || !in.fault.fireLocked(fr, m.Hdr.Type) {
				continue
			}
			hs := in.fault.healthLocked(fr.HealthError)
			m.hstatus = hs
			in.log.Debug("lnet: fault: simulating a send error", "src", m.Hdr.SrcNID, "dst", m.Hdr.DestNID,
				"type", m.Hdr.Type, "status", hs)
			return sendFail, fmt.Errorf("%w: simulated %v", ErrDropped, hs)
		}
	}
	if in.faultDelayTxLocked(m) {
		return sendQueued, nil
	}
	return sendReady, nil
}

// healthLocked picks the simulated status of a health-error rule
// (lnet_fault_match_health): a random failure status, moved to the
// nearest one the mask selects.
func (f *faultState) healthLocked(mask uint32) healthStatus {
	choice := 1 + int(f.below(faultHealthEnd-1))
	if mask != FaultHealthRandom && mask&(1<<choice) == 0 {
		best := faultHealthEnd
		for i := faultHealthEnd - 1; i > 0; i-- {
			if mask&(1<<i) == 0 {
				continue
			}
			if d := abs(choice - i); d < best {
				best = d
				choice = i
			}
		}
	}
	return faultHealthStatus[choice]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// faultDelayTxLocked holds back a message about to be handed to its LND
// (it keeps its credits meanwhile, as in Lustre).
func (in *Instance) faultDelayTxLocked(m *message) bool {
	if m.faultHeld || m.ni.lo {
		return false // once per message; loopback is not a network
	}
	fr := in.faultDelayRuleLocked(m)
	if fr == nil {
		return false
	}
	in.faultHoldLocked(fr, m)
	return true
}

// faultRelease sends on (or delivers) a rule's messages whose latency
// passed, and re-arms its timer for the next.
func (in *Instance) faultRelease(fr *faultRule) {
	in.mu.Lock()
	now := in.fault.now()
	var due msgQueue
	for m := fr.held.head; m != nil && !m.faultAt.After(now); m = fr.held.head {
		due.push(fr.held.pop())
	}
	if m := fr.held.head; m != nil {
		fr.timer.Reset(m.faultAt.Sub(now))
	}
	in.mu.Unlock()
	in.releaseHeld(&due)
}

// releaseHeld lets held messages go on: a received one is delivered
// (lnet_parse_local), a sent one goes to its LND; on an NI that stopped
// meanwhile they fail.
func (in *Instance) releaseHeld(q *msgQueue) {
	for m := q.pop(); m != nil; m = q.pop() {
		in.mu.Lock()
		ni := m.ni
		if m.rx {
			if ni.down {
				_ = in.dropMsgLocked(m)
				continue
			}
			if err := in.parseLocalLocked(m); err != nil {
				in.log.Debug("lnet: fault: delayed message failed", "err", err)
			}
			continue
		}
		if ni.down {
			in.mu.Unlock()
			in.finalize(m, lnd.ErrShutdown)
			continue
		}
		ni.calls.Add(1)
		in.mu.Unlock()
		in.afterSend(m, sendReady, nil)
	}
}

// faultFlushNI lets every message held for ni go on now (they fail: the
// NI is stopping), so the NI's driver gets its receives back before it
// shuts down.
func (in *Instance) faultFlushNI(ni *netIface) {
	in.mu.Lock()
	var q msgQueue
	for _, fr := range in.fault.delay {
		chain := fr.held.removeIf(func(m *message) bool { return m.ni == ni })
		for m := chain; m != nil; {
			next := m.next
			q.push(m)
			m = next
		}
	}
	in.mu.Unlock()
	in.releaseHeld(&q)
}
