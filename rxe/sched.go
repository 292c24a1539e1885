package rxe

import (
	"softib/udp"
)

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
