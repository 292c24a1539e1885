package rxe

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"softib/internal/seqnum"
	"softib/verbs"
	"softib/wire/roce"
)

// responder is the receive side of a QP (rxe_resp.c): it checks request
// packets against the expected PSN and the message in progress, executes
// them into receive WQEs and memory, and queues ACKs, NAKs and READ and
// atomic responses on QP.respTx, replaying duplicates from its resource
// ring. Its fields are guarded by QP.mu and written only by its methods;
// it shares nothing with the requester and the completer but the QP's
// attributes and send path. The receive queue (QP.rq, or the SRQ) is
// shared with PostRecv, which fills its tail.
type responder struct {
	q       *QP        // set once by CreateQP
	psn     seqnum.PSN // expected PSN
	msn     seqnum.MSN
	nakSent bool // a PSN sequence NAK went out for the current gap
	commEst bool
	ucDrop  bool // UC: dropping until the next FIRST/ONLY

	inSend  bool // inside a multi-packet SEND
	inWrite bool // inside a multi-packet WRITE

	// The receive WQE being filled (taken from the RQ or SRQ).
	haveRWQE bool
	rwqe     recvWQE
	rsegs    [][]byte
	rlen     int // bytes received so far
	rcap     int

	// The RDMA WRITE in progress.
	wmr    *MR
	wmap   *mrMap // wmr's mapping when the WRITE started
	wva    uint64 // translated into wmap (zero-based windows)
	wresid uint32
	wlen   uint32

	// Responder resources for READ and atomic replay
	// (max_dest_rd_atomic entries, rounded up to a power of 2).
	res     []readRes
	resNext int

	// The positive ACK this round owes the peer, not yet built: the
	// requests that ask for one (AckReq) merge into it, and the round's
	// end (flushAck) sends it. See the ACK policy in sched.go.
	ack ackDue
}

// ackDue is a positive ACK waiting for the end of its round.
type ackDue struct {
	due  bool
	psn  seqnum.PSN    // the newest PSN it acknowledges
	from seqnum.PSN    // the PSN of the first ACK merged into it
	syn  roce.Syndrome // as of the newest request
	msn  seqnum.MSN    // as of the newest request
	// merged counts the ACKs that went into others since the last
	// reset (for tests).
	merged uint64
}

// readRes remembers an executed READ or atomic for duplicate replay.
type readRes struct {
	valid    bool
	atomic   bool
	firstPSN seqnum.PSN
	lastPSN  seqnum.PSN
	mr       *MR
	mm       *mrMap // mr's mapping at execution
	va       uint64 // translated into mm
	length   uint32
	orig     uint64
}

// reset clears the responder (QP to RESET, or flushed in ERR), keeping
// its buffers for reuse.
func (r *responder) reset() {
	res, segs, rw := r.res, r.rsegs, r.rwqe
	clear(res)
	*r = responder{q: r.q, res: res[:0], rsegs: segs[:0], rwqe: rw}
}

// setPSN sets the expected PSN (rq_psn).
func (r *responder) setPSN(psn seqnum.PSN) { r.psn = psn }

// noteRequest raises COMM_EST for the first request a connected QP
// receives in RTR (IBA §11.6.3.1). Should be called for every request
// before respond.
func (r *responder) noteRequest() {
	q := r.q
	if q.state == verbs.QPStateRTR && q.typ != verbs.QPTypeUD && q.typ != verbs.QPTypeGSI && !r.commEst {
		r.commEst = true
		q.dev.raise(verbs.AsyncEvent{Type: verbs.EventCommEst, QP: q})
	}
}

// flushRWQE completes a receive WQE taken but not finished with
// WR_FLUSH_ERR (part of flush).
func (r *responder) flushRWQE() {
	q := r.q
	if r.haveRWQE {
		r.haveRWQE = false
		q.pushCQ(q.recvCQ, hdueRecv, &verbs.WC{WRID: r.rwqe.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn}, false)
	}
}

