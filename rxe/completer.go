package rxe

import (
	"encoding/binary"

	"softib/internal/seqnum"
	"softib/verbs"
	"softib/wire/roce"
)

// completer processes ACKs, NAKs and responses for the requester
// (rxe_comp.c): it completes WQEs in order, runs the retransmit and RNR
// timers and rewinds the requester for go-back-N.
type completer struct {
	psn       seqnum.PSN // oldest PSN not yet acknowledged
	retryCnt  uint8
	rnrRetry  uint8
	timeoutAt int64 // retransmit deadline (0: none)
	// retrying is set by a NAK- or gap-triggered retry and cleared by
	// progress: responses still in flight from before the rewind must
	// not each start another retry (rxe's started_retry).
	retrying bool
}

// oldest returns the oldest send WQE that has not finished, or nil.
func (q *QP) oldest() *sendWQE {
	for p := q.sq.head; p != q.sq.tail; p++ {
		w := q.sq.at(p)
		if w.state != wqeDone {
			if !w.started {
				return nil
			}
			return w
		}
	}
	return nil
}

// complete handles a response packet (ACK, NAK, READ response, atomic
// ACK).
func (q *QP) complete(p *packet, now int64) {
	if q.typ != verbs.QPTypeRC {
		q.dev.stats.BadResp.Inc()
		return
	}
	if p.psn.Less(q.comp.psn) {
		// Already acknowledged: a duplicate answer to a retransmission.
		q.dev.stats.StaleResp.Inc()
		return
	}
	if !p.psn.Less(q.req.psn) {
		// For a PSN never sent.
		q.dev.stats.BadResp.Inc()
		return
	}
	var syn roce.Syndrome
	hasAETH := p.op.Is(roce.MaskAETH)
	if hasAETH {
		syn = roce.AETH(p.ext(roce.HdrAETH)).Syndrome()
	}
	// Everything before a response's PSN is implicitly acknowledged,
	// except NAKed/RNR'd ones, whose PSN is the first not done.
	var w *sendWQE
	for {
		w = q.oldest()
		if w == nil {
			q.dev.stats.BadResp.Inc()
			return
		}
		if !w.lastPSN.Less(p.psn) {
			break
		}
		if w.isReadAtomic() {
			// Its response got lost: go back and ask again.
			q.retryOnce(now)
			return
		}
		q.wqeDone(w, verbs.WCSuccess)
		q.progress(w.lastPSN.Next(), now)
	}
	switch {
	case p.op.Is(roce.MaskPayload): // READ response
		if w.opcode != verbs.WRRDMARead || p.psn.Less(w.firstPSN) {
			q.dev.stats.BadResp.Inc()
			return
		}
		if p.psn != q.comp.psn {
			q.retryOnce(now) // a response packet is missing
			return
		}
		first, last := p.psn == w.firstPSN, p.psn == w.lastPSN
		wantStart := first
		if p.op.Is(roce.MaskStart) != wantStart || p.op.Is(roce.MaskEnd) != last {
			q.dev.stats.BadResp.Inc()
			return
		}
		off := uint32(p.psn.Diff(w.firstPSN)) * uint32(q.mtu)
		want := min(uint32(q.mtu), w.length-min(off, w.length))
		if uint32(p.pay) != want {
			q.dev.stats.BadResp.Inc()
			return
		}
		copyIn(w.segs, int(off), p.payload())
		if hasAETH {
			q.credits(p)
		}
		q.progress(p.psn.Next(), now)
		if last {
			q.wqeDone(w, verbs.WCSuccess)
		}
	case p.op == roce.RCAtomicAck:
		if w.opcode != verbs.WRAtomicCmpAndSwp && w.opcode != verbs.WRAtomicFetchAndAdd || p.psn != w.firstPSN {
			q.dev.stats.BadResp.Inc()
			return
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], binary.BigEndian.Uint64(p.ext(roce.HdrAtomicAckETH)))
		copyIn(w.segs, 0, b[:])
		q.credits(p)
		q.progress(p.psn.Next(), now)
		q.wqeDone(w, verbs.WCSuccess)
	default: // ACKNOWLEDGE
		switch syn.Type() {
		case roce.SyndromeACK:
			if w.isReadAtomic() {
				// An ACK inside a READ/atomic: its data was lost.
				q.retryOnce(now)
				return
			}
			q.credits(p)
			q.progress(p.psn.Next(), now)
			if p.psn == w.lastPSN {
				q.wqeDone(w, verbs.WCSuccess)
			}
		case roce.SyndromeRNRNAK:
			q.dev.stats.RcvRNR.Inc()
			q.stats.RcvRNR.Inc()
			if p.psn.Less(q.comp.psn) {
				return
			}
			q.comp.psn = p.psn
			if q.comp.rnrRetry == 0 {
				q.dev.stats.RNRRetryExceeded.Inc()
				q.stats.RNRRetryExceeded.Inc()
				q.wqeDone(w, verbs.WCRNRRetryExcErr)
				q.fail(verbs.EventQPFatal)
				return
			}
			if q.comp.rnrRetry != 7 {
				q.comp.rnrRetry--
			}
			q.rewind()
			q.req.rnrUntil = now + int64(syn.RNRTimer().Duration())
			q.comp.timeoutAt = 0
		case roce.SyndromeNAK:
			switch syn.NAKCode() {
			case roce.NAKPSNSeqError:
				q.dev.stats.RcvSeqErr.Inc()
				q.stats.RcvSeqErr.Inc()
				if q.comp.psn.Less(p.psn) {
					q.comp.psn = p.psn
					q.comp.retrying = false
				}
				q.retryOnce(now)
			case roce.NAKInvalidRequest:
				q.wqeDone(w, verbs.WCRemInvReqErr)
				q.fail(verbs.EventQPFatal)
			case roce.NAKRemoteAccessError:
				q.wqeDone(w, verbs.WCRemAccessErr)
				q.fail(verbs.EventQPFatal)
			case roce.NAKRemoteOpError:
				q.wqeDone(w, verbs.WCRemOpErr)
				q.fail(verbs.EventQPFatal)
			default:
				q.wqeDone(w, verbs.WCBadRespErr)
				q.fail(verbs.EventQPFatal)
			}
		default:
			q.dev.stats.BadResp.Inc()
		}
	}
}

