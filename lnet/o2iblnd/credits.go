package o2iblnd

import (
	"errors"
	"fmt"
	"time"

	"softib/wire/lnetwire"
)

// ErrCreditOverflow is a peer returning more credits than the queue depth
// allows (-EPROTO in kiblnd_handle_rx): the connection must be closed.
var ErrCreditOverflow = errors.New("o2iblnd: peer returned too many credits")

// RxRepost says how a consumed receive buffer is given back
// (IBLND_POSTRX_*).
type RxRepost uint8

// Receive repost kinds.
const (
	// RepostNone keeps the buffer (the message is still being handled).
	RepostNone RxRepost = iota
	// RepostNoCredit reposts it without returning a credit (NOOPs, and a
	// PUT_REQ's buffer, whose credit returns with the PUT_DONE).
	RepostNoCredit
	// RepostPeerCredit reposts it and owes the peer one credit.
	RepostPeerCredit
	// RepostReservedCredit reposts it and gives this side back the
	// reserved credit of the PUT_REQ/GET_REQ it answered.
	RepostReservedCredit
)

// RepostFor returns how the buffer of a received message of type t is
// reposted once handled (kiblnd_handle_rx, kiblnd_recv). putAcked says a
// PUT_REQ was answered with a PUT_ACK (its credit then comes back with
// the PUT_DONE); credits is the message's ibm_credits (V1 keepalives).
func RepostFor(version uint16, t lnetwire.KibMsgType, putAcked bool, credits uint8) RxRepost {
	switch t {
	case lnetwire.KibNOOP:
		if version != lnetwire.KibVersion1 || credits != 0 {
			return RepostNoCredit
		}
		return RepostPeerCredit // a V1 keepalive consumed a credit
	case lnetwire.KibIMMEDIATE, lnetwire.KibGETREQ, lnetwire.KibPUTDONE:
		return RepostPeerCredit
	case lnetwire.KibPUTREQ:
		if putAcked {
			return RepostNoCredit
		}
		return RepostPeerCredit
	case lnetwire.KibPUTACK, lnetwire.KibPUTNAK, lnetwire.KibGETDONE:
		return RepostReservedCredit
	}
	return RepostNoCredit
}

// FlowParams are the negotiated parameters of one connection.
type FlowParams struct {
	// Version is the connection's kib_msg version.
	Version uint16
	// QueueDepth is Q, the negotiated peer credits.
	QueueDepth int
	// HighWater is when outstanding credits are returned eagerly with a
	// NOOP (already clamped: see HighWater).
	HighWater int
	// ConcurrentSends caps the sends posted and not yet completed.
	ConcurrentSends int
	// Keepalive is the idle time after which a NOOP is sent; 0 disables.
	Keepalive time.Duration
}

// HighWater returns the credit high-water mark of a connection: V1's 7,
// else peer_credits_hiw (0 meaning peer_credits/2, at least that, below
// peer_credits) capped at Q-1 for a queue depth negotiated down.
func HighWater(version uint16, hiw, peerCredits, q int) int {
	if version == lnetwire.KibVersion1 {
		return lnetwire.KibCreditHighWaterV1
	}
	if hiw < peerCredits/2 {
		hiw = peerCredits / 2
	}
	if hiw >= peerCredits {
		hiw = peerCredits - 1
	}
	return max(1, min(hiw, q-1))
}

// ConcurrentSends returns the posted-send cap: concurrent_sends (0
// meaning peer_credits) clamped to [Q/2, 2Q] (V1: Q = 8).
func ConcurrentSends(version uint16, cs, peerCredits, q int) int {
	if version == lnetwire.KibVersion1 {
		q = lnetwire.KibQueueDepthV1
	}
	if cs <= 0 {
		cs = peerCredits
	}
	return max(1, min(max(cs, q/2), 2*q))
}

// RxBuffers returns the receive buffers a connection posts: 2Q plus V2's
// two out-of-band slots (a keepalive NOOP and a credit-returning NOOP).
func RxBuffers(version uint16, q int) int {
	if version == lnetwire.KibVersion1 {
		return 2 * q
	}
	return 2*q + 2
}

// flowEntry is one queued send: a driver tx, or a NOOP the flow created.
type flowEntry[T any] struct {
	tx   T
	typ  lnetwire.KibMsgType
	noop bool
}

// queue is a FIFO of entries that reuses its backing array.
type queue[T any] struct {
	e    []flowEntry[T]
	head int
}

func (q *queue[T]) len() int { return len(q.e) - q.head }

func (q *queue[T]) push(e flowEntry[T]) {
	if q.head > 0 && len(q.e) == cap(q.e) {
		n := copy(q.e, q.e[q.head:])
		clear(q.e[n:])
		q.e, q.head = q.e[:n], 0
	}
	q.e = append(q.e, e)
}