// takeRWQE takes the next receive WQE (RQ or SRQ) and resolves it.
func (r *responder) takeRWQE() (ok bool, st verbs.WCStatus) {
	q := r.q
	if q.srq != nil {
		if !q.srq.take(&r.rwqe) {
			return false, 0
		}
	} else {
		if q.rq.len() == 0 {
			return false, 0
		}
		e := q.rq.at(q.rq.head)
		r.rwqe.id = e.id
		r.rwqe.sgl = append(r.rwqe.sgl[:0], e.sgl...)
		q.rq.pop()
	}
	r.haveRWQE = true
	r.rlen = 0
	if q.resolve(r.rwqe.sgl, &r.rsegs, true) != verbs.WCSuccess {
		st = verbs.WCLocQPOpErr // a malformed WQE, as rxe_resp.c reports it
	}
	r.rcap = segsLen(r.rsegs)
	return true, st
}

// completeRecv posts the receive completion of the current WQE.
func (r *responder) completeRecv(wc *verbs.WC, solicited bool) {
	q := r.q
	wc.WRID = r.rwqe.id
	wc.QPN = q.qpn
	r.haveRWQE = false
	if wc.Status == verbs.WCSuccess {
		q.dev.stats.RDMARecvs.Inc()
		q.stats.RDMARecvs.Inc()
	}
	q.pushed = true
	q.pushCQ(q.recvCQ, hdueRecv, wc, solicited)
	if q.rq.len() == 0 {
		q.drainC.Broadcast()
	}
}

// lengthOK applies IBA's packet length rules to SEND/WRITE packets:
// FIRST and MIDDLE carry exactly the path MTU, LAST and ONLY at most that.
// (rxe 6.1 does not check; a packet that breaks them is corrupt or
// truncated, and dropping it lets go-back-N recover.)
func (r *responder) lengthOK(p *packet) bool {
	q := r.q
	if !p.op.Is(roce.MaskPayload) {
		return true
	}
	if p.op.Is(roce.MaskEnd) {
		return p.pay <= q.mtu
	}
	return p.pay == q.mtu
}

// respond handles a request packet.
func (r *responder) respond(p *packet, now int64) {
	q := r.q
	if q.typ != verbs.QPTypeUD && q.typ != verbs.QPTypeGSI && !r.lengthOK(p) {
		q.dev.stats.BadLength.Inc()
		return
	}
	switch q.typ {
	case verbs.QPTypeUD, verbs.QPTypeGSI:
		r.respondUD(p)
	case verbs.QPTypeUC:
		r.respondUC(p)
	default:
		r.respondRC(p, now)
	}
}

func (r *responder) respondUD(p *packet) {
	q := r.q
	deth := roce.DETH(p.ext(roce.HdrDETH))
	want := q.attr.QKey
	if q.typ == verbs.QPTypeGSI {
		want = GSIQKey
	}
	if deth.QKey() != want {
		q.dev.stats.BadQKey.Inc()
		return
	}
	ok, st := r.takeRWQE()
	if !ok {
		q.dev.stats.RcvNoRecvWQE.Inc()
		return
	}
	wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: deth.SrcQP(), Flags: verbs.WCFlagGRH}
	switch {
	case st != verbs.WCSuccess:
		wc.Status = st
	case r.rcap < 40+p.pay:
		wc.Status = verbs.WCLocLenErr
	default:
		var grh [40]byte
		grhArea(grh[:], p.addr.Addr(), p.grhDst(q.dev.addr), p.n)
		copyIn(r.rsegs, 0, grh[:])
		copyIn(r.rsegs, 40, p.payload())
		wc.ByteLen = uint32(40 + p.pay)
		if p.op == roce.UDSendOnlyImm {
			wc.ImmData = roce.ImmDt(p.ext(roce.HdrImmDt)).Value()
			wc.Flags |= verbs.WCFlagWithImm
		}
	}
	r.completeRecv(&wc, p.bth().SE())
}

