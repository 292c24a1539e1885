package lnet

// LNet health (lib-msg.c lnet_health_check, lib-move.c monitor thread;
// lnet-wire.md §8.6).
//
// Every local NI and peer NI has a health value, MaxHealthValue when
// nothing went wrong. When a message we send fails, the LND's error is
// classified as Lustre's LNDs classify theirs:
//
//	connection refused/reset, host or net unreachable, peer down,
//	  NI shut down                            → REMOTE_DROPPED / LOCAL_DROPPED (resend)
//	timed out                                 → NETWORK_TIMEOUT (no resend)
//	protocol errors, too big, anything else   → LOCAL_ERROR (no resend)
//
// A local failure lowers the NI's health by health_sensitivity, a remote
// one the peer NI's, a network timeout both; the NI or peer NI goes on a
// recovery queue. LOCAL_* drops (other than LOCAL_ERROR) are resent when
// the node has another NI; REMOTE_DROPPED when the peer has another NI;
// each message at most retry_count times and only before its deadline
// (transaction_timeout after it was first sent). Selection prefers
// healthy NIs, so a resend goes elsewhere. The SEND event (or ACK/REPLY
// timeout) reports the outcome once, after the last try: a message is
// failed only when every allowed resend failed.
//
// Health comes back by success: each message sent or received on an NI
// adds health_sensitivity to it, each message received from a peer NI to
// that peer NI (a router's or a routing node's peer NIs jump to the
// maximum). Every recovery_interval the recovery queues are walked: a
// peer NI below the maximum is pinged (GET on the reserved portal), a
// local NI pings, from itself, the peer NI on its net heard from most
// recently (Lustre pings the NI's own NID, which over TCP never leaves
// the host and so proves nothing about the link). A failed ping doubles
// the wait before the next (1, 2, 4 ... s, at most
// max_recovery_ping_interval); a peer NI not heard from for
// recovery_limit (if set) leaves the queue.

import (
	"errors"
	"syscall"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// healthStatus is enum lnet_msg_hstatus.
type healthStatus uint8

const (
	hsOK healthStatus = iota
	hsLocalInterrupt
	hsLocalDropped
	hsLocalAborted
	hsLocalNoRoute
	hsLocalTimeout
	hsLocalError
	hsRemoteDropped
	hsRemoteError
	hsRemoteTimeout
	hsNetworkTimeout
)

var hsNames = [...]string{"OK", "LOCAL_INTERRUPT", "LOCAL_DROPPED", "LOCAL_ABORTED", "LOCAL_NO_ROUTE",
	"LOCAL_TIMEOUT", "LOCAL_ERROR", "REMOTE_DROPPED", "REMOTE_ERROR", "REMOTE_TIMEOUT", "NETWORK_TIMEOUT"}

func (h healthStatus) String() string { return hsNames[h] }

// classify maps an LND (or core) failure onto a health status, as
// socklnd's ksocknal_txlist_done and o2iblnd's kiblnd_peer_connect_failed
// do with errnos.
func classify(err error) healthStatus {
	switch {
	case err == nil:
		return hsOK
	case errors.Is(err, lnd.ErrTimeout), errors.Is(err, ErrTimeout), errors.Is(err, syscall.ETIMEDOUT):
		return hsNetworkTimeout
	case errors.Is(err, lnd.ErrPeerDown), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ENETDOWN),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return hsRemoteDropped
	case errors.Is(err, lnd.ErrShutdown):
		return hsLocalDropped
	case errors.Is(err, ErrNoRoute):
		return hsLocalNoRoute
	}
	return hsLocalError
}

// HealthStats are Lustre 2.17's lnet_counters_health (lnetctl stats show).
type HealthStats struct {
	ResendCount          uint64 // messages resent
	ResponseTimeoutCount uint64 // ACKs/REPLYs that did not come in time
	LocalInterruptCount  uint64
	LocalDroppedCount    uint64
	LocalAbortedCount    uint64
	LocalNoRouteCount    uint64
	LocalTimeoutCount    uint64
	LocalErrorCount      uint64
	RemoteDroppedCount   uint64
	RemoteErrorCount     uint64
	RemoteTimeoutCount   uint64
	NetworkTimeoutCount  uint64
	FailedResends        uint64 // messages that failed after all resends
	SuccessfulResends    uint64 // messages that got through on a resend
}

