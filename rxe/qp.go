package rxe

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"softib/udp"
	"softib/verbs"
)

// QP is a queue pair. The engine state (queues, requester, responder,
// completer) is guarded by mu and run by whichever goroutine holds it: the
// poster inline, the device receive goroutine inline, or the QP's run
// loop. locking.go lists every lock, the order and the scheduling rules.
type QP struct {
	// Set at creation, then read-only.
	dev     *Device
	pd      *PD
	qpn     uint32
	typ     verbs.QPType
	sendCQ  *CQ
	recvCQ  *CQ
	srq     *SRQ
	init    verbs.QPInitAttr
	context any
	kickC   chan struct{} // capacity 1: one pending wakeup of loop
	done    chan struct{} // closed by destroy: loop exits
	timer   *time.Timer   // loop's deadline timer; Reset under mu (armTimer)

	// Lock-free mirrors, written under mu.
	stateA atomic.Uint32 // mirror of state for State()
	// peerIP mirrors dst's address for the receive path, which drops an
	// RC/UC packet from another address before it takes a slot in the
	// QP's inbound ring (nil until an address vector is set).
	peerIP atomic.Pointer[netip.Addr]

	mu       sync.Mutex
	state    verbs.QPState  // guarded by mu; changed only by setState
	attr     verbs.QPAttr   // guarded by mu
	dst      netip.AddrPort // guarded by mu; RC/UC peer
	mtu      int            // guarded by mu; path MTU in bytes
	sq       ring[sendWQE]  // guarded by mu
	rq       ring[recvWQE]  // guarded by mu
	cap      verbs.QPCap    // guarded by mu
	req      requester      // guarded by mu (requester.go)
	comp     completer      // guarded by mu (completer.go)
	resp     responder      // guarded by mu (responder.go)
	reqTx    txLane         // cur guarded by mu, out by reqTx.mu; requests (PSN order towards the peer's responder)
	respTx   txLane         // cur guarded by mu, out by respTx.mu; ACKs, NAKs, READ/atomic responses (PSN order)
	woke     bool           // guarded by mu; this round's completions notified a channel
	hdue     uint8          // guarded by mu; CQ handlers due (hdueSend, hdueRecv) once mu is released
	pushed   bool           // guarded by mu; this round pushed a completion
	roundIn  int            // guarded by mu; inbound packets this round handled
	roundReq int            // guarded by mu; request packets among them
	respDue  int64          // guarded by mu; deferred responses must go by then (0: none)
	listed   bool           // guarded by Device.defMu; in Device.deferred
	txMsgs   []udp.Message  // guarded by reqTx.mu and respTx.mu together; sendBoth's vector
	encap    encapCache     // guarded by mu; ICRC template of the last destination
	sport    qpSport        // written with mu and both lane mutexes held, read with either (sport.go)
	drainC   *sync.Cond     // on mu; signalled when queues may have emptied
	dead     bool           // guarded by mu; set once by destroy
	timerAt  int64          // guarded by mu; deadline the timer is set for (0: none)
	sqdEvent bool           // guarded by mu; raise SQ_DRAINED when the SQ empties in SQD
	stats    qpStats        // atomic counters (introspect.go)
	cc       *congestion    // guarded by mu; made at the first CE mark or CNP (congestion.go)

	inMu    sync.Mutex
	inq     []*packet // guarded by inMu; the inbound ring (inqMax)
	inSpare []*packet // guarded by mu; swapped with inq under inMu too
}

var _ verbs.QP = (*QP)(nil)