// respondUC handles UC: no ACKs; on any error the rest of the message is
// dropped until the next FIRST/ONLY packet.
func (r *responder) respondUC(p *packet) {
	q := r.q
	if p.psn != r.psn {
		// Lost packets: abandon the message in progress (its receive
		// WQE is reused).
		r.inSend, r.inWrite, r.rlen = false, false, 0
		r.ucDrop = true
	}
	r.psn = p.psn.Next()
	if r.ucDrop && !p.op.Is(roce.MaskStart) {
		q.dev.stats.UCDropped.Inc()
		return
	}
	r.ucDrop = false
	if !r.seqOK(p) {
		r.inSend, r.inWrite, r.rlen = false, false, 0
		if p.op.Is(roce.MaskStart) {
			r.ucDrop = false
		} else {
			r.ucDrop = true
			q.dev.stats.UCDropped.Inc()
			return
		}
	}
	if nak, _ := r.execute(p); nak != nakNone {
		r.inSend, r.inWrite, r.rlen = false, false, 0
		r.ucDrop = !p.op.Is(roce.MaskEnd)
		q.dev.stats.UCDropped.Inc()
	}
}

// seqOK checks the opcode against the message in progress.
func (r *responder) seqOK(p *packet) bool {
	switch {
	case r.inSend:
		return p.op.Is(roce.MaskSend) && !p.op.Is(roce.MaskStart)
	case r.inWrite:
		return p.op.Is(roce.MaskWrite) && !p.op.Is(roce.MaskStart)
	}
	return p.op.Is(roce.MaskStart)
}

type nakKind uint8

const (
	nakNone nakKind = iota
	nakRNR
	nakInvReq
	nakAccess
	nakRemOp
	nakDrop // silently dropped (UC/UD-style), nothing consumed
)

func (r *responder) respondRC(p *packet, now int64) {
	q := r.q
	d := p.psn.Diff(r.psn)
	if d > 0 {
		q.dev.stats.OutOfSeqReq.Inc()
		q.stats.OutOfSeqReq.Inc()
		if !r.nakSent {
			r.nakSent = true
			r.sendAck(roce.RCAck, roce.NAKSyndrome(roce.NAKPSNSeqError), r.psn, 0)
		}
		return
	}
	if d < 0 {
		q.dev.stats.DupReq.Inc()
		q.stats.DupReq.Inc()
		r.duplicate(p)
		return
	}
	r.nakSent = false
	if !r.seqOK(p) {
		r.nak(p, nakInvReq)
		return
	}
	acc := q.attr.AccessFlags
	if (p.op.Is(roce.MaskWrite) && acc&verbs.AccessRemoteWrite == 0) ||
		(p.op.Is(roce.MaskRead) && acc&verbs.AccessRemoteRead == 0) ||
		(p.op.Is(roce.MaskAtomic) && acc&verbs.AccessRemoteAtomic == 0) ||
		((p.op.Is(roce.MaskRead) || p.op.Is(roce.MaskAtomic)) && q.attr.MaxDestRdAtomic == 0) {
		r.nak(p, nakInvReq)
		return
	}
	nak, psnUsed := r.execute(p)
	if nak != nakNone {
		r.nak(p, nak)
		return
	}
	r.psn = r.psn.Add(psnUsed)
	if p.op.Is(roce.MaskRead) || p.op.Is(roce.MaskAtomic) {
		return // the response went out from execute
	}
	if p.bth().AckReq() {
		r.sendAck(roce.RCAck, r.ackSyndrome(), p.psn, 0)
	}
}

// nak answers a request that failed: RNR NAK (QP stays), or a class C /
// access error NAK, which also moves the QP to ERR.
func (r *responder) nak(p *packet, k nakKind) {
	q := r.q
	switch k {
	case nakRNR:
		q.dev.stats.SndRNR.Inc()
		q.stats.SndRNR.Inc()
		r.sendAck(roce.RCAck, roce.RNRNAKSyndrome(roce.RNRTimer(q.attr.MinRNRTimer)), p.psn, 0)
		return
	case nakDrop:
		return
	case nakInvReq:
		q.dev.stats.InvReqNAK.Inc()
		r.sendAck(roce.RCAck, roce.NAKSyndrome(roce.NAKInvalidRequest), p.psn, 0)
		q.fail(verbs.EventQPReqErr)
	case nakAccess:
		q.dev.stats.RemAccessNAK.Inc()
		r.sendAck(roce.RCAck, roce.NAKSyndrome(roce.NAKRemoteAccessError), p.psn, 0)
		q.fail(verbs.EventQPAccessErr)
	case nakRemOp:
		q.dev.stats.RemOpNAK.Inc()
		r.sendAck(roce.RCAck, roce.NAKSyndrome(roce.NAKRemoteOpError), p.psn, 0)
		q.fail(verbs.EventQPFatal)
	}
}