func (q *queue[T]) front() *flowEntry[T] { return &q.e[q.head] }

func (q *queue[T]) pop() flowEntry[T] {
	e := q.e[q.head]
	q.e[q.head] = flowEntry[T]{}
	q.head++
	if q.head == len(q.e) {
		q.e, q.head = q.e[:0], 0
	}
	return e
}

func (q *queue[T]) drain(out []T) []T {
	for q.len() > 0 {
		if e := q.pop(); !e.noop {
			out = append(out, e.tx)
		}
	}
	return out
}

// Post is a send the Flow released: the caller posts it with Credits in
// ibm_credits. Noop means the flow wants a NOOP sent (Tx is zero).
type Post[T any] struct {
	Tx      T
	Type    lnetwire.KibMsgType
	Noop    bool
	Credits uint8
}

// Flow is the credit state machine of one o2iblnd connection
// (kiblnd_check_sends, kiblnd_post_tx_locked, kiblnd_need_noop,
// kiblnd_handle_rx, kiblnd_post_rx). It is pure: no verbs, no locks, no
// clock; the driver calls it under the connection's lock and passes the
// time. T is the driver's tx descriptor.
//
// Queues: sends that take a credit (IMMEDIATE), sends that first need a
// reserved credit for their reply (PUT_REQ, GET_REQ, then moved to the
// credit queue), credit-free sends (PUT_ACK/NAK/DONE, GET_DONE, V2 NOOP)
// and V1 NOOPs.
type Flow[T any] struct {
	p FlowParams

	credits     int // send credits (ibc_credits)
	outstanding int // credits owed to the peer (ibc_outstanding_credits)
	reserved    int // reply credits (ibc_reserved_credits)
	posted      int // sends posted and not completed (ibc_nsends_posted)
	noopsPosted int // NOOPs among them
	lastSend    time.Time

	txq    queue[T] // need a credit
	rsrvdq queue[T] // need a reserved credit first
	nocred queue[T] // need none
	noops  queue[T] // V1 NOOPs
}

// NewFlow returns the state of a connection just established: Q send
// credits, Q reserved credits, nothing owed. now starts the keepalive
// clock.
func NewFlow[T any](p FlowParams, now time.Time) *Flow[T] {
	return &Flow[T]{p: p, credits: p.QueueDepth, reserved: p.QueueDepth, lastSend: now}
}

// Params returns the connection's parameters.
func (f *Flow[T]) Params() FlowParams { return f.p }

// Credits returns the send credits held.
func (f *Flow[T]) Credits() int { return f.credits }

// Outstanding returns the credits owed to the peer.
func (f *Flow[T]) Outstanding() int { return f.outstanding }

// Reserved returns the reserved (reply) credits.
func (f *Flow[T]) Reserved() int { return f.reserved }

// Posted returns the sends posted and not completed.
func (f *Flow[T]) Posted() int { return f.posted }

// Queued returns the number of sends waiting.
func (f *Flow[T]) Queued() int { return f.txq.len() + f.rsrvdq.len() + f.nocred.len() }

// LastSend returns when the last message was posted.
func (f *Flow[T]) LastSend() time.Time { return f.lastSend }

// Enqueue queues tx, a message of type t (kiblnd_queue_tx_locked). NOOPs
// are the flow's own business (Next asks for them), so t is IMMEDIATE,
// PUT_REQ, GET_REQ or a credit-free PUT_ACK/PUT_NAK/PUT_DONE/GET_DONE.
func (f *Flow[T]) Enqueue(tx T, t lnetwire.KibMsgType) {
	e := flowEntry[T]{tx: tx, typ: t}
	switch t {
	case lnetwire.KibPUTREQ, lnetwire.KibGETREQ:
		f.rsrvdq.push(e)
	case lnetwire.KibIMMEDIATE:
		f.txq.push(e)
	default:
		f.nocred.push(e)
	}
}

// keepaliveDue reports whether nothing was sent for Keepalive.
func (f *Flow[T]) keepaliveDue(now time.Time) bool {
	return f.p.Keepalive > 0 && now.Sub(f.lastSend) >= f.p.Keepalive
}

// NeedNoop is kiblnd_need_noop: a NOOP must go out to return credits (at
// the high-water mark) or as a keepalive, and no other message can carry
// them soon.
func (f *Flow[T]) NeedNoop(now time.Time) bool {
	if f.outstanding < f.p.HighWater && !f.keepaliveDue(now) {
		return false
	}
	if f.p.Version != lnetwire.KibVersion1 {
		if f.nocred.len() > 0 {
			return false // a credit-free message will carry them
		}
		return f.txq.len() == 0 || f.credits == 0
	}
	if f.noops.len() > 0 || f.nocred.len() > 0 || f.credits == 0 {
		return false
	}
	if f.credits == 1 && f.outstanding == 0 {
		return false // the last credit is for returning credits
	}
	return f.txq.len() == 0 || f.credits == 1
}

