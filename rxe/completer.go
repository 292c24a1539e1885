package rxe

import (
	"encoding/binary"

	"softib/internal/seqnum"
	"softib/verbs"
	"softib/wire/roce"
)

// completer processes ACKs, NAKs and responses for the requester
// (rxe_comp.c): it completes WQEs in order, owns the retransmit
// deadline and the retry and RNR retry counters, and rewinds the
// requester for go-back-N. Its fields are guarded by QP.mu and written
// only by its methods; the requester reports each request it sends
// (onRequestSent).
type completer struct {
	q         *QP        // set once by CreateQP
	psn       seqnum.PSN // oldest PSN not yet acknowledged
	retryCnt  uint8
	rnrRetry  uint8
	timeoutAt int64 // retransmit deadline (0: none)
	// retrying is set by a NAK- or gap-triggered retry and cleared by
	// progress: responses still in flight from before the rewind must
	// not each start another retry (rxe's started_retry).
	retrying bool
}

// reset clears the completer (QP to RESET).
func (c *completer) reset() { *c = completer{q: c.q} }

// setPSN sets the oldest unacknowledged PSN (sq_psn: nothing is
// outstanding).
func (c *completer) setPSN(psn seqnum.PSN) { c.psn = psn }

// setRetryCnt and setRNRRetry load the retry counters (Modify).
func (c *completer) setRetryCnt(n uint8) { c.retryCnt = n }

func (c *completer) setRNRRetry(n uint8) { c.rnrRetry = n }

// resetRetries reloads both retry counters from the QP attributes
// (entering RTS, and after progress).
func (c *completer) resetRetries() {
	c.retryCnt, c.rnrRetry = c.q.attr.RetryCnt, c.q.attr.RNRRetry
}

// onRequestSent starts the retransmit deadline if none runs. Should be
// called after the requester queued an RC request packet.
func (c *completer) onRequestSent(now int64) {
	if c.timeoutAt == 0 {
		if rto := ackTimeout(c.q.attr.Timeout); rto > 0 {
			c.timeoutAt = now + int64(rto)
		}
	}
}

// oldest returns the oldest send WQE that has not finished, or nil.
func (c *completer) oldest() *sendWQE {
	q := c.q
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
func (c *completer) complete(p *packet, now int64) {
	q := c.q
	if q.typ != verbs.QPTypeRC {
		q.dev.stats.BadResp.Inc()
		return
	}
	if p.psn.Less(c.psn) {
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
		w = c.oldest()
		if w == nil {
			q.dev.stats.BadResp.Inc()
			return
		}
		if !w.lastPSN.Less(p.psn) {
			break
		}
		if w.isReadAtomic() {
			// Its response got lost: go back and ask again.
			c.retryOnce(now)
			return
		}
		q.req.done(w, verbs.WCSuccess)
		c.progress(w.lastPSN.Next(), now)
	}
	switch {
	case p.op.Is(roce.MaskPayload): // READ response
		if w.opcode != verbs.WRRDMARead && !p.psn.Less(w.firstPSN) {
			// A READ response to a request that was no READ: FATAL_ERR
			// and the QP in error, as rxe_comp.c's check_ack.
			q.dev.stats.BadResp.Inc()
			q.req.done(w, verbs.WCFatalErr)
			q.fail(verbs.EventQPFatal)
			return
		}
		if w.opcode != verbs.WRRDMARead || p.psn.Less(w.firstPSN) {
			q.dev.stats.BadResp.Inc()
			return
		}
		if p.psn != c.psn {
			c.retryOnce(now) // a response packet is missing
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
			q.req.credits(roce.AETH(p.ext(roce.HdrAETH)))
		}
		c.progress(p.psn.Next(), now)
		if last {
			q.req.done(w, verbs.WCSuccess)
		}
	case p.op == roce.RCAtomicAck:
		if w.opcode != verbs.WRAtomicCmpAndSwp && w.opcode != verbs.WRAtomicFetchAndAdd || p.psn != w.firstPSN {
			q.dev.stats.BadResp.Inc()
			return
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], binary.BigEndian.Uint64(p.ext(roce.HdrAtomicAckETH)))
		copyIn(w.segs, 0, b[:])
		q.req.credits(roce.AETH(p.ext(roce.HdrAETH)))
		c.progress(p.psn.Next(), now)
		q.req.done(w, verbs.WCSuccess)
	default: // ACKNOWLEDGE
		switch syn.Type() {
		case roce.SyndromeACK:
			if w.isReadAtomic() {
				// An ACK inside a READ/atomic: its data was lost.
				c.retryOnce(now)
				return
			}
			q.req.credits(roce.AETH(p.ext(roce.HdrAETH)))
			c.progress(p.psn.Next(), now)
			if p.psn == w.lastPSN {
				q.req.done(w, verbs.WCSuccess)
			}
		case roce.SyndromeRNRNAK:
			q.dev.stats.RcvRNR.Inc()
			q.stats.RcvRNR.Inc()
			if p.psn.Less(c.psn) {
				return
			}
			c.psn = p.psn
			if c.rnrRetry == 0 {
				q.dev.stats.RNRRetryExceeded.Inc()
				q.stats.RNRRetryExceeded.Inc()
				q.req.done(w, verbs.WCRNRRetryExcErr)
				q.fail(verbs.EventQPFatal)
				return
			}
			if c.rnrRetry != 7 {
				c.rnrRetry--
			}
			q.req.rewind(c.psn)
			q.req.pauseUntil(now + int64(syn.RNRTimer().Duration()))
			c.timeoutAt = 0
		case roce.SyndromeNAK:
			switch syn.NAKCode() {
			case roce.NAKPSNSeqError:
				q.dev.stats.RcvSeqErr.Inc()
				q.stats.RcvSeqErr.Inc()
				if c.psn.Less(p.psn) {
					c.psn = p.psn
					c.retrying = false
				}
				c.retryOnce(now)
			case roce.NAKInvalidRequest:
				q.req.done(w, verbs.WCRemInvReqErr)
				q.fail(verbs.EventQPFatal)
			case roce.NAKRemoteAccessError:
				q.req.done(w, verbs.WCRemAccessErr)
				q.fail(verbs.EventQPFatal)
			case roce.NAKRemoteOpError:
				q.req.done(w, verbs.WCRemOpErr)
				q.fail(verbs.EventQPFatal)
			default: // a reserved NAK code: REM_OP_ERR, as rxe_comp.c
				q.req.done(w, verbs.WCRemOpErr)
				q.fail(verbs.EventQPFatal)
			}
		default:
			q.dev.stats.BadResp.Inc()
		}
	}
}

