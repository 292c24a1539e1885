package rxe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"softib/internal/seqnum"
	"softib/udp"
	"softib/verbs"
	"softib/wire/roce"
)

// QP is a queue pair. The engine state (queues, requester, responder,
// completer) is guarded by mu and run by whichever goroutine holds it: the
// poster inline, the device receive goroutine inline, or the QP's run
// loop (see the package comment).
type QP struct {
	dev     *Device
	pd      *PD
	qpn     uint32
	typ     verbs.QPType
	sendCQ  *CQ
	recvCQ  *CQ
	srq     *SRQ
	init    verbs.QPInitAttr
	context any
	stateA  atomic.Uint32 // mirror of state for State()
	// peerIP mirrors dst's address for the receive path, which drops an
	// RC/UC packet from another address before it takes a slot in the
	// QP's inbound ring (nil until an address vector is set).
	peerIP atomic.Pointer[netip.Addr]

	mu       sync.Mutex
	state    verbs.QPState
	attr     verbs.QPAttr
	dst      netip.AddrPort // RC/UC peer
	mtu      int
	sq       ring[sendWQE]
	rq       ring[recvWQE]
	cap      verbs.QPCap
	req      requester
	comp     completer
	resp     responder
	reqTx    txLane        // requests (PSN order towards the peer's responder)
	respTx   txLane        // ACKs, NAKs, READ/atomic responses (PSN order)
	woke     bool          // this round's completions notified a channel
	hdue     uint8         // CQ handlers due (hdueSend, hdueRecv) once mu is released
	pushed   bool          // this round pushed a completion
	respDue  int64         // deferred responses must go by then (0: none)
	listed   bool          // in Device.deferred (guarded by Device.defMu)
	txMsgs   []udp.Message // sendBoth's vector (both lane mutexes held)
	encap    encapCache
	sport    qpSport    // source port (sport.go)
	drainC   *sync.Cond // signalled when queues may have emptied
	dead     bool
	timerAt  int64   // deadline the timer is set for (0: none)
	sqdEvent bool    // raise SQ_DRAINED when the SQ empties in SQD
	stats    qpStats // per-QP counters (introspect.go)

	inMu    sync.Mutex
	inq     []*packet
	inSpare []*packet

	kickC chan struct{}
	done  chan struct{}
	timer *time.Timer
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

func (d *Device) addQP(q *QP) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return verbs.ErrClosed
	}
	if q.typ == verbs.QPTypeGSI {
		if d.gsi.Load() != nil {
			return fmt.Errorf("rxe: GSI QP exists: %w", verbs.ErrBusy)
		}
		q.qpn = 1
		d.gsi.Store(q)
		d.qps[q] = struct{}{}
		return nil
	}
	if d.qpTable.n >= MaxQP {
		return fmt.Errorf("rxe: create QP: %w", verbs.ErrResourceLimit)
	}
	for {
		qpn := d.nextQPN
		d.nextQPN++
		if d.nextQPN > seqnum.Mask {
			d.nextQPN = firstUserQPN
		}
		if d.qpTable.get(qpn) == nil {
			q.qpn = qpn
			break
		}
	}
	d.qpTable.put(q.qpn, q)
	d.qps[q] = struct{}{}
	return nil
}

func (d *Device) removeQP(q *QP) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.qps, q)
	if q.qpn == 1 {
		d.gsi.CompareAndSwap(q, nil)
		return
	}
	d.qpTable.remove(q.qpn, q)
}

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the transport service.
func (q *QP) Type() verbs.QPType { return q.typ }

// State returns the current state.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.stateA.Load()) }

// Context returns QPInitAttr.Context.
func (q *QP) Context() any { return q.context }

// acceptsTransport reports whether opcode op belongs to the QP's type.
func (q *QP) acceptsTransport(op roce.Opcode) bool {
	switch op.Transport() {
	case roce.TransportRC:
		return q.typ == verbs.QPTypeRC
	case roce.TransportUC:
		return q.typ == verbs.QPTypeUC
	case roce.TransportUD:
		return q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI
	}
	return false
}

