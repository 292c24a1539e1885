package rxe

import (
	"runtime"

	"softib/udp"
)

// # The ACK policy
//
// What a round does with the packets it built, decided in one place
// (respHold, carried out by unlockAndSend). Requests (the reqTx lane)
// always leave at the end of the round that built them, in one
// sendmmsg: a burst of same-size requests, as a post list of small
// WRITEs or SENDs builds, so becomes one UDP GSO send. Responses (the
// respTx lane: ACKs, NAKs, READ and atomic responses) are
//
//   - coalesced: the requests of one round that ask for an ACK (AckReq:
//     the peer's requester sets it on the last packet of every message
//     and at least every maxPktPerAck packets, rxe's RXE_MAX_PKT_PER_ACK)
//     get one positive ACK, for the newest PSN, built at the round's end
//     (responder.sendAck, flushAck). An ACK acknowledges every earlier
//     PSN, so the peer completes the same WQEs; Linux rxe's completer
//     takes such an ACK as rxe's own responder sends one after a lost
//     ACK (roce-wire.md §8.2, row 7 of the observed behaviour). Linux
//     rxe sends one ACK per AckReq packet because its responder handles
//     one packet at a time; a round here handles what one receive batch
//     brought. One ACK holds back at most maxPktPerAck PSNs of the peer's
//     send window (rxe stops at 128 unacknowledged), so a longer run
//     is cut into several. NAKs, RNR NAKs, atomic ACKs and READ
//     responses are never merged and go out behind the pending ACK.
//   - sent at once, with the round's requests (one sendmmsg, a lone
//     request first so that a reply and the ACK it carries leave as one
//     GSO send: sendBoth), unless the round pushed a completion that
//     someone is about to act on. Then they wait for that reply, which
//     carries them (piggybacking), in exactly three cases:
//     1. holdHandlers: a CQ completion handler is due. The round sends
//     its requests, runs the handlers on this goroutine with QP.mu
//     released, and sends the responses afterwards, or with the
//     handler's own post if it posted (the event-driven ping-pong).
//     2. holdYield: a device goroutine (a shard's receive goroutine, the
//     QP's run loop) woke a channel reader with a lone round: at most
//     one request and two packets (a ping-pong's message, which arrives
//     with the ACK of the previous one in the same GRO datagram, or a
//     lone response): it yields the CPU once before sending, so that
//     the woken application's post carries the responses (the Go
//     scheduler otherwise runs the reader only after the sendmmsg and
//     the next empty recvmmsg: a median 7 µs per message, measured).
//     They go out when the goroutine runs again, whether the reader
//     posted or not. A bigger round (a stream) sends at once:
//     runtime.Gosched puts the goroutine on the global run queue,
//     behind every runnable goroutine of the process, and a shard's
//     receive goroutine that yields for each QP of a batch stalls the
//     others (o2iblnd with conns_per_peer 4: a third of the wall time
//     spent runnable there, measured with the scheduler-latency profile
//     of a runtime trace).
//     3. holdPoller: a CQ poller holding a receive token (busypoll.go) is
//     the application itself and returns to it at once: the responses
//     stay queued for its next post on the QP, its next empty Poll or
//     ReqNotify (Device.flushDeferred), or respDeferMax after the
//     round, which the QP timer enforces (deferResp).
//     A round run by the application's post (byApp) sends at once: the
//     application is already past the point where it would reply.
//
// An ACK only retires the peer's WQEs, so holding it is off the
// critical path, and a held response never waits for another message.
// respDeferMax (100 µs) is below any retransmit timeout Linux rxe arms
// (its timer counts jiffies: ≥ 1 ms) and below 4.096 µs × 2^timeout for
// every timeout code from 5 up (the usual 14, rdma-core's and
// perftest's, is 67 ms); a peer with a smaller code retransmits, and the
// duplicate is re-ACKed.

// sendMode names who runs a round: the only thing the ACK policy needs
// to know about its caller.
type sendMode uint8

const (
	// byApp: the application's own call (PostSend, Destroy, a flush of
	// deferred responses), which returns to it at once.
	byApp sendMode = iota
	// byDevice: a shard's receive goroutine or the QP's run loop.
	byDevice
	// byPoller: a CQ poller holding a receive token (busypoll.go).
	byPoller
)

// respHold is what the ACK policy does with a round's responses.
type respHold uint8

const (
	holdNone     respHold = iota // send them with the requests
	holdHandlers                 // after the due completion handlers ran
	holdYield                    // after yielding to the woken channel reader
	holdPoller                   // for the poller's next post, empty Poll or respDeferMax
)

// holdFor decides a round's respHold (the policy above) from who ran it
// and what it did: hdue (handlers due), woke (a channel reader woken),
// pushed (a completion pushed), resp (responses queued), lone (it
// handled at most one request and two packets).
func holdFor(by sendMode, hdue uint8, woke, pushed, resp, lone bool) respHold {
	switch {
	case hdue != 0:
		return holdHandlers
	case by == byDevice && woke && lone:
		return holdYield
	case by == byPoller && pushed && resp:
		return holdPoller
	}
	return holdNone
}

// unlockAndSend releases mu and then sends the packets the round queued
// (mu held on entry), as the ACK policy above decides.
func (q *QP) unlockAndSend(by sendMode) {
	q.resp.flushAck() // a round that ran no inbound packets may still owe one
	// A lone round: one message of a request/response exchange, with
	// at most the ACK of the previous one beside it.
	lone := q.roundReq <= 1 && q.roundIn <= 2
	pushed, woke, due := q.pushed, q.woke, q.hdue
	q.pushed, q.woke, q.roundIn, q.roundReq = false, false, 0, 0
	switch holdFor(by, due, woke, pushed, len(q.respTx.cur.pkts) > 0, lone) {
	case holdHandlers:
		q.hdue = 0
		req := q.reqTx.take()
		q.mu.Unlock()
		if req {
			q.reqTx.send(q)
		}
		q.runHandlers(due)
		q.mu.Lock()
		q.unlockAndSend(byApp)
		return
	case holdYield:
		req, resp := q.reqTx.take(), len(q.respTx.cur.pkts) > 0
		q.mu.Unlock()
		if req {
			q.reqTx.send(q)
		}
		runtime.Gosched()
		if resp {
			q.mu.Lock()
			q.unlockAndSend(byApp)
		}
		return
	case holdPoller:
		if q.deferResp() {
			req := q.reqTx.take()
			q.mu.Unlock()
			if req {
				q.reqTx.send(q)
			}
			q.dev.addDeferred(q)
			return
		}
		// Overdue: send now.
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
	q.unlockAndSend(byApp)
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