// progress records that every PSN before psn is acknowledged: the retry
// counters and the retransmit deadline restart.
func (c *completer) progress(psn seqnum.PSN, now int64) {
	if c.psn.Less(psn) {
		c.psn = psn
	}
	c.resetRetries()
	c.retrying = false
	c.timeoutAt = 0
	if c.psn != c.q.req.psn {
		if rto := ackTimeout(c.q.attr.Timeout); rto > 0 {
			c.timeoutAt = now + int64(rto)
		}
	}
}

// retryOnce retries unless a NAK- or gap-triggered retry is already under
// way and nothing progressed since.
func (c *completer) retryOnce(now int64) {
	if c.retrying {
		// A response sent before the peer saw our retransmission.
		c.q.dev.stats.StaleResp.Inc()
		return
	}
	c.retry(now, true)
	c.retrying = true
}

// retry starts a retransmission from psn (timeout or PSN sequence NAK),
// counting it against retry_cnt (7 = infinite, as rxe).
func (c *completer) retry(now int64, count bool) {
	q := c.q
	if count {
		if c.retryCnt == 0 {
			q.dev.stats.RetryExceeded.Inc()
			q.stats.RetryExceeded.Inc()
			if w := c.oldest(); w != nil {
				q.req.done(w, verbs.WCRetryExcErr)
			}
			q.fail(verbs.EventQPFatal)
			return
		}
		if c.retryCnt != 7 {
			c.retryCnt--
		}
	}
	q.dev.stats.CompRetry.Inc()
	q.stats.CompRetry.Inc()
	q.req.rewind(c.psn)
	c.timeoutAt = 0
	if rto := ackTimeout(q.attr.Timeout); rto > 0 {
		c.timeoutAt = now + int64(rto)
	}
}

// checkTimer retransmits when the retransmit deadline passed with work
// outstanding.
func (c *completer) checkTimer(now int64) {
	q := c.q
	if c.timeoutAt != 0 && now >= c.timeoutAt {
		c.timeoutAt = 0
		if q.state == verbs.QPStateRTS || q.state == verbs.QPStateSQD {
			if c.oldest() != nil {
				c.retry(now, true)
			}
		}
	}
}

// deadline is the retransmit deadline (0: none).
func (c *completer) deadline() int64 { return c.timeoutAt }

// completeSends posts the CQEs of finished send WQEs in order.
func (c *completer) completeSends() {
	q := c.q
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
	q.req.onRetired()
	if popped && q.sq.len() == 0 {
		q.drainC.Broadcast()
		q.checkSQDrained()
	}
}