// Modify applies attributes following the IBA transition rules.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	next, err := verbs.ModifyCheck(q.typ, q.state, attr, mask)
	if err != nil {
		return err
	}
	var dst netip.AddrPort
	if err := q.checkAttr(attr, mask, &dst); err != nil {
		return err
	}
	a := &q.attr
	if mask&verbs.QPAttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&verbs.QPAttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&verbs.QPAttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&verbs.QPAttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&verbs.QPAttrAV != 0 {
		a.AH = attr.AH
		q.dst = dst
		ip := dst.Addr()
		q.peerIP.Store(&ip)
	}
	if mask&verbs.QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
		q.mtu = attr.PathMTU.Bytes()
	}
	if mask&verbs.QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&verbs.QPAttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
		q.comp.retryCnt = attr.RetryCnt
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
		q.comp.rnrRetry = attr.RNRRetry
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN & seqnum.Mask
		q.resp.psn = seqnum.NewPSN(attr.RQPSN)
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&verbs.QPAttrAltPath != 0 {
		a.AltAH, a.AltPKeyIndex, a.AltPortNum, a.AltTimeout = attr.AltAH, attr.AltPKeyIndex, attr.AltPortNum, attr.AltTimeout
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN & seqnum.Mask
		psn := seqnum.NewPSN(attr.SQPSN)
		q.req.psn, q.comp.psn = psn, psn
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	if mask&verbs.QPAttrPathMigState != 0 {
		a.PathMigState = attr.PathMigState
	}
	if mask&verbs.QPAttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN & seqnum.Mask
	}
	if mask&verbs.QPAttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}
	if next != q.state {
		q.setState(next)
		q.kick()
	}
	q.updateSport()
	return nil
}

// checkAttr range-checks the attributes a Modify carries.
func (q *QP) checkAttr(a *verbs.QPAttr, mask verbs.QPAttrMask, dst *netip.AddrPort) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("rxe: modify QP %d: %s %v out of range: %w", q.qpn, what, v, verbs.ErrInvalidAttr)
	}
	if mask&verbs.QPAttrPKeyIndex != 0 && a.PKeyIndex >= PKeyTableLen {
		return bad("pkey_index", a.PKeyIndex)
	}
	if mask&verbs.QPAttrPort != 0 && a.PortNum != 1 {
		return bad("port", a.PortNum)
	}
	if mask&verbs.QPAttrPathMTU != 0 && !a.PathMTU.Valid() {
		return bad("path_mtu", a.PathMTU)
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtom {
		return bad("max_rd_atomic", a.MaxRdAtomic)
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtom {
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return bad("min_rnr_timer", a.MinRNRTimer)
	}
	if mask&verbs.QPAttrTimeout != 0 && a.Timeout > 31 {
		return bad("timeout", a.Timeout)
	}
	if mask&verbs.QPAttrRetryCnt != 0 && a.RetryCnt > 7 {
		return bad("retry_cnt", a.RetryCnt)
	}
	if mask&verbs.QPAttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad("rnr_retry", a.RNRRetry)
	}
	if mask&verbs.QPAttrDestQPN != 0 && a.DestQPN > seqnum.Mask {
		return bad("dest_qp_num", a.DestQPN)
	}
	if mask&(verbs.QPAttrRQPSN) != 0 && a.RQPSN > seqnum.Mask {
		return bad("rq_psn", a.RQPSN)
	}
	if mask&(verbs.QPAttrSQPSN) != 0 && a.SQPSN > seqnum.Mask {
		return bad("sq_psn", a.SQPSN)
	}
	if mask&verbs.QPAttrAccessFlags != 0 && a.AccessFlags&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessMWBind) != 0 {
		return bad("qp_access_flags", a.AccessFlags)
	}
	if mask&verbs.QPAttrAV != 0 {
		d, err := q.dev.resolveAV(&a.AH)
		if err != nil {
			return fmt.Errorf("rxe: modify QP %d: %w: %w", q.qpn, verbs.ErrInvalidAttr, err)
		}
		*dst = d
	}
	return nil
}