// progress records that every PSN before psn is acknowledged: the retry
// counters and the retransmit deadline restart.
func (q *QP) progress(psn seqnum.PSN, now int64) {
	if q.comp.psn.Less(psn) {
		q.comp.psn = psn
	}
	q.comp.retryCnt, q.comp.rnrRetry = q.attr.RetryCnt, q.attr.RNRRetry
	q.comp.retrying = false
	q.comp.timeoutAt = 0
	if q.comp.psn != q.req.psn {
		if rto := ackTimeout(q.attr.Timeout); rto > 0 {
			q.comp.timeoutAt = now + int64(rto)
		}
	}
}

// credits takes the end-to-end credits of an AETH (IBA §9.7.7.2).
func (q *QP) credits(p *packet) {
	a := roce.AETH(p.ext(roce.HdrAETH))
	n, unlimited := a.Syndrome().Credits()
	if unlimited {
		q.req.credUnlimited = true
		return
	}
	q.req.credUnlimited = false
	q.req.lsn = a.MSN().Add(n)
}

// retryOnce retries unless a NAK- or gap-triggered retry is already under
// way and nothing progressed since.
func (q *QP) retryOnce(now int64) {
	if q.comp.retrying {
		// A response sent before the peer saw our retransmission.
		q.dev.stats.StaleResp.Inc()
		return
	}
	q.retry(now, true)
	q.comp.retrying = true
}