// niHealthStats is lnet_health_local_stats.
type niHealthStats struct {
	interrupt, dropped, aborted, noRoute, timeout, error uint64
}

// niRecovery is a local NI's recovery state (ni_recovery, ni_next_ping,
// ni_ping_count, LNET_NI_RECOVERY_PENDING).
type niRecovery struct {
	queued    bool
	pending   bool
	nextPing  int64 // ns since Instance.start
	pingCount uint32
}

// recoveryState is the monitor's: the recovery queues and its timer.
type recoveryState struct {
	timer  *time.Timer
	armed  bool
	localQ []*netIface
	peerQ  []*peer
}

// maxRecoveryPingCount is lnet_max_recovery_ping_count: past this many
// failed pings the wait is max_recovery_ping_interval.
const maxRecoveryPingCount = 9

// nextRecoveryPing is lnet_get_next_recovery_ping.
func (in *Instance) nextRecoveryPing(count uint32, now int64) int64 {
	iv := in.globals.MaxRecoveryPingInterval
	if count <= maxRecoveryPingCount {
		iv = min(iv, time.Duration(1<<count)*time.Second)
	}
	return now + int64(iv)
}

// decHealth lowers a health value by health_sensitivity (not below 0);
// it reports whether it changed.
func (in *Instance) decHealth(h *int32) bool {
	s := int32(in.globals.HealthSensitivity)
	old := *h
	*h = max(0, old-s)
	return *h != old
}

// incHealth raises a health value by health_sensitivity (not above the
// maximum).
func (in *Instance) incHealth(h *int32) {
	*h = min(MaxHealthValue, *h+int32(in.globals.HealthSensitivity))
}

// niDecHealthLocked is lnet_handle_local_failure.
func (in *Instance) niDecHealthLocked(ni *netIface) {
	h := ni.mr.health()
	in.decHealth(&h)
	ni.mr.sick = MaxHealthValue - h
	in.queueNIRecoveryLocked(ni)
}

// niIncHealthLocked is lnet_inc_ni_healthv.
func (in *Instance) niIncHealthLocked(ni *netIface) {
	h := ni.mr.health()
	in.incHealth(&h)
	ni.mr.sick = MaxHealthValue - h
}

// peerDecHealthLocked is lnet_handle_remote_failure_locked.
func (in *Instance) peerDecHealthLocked(p *peer) {
	in.decHealth(&p.health)
	in.queuePeerRecoveryLocked(p)
}

// queueNIRecoveryLocked is lnet_ni_add_to_recoveryq_locked.
func (in *Instance) queueNIRecoveryLocked(ni *netIface) {
	if ni.mr.rec.queued || ni.mr.health() == MaxHealthValue || ni.lo {
		return
	}
	ni.mr.rec.queued = true
	ni.mr.rec.nextPing = in.nextRecoveryPing(ni.mr.rec.pingCount, in.nowNS())
	in.mr.rec.localQ = append(in.mr.rec.localQ, ni)
	in.armRecoveryLocked()
}

// queuePeerRecoveryLocked is lnet_peer_ni_add_to_recoveryq_locked.
func (in *Instance) queuePeerRecoveryLocked(p *peer) {
	if p.health == MaxHealthValue || (p.hs != nil && p.hs.queued) {
		return
	}
	if p.lastAlive == 0 {
		return // never heard from: nothing to recover
	}
	h := p.healthState()
	now := in.nowNS()
	if lim := in.globals.RecoveryLimit; lim > 0 && now > p.lastAlive+int64(lim) {
		h.pingCount = 0 // aged out; the first ping goes at once if it comes back
		return
	}
	h.queued = true
	h.nextPing = in.nextRecoveryPing(h.pingCount, now)
	in.mr.rec.peerQ = append(in.mr.rec.peerQ, p)
	in.armRecoveryLocked()
}