// setState is the single mutation point of the QP state (mu held): it
// runs the side effects of entering a state (flush on ERR, clearing on
// RESET, credits and retry counters on RTS, SQ_DRAINED in SQD).
func (q *QP) setState(next verbs.QPState) {
	prev := q.state
	q.state = next
	q.stateA.Store(uint32(next))
	switch next {
	case verbs.QPStateReset:
		q.reset()
	case verbs.QPStateRTS:
		if prev == verbs.QPStateRTR {
			q.comp.retryCnt, q.comp.rnrRetry = q.attr.RetryCnt, q.attr.RNRRetry
			q.req.credUnlimited = true
		}
	case verbs.QPStateSQD:
		q.sqdEvent = q.attr.EnSQDAsyncNotify
		q.checkSQDrained()
	case verbs.QPStateErr:
		if prev != verbs.QPStateErr {
			q.flush()
			if q.srq != nil {
				q.dev.raise(verbs.AsyncEvent{Type: verbs.EventQPLastWQEReached, QP: q})
			}
		}
	}
}

// fail moves the QP to ERR after a transport error and raises the async
// event of that error class (mu held).
func (q *QP) fail(ev verbs.EventType) {
	if q.state == verbs.QPStateErr {
		return
	}
	q.setState(verbs.QPStateErr)
	q.dev.raise(verbs.AsyncEvent{Type: ev, QP: q})
}

// reset empties both queues without completions and clears the engine.
func (q *QP) reset() {
	for q.sq.len() > 0 {
		q.sq.pop()
	}
	for q.rq.len() > 0 {
		q.rq.pop()
	}
	q.req = requester{}
	q.comp = completer{}
	q.resp.reset()
	q.timerAt = 0
	q.drainC.Broadcast()
}

// flush completes every outstanding WR with WR_FLUSH_ERR (mu held).
func (q *QP) flush() {
	for p := q.sq.head; p != q.sq.tail; p++ {
		w := q.sq.at(p)
		if w.state != wqeDone {
			w.state, w.status = wqeDone, verbs.WCWRFlushErr
		}
	}
	q.completeSends()
	q.flushRWQE()
	for q.rq.len() > 0 {
		r := q.rq.at(q.rq.head)
		q.pushCQ(q.recvCQ, hdueRecv, &verbs.WC{WRID: r.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn}, false)
		q.rq.pop()
	}
	q.resp.reset()
	q.timerAt = 0
	q.drainC.Broadcast()
}

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

// Drain moves the QP to ERR and waits until every WR has completed.
func (q *QP) Drain() error {
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		return verbs.ErrClosed
	}
	if q.state != verbs.QPStateErr {
		if q.state == verbs.QPStateReset {
			return fmt.Errorf("rxe: drain QP in RESET: %w", verbs.ErrQPState)
		}
		q.setState(verbs.QPStateErr)
	}
	for (q.sq.len() > 0 || q.rq.len() > 0) && !q.dead && q.state == verbs.QPStateErr {
		q.drainC.Wait()
	}
	return nil
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
	q.unlockAndSend(sendNow)
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

// enqueue queues a received packet for the engine.
func (q *QP) enqueue(p *packet) bool {
	q.inMu.Lock()
	if len(q.inq) >= inqMax {
		q.inMu.Unlock()
		return false
	}
	q.inq = append(q.inq, p)
	q.inMu.Unlock()
	return true
}

// kick wakes the run loop (the rxe "armed" semantic: one pending wakeup).
func (q *QP) kick() {
	select {
	case q.kickC <- struct{}{}:
	default:
	}
}

// sendMode tells unlockAndSend what to do with the response lane.
type sendMode uint8

const (
	// sendNow sends both lanes.
	sendNow sendMode = iota
	// sendYield (the receive goroutine and the run loop): a round whose
	// completions woke a channel reader gives that reader the CPU before
	// sending its responses.
	sendYield
	// sendDefer (a CQ poller holding the receive token, busypoll.go): a
	// round that pushed a completion keeps its responses queued for the
	// poller's next post on the QP, its next empty Poll or, at the
	// latest, respDeferMax.
	sendDefer
)