// CreateQP creates a queue pair in RESET. A GSI QP is QP1 (one per
// device).
func (pd *PD) CreateQP(a *verbs.QPInitAttr) (verbs.QP, error) {
	if err := pd.check(); err != nil {
		return nil, err
	}
	d := pd.dev
	switch a.Type {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD, verbs.QPTypeGSI:
	default:
		return nil, fmt.Errorf("rxe: create QP type %v: %w", a.Type, verbs.ErrNotSupported)
	}
	scq, ok1 := a.SendCQ.(*CQ)
	rcq, ok2 := a.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, fmt.Errorf("rxe: create QP: send and receive CQs of this device needed: %w", verbs.ErrInvalidArgument)
	}
	var srq *SRQ
	if a.SRQ != nil {
		s, ok := a.SRQ.(*SRQ)
		if !ok || s.pd.dev != d || a.Type == verbs.QPTypeGSI {
			return nil, fmt.Errorf("rxe: create QP: bad SRQ: %w", verbs.ErrInvalidArgument)
		}
		srq = s
	}
	c := a.Cap
	if c.MaxSendWR < 0 || c.MaxSendWR > MaxQPWR || c.MaxSendSGE < 0 || c.MaxSendSGE > MaxSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > MaxInline ||
		(srq == nil && (c.MaxRecvWR < 0 || c.MaxRecvWR > MaxQPWR || c.MaxRecvSGE < 0 || c.MaxRecvSGE > MaxSGE)) {
		return nil, fmt.Errorf("rxe: create QP: capabilities %+v out of range: %w", c, verbs.ErrInvalidArgument)
	}
	c.MaxSendWR, c.MaxSendSGE = max(c.MaxSendWR, 1), max(c.MaxSendSGE, 1)
	// rxe sizes a send WQE to hold either the SGEs (16 bytes each) or the
	// inline data, so the inline capacity is at least 16 × max_send_sge
	// (capped at the device's 400 here).
	c.MaxInlineData = min(max(c.MaxInlineData, 16*c.MaxSendSGE), MaxInline)
	if srq != nil {
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	} else {
		c.MaxRecvWR, c.MaxRecvSGE = max(c.MaxRecvWR, 1), max(c.MaxRecvSGE, 1)
	}
	q := &QP{
		dev: d, pd: pd, typ: a.Type, sendCQ: scq, recvCQ: rcq, srq: srq,
		init: *a, context: a.Context, cap: c,
		kickC: make(chan struct{}, 1), done: make(chan struct{}),
	}
	q.init.Cap = c
	a.Cap = c // report the actual sizes back, as ibv_create_qp does
	q.sq.max, q.rq.max = c.MaxSendWR, c.MaxRecvWR
	q.req.q, q.comp.q, q.resp.q = q, q, q
	q.drainC = sync.NewCond(&q.mu)
	q.attr.PathMTU = d.mtu
	q.attr.PortNum = 1
	q.mtu = d.mtu.Bytes()
	if err := d.addQP(q); err != nil {
		return nil, err
	}
	pd.users.Add(1)
	scq.users.Add(1)
	rcq.users.Add(1)
	if srq != nil {
		srq.users.Add(1)
	}
	q.timer = time.NewTimer(time.Hour)
	q.timer.Stop()
	d.qpWG.Add(1)
	go q.loop()
	return q, nil
}

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the transport service.
func (q *QP) Type() verbs.QPType { return q.typ }

// State returns the current state.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.stateA.Load()) }

// Context returns QPInitAttr.Context.
func (q *QP) Context() any { return q.context }

// Query returns the current and the creation attributes.
func (q *QP) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, verbs.ErrClosed
	}
	a := q.attr
	a.State, a.CurState = q.state, q.state
	a.Cap = q.cap
	a.SQDraining = q.state == verbs.QPStateSQD && q.sq.len() > 0
	return a, q.init, nil
}

// Destroy frees the QP; outstanding WRs are flushed first.
func (q *QP) Destroy() error {
	if !q.destroy() {
		return verbs.ErrClosed
	}
	return nil
}

func (q *QP) destroy() bool {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return false
	}
	if q.state != verbs.QPStateErr && q.state != verbs.QPStateReset {
		q.setState(verbs.QPStateErr)
	}
	q.dead = true
	q.drainC.Broadcast()
	q.unlockAndSend(byApp)
	q.dropSport()
	q.dev.removeQP(q)
	close(q.done)
	q.pd.users.Add(-1)
	q.sendCQ.users.Add(-1)
	q.recvCQ.users.Add(-1)
	if q.srq != nil {
		q.srq.users.Add(-1)
	}
	return true
}