// armRecoveryLocked starts the recovery timer if it is not running.
func (in *Instance) armRecoveryLocked() {
	if in.mr.rec.armed || in.closed {
		return
	}
	in.mr.rec.armed = true
	iv := in.globals.RecoveryInterval
	if in.mr.rec.timer == nil {
		in.mr.rec.timer = time.AfterFunc(iv, in.recoveryTick)
		return
	}
	in.mr.rec.timer.Reset(iv)
}

// recoveryPing is one recovery ping to start after unlocking.
type recoveryPing struct {
	self, target lnetwire.NID
	ni           *netIface // local NI being recovered, or nil
	p            *peer     // peer NI being recovered, or nil
}

// recoveryTick is the monitor thread's recovery pass
// (lnet_recover_local_nis, lnet_recover_peer_nis).
func (in *Instance) recoveryTick() {
	in.mu.Lock()
	in.mr.rec.armed = false
	if in.closed {
		in.mu.Unlock()
		return
	}
	pings := in.recoveryPassLocked()
	if len(in.mr.rec.localQ)+len(in.mr.rec.peerQ) > 0 {
		in.armRecoveryLocked()
	}
	in.mu.Unlock()
	for _, rp := range pings {
		in.sendRecoveryPing(rp)
	}
}

// recoveryPassLocked drops recovered or vanished entries from the
// recovery queues and returns the pings that are due.
func (in *Instance) recoveryPassLocked() []recoveryPing {
	now := in.nowNS()
	var out []recoveryPing
	lq := in.mr.rec.localQ[:0]
	for _, ni := range in.mr.rec.localQ {
		r := &ni.mr.rec
		if !ni.usable() || ni.mr.health() == MaxHealthValue || in.byNID[ni.nid()] != ni {
			r.queued, r.pending = false, false
			continue
		}
		lq = append(lq, ni)
		if r.pending || now < r.nextPing {
			continue
		}
		target := in.recoveryWitnessLocked(ni)
		if target == 0 {
			// No peer to ping through it: only traffic heals it.
			r.nextPing = in.nextRecoveryPing(r.pingCount, now)
			continue
		}
		r.pending = true
		r.pingCount++
		r.nextPing = in.nextRecoveryPing(r.pingCount, now)
		out = append(out, recoveryPing{self: ni.nid(), target: target, ni: ni})
	}
	clear(in.mr.rec.localQ[len(lq):])
	in.mr.rec.localQ = lq
	pq := in.mr.rec.peerQ[:0]
	for _, p := range in.mr.rec.peerQ {
		h := p.hs
		if in.peers[p.nid] != p || p.health == MaxHealthValue || h == nil {
			if h != nil {
				h.queued, h.pending = false, false
			}
			continue
		}
		if lim := in.globals.RecoveryLimit; lim > 0 && now > p.lastAlive+int64(lim) {
			h.queued, h.pending, h.pingCount = false, false, 0
			continue
		}
		pq = append(pq, p)
		if h.pending || now < h.nextPing || in.bestNILocked(p.nid.Net()) == nil {
			continue
		}
		h.pending = true
		h.pingCount++
		h.nextPing = in.nextRecoveryPing(h.pingCount, now)
		out = append(out, recoveryPing{self: lnetwire.NIDAny, target: p.nid, p: p})
	}
	clear(in.mr.rec.peerQ[len(pq):])
	in.mr.rec.peerQ = pq
	return out
}

// recoveryWitnessLocked picks the peer NI a local NI's recovery ping goes
// to: the one on its net heard from most recently.
func (in *Instance) recoveryWitnessLocked(ni *netIface) lnetwire.NID {
	var best *peer
	for _, p := range in.peers {
		if p.nid.Net() != ni.net() || p.lastAlive == 0 || in.byNID[p.nid] != nil {
			continue
		}
		if best == nil || p.lastAlive > best.lastAlive {
			best = p
		}
	}
	if best == nil {
		return 0
	}
	return best.nid
}