// runInline processes the QP on the calling goroutine if nobody else is,
// and otherwise leaves the work to the holder and the loop.
func (q *QP) runInline(mode sendMode) {
	if !q.mu.TryLock() {
		q.kick()
		return
	}
	more := q.process()
	q.unlockAndSend(mode)
	if more {
		q.kick()
	}
}

// unlockAndSend releases mu and then sends the packets the round queued
// (mu held on entry), both lanes in one WriteBatch when both have some.
//
// With sendYield, a round whose completions woke a channel reader gives
// that reader the CPU before sending its responses. The Go scheduler
// runs a goroutine readied by a channel send only when the readier
// blocks (or after a steal delay), so otherwise the application would
// wait for the ACK's sendmmsg and the next empty recvmmsg: measured, a
// median 7 µs per message. The responses stay queued meanwhile: if the
// woken application posts (the reply of a ping-pong), its round sends
// them in the same sendmmsg as its request, and the peer receives both in
// one recvmmsg; otherwise they go out when this goroutine runs again.
// (Deferring them further, as sendDefer does, was measured: it saves the
// ~2% of ACKs that leave alone but costs more in timer resets.)
// sendDefer makes the same bet for a CQ poller, which is the application
// itself and returns to it at once. An ACK only retires the peer's WQEs,
// so it is off the critical path either way.
func (q *QP) unlockAndSend(mode sendMode) {
	pushed, woke := q.pushed, q.woke
	q.pushed, q.woke = false, false
	if due := q.hdue; due != 0 {
		// Completion handlers run first, with mu released: an
		// event-driven application's reply (a post from the handler)
		// then takes this round's responses along in its own send, as
		// a woken channel reader's does with sendYield.
		q.hdue = 0
		req := q.reqTx.take()
		q.mu.Unlock()
		if req {
			q.reqTx.send(q)
		}
		q.runHandlers(due)
		q.mu.Lock()
		q.unlockAndSend(sendNow)
		return
	}
	if mode == sendDefer && pushed && len(q.respTx.cur.pkts) > 0 && q.deferResp() {
		req := q.reqTx.take()
		q.mu.Unlock()
		if req {
			q.reqTx.send(q)
		}
		q.dev.addDeferred(q)
		return
	}
	if mode == sendYield && woke {
		req, resp := q.reqTx.take(), len(q.respTx.cur.pkts) > 0
		q.mu.Unlock()
		if req {
			q.reqTx.send(q)
		}
		runtime.Gosched()
		if resp {
			q.mu.Lock()
			q.unlockAndSend(sendNow)
		}
		return
	}
	req, resp := q.reqTx.take(), q.respTx.take()
	q.respDue = 0 // nothing deferred is left queued
	q.mu.Unlock()
	switch {
	case req && resp:
		q.sendBoth()
	case req:
		q.reqTx.send(q)
	case resp:
		q.respTx.send(q)
	}
}

// Handlers due after a round (QP.hdue).
const (
	hdueSend uint8 = 1 << iota // the send CQ's
	hdueRecv                   // the receive CQ's
)

// pushCQ queues wc on cq (mu held) and records what that notified: a
// woken channel reader for sendYield, a handler for runHandlers. bit
// names cq's role (hdueSend or hdueRecv).
func (q *QP) pushCQ(cq *CQ, bit uint8, wc *verbs.WC, solicited bool) {
	ev := cq.push(wc, solicited)
	if ev&pushWoke != 0 {
		q.woke = true
	}
	if ev&pushHandler != 0 {
		q.hdue |= bit
	}
}

// runHandlers calls the completion handlers that a round made due (mu
// not held): each CQ once, even when it is both the send and the
// receive CQ.
func (q *QP) runHandlers(due uint8) {
	if due&hdueSend != 0 {
		q.sendCQ.callHandler()
	}
	if due&hdueRecv != 0 && (due&hdueSend == 0 || q.recvCQ != q.sendCQ) {
		q.recvCQ.callHandler()
	}
}