// ackSyndrome is the syndrome of a positive ACK: credits when advertised.
func (r *responder) ackSyndrome() roce.Syndrome {
	q := r.q
	if !q.dev.cfg.AdvertiseCredits || q.srq != nil {
		return roce.SyndromeACKUnlimited
	}
	return roce.ACKSyndrome(roce.CreditsToCode(q.rq.len()))
}

// execute performs a request in sequence. It returns the NAK to send (if
// any) and the number of PSNs the request consumed.
func (r *responder) execute(p *packet) (nakKind, int) {
	q := r.q
	op := p.op
	switch {
	case op.Is(roce.MaskSend):
		if !r.inSend && r.haveRWQE {
			// Left over from a UC message that lost packets: reuse.
			r.rlen = 0
		} else if !r.inSend {
			ok, st := r.takeRWQE()
			if !ok {
				if q.typ == verbs.QPTypeUC {
					q.dev.stats.RcvNoRecvWQE.Inc()
					return nakDrop, 0
				}
				return nakRNR, 0
			}
			if st != verbs.WCSuccess {
				r.completeRecv(&verbs.WC{Status: st, Opcode: verbs.WCRecv}, false)
				return nakRemOp, 0
			}
		}
		if r.rlen+p.pay > r.rcap {
			// Too long for the receive WQE: an invalid request (class
			// C) with REM_INV_REQ_ERR on both sides, as rxe_resp.c.
			r.completeRecv(&verbs.WC{Status: verbs.WCRemInvReqErr, Opcode: verbs.WCRecv}, false)
			return nakInvReq, 0
		}
		copyIn(r.rsegs, r.rlen, p.payload())
		r.rlen += p.pay
		r.inSend = !op.Is(roce.MaskEnd)
		if op.Is(roce.MaskEnd) {
			wc := verbs.WC{Opcode: verbs.WCRecv, ByteLen: uint32(r.rlen), SrcQP: q.attr.DestQPN}
			if op.Is(roce.MaskImmDt) {
				wc.ImmData = roce.ImmDt(p.ext(roce.HdrImmDt)).Value()
				wc.Flags |= verbs.WCFlagWithImm
			}
			if op.Is(roce.MaskIETH) {
				key := roce.IETH(p.ext(roce.HdrIETH)).RKey()
				if !q.invalidate(key) {
					r.haveRWQE = true
					r.completeRecv(&verbs.WC{Status: verbs.WCRemInvReqErr, Opcode: verbs.WCRecv}, false)
					return nakInvReq, 0
				}
				wc.InvalidatedRKey = key
				wc.Flags |= verbs.WCFlagWithInv
			}
			r.msn = r.msn.Next()
			r.completeRecv(&wc, p.bth().SE())
		}
		return nakNone, 1
	case op.Is(roce.MaskWrite):
		if op.Is(roce.MaskStart) {
			reth := roce.RETH(p.ext(roce.HdrRETH))
			r.wva, r.wlen, r.wresid, r.wmr, r.wmap = reth.VA(), reth.DMALen(), reth.DMALen(), nil, nil
			if r.wlen > 0 {
				mr, m, va := q.remoteMR(reth.RKey(), verbs.AccessRemoteWrite, r.wva, r.wlen)
				if mr == nil {
					return nakAccess, 0
				}
				r.wmr, r.wmap, r.wva = mr, m, va
			}
		}
		if uint32(p.pay) > r.wresid || (op.Is(roce.MaskEnd) && uint32(p.pay) != r.wresid) {
			return nakInvReq, 0
		}
		if op.Is(roce.MaskRWR) && !r.haveRWQE {
			ok, st := r.takeRWQE()
			if !ok {
				if q.typ == verbs.QPTypeUC {
					q.dev.stats.RcvNoRecvWQE.Inc()
					return nakDrop, 0
				}
				return nakRNR, 0
			}
			if st != verbs.WCSuccess {
				r.completeRecv(&verbs.WC{Status: st, Opcode: verbs.WCRecvRDMAWithImm}, false)
				return nakRemOp, 0
			}
		}
		if p.pay > 0 {
			if r.wmr == nil || !r.wmr.valid.Load() {
				return nakAccess, 0
			}
			r.wmap.copyIn(r.wva+uint64(r.wlen-r.wresid), p.payload())
			r.wresid -= uint32(p.pay)
		}
		r.inWrite = !op.Is(roce.MaskEnd)
		if op.Is(roce.MaskEnd) {
			r.msn = r.msn.Next()
			if op.Is(roce.MaskImmDt) {
				wc := verbs.WC{Opcode: verbs.WCRecvRDMAWithImm, ByteLen: r.wlen, SrcQP: q.attr.DestQPN,
					ImmData: roce.ImmDt(p.ext(roce.HdrImmDt)).Value(), Flags: verbs.WCFlagWithImm}
				r.completeRecv(&wc, p.bth().SE())
			}
		}
		return nakNone, 1
	case op.Is(roce.MaskRead):
		reth := roce.RETH(p.ext(roce.HdrRETH))
		va, n := reth.VA(), reth.DMALen()
		var mr *MR
		var mm *mrMap
		if n > 0 {
			if mr, mm, va = q.remoteMR(reth.RKey(), verbs.AccessRemoteRead, va, n); mr == nil {
				return nakAccess, 0
			}
		}
		if n > MaxMsgSize {
			return nakInvReq, 0
		}
		npk := q.npkts(n)
		res := r.newRes()
		*res = readRes{valid: true, firstPSN: p.psn, lastPSN: p.psn.Add(int(npk) - 1), mr: mr, mm: mm, va: va, length: n}
		r.msn = r.msn.Next()
		r.sendReadResp(res, p.psn)
		return nakNone, int(npk)
	case op.Is(roce.MaskAtomic):
		ae := roce.AtomicETH(p.ext(roce.HdrAtomicETH))
		va := ae.VA()
		if va&7 != 0 {
			return nakInvReq, 0
		}
		mr, m, tva := q.remoteMR(ae.RKey(), verbs.AccessRemoteAtomic, va, 8)
		if mr == nil {
			return nakAccess, 0
		}
		b, ok := m.span(tva, 8)
		if !ok {
			return nakAccess, 0
		}
		if uintptr(unsafe.Pointer(&b[0]))&7 != 0 {
			return nakInvReq, 0
		}
		ptr := (*uint64)(unsafe.Pointer(&b[0]))
		var orig uint64
		if op == roce.RCCompareSwap {
			for {
				orig = atomic.LoadUint64(ptr)
				if orig != ae.Compare() || atomic.CompareAndSwapUint64(ptr, orig, ae.SwapAdd()) {
					break
				}
			}
		} else {
			orig = atomic.AddUint64(ptr, ae.SwapAdd()) - ae.SwapAdd()
		}
		res := r.newRes()
		*res = readRes{valid: true, atomic: true, firstPSN: p.psn, lastPSN: p.psn, orig: orig}
		r.msn = r.msn.Next()
		r.sendAck(roce.RCAtomicAck, r.ackSyndrome(), p.psn, orig)
		return nakNone, 1
	}
	return nakInvReq, 0
}