// retry starts a retransmission from comp.psn (timeout or PSN sequence
// NAK), counting it against retry_cnt (7 = infinite, as rxe).
func (q *QP) retry(now int64, count bool) {
	if count {
		if q.comp.retryCnt == 0 {
			q.dev.stats.RetryExceeded.Inc()
			q.stats.RetryExceeded.Inc()
			if w := q.oldest(); w != nil {
				q.wqeDone(w, verbs.WCRetryExcErr)
			}
			q.fail(verbs.EventQPFatal)
			return
		}
		if q.comp.retryCnt != 7 {
			q.comp.retryCnt--
		}
	}
	q.dev.stats.CompRetry.Inc()
	q.stats.CompRetry.Inc()
	q.rewind()
	q.comp.timeoutAt = 0
	if rto := ackTimeout(q.attr.Timeout); rto > 0 {
		q.comp.timeoutAt = now + int64(rto)
	}
}

// rewind moves the requester back to the packet at comp.psn: every
// unfinished WQE from there on is sent again with the same PSNs.
func (q *QP) rewind() {
	first := true
	for p := q.sq.head; p != q.sq.tail; p++ {
		w := q.sq.at(p)
		if w.state == wqeDone {
			continue
		}
		if !w.started {
			break
		}
		if first {
			q.req.pos = p
			first = false
			w.off = 0
			if w.opcode == verbs.WRRDMARead || (!w.isReadAtomic() && q.typ == verbs.QPTypeRC) {
				if d := q.comp.psn.Diff(w.firstPSN); d > 0 {
					w.off = min(uint32(d)*uint32(q.mtu), w.length)
				}
			}
		} else {
			w.off = 0
		}
		w.state = wqePosted
	}
	q.req.noack = 0
}

// checkTimers fires expired deadlines.
func (q *QP) checkTimers(now int64) {
	if q.req.rnrUntil != 0 && now >= q.req.rnrUntil {
		q.req.rnrUntil = 0
	}
	if q.comp.timeoutAt != 0 && now >= q.comp.timeoutAt {
		q.comp.timeoutAt = 0
		if q.state == verbs.QPStateRTS || q.state == verbs.QPStateSQD {
			if q.oldest() != nil {
				q.retry(now, true)
			}
		}
	}
}

// nextDeadline is the nearest engine deadline (0: none).
func (q *QP) nextDeadline() int64 {
	dl := q.comp.timeoutAt
	if r := q.req.rnrUntil; r != 0 && (dl == 0 || r < dl) {
		dl = r
	}
	if r := q.respDue; r != 0 && (dl == 0 || r < dl) {
		dl = r
	}
	return dl
}

// completeSends posts the CQEs of finished send WQEs in order.
func (q *QP) completeSends() {
	popped := false
	for q.sq.len() > 0 {
		w := q.sq.at(q.sq.head)
		if w.state != wqeDone {
			break
		}
		if w.opcode == verbs.WRSend || w.opcode == verbs.WRSendWithImm || w.opcode == verbs.WRSendWithInv {
			// As rxe's do_complete: every completed SEND, signalled or not.
			q.dev.stats.RDMASends.Inc()
			q.stats.RDMASends.Inc()
		}
		if w.flags&verbs.SendSignaled != 0 || w.status != verbs.WCSuccess {
			wc := verbs.WC{WRID: w.id, Status: w.status, Opcode: verbs.WCOpcodeFor(w.opcode), QPN: q.qpn}
			if w.status == verbs.WCSuccess {
				wc.ByteLen = w.length
			}
			q.pushed = true
			q.pushCQ(q.sendCQ, hdueSend, &wc, false)
		}
		q.sq.pop()
		popped = true
	}
	if q.req.pos < q.sq.head {
		q.req.pos = q.sq.head
	}
	if popped && q.sq.len() == 0 {
		q.drainC.Broadcast()
		q.checkSQDrained()
	}
}

// checkSQDrained raises SQ_DRAINED once in SQD when the SQ is empty.
func (q *QP) checkSQDrained() {
	if q.state == verbs.QPStateSQD && q.sqdEvent && q.sq.len() == 0 {
		q.sqdEvent = false
		q.dev.raise(verbs.AsyncEvent{Type: verbs.EventSQDrained, QP: q})
	}
}