// unlock releases mu after an operation that may have completed work
// requests (a flush) without sending anything, and runs the completion
// handlers that made due.
func (q *QP) unlock() {
	due := q.hdue
	q.hdue = 0
	q.mu.Unlock()
	if due != 0 {
		q.runHandlers(due)
	}
}

// deferResp starts or continues a response deferral (mu held) and
// reports false when the deferral is overdue. A fresh one arms the timer
// for respDeferMax, so that responses never wait for an application that
// stopped polling.
func (q *QP) deferResp() bool {
	now := q.dev.now()
	if q.respDue == 0 {
		q.respDue = now + respDeferMax
		q.armTimer(now)
		q.dev.stats.RespDeferred.Inc()
		return true
	}
	return now < q.respDue
}

// flushDeferred sends deferred responses that are still queued.
func (q *QP) flushDeferred() {
	q.mu.Lock()
	if q.respDue == 0 {
		q.mu.Unlock()
		return
	}
	q.unlockAndSend(sendNow)
}

// addDeferred lists q for flushDeferred (q.mu not held).
func (d *Device) addDeferred(q *QP) {
	d.defMu.Lock()
	if !q.listed {
		q.listed = true
		d.deferred = append(d.deferred, q)
		d.nDeferred.Store(int32(len(d.deferred)))
	}
	d.defMu.Unlock()
}

// flushDeferred sends the responses that rounds deferred for the
// application and it did not take with a post since. The application's
// next empty Poll and ReqNotify call it, and so does the busy-poll
// receive goroutine.
func (d *Device) flushDeferred() {
	if d.nDeferred.Load() == 0 {
		return
	}
	d.defMu.Lock()
	for i, q := range d.deferred {
		q.listed = false
		q.flushDeferred()
		d.deferred[i] = nil
	}
	d.deferred = d.deferred[:0]
	d.nDeferred.Store(0)
	d.defMu.Unlock()
}

// sendBoth sends what both lanes took in one WriteBatch, responses
// first, except that a lone request followed by a lone response no longer
// than it (a ping-pong reply and the ACK of the request it answers) goes
// first: the two then leave as one GSO send (a shorter last segment is
// allowed) and arrive as one GRO datagram, halving the kernel's work for
// the ACK. The lanes are independent directions of the connection, so
// their order on the wire does not matter to the peer.
func (q *QP) sendBoth() {
	if q.txMsgs == nil {
		q.txMsgs = make([]udp.Message, 0, cap(q.reqTx.out.msgs)+cap(q.respTx.out.msgs))
	}
	var msgs []udp.Message
	if r, a := q.reqTx.out.pkts, q.respTx.out.pkts; len(r) == 1 && len(a) == 1 && a[0].n <= r[0].n {
		msgs = q.reqTx.out.fill(q.txMsgs[:0])
		msgs = q.respTx.out.fill(msgs)
	} else {
		msgs = q.respTx.out.fill(q.txMsgs[:0])
		msgs = q.reqTx.out.fill(msgs)
	}
	q.dev.writeAll(q.txConn(), msgs)
	clear(msgs)
	q.respTx.out.release(q)
	q.reqTx.out.release(q)
	q.respTx.mu.Unlock()
	q.reqTx.mu.Unlock()
}

// loop is the QP's run-loop goroutine.
func (q *QP) loop() {
	defer q.dev.qpWG.Done()
	defer q.timer.Stop()
	for {
		select {
		case <-q.done:
			q.drainInbound()
			return
		case <-q.kickC:
			q.mu.Lock()
		case <-q.timer.C:
			q.mu.Lock()
			q.timerAt = 0 // fired: make armTimer set it again
		}
		if q.dead {
			q.mu.Unlock()
			continue
		}
		more := q.process()
		q.unlockAndSend(sendYield)
		if more {
			q.kick()
		}
	}
}

func (q *QP) drainInbound() {
	q.inMu.Lock()
	for i, p := range q.inq {
		q.dev.putPacket(p)
		q.inq[i] = nil
	}
	q.inq = q.inq[:0]
	q.inMu.Unlock()
}

