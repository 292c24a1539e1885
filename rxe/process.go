package rxe

import (
	"time"

	"softib/verbs"
	"softib/wire/roce"
)

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

// Handlers due after a round (QP.hdue).
const (
	hdueSend uint8 = 1 << iota // the send CQ's
	hdueRecv                   // the receive CQ's
)

// pushCQ queues wc on cq (mu held) and records what that notified: a
// woken channel reader (holdYield), a handler for runHandlers. bit
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
		q.unlockAndSend(byDevice)
		if more {
			q.kick()
		}
	}
}

func (q *QP) drainInbound() {
	q.inMu.Lock()
	for i, p := range q.inq {
		q.dev.releaseRx(p)
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
		q.dev.releaseRx(p)
		in[i] = nil
	}
	q.inSpare = in[:0]
	q.roundIn = len(in)
	q.resp.flushAck() // one ACK for the round's requests (sched.go)
	q.checkTimers(now)
	// Pop what the inbound packets finished first: fences, local
	// operations and credit probes wait for an empty SQ front.
	q.comp.completeSends()
	more := q.req.run(now, procBudget)
	q.comp.completeSends()
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
	q.onPacketClass(p, now) // CE → CNP (congestion.go)
	if p.op == roce.CNP {
		q.onCNP(now)
		return
	}
	if p.op.Is(roce.MaskReq) {
		q.roundReq++ // the ACK policy's lone rounds (sched.go)
		q.resp.noteRequest()
		q.resp.respond(p, now)
		return
	}
	if q.state == verbs.QPStateRTR {
		q.dev.stats.BadQPState.Inc()
		return
	}
	q.comp.complete(p, now)
}

// checkTimers fires the roles' expired deadlines (the RNR pause, then
// the retransmit deadline).
func (q *QP) checkTimers(now int64) {
	q.req.checkTimer(now)
	q.comp.checkTimer(now)
}

// nextDeadline is the nearest engine deadline (0: none): the completer's
// retransmit deadline, the requester's RNR pause, a response deferral.
func (q *QP) nextDeadline() int64 {
	dl := q.comp.deadline()
	if r := q.req.deadline(); r != 0 && (dl == 0 || r < dl) {
		dl = r
	}
	if r := q.respDue; r != 0 && (dl == 0 || r < dl) {
		dl = r
	}
	if r := q.ccDeadline(); r != 0 && (dl == 0 || r < dl) {
		dl = r // a rate-limited requester's next send (congestion.go)
	}
	return dl
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
