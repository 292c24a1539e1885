package rxe

import (
	"net/netip"

	"softib/internal/seqnum"
	"softib/verbs"
	"softib/wire/roce"
)

// wqeState is the life cycle of a send WQE.
type wqeState uint8

const (
	wqePosted  wqeState = iota // (some) packets still to send
	wqePending                 // all sent; waiting for ACK or response (RC)
	wqeDone                    // finished with status; CQE goes out in order
)

// sendWQE is a posted send work request plus the requester's progress.
type sendWQE struct {
	id      uint64
	opcode  verbs.WROpcode
	flags   verbs.SendFlags
	sgl     []verbs.SGE
	inline  bool
	data    []byte // inline payload, copied at post time
	imm     uint32
	invRKey uint32
	raddr   uint64
	rkey    uint32
	cmpAdd  uint64
	swap    uint64
	dst     netip.AddrPort // UD destination
	cls     ipClass        // UD: the AH's traffic class and hop limit
	rqpn    uint32
	rqkey   uint32
	length  uint32
	reg     verbs.RegWR  // REG_MR
	bind    verbs.BindWR // BIND_MW

	state    wqeState
	status   verbs.WCStatus
	started  bool // PSNs and SSN assigned, start checks passed
	counted  bool // counted in requester.rdAtomOut
	firstPSN seqnum.PSN
	lastPSN  seqnum.PSN
	off      uint32 // bytes already sent: the resume point
	ssn      seqnum.MSN
	segs     [][]byte // the SGL resolved to registered memory
}

func (w *sendWQE) isReadAtomic() bool {
	return w.opcode == verbs.WRRDMARead || w.opcode == verbs.WRAtomicCmpAndSwp || w.opcode == verbs.WRAtomicFetchAndAdd
}

func (w *sendWQE) isSend() bool {
	return w.opcode == verbs.WRSend || w.opcode == verbs.WRSendWithImm || w.opcode == verbs.WRSendWithInv
}

// requester is the send side of a QP (rxe_req.c): it turns the send
// queue's WQEs into request packets on QP.reqTx, in PSN order, within
// the window of maxUnackedPSNs beyond completer.psn, max_rd_atomic, the
// peer's end-to-end credits, fences and RNR pauses. Its fields are
// guarded by QP.mu and written only by its methods; the completer moves
// it back (rewind), pauses it (pauseUntil) and hands it credits
// (credits). The send queue itself (QP.sq) is shared: PostSend fills its
// tail, the requester walks it at pos, the completer retires its head.
type requester struct {
	q             *QP        // set once by CreateQP
	psn           seqnum.PSN // next PSN for a WQE not yet started
	pos           uint64     // SQ position of the WQE being sent
	ssn           seqnum.MSN // send sequence number of the last started message
	noack         int        // packets since the last AckReq
	rdAtomOut     int        // READ/atomic WQEs outstanding
	credUnlimited bool
	lsn           seqnum.MSN // limit sequence number from AETH credits
	rnrUntil      int64      // after an RNR NAK: no sending before this time
}

// reset clears the requester (QP to RESET).
func (r *requester) reset() { *r = requester{q: r.q} }

// setPSN sets the next PSN to send (sq_psn).
func (r *requester) setPSN(psn seqnum.PSN) { r.psn = psn }

// onRTS: a QP entering RTS from RTR sends with unlimited credits until
// the peer advertises some.
func (r *requester) onRTS() { r.credUnlimited = true }

// run turns WQEs into packets until the budget is used, the window is
// full, or a WQE has to wait. It reports whether it stopped for the
// budget.
func (r *requester) run(now int64, budget int) bool {
	q := r.q
	if q.state != verbs.QPStateRTS {
		return false
	}
	if r.rnrUntil != 0 {
		return false
	}
	for budget > 0 && r.pos < q.sq.tail {
		w := q.sq.at(r.pos)
		if w.state != wqePosted {
			r.pos++
			continue
		}
		if !w.started && !r.start(w) {
			return false
		}
		if w.state == wqeDone { // a local operation, or failed to start
			r.pos++
			if q.state != verbs.QPStateRTS {
				return false
			}
			continue
		}
		psn := w.firstPSN.Add(int(w.off / uint32(q.mtu)))
		if q.typ == verbs.QPTypeRC && psn.Diff(q.comp.psn) >= maxUnackedPSNs {
			return false
		}
		if !q.ccAdmit(w, now) {
			return false // rate-limited: QP.nextDeadline has the next send
		}
		r.sendPacket(w, psn, now)
		budget--
	}
	return budget == 0
}