// process runs one engine round (mu held): inbound packets, then the
// requester, then completions, then the socket flush and timer. It
// reports whether work is left for another round.
func (q *QP) process() bool {
	if q.dead {
		return false
	}
	now := q.dev.now()
	q.inMu.Lock()
	in := q.inq
	q.inq = q.inSpare[:0]
	q.inMu.Unlock()
	for i, p := range in {
		q.handle(p, now)
		q.dev.putPacket(p)
		in[i] = nil
	}
	q.inSpare = in[:0]
	q.checkTimers(now)
	// Pop what the inbound packets finished first: fences, local
	// operations and credit probes wait for an empty SQ front.
	q.completeSends()
	more := q.runRequester(now, procBudget)
	q.completeSends()
	q.armTimer(now)
	q.inMu.Lock()
	more = more || len(q.inq) > 0
	q.inMu.Unlock()
	return more
}

// handle dispatches one received packet: requests to the responder,
// responses to the completer.
func (q *QP) handle(p *packet, now int64) {
	switch q.state {
	case verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD:
	default:
		q.dev.stats.BadQPState.Inc()
		return
	}
	if q.typ == verbs.QPTypeRC || q.typ == verbs.QPTypeUC {
		if p.addr.Addr().Unmap() != q.dst.Addr() {
			q.dev.stats.BadSrcAddr.Inc()
			return
		}
	}
	q.dev.stats.RcvdPkts.Inc()
	q.stats.RcvdPkts.Inc()
	if p.op.Is(roce.MaskReq) {
		if q.state == verbs.QPStateRTR && q.typ != verbs.QPTypeUD && q.typ != verbs.QPTypeGSI && !q.resp.commEst {
			q.resp.commEst = true
			q.dev.raise(verbs.AsyncEvent{Type: verbs.EventCommEst, QP: q})
		}
		q.respond(p, now)
		return
	}
	if q.state == verbs.QPStateRTR {
		q.dev.stats.BadQPState.Inc()
		return
	}
	q.complete(p, now)
}

// armTimer makes sure the QP timer fires no later than the nearest engine
// deadline. It is lazy (style.md §2): a timer set for an earlier time,
// or one whose deadline went away, is left to fire spuriously, since
// checkTimers tests each deadline and the next round re-arms. So the
// usual per-message deadline (set on send, cleared by the ACK) costs no
// timer operation; only a deadline earlier than the armed one resets it.
func (q *QP) armTimer(now int64) {
	dl := q.nextDeadline()
	if dl == 0 || (q.timerAt != 0 && q.timerAt <= dl) {
		return
	}
	q.timerAt = dl
	q.timer.Reset(time.Duration(max(dl-now, 0)))
}

// PostSend posts send work requests.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return 0, verbs.ErrClosed
	}
	switch q.state {
	case verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr:
	default:
		q.mu.Unlock()
		return 0, fmt.Errorf("rxe: post send on QP %d in %v: %w", q.qpn, q.state, verbs.ErrQPState)
	}
	for i := range wrs {
		if err := q.postOne(&wrs[i]); err != nil {
			q.afterPost()
			return i, err
		}
	}
	q.afterPost()
	return len(wrs), nil
}

// afterPost runs the engine inline once and unlocks (mu held).
func (q *QP) afterPost() {
	if q.state == verbs.QPStateErr {
		q.flush()
		q.unlock()
		return
	}
	more := q.process()
	q.unlockAndSend(sendNow)
	if more {
		q.kick()
	}
}