// Next returns the next message to post now, having charged it: a credit
// for IMMEDIATE/PUT_REQ/GET_REQ (and V1 NOOPs), the owed credits it
// carries, a posted-send slot. ok is false when nothing may go until a
// completion or a received credit (kiblnd_check_sends_locked). The
// caller must post the returned message, or undo it with Unpost.
func (f *Flow[T]) Next(now time.Time) (p Post[T], ok bool) {
	for f.reserved > 0 && f.rsrvdq.len() > 0 {
		e := f.rsrvdq.pop()
		f.txq.push(e)
		f.reserved--
	}
	if f.NeedNoop(now) {
		e := flowEntry[T]{typ: lnetwire.KibNOOP, noop: true}
		if f.p.Version == lnetwire.KibVersion1 {
			f.noops.push(e)
		} else {
			f.nocred.push(e)
		}
	}
	for {
		var q *queue[T]
		credit := 0
		switch {
		case f.nocred.len() > 0:
			q = &f.nocred
		case f.noops.len() > 0:
			q, credit = &f.noops, 1
		case f.txq.len() > 0:
			q, credit = &f.txq, 1
		default:
			return p, false
		}
		if f.posted >= f.p.ConcurrentSends {
			return p, false
		}
		if credit != 0 && f.credits == 0 {
			return p, false
		}
		e := q.front()
		if credit != 0 && f.p.Version == lnetwire.KibVersion1 && f.credits == 1 && e.typ != lnetwire.KibNOOP {
			return p, false // V1: the last credit is reserved for a NOOP
		}
		isNoop := e.typ == lnetwire.KibNOOP
		popped := q.pop()
		if isNoop && (!f.NeedNoop(now) ||
			(f.p.Version != lnetwire.KibVersion1 && f.noopsPosted >= 2)) {
			// Redundant (re-checked once off the queue, as Lustre
			// does): dropped; a completion re-checks and asks again.
			continue
		}
		p = Post[T]{Tx: popped.tx, Type: popped.typ, Noop: popped.noop, Credits: uint8(f.outstanding)}
		f.credits -= credit
		f.outstanding = 0
		f.posted++
		if isNoop {
			f.noopsPosted++
		}
		f.lastSend = now
		return p, true
	}
}

// Unpost undoes Next for a message that could not be posted
// (kiblnd_post_tx_locked's failure path); the caller closes the
// connection.
func (f *Flow[T]) Unpost(p Post[T]) {
	if p.Type == lnetwire.KibIMMEDIATE || p.Type == lnetwire.KibPUTREQ || p.Type == lnetwire.KibGETREQ ||
		(p.Type == lnetwire.KibNOOP && f.p.Version == lnetwire.KibVersion1) {
		f.credits++
	}
	f.outstanding += int(p.Credits)
	f.posted--
	if p.Type == lnetwire.KibNOOP {
		f.noopsPosted--
	}
}

// SendDone records the completion of a posted message (kiblnd_tx_complete).
func (f *Flow[T]) SendDone(t lnetwire.KibMsgType) {
	f.posted--
	if t == lnetwire.KibNOOP {
		f.noopsPosted--
	}
}

// Received accounts for a received message's returned credits
// (kiblnd_handle_rx). Credits beyond Q fail with ErrCreditOverflow: the
// connection must be closed (-EPROTO).
func (f *Flow[T]) Received(t lnetwire.KibMsgType, credits uint8) error {
	if credits == 0 {
		return nil
	}
	if f.credits+int(credits) > f.p.QueueDepth {
		return fmt.Errorf("%w: %d + %d > %d", ErrCreditOverflow, f.credits, credits, f.p.QueueDepth)
	}
	f.credits += int(credits)
	if t == lnetwire.KibNOOP && f.p.Version == lnetwire.KibVersion1 {
		f.outstanding++ // give back the credit the V1 NOOP took
	}
	return nil
}

// Reposted records a receive buffer given back (kiblnd_post_rx).
func (f *Flow[T]) Reposted(k RxRepost) {
	switch k {
	case RepostPeerCredit:
		f.outstanding++
	case RepostReservedCredit:
		f.reserved++
	}
}

// Drain removes and returns every queued driver tx (the connection is
// closing); NOOPs the flow created are dropped.
func (f *Flow[T]) Drain(out []T) []T {
	out = f.nocred.drain(out)
	out = f.noops.drain(out)
	out = f.rsrvdq.drain(out)
	return f.txq.drain(out)
}