// start runs the checks before a WQE's first packet (fence, local
// operations, max_rd_atomic, credits) and assigns its PSNs. It reports
// false when the WQE has to wait.
func (r *requester) start(w *sendWQE) bool {
	q := r.q
	idle := q.sq.head == r.pos // every earlier WQE has completed
	// Local operations (rxe_do_local_ops). LOCAL_INV waits for earlier
	// work requests, which may still use the key; a failure completes
	// with rxe's status and moves the QP to the error state.
	switch w.opcode {
	case verbs.WRLocalInv:
		if !idle {
			return false
		}
		r.localOpDone(w, q.invalidate(w.invRKey), verbs.WCLocQPOpErr)
		return true
	case verbs.WRRegMR:
		r.localOpDone(w, q.register(&w.reg), verbs.WCLocQPOpErr)
		return true
	case verbs.WRBindMW:
		r.localOpDone(w, q.bind(&w.bind), verbs.WCMWBindErr)
		return true
	}
	if w.flags&verbs.SendFence != 0 && !idle {
		return false
	}
	if q.typ == verbs.QPTypeRC {
		if w.isReadAtomic() && r.rdAtomOut >= max(int(q.attr.MaxRdAtomic), 1) {
			return false
		}
		if w.isSend() && !r.credUnlimited && r.lsn.Less(r.ssn.Next()) && !idle {
			return false
		}
	}
	if !w.inline && w.length > 0 {
		if st := q.resolve(w.sgl, &w.segs, w.isReadAtomic()); st != verbs.WCSuccess {
			r.done(w, st)
			q.fail(verbs.EventQPFatal)
			return true
		}
	}
	w.started = true
	w.off = 0
	r.ssn = r.ssn.Next()
	w.ssn = r.ssn
	n := q.npkts(w.length)
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI || w.opcode == verbs.WRAtomicCmpAndSwp || w.opcode == verbs.WRAtomicFetchAndAdd {
		n = 1
	}
	w.firstPSN = r.psn
	w.lastPSN = r.psn.Add(int(n) - 1)
	r.psn = r.psn.Add(int(n))
	if w.isReadAtomic() {
		w.counted = true
		r.rdAtomOut++
	}
	return true
}

// localOpDone finishes a local operation: success, or status bad and the
// QP in error.
func (r *requester) localOpDone(w *sendWQE, ok bool, bad verbs.WCStatus) {
	w.reg, w.bind = verbs.RegWR{}, verbs.BindWR{}
	if !ok {
		r.done(w, bad)
		r.q.fail(verbs.EventQPFatal)
		return
	}
	r.done(w, verbs.WCSuccess)
}

// done finishes a send WQE with status st (the requester for local
// operations and unacknowledged transports, the completer for RC).
func (r *requester) done(w *sendWQE, st verbs.WCStatus) {
	w.state, w.status = wqeDone, st
	if w.counted {
		w.counted = false
		r.rdAtomOut--
	}
}

// opcodeFor picks the wire opcode of a packet by message position (IBTA
// §9.4, rxe next_opcode).
func (r *requester) opcodeFor(w *sendWQE, first, last bool) roce.Opcode {
	var op roce.Opcode
	switch w.opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		switch {
		case first && last:
			op = roce.RCSendOnly
			if w.opcode == verbs.WRSendWithImm {
				op = roce.RCSendOnlyImm
			} else if w.opcode == verbs.WRSendWithInv {
				op = roce.RCSendOnlyInv
			}
		case first:
			op = roce.RCSendFirst
		case last:
			op = roce.RCSendLast
			if w.opcode == verbs.WRSendWithImm {
				op = roce.RCSendLastImm
			} else if w.opcode == verbs.WRSendWithInv {
				op = roce.RCSendLastInv
			}
		default:
			op = roce.RCSendMiddle
		}
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		imm := w.opcode == verbs.WRRDMAWriteWithImm
		switch {
		case first && last:
			op = roce.RCWriteOnly
			if imm {
				op = roce.RCWriteOnlyImm
			}
		case first:
			op = roce.RCWriteFirst
		case last:
			op = roce.RCWriteLast
			if imm {
				op = roce.RCWriteLastImm
			}
		default:
			op = roce.RCWriteMiddle
		}
	case verbs.WRRDMARead:
		return roce.RCReadRequest
	case verbs.WRAtomicCmpAndSwp:
		return roce.RCCompareSwap
	case verbs.WRAtomicFetchAndAdd:
		return roce.RCFetchAdd
	}
	switch r.q.typ {
	case verbs.QPTypeUC:
		op |= roce.TransportUC
	case verbs.QPTypeUD, verbs.QPTypeGSI:
		op = roce.UDSendOnly
		if w.opcode == verbs.WRSendWithImm {
			op = roce.UDSendOnlyImm
		}
	}
	return op
}