func (q *QP) postOne(wr *verbs.SendWR) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("rxe: post send wr %d: "+format+": %w", append(append([]any{wr.ID}, args...), verbs.ErrInvalidArgument)...)
	}
	switch q.typ {
	case verbs.QPTypeRC:
		if wr.Opcode > verbs.WRSendWithInv && wr.Opcode != verbs.WRRegMR {
			return fmt.Errorf("rxe: post send: opcode %v: %w", wr.Opcode, verbs.ErrNotSupported)
		}
		if err := checkMemWR(wr); err != nil {
			return err
		}
	case verbs.QPTypeUC:
		switch wr.Opcode {
		case verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		case verbs.WRBindMW: // as rxe_wr_opcode_info: RC and UC
			if err := checkMemWR(wr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("rxe: post send: opcode %v on UC: %w", wr.Opcode, verbs.ErrNotSupported)
		}
	default:
		if wr.Opcode != verbs.WRSend && wr.Opcode != verbs.WRSendWithImm {
			return fmt.Errorf("rxe: post send: opcode %v on %v: %w", wr.Opcode, q.typ, verbs.ErrNotSupported)
		}
	}
	if len(wr.SGL) > q.cap.MaxSendSGE {
		return bad("%d SGEs > max %d", len(wr.SGL), q.cap.MaxSendSGE)
	}
	var length uint64
	for _, s := range wr.SGL {
		length += uint64(s.Length)
	}
	inline := wr.Flags&verbs.SendInline != 0 && wr.Opcode != verbs.WRRDMARead && wr.Opcode != verbs.WRAtomicCmpAndSwp && wr.Opcode != verbs.WRAtomicFetchAndAdd && wr.Opcode != verbs.WRLocalInv &&
		wr.Opcode != verbs.WRRegMR && wr.Opcode != verbs.WRBindMW
	if inline && wr.InlineData != nil {
		length = uint64(len(wr.InlineData))
	}
	if inline && length > uint64(max(q.cap.MaxInlineData, 0)) {
		return bad("inline length %d > max %d", length, q.cap.MaxInlineData)
	}
	if length > MaxMsgSize {
		return bad("length %d > max message size", length)
	}
	var ah *AH
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI {
		a, ok := wr.AH.(*AH)
		if !ok || a.pd.dev != q.dev || a.dead.Load() {
			return bad("UD send needs an AH of this device")
		}
		if length > uint64(q.mtu) {
			return bad("UD message %d bytes > path MTU %d", length, q.mtu)
		}
		ah = a
	}
	if (wr.Opcode == verbs.WRAtomicCmpAndSwp || wr.Opcode == verbs.WRAtomicFetchAndAdd) && length != 8 {
		return bad("atomic needs one 8-byte result buffer, got %d bytes", length)
	}
	w := q.sq.push()
	if w == nil {
		return fmt.Errorf("rxe: post send: %w", verbs.ErrQueueFull)
	}
	w.id, w.opcode, w.flags = wr.ID, wr.Opcode, wr.Flags
	if q.init.SigAll {
		w.flags |= verbs.SendSignaled
	}
	w.imm, w.invRKey = wr.ImmData, wr.InvalidateRKey
	w.raddr, w.rkey, w.cmpAdd, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.rqpn, w.rqkey = wr.RemoteQPN&seqnum.Mask, wr.RemoteQKey
	w.reg, w.bind = wr.Reg, wr.BindMW
	if ah != nil {
		w.dst = ah.dst
	}
	w.length = uint32(length)
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.inline = inline
	w.data = w.data[:0]
	w.state, w.status = wqePosted, verbs.WCSuccess
	w.started, w.counted = false, false
	w.off = 0
	if inline {
		if wr.InlineData != nil {
			w.data = append(w.data, wr.InlineData...)
		} else if st := q.gather(w); st != verbs.WCSuccess {
			q.sq.tail-- // unpost
			return fmt.Errorf("rxe: post send wr %d: inline SGL: %w", wr.ID, verbs.ErrInvalidLKey)
		}
	}
	if q.state == verbs.QPStateErr {
		w.state, w.status = wqeDone, verbs.WCWRFlushErr
	}
	return nil
}

// PostRecv posts receive work requests.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.srq != nil {
		return 0, fmt.Errorf("rxe: post recv on a QP with an SRQ: %w", verbs.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		return 0, verbs.ErrClosed
	}
	if q.state == verbs.QPStateReset {
		return 0, fmt.Errorf("rxe: post recv on QP %d in RESET: %w", q.qpn, verbs.ErrQPState)
	}
	for i := range wrs {
		if len(wrs[i].SGL) > q.cap.MaxRecvSGE {
			return i, fmt.Errorf("rxe: post recv: %d SGEs > max %d: %w", len(wrs[i].SGL), q.cap.MaxRecvSGE, verbs.ErrInvalidArgument)
		}
		r := q.rq.push()
		if r == nil {
			return i, fmt.Errorf("rxe: post recv: %w", verbs.ErrQueueFull)
		}
		r.id = wrs[i].ID
		r.sgl = append(r.sgl[:0], wrs[i].SGL...)
	}
	if q.state == verbs.QPStateErr {
		q.flush()
	}
	return len(wrs), nil
}