// newRes returns the next responder resource slot, evicting the oldest.
func (r *responder) newRes() *readRes {
	q := r.q
	if len(r.res) == 0 {
		n := 1
		for n < int(max(q.attr.MaxDestRdAtomic, 1)) {
			n <<= 1
		}
		if cap(r.res) >= n {
			r.res = r.res[:n]
		} else {
			r.res = make([]readRes, n)
		}
	}
	e := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	return e
}

// duplicate handles a request with a PSN already seen: SEND/WRITE are
// re-ACKed with the last ACKed PSN (ack_psn - 1), READ and atomics are
// replayed from the resource ring.
func (r *responder) duplicate(p *packet) {
	if p.op.Is(roce.MaskRead) || p.op.Is(roce.MaskAtomic) {
		for i := range r.res {
			e := &r.res[i]
			if !e.valid || e.atomic != p.op.Is(roce.MaskAtomic) || p.psn.Less(e.firstPSN) || e.lastPSN.Less(p.psn) {
				continue
			}
			if e.atomic {
				r.sendAck(roce.RCAtomicAck, r.ackSyndrome(), e.firstPSN, e.orig)
				return
			}
			if e.mr != nil && !e.mr.valid.Load() {
				return
			}
			r.sendReadResp(e, p.psn)
			return
		}
		return
	}
	r.sendAck(roce.RCAck, r.ackSyndrome(), r.psn.Prev(), 0)
}