// sendRecoveryPing sends one recovery ping (lnet_send_ping with
// recovery set: never resent, sent to exactly that NID).
func (in *Instance) sendRecoveryPing(rp recoveryPing) {
	buf := make([]byte, lnetwire.PingInfoHdrSize+2*lnetwire.PingInfoEntrySize)
	done := func(err error, reply bool) {
		in.mu.Lock()
		defer in.mu.Unlock()
		if rp.ni != nil {
			rp.ni.mr.rec.pending = false
			if err == nil && reply {
				// lnet_handle_recovery_reply: the NI works.
				in.niIncHealthLocked(rp.ni)
				rp.ni.mr.rec.pingCount = 0
			}
		}
		if rp.p != nil && rp.p.hs != nil {
			rp.p.hs.pending = false
		}
	}
	h, err := in.MDBind(MD{Start: buf, Threshold: 2, Options: MDTruncate, Handler: func(ev *Event) {
		switch {
		case ev.Status != nil:
			done(ev.Status, false)
		case ev.Type == EventReply:
			done(nil, true)
		case ev.Type == EventUnlink:
			done(ErrTimeout, false)
		}
	}}, AutoUnlink)
	if err != nil {
		done(err, false)
		return
	}
	if err := in.get(rp.self, h, lnetwire.ProcessID{NID: rp.target, PID: lnetwire.PIDLustre},
		ReservedPortal, lnetwire.PingMatchBits, 0, true); err != nil {
		_ = in.MDUnlink(h)
		done(err, false)
	}
}

// unqueueRecoveryLocked forgets p's recovery (it is being deleted).
func (in *Instance) unqueueRecoveryLocked(p *peer) {
	if p.hs != nil && p.hs.queued {
		p.hs.queued = false
		for i, q := range in.mr.rec.peerQ {
			if q == p {
				in.mr.rec.peerQ = append(in.mr.rec.peerQ[:i], in.mr.rec.peerQ[i+1:]...)
				break
			}
		}
	}
}

// countHealthLocked is lnet_incr_hstats: the instance's counters, the
// NI's local ones and the peer NI's remote ones.
func (in *Instance) countHealthLocked(ni *netIface, p *peer, hs healthStatus, retries int) {
	st := &in.mr.hstats
	nh := &ni.mr.hs
	var ph *peerHealth
	if p != nil && hs >= hsRemoteDropped {
		ph = p.healthState()
	}
	switch hs {
	case hsOK:
		if retries > 0 {
			st.SuccessfulResends++
		}
	case hsLocalInterrupt:
		nh.interrupt++
		st.LocalInterruptCount++
	case hsLocalDropped:
		nh.dropped++
		st.LocalDroppedCount++
	case hsLocalAborted:
		nh.aborted++
		st.LocalAbortedCount++
	case hsLocalNoRoute:
		nh.noRoute++
		st.LocalNoRouteCount++
	case hsLocalTimeout:
		nh.timeout++
		st.LocalTimeoutCount++
	case hsLocalError:
		nh.error++
		st.LocalErrorCount++
	case hsRemoteDropped:
		st.RemoteDroppedCount++
		if ph != nil {
			ph.dropped++
		}
	case hsRemoteError:
		st.RemoteErrorCount++
		if ph != nil {
			ph.error++
		}
	case hsRemoteTimeout:
		st.RemoteTimeoutCount++
		if ph != nil {
			ph.timeout++
		}
	case hsNetworkTimeout:
		st.NetworkTimeoutCount++
		if ph != nil {
			ph.networkTimeout++
		}
	}
}