// txLane is one ordered stream of a QP's outgoing packets. A round builds
// packets into cur under the QP mutex; at its end the batch moves to out
// under mu and then goes to the socket with only mu held, so the socket
// call does not keep the poster or the receive goroutine off the engine.
// The two lanes (requests, responses) are independent PSN streams and
// need no order between them. Lock order: QP.mu, then txLane.mu.
type txLane struct {
	cur txBatch    // guarded by QP.mu
	mu  sync.Mutex // held from hand-off until the batch is sent
	out txBatch    // guarded by mu; empty whenever mu is free
}

// add queues p; a full batch goes out at once, still in order (QP.mu
// held).
func (l *txLane) add(q *QP, p *packet) {
	if l.cur.add(q, p) {
		l.mu.Lock()
		l.cur.flush(q)
		l.mu.Unlock()
	}
}

// take hands the round's batch over for sending (QP.mu held); if it
// returns true, the caller must call send.
func (l *txLane) take() bool {
	if len(l.cur.pkts) == 0 {
		return false
	}
	l.mu.Lock()
	l.cur, l.out = l.out, l.cur
	return true
}

// send sends the batch take handed over.
func (l *txLane) send(q *QP) {
	l.out.flush(q)
	l.mu.Unlock()
}

// txBatch collects outgoing packets for one WriteBatch.
type txBatch struct {
	pkts []*packet
	msgs []udp.Message
}

// add appends p and reports whether the batch is full.
func (t *txBatch) add(q *QP, p *packet) bool {
	if t.pkts == nil {
		n := max(q.dev.conn.BatchSize(), 1)
		t.pkts = make([]*packet, 0, n)
		t.msgs = make([]udp.Message, n)
	}
	t.pkts = append(t.pkts, p)
	return len(t.pkts) == cap(t.pkts)
}

// flush sends the batch.
func (t *txBatch) flush(q *QP) {
	if len(t.pkts) == 0 {
		return
	}
	q.dev.writeAll(q.txConn(), t.fill(t.msgs[:0]))
	t.release(q)
}

// fill appends the batch's datagrams to msgs.
func (t *txBatch) fill(msgs []udp.Message) []udp.Message {
	for _, p := range t.pkts {
		msgs = append(msgs, udp.Message{Buf: p.buf[:p.n], N: p.n, Addr: p.addr})
	}
	return msgs
}

// release returns the sent packets to the pool.
func (t *txBatch) release(q *QP) {
	q.stats.SentPkts.Add(uint64(len(t.pkts)))
	for i, p := range t.pkts {
		q.dev.putPacket(p)
		t.pkts[i] = nil
	}
	clear(t.msgs[:len(t.pkts)]) // what flush filled, not the whole batch
	t.pkts = t.pkts[:0]
}

// writeAll sends msgs through c (the device socket or a QP's source
// port socket). Send errors lose the packets (the transport
// retransmits); they are counted.
func (d *Device) writeAll(c udp.Conn, msgs []udp.Message) {
	if d.capture != nil {
		d.capture.sent(netip.AddrPortFrom(d.addr, c.LocalAddr().Port()), msgs)
	}
	for sent := 0; sent < len(msgs); {
		n, err := c.WriteBatch(msgs[sent:])
		sent += n
		if err != nil {
			// Skip the datagram that failed; a closed socket loses all.
			d.stats.SendErr.Inc()
			sent++
			if errors.Is(err, net.ErrClosed) {
				d.stats.SendErr.Add(uint64(max(len(msgs)-sent, 0)))
				break
			}
		}
	}
	d.stats.SentPkts.Add(uint64(len(msgs)))
}
