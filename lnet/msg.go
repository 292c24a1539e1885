package lnet

// Message lifecycle (lib-move.c / lib-msg.c analogue):
//
//	Put/Get ──► sendLocked: a peer discovery has not brought up to date
//	             │  first waits for a discovery round (discovery.go)
//	             ▼
//	           pick NI and peer, take peer then NI credit
//	             │  (no credit: wait FIFO on the peer's or NI's queue)
//	             ▼
//	           Driver.Send ──► ni.Finalize ──► finalize: health check
//	                                           (health.go: a failure may be
//	                                           resent on another path),
//	                                           return credits (release
//	                                           queued messages), SEND
//	                                           event, free
//	Driver ──► ni.Parse ──► match ──► Driver.Recv ──► ni.Finalize ──►
//	           finalize: PUT/REPLY/ACK event; a PUT wanting an ACK turns
//	           into the ACK send; a matched GET turns into the REPLY send
//	           whose completion posts the GET event.
//
// Messages are pooled; the steady-state path allocates nothing.

import (
	"sync"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// message is the core's state of one LNet message (struct lnet_msg). All
// fields are guarded by Instance.mu except while a driver owns it.
type message struct {
	lnd.Msg
	ni   *netIface // NI it is sent or was received on
	peer *peer     // peer NI (next hop) holding its credits
	md   *libMD    // attached MD, nil if none

	ev       Event // event to post on completion (hasEvent)
	hasEvent bool
	status   error // first failure

	rx         bool // receiving (Parse → Recv → Finalize)
	ackWanted  bool // received PUT: send an ACK after delivery
	niCredit   bool // holds an NI tx credit
	peerCredit bool // holds a peer tx credit
	queued     bool // waiting on a credit queue
	private    any  // driver rx context
	rdmaReq    bool
	from       lnetwire.NID // previous hop of a received message
	mlen       int          // matched length of a received message
	dropped    bool         // counted as a drop rather than an error

	// Forwarding state (router.go): set while this node routes m.
	routing       bool      // not for us: received into a router buffer, then sent on
	rxNI          *netIface // NI it arrived on
	rxPeer        *peer     // peer NI it came from (holds its router credit)
	rtrPool       int       // router buffer pool index
	rtrBuf        []byte    // router buffer (nil for tiny)
	rtrFrag       [1][]byte // rtrBuf as an IOV fragment list
	rtrCredit     bool      // holds a pool buffer credit
	peerRtrCredit bool      // holds a peer router credit
	rxDelayed     bool      // waited for router credits (Recv is delayed)

	// Health and resends (health.go): the source NID the caller asked
	// for (msg_src_nid_param), resends so far, the deadline for resends
	// (ns since Instance.start), a health status set before the LND saw
	// the message (fault.go's simulated errors; hsOK: classify the LND's
	// status), and whether it may be resent at all.
	srcParam lnetwire.NID
	deadline int64
	retries  uint8
	hstatus  healthStatus
	noResend bool
	recovery bool // a recovery ping: exactly this NID, never resent

	// Fault injection (fault.go): held by a delay rule until faultAt.
	faultAt   time.Time
	faultHeld bool

	next *message // msgQueue link
}

// msgQueue is an intrusive FIFO of messages.
type msgQueue struct {
	head, tail *message
	n          int
}

func (q *msgQueue) push(m *message) {
	m.next = nil
	if q.tail == nil {
		q.head = m
	} else {
		q.tail.next = m
	}
	q.tail = m
	q.n++
}

func (q *msgQueue) pop() *message {
	m := q.head
	if m == nil {
		return nil
	}
	q.head = m.next
	if q.head == nil {
		q.tail = nil
	}
	m.next = nil
	q.n--
	return m
}

// removeIf unlinks and returns (as a chain through next) every message
// for which drop is true.
func (q *msgQueue) removeIf(drop func(*message) bool) *message {
	var out msgQueue
	var kept msgQueue
	for m := q.pop(); m != nil; m = q.pop() {
		if drop(m) {
			out.push(m)
		} else {
			kept.push(m)
		}
	}
	*q = kept
	return out.head
}

var msgPool = sync.Pool{New: func() any { return new(message) }}

// allocMsgLocked takes a message from the pool (lnet_msg_alloc).
func (in *Instance) allocMsgLocked() *message {
	m := msgPool.Get().(*message)
	m.SetOwner(m)
	in.stats.MsgsAlloc++
	in.stats.MsgsMax = max(in.stats.MsgsMax, in.stats.MsgsAlloc)
	return m
}

// freeMsgLocked returns m to the pool, clearing references.
func (in *Instance) freeMsgLocked(m *message) {
	in.stats.MsgsAlloc--
	*m = message{}
	msgPool.Put(m)
}

// msgOf recovers the core message from a driver-visible *lnd.Msg.
func msgOf(lm *lnd.Msg) *message {
	m, _ := lm.Owner().(*message)
	return m
}

// sendResult says what to do with a message after sendLocked, outside the
// lock.
type sendResult uint8

const (
	sendQueued sendResult = iota // waiting for credits (or taken over)
	sendReady                    // call Driver.Send
	sendFail                     // finalize with the returned error
)

// sendLocked is lnet_send: choose the NI and peer for m (unless a
// response already has them), then post it. The first send records the
// source asked for and the resend deadline.
func (in *Instance) sendLocked(m *message, self lnetwire.NID) (sendResult, error) {
	if m.retries == 0 {
		m.srcParam = self
		m.deadline = in.nowNS() + int64(in.globals.TransactionTimeout)
	}
	if in.holdForDiscoveryLocked(m) {
		return sendQueued, nil // sent (or failed) when discovery ends
	}
	dst := m.Hdr.DestNID
	if err := in.selectPathLocked(m, self); err != nil {
		m.noResend = true
		return sendFail, err
	}
	if in.holdForGatewayLocked(m, dst) {
		return sendQueued, nil // selected again when the gateway is discovered
	}
	return in.postSendLocked(m)
}

// resendLocked is lnet_resend_msg_locked plus the resend queue's
// lnet_send: give back m's credits and send it again, letting selection
// (which now sees lower health where it failed) pick the path.
func (in *Instance) resendLocked(m *message, out *pendings) pending {
	in.returnCreditsLocked(m, out)
	m.retries++
	m.status = nil
	m.hstatus = hsOK
	m.dropped = false
	m.queued = false
	m.Msg.Target.NID = m.Hdr.DestNID
	if m.Type == lnetwire.MsgGET && m.md != nil {
		m.Sink = m.md.iov(0, int(m.Hdr.SinkLength)) // routing cleared it
	}
	if !isResponse(m) {
		m.ni = nil
	}
	in.mr.hstats.ResendCount++
	r, err := in.sendLocked(m, m.srcParam)
	return pending{m: m, r: r, err: err}
}

// postSendLocked is lnet_post_send_locked: peer credit first, then NI
// credit; a message short of either waits FIFO on that queue.
func (in *Instance) postSendLocked(m *message) (sendResult, error) {
	ni, p := m.ni, m.peer
	if ni.down {
		return sendFail, lnd.ErrShutdown
	}
	if !in.peerAliveLocked(p) {
		m.dropped = true
		return sendFail, ErrPeerDown
	}
	if !m.peerCredit {
		m.peerCredit = true
		p.txCredits--
		p.txqnob += int64(m.Payload.Len)
		p.minTxCredits = min(p.minTxCredits, p.txCredits)
		if p.txCredits < 0 {
			m.queued = true
			p.txq.push(m)
			return sendQueued, nil
		}
	}
	if !m.niCredit {
		m.niCredit = true
		ni.txCredits--
		ni.minTxCredits = min(ni.minTxCredits, ni.txCredits)
		if ni.txCredits < 0 {
			m.queued = true
			ni.txq.push(m)
			return sendQueued, nil
		}
	}
	if r, err := in.faultTxLocked(m); r != sendReady { // fault.go: simulated send error or delay
		return r, err
	}
	m.queued = false
	ni.calls.Add(1)
	return sendReady, nil
}

// returnCreditsLocked is lnet_return_tx_credits_locked: give back m's
// credits and post the next waiter of each queue; the messages that became
// ready or failed are appended to out.
func (in *Instance) returnCreditsLocked(m *message, out *pendings) {
	if m.niCredit {
		m.niCredit = false
		ni := m.ni
		ni.txCredits++
		if ni.txCredits <= 0 {
			if next := ni.txq.pop(); next != nil {
				r, err := in.postSendLocked(next)
				out.add(pending{m: next, r: r, err: err})
			}
		}
	}
	if m.peerCredit {
		m.peerCredit = false
		p := m.peer
		p.txCredits++
		p.txqnob -= int64(m.Payload.Len)
		if p.txCredits <= 0 {
			if next := p.txq.pop(); next != nil {
				r, err := in.postSendLocked(next)
				out.add(pending{m: next, r: r, err: err})
			}
		}
	}
	if m.peer != nil {
		m.peer.refs--
		m.peer = nil
	}
}

// pending is a message to act on after unlocking: a send result, or
// (recv) a routed message that got its router buffer and is to be
// received.
type pending struct {
	m    *message
	r    sendResult
	err  error
	recv bool
}

// pendings holds the messages one completion releases from credit queues
// (at most two tx and two router waiters, more when a pool grows); a fixed
// array keeps the common case on the stack.
type pendings struct {
	a    [4]pending
	n    int
	more []pending
}

func (ps *pendings) add(p pending) {
	if ps.n < len(ps.a) {
		ps.a[ps.n] = p
		ps.n++
		return
	}
	ps.more = append(ps.more, p)
}

// runPending hands ready messages to their driver and finalizes failed
// ones.
func (in *Instance) runPending(ps *pendings) {
	for i := range ps.n {
		in.runOne(ps.a[i])
	}
	for _, p := range ps.more {
		in.runOne(p)
	}
}

func (in *Instance) runOne(p pending) {
	if p.recv {
		in.recvRouted(p.m)
		return
	}
	in.afterSend(p.m, p.r, p.err)
}

// afterSend acts on a sendLocked result outside the lock.
func (in *Instance) afterSend(m *message, r sendResult, err error) {
	switch r {
	case sendFail:
		in.finalize(m, err)
	case sendReady:
		ni := m.ni
		err := ni.drv.Send(&m.Msg)
		ni.calls.Done()
		if err != nil {
			in.finalize(m, err)
		}
	}
}

// detachMDLocked is lnet_msg_detach_md: drop m's MD reference and post its
// event with the final status, unlinking the MD if that was its last use.
func (in *Instance) detachMDLocked(m *message, d *delivery) {
	md := m.md
	if md == nil {
		return
	}
	m.md = nil
	md.refs--
	unlink := md.unlinkable()
	if m.hasEvent && (md.eq != nil || md.user.Handler != nil) {
		d.ev = m.ev
		d.ev.Status = m.status
		d.ev.Unlinked = unlink
		d.queueLocked(md)
	}
	if unlink {
		in.unlinkMDLocked(md)
	}
}

// finalize is lnet_finalize: the driver (or the core) is done with m.
func (in *Instance) finalize(m *message, status error) {
	var d delivery
	var ps pendings
	var next pending
	in.mu.Lock()
	if m.status == nil {
		m.status = status
	}
	if m.queued {
		// Failed while waiting for credits (shutdown): it is no longer on
		// a queue (the caller removed it).
		m.queued = false
	}
	if p := m.peer; p != nil && p.down && m.status == nil && !m.rx {
		// The LND delivered to a peer we thought dead: it is back.
		in.setPeerAliveLocked(p, true, time.Now())
	}
	switch {
	case !m.rx && !m.routing && m.ni != nil:
		if in.txHealthLocked(m, m.status) {
			next = in.resendLocked(m, &ps)
			in.mu.Unlock()
			in.runPending(&ps)
			in.afterSend(next.m, next.r, next.err)
			return
		}
	case m.rx && !m.routing && m.status == nil:
		in.rxHealthLocked(m)
	case m.routing && !m.rx && m.ni != nil:
		// A forwarded message's send to its next hop ended: health
		// as for our own, and a failed one is resent when its payload
		// is ours to send again (lnet_health_check with msg_routing;
		// the router buffer and credit stay with the message).
		if in.txHealthLocked(m, m.status) && m.status != nil && m.fwdResendable() {
			in.returnCreditsLocked(m, &ps)
			m.retries++
			m.status = nil
			m.hstatus = hsOK
			m.dropped = false
			m.queued = false
			in.mr.hstats.ResendCount++
			r, err := in.forwardLocked(m)
			in.mu.Unlock()
			in.runPending(&ps)
			in.afterSend(m, r, err)
			return
		}
	}
	in.returnCreditsLocked(m, &ps)
	switch {
	case m.routing && m.rx && m.status == nil:
		// The payload is in the router buffer: send it on.
		r, err := in.forwardLocked(m)
		next = pending{m: m, r: r, err: err}
	case m.routing:
		// Forwarded (or failed on either hop): give back the buffer and
		// the router credit.
		in.countDoneLocked(m)
		in.returnRxCreditsLocked(m, &ps)
		in.freeMsgLocked(m)
	case m.rx && m.status == nil && m.ackWanted:
		// PUT delivered: post the PUT event, then reuse m for the ACK.
		in.stats.RecvCount++
		in.stats.RecvLength += uint64(m.mlen)
		m.ni.recvCount++
		in.detachMDLocked(m, &d)
		in.prepAckLocked(m)
		r, err := in.sendLocked(m, lnetwire.NIDAny)
		next = pending{m: m, r: r, err: err}
	default:
		in.countDoneLocked(m)
		in.detachMDLocked(m, &d)
		in.freeMsgLocked(m)
	}
	in.mu.Unlock()
	d.run()
	in.runPending(&ps)
	if next.m != nil {
		in.afterSend(next.m, next.r, next.err)
	}
}

// countDoneLocked updates the counters for a message that is finished.
func (in *Instance) countDoneLocked(m *message) {
	switch {
	case m.routing && m.status == nil:
		in.stats.RouteCount++
		in.stats.RouteLength += uint64(m.Hdr.PayloadLength)
		if m.ni != nil {
			m.ni.sendCount++
		}
		if m.rxNI != nil {
			m.rxNI.recvCount++
		}
	case m.routing:
		in.stats.DropCount++
		in.stats.DropLength += uint64(m.Hdr.PayloadLength)
		if m.rxNI != nil {
			m.rxNI.dropCount++
		}
	case m.status != nil && m.dropped:
		in.stats.DropCount++
		in.stats.DropLength += uint64(max(m.mlen, m.Payload.Len))
		in.stats.Errors++
	case m.status != nil:
		in.stats.Errors++
	case m.rx:
		in.stats.RecvCount++
		in.stats.RecvLength += uint64(m.mlen)
		if m.ni != nil {
			m.ni.recvCount++
		}
	default:
		in.stats.SendCount++
		in.stats.SendLength += uint64(m.Payload.Len)
		if m.ni != nil {
			m.ni.sendCount++
		}
	}
}

// prepAckLocked turns a delivered PUT into its ACK (lnet_prep_send of an
// ACK reusing the message): no MD, no event, back to the initiator.
func (in *Instance) prepAckLocked(m *message) {
	h := &m.Hdr
	*h = lnetwire.Header{
		Type:      lnetwire.MsgACK,
		DestNID:   h.SrcNID,
		DestPID:   h.SrcPID,
		SrcPID:    in.pid,
		WMD:       h.WMD,
		MatchBits: h.MatchBits,
		MLength:   uint32(m.mlen),
	}
	m.Type = lnetwire.MsgACK
	m.Payload = lnd.IOV{}
	m.rx = false
	m.ackWanted = false
	m.hasEvent = false
	m.private = nil
}