// txHealthLocked is lnet_health_check for a message we sent (not
// forwarded) that completed with status: it updates health and counters
// and reports whether m is to be resent.
func (in *Instance) txHealthLocked(m *message, status error) bool {
	ni, p := m.ni, m.peer
	if ni == nil || ni.lo || in.closed {
		return false
	}
	hs := classify(status)
	if m.hstatus != hsOK && status != nil {
		hs = m.hstatus
	}
	in.countHealthLocked(ni, p, hs, int(m.retries))
	if hs == hsOK {
		in.niIncHealthLocked(ni)
		if p != nil {
			p.sendCount++
		}
		return false
	}
	if p != nil {
		p.dropCount++
	}
	localResend, remoteResend, remoteHealth := true, true, true
	if in.usableNIsLocked() < 2 {
		localResend = false // nowhere else to send from
	}
	if p == nil || p.lp == nil || p.lp.nnis <= 1 {
		remoteResend = false // nowhere else to send to
		remoteHealth = p != nil && (in.routes.gateways[p.nid] != nil || in.router.on)
	}
	if p != nil && in.byNID[p.nid] != nil {
		remoteHealth = false // our own NI: local recovery handles it
	}
	resend := false
	switch hs {
	case hsLocalInterrupt, hsLocalDropped, hsLocalAborted, hsLocalNoRoute, hsLocalTimeout:
		in.niDecHealthLocked(ni)
		resend = localResend
	case hsLocalError:
		in.niDecHealthLocked(ni)
	case hsRemoteDropped:
		if remoteHealth {
			in.peerDecHealthLocked(p)
		}
		resend = remoteResend
	case hsRemoteError, hsRemoteTimeout:
		if remoteHealth {
			in.peerDecHealthLocked(p)
		}
	case hsNetworkTimeout:
		if remoteHealth {
			in.peerDecHealthLocked(p)
		}
		in.niDecHealthLocked(ni)
	}
	if !resend || m.recovery || m.noResend {
		return false
	}
	if in.nowNS() > m.deadline {
		return false // past the transaction deadline
	}
	if int(m.retries) >= in.globals.RetryCount {
		if in.globals.RetryCount > 0 {
			in.mr.hstats.FailedResends++
		}
		return false
	}
	return true
}

// rxHealthLocked is lnet_health_check for a message received on m.ni
// from m.from that completed successfully: the NI and the peer NI work.
func (in *Instance) rxHealthLocked(m *message) {
	ni := m.ni
	if ni == nil || ni.lo {
		return
	}
	in.niIncHealthLocked(ni)
	ni.mr.rec.pingCount = 0
	p := in.peers[m.from]
	if p == nil {
		return
	}
	p.recvCount++
	if p.hs != nil {
		p.hs.pingCount = 0
	}
	if in.routes.gateways[p.nid] != nil || in.router.on {
		p.health = MaxHealthValue
		return
	}
	in.incHealth(&p.health)
	in.queuePeerRecoveryLocked(p)
}

// usableNIsLocked counts the NIs that can carry traffic (lo excluded).
func (in *Instance) usableNIsLocked() int {
	n := 0
	for _, ni := range in.nis {
		if ni.usable() {
			n++
		}
	}
	return n
}

// HealthStats returns the health counters (lnetctl stats show).
func (in *Instance) HealthStats() HealthStats {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := in.mr.hstats
	st.ResponseTimeoutCount = in.stats.ResponseTimeouts
	return st
}

// SetNIHealth sets a local NI's health value (lnetctl net set --health,
// for tests); below the maximum it goes on the recovery queue.
func (in *Instance) SetNIHealth(nid lnetwire.NID, health int) error {
	if health < 0 || health > MaxHealthValue {
		return ErrInvalid
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	ni := in.byNID[nid]
	if ni == nil || ni.lo {
		return ErrNoEnt
	}
	ni.mr.sick = int32(MaxHealthValue - health)
	in.queueNIRecoveryLocked(ni)
	return nil
}

// SetPeerNIHealth sets a peer NI's health value (lnetctl peer set
// --health, for tests).
func (in *Instance) SetPeerNIHealth(nid lnetwire.NID, health int) error {
	if health < 0 || health > MaxHealthValue {
		return ErrInvalid
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	p := in.peers[nid]
	if p == nil {
		return ErrNoEnt
	}
	p.health = int32(health)
	in.queuePeerRecoveryLocked(p)
	return nil
}