// sendPacket builds and queues the packet of w at PSN psn (w.off is its
// message offset) and advances w.
func (r *requester) sendPacket(w *sendWQE, psn seqnum.PSN, now int64) {
	q := r.q
	first := w.off == 0
	var size uint32
	last := true
	if w.opcode != verbs.WRRDMARead && !w.isReadAtomic() {
		size = min(uint32(q.mtu), w.length-w.off)
		last = w.off+size >= w.length
	}
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI {
		size, last = w.length, true
	}
	if w.opcode == verbs.WRRDMARead && !first {
		first = true // a resumed READ is a new request for the rest
	}
	op := r.opcodeFor(w, first, last)
	dst, dqpn := q.dst, q.attr.DestQPN
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI {
		dst, dqpn = w.dst, w.rqpn
	}
	ackReq := false
	if q.typ == verbs.QPTypeRC {
		r.noack++
		if last || r.noack > maxPktPerAck {
			ackReq = true
			r.noack = 0
		}
	}
	se := last && w.flags&verbs.SendSolicited != 0 && (w.isSend() || w.opcode == verbs.WRRDMAWriteWithImm)
	p, pay := q.newPacket(op, psn, dqpn, int(size), dst, ackReq, se)
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI {
		p.cls = w.cls
	}
	info := op.Info()
	if o := info.Offset(roce.HdrRETH); o >= 0 {
		reth := roce.RETH(p.buf[o:])
		reth.SetVA(w.raddr + uint64(w.off))
		reth.SetRKey(w.rkey)
		if w.opcode == verbs.WRRDMARead {
			reth.SetDMALen(w.length - w.off)
		} else {
			reth.SetDMALen(w.length)
		}
	}
	if o := info.Offset(roce.HdrAtomicETH); o >= 0 {
		a := roce.AtomicETH(p.buf[o:])
		a.SetVA(w.raddr)
		a.SetRKey(w.rkey)
		if w.opcode == verbs.WRAtomicCmpAndSwp {
			a.SetSwapAdd(w.swap)
			a.SetCompare(w.cmpAdd)
		} else {
			a.SetSwapAdd(w.cmpAdd)
			a.SetCompare(0)
		}
	}
	if o := info.Offset(roce.HdrDETH); o >= 0 {
		qkey := w.rqkey
		if qkey&0x80000000 != 0 {
			qkey = q.attr.QKey
			if q.typ == verbs.QPTypeGSI {
				qkey = GSIQKey
			}
		}
		roce.DETH(p.buf[o:]).Encode(&roce.DETHFields{QKey: qkey, SrcQP: q.qpn})
	}
	if o := info.Offset(roce.HdrImmDt); o >= 0 {
		roce.ImmDt(p.buf[o:]).SetValue(w.imm)
	}
	if o := info.Offset(roce.HdrIETH); o >= 0 {
		roce.IETH(p.buf[o:]).SetRKey(w.invRKey)
	}
	if size > 0 {
		if w.inline {
			copy(pay, w.data[w.off:w.off+size])
		} else {
			copyOut(pay, w.segs, int(w.off))
		}
	}
	q.finish(p)
	q.reqTx.add(q, p)
	if w.opcode == verbs.WRRDMARead {
		w.off = w.length
	} else {
		w.off += size
	}
	if last {
		if q.typ == verbs.QPTypeRC {
			w.state = wqePending
		} else {
			r.done(w, verbs.WCSuccess)
		}
		r.pos++
	}
	if q.typ == verbs.QPTypeRC {
		q.comp.onRequestSent(now)
	}
}

// rewind moves the requester back to the packet at PSN from (the
// completer's oldest unacknowledged PSN): every unfinished WQE from there
// on is sent again with the same PSNs (go-back-N).
func (r *requester) rewind(from seqnum.PSN) {
	q := r.q
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
			r.pos = p
			first = false
			w.off = 0
			if w.opcode == verbs.WRRDMARead || (!w.isReadAtomic() && q.typ == verbs.QPTypeRC) {
				if d := from.Diff(w.firstPSN); d > 0 {
					w.off = min(uint32(d)*uint32(q.mtu), w.length)
				}
			}
		} else {
			w.off = 0
		}
		w.state = wqePosted
	}
	r.noack = 0
}

// onRetired keeps pos at or after the SQ head. Should be called after
// the completer retired WQEs from the head.
func (r *requester) onRetired() {
	if r.pos < r.q.sq.head {
		r.pos = r.q.sq.head
	}
}

// pauseUntil stops sending until time t (an RNR NAK's timer).
func (r *requester) pauseUntil(t int64) { r.rnrUntil = t }

// credits takes the end-to-end credits of an AETH (IBA §9.7.7.2).
func (r *requester) credits(a roce.AETH) {
	n, unlimited := a.Syndrome().Credits()
	if unlimited {
		r.credUnlimited = true
		return
	}
	r.credUnlimited = false
	r.lsn = a.MSN().Add(n)
}

// checkTimer ends an RNR pause that expired.
func (r *requester) checkTimer(now int64) {
	if r.rnrUntil != 0 && now >= r.rnrUntil {
		r.rnrUntil = 0
	}
}

// deadline is the end of the RNR pause (0: none).
func (r *requester) deadline() int64 { return r.rnrUntil }