// sendReadResp sends the READ response packets of res from PSN from on.
func (r *responder) sendReadResp(res *readRes, from seqnum.PSN) {
	q := r.q
	r.flushAck() // the lane stays in PSN order
	mtu := uint32(q.mtu)
	for psn := from; ; psn = psn.Next() {
		idx := uint32(psn.Diff(res.firstPSN))
		off := idx * mtu
		size := min(mtu, res.length-min(off, res.length))
		first, last := psn == res.firstPSN, psn == res.lastPSN
		var op roce.Opcode
		switch {
		case first && last:
			op = roce.RCReadResponseOnly
		case first:
			op = roce.RCReadResponseFirst
		case last:
			op = roce.RCReadResponseLast
		default:
			op = roce.RCReadResponseMiddle
		}
		p, pay := q.newPacket(op, psn, q.attr.DestQPN, int(size), q.dst, false, false)
		if o := op.Info().Offset(roce.HdrAETH); o >= 0 {
			roce.AETH(p.buf[o:]).Encode(&roce.AETHFields{Syndrome: r.ackSyndrome(), MSN: r.msn})
		}
		if size > 0 {
			res.mm.copyOut(pay[:size], res.va+uint64(off))
		}
		q.finish(p)
		q.respTx.add(q, p)
		if last {
			return
		}
	}
}

// sendAck sends an ACKNOWLEDGE (or ATOMIC_ACKNOWLEDGE carrying orig). A
// positive ACK is coalesced (sched.go's ACK policy): it only becomes the
// round's pending ACK, which a later one of the same round replaces and
// flushAck sends. Anything else goes out behind the pending ACK, so the
// response lane stays in PSN order.
func (r *responder) sendAck(op roce.Opcode, syn roce.Syndrome, psn seqnum.PSN, orig uint64) {
	if op == roce.RCAck && syn.IsACK() {
		a := &r.ack
		switch {
		case !a.due:
			a.due, a.psn, a.from, a.syn, a.msn = true, psn, psn, syn, r.msn
			return
		case psn.Less(a.psn):
			// Older than the pending one, which covers it.
			r.ack.merged++
			return
		case psn.Diff(a.from) < maxPktPerAck:
			a.psn, a.syn, a.msn = psn, syn, r.msn
			r.ack.merged++
			return
		}
		// The pending ACK would hold back maxPktPerAck PSNs or more of
		// the peer's send window: send it and start a new one.
		r.flushAck()
		a.due, a.psn, a.from, a.syn, a.msn = true, psn, psn, syn, r.msn
		return
	}
	r.flushAck()
	r.buildAck(op, syn, psn, r.msn, orig)
}

// flushAck sends the round's pending positive ACK, if any (the end of a
// round, and before any other response).
func (r *responder) flushAck() {
	if !r.ack.due {
		return
	}
	a := r.ack
	r.ack.due = false
	r.buildAck(roce.RCAck, a.syn, a.psn, a.msn, 0)
}

// buildAck queues an ACKNOWLEDGE or ATOMIC_ACKNOWLEDGE on the response
// lane.
func (r *responder) buildAck(op roce.Opcode, syn roce.Syndrome, psn seqnum.PSN, msn seqnum.MSN, orig uint64) {
	q := r.q
	p, _ := q.newPacket(op, psn, q.attr.DestQPN, 0, q.dst, false, false)
	roce.AETH(p.buf[roce.BTHSize:]).Encode(&roce.AETHFields{Syndrome: syn, MSN: msn})
	if op == roce.RCAtomicAck {
		binary.BigEndian.PutUint64(p.buf[roce.BTHSize+roce.AETHSize:], orig)
	}
	q.finish(p)
	q.respTx.add(q, p)
}
