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

// requester is the send side of a QP (rxe_req.c).
type requester struct {
	psn           seqnum.PSN // next PSN for a WQE not yet started
	pos           uint64     // SQ position of the WQE being sent
	ssn           seqnum.MSN // send sequence number of the last started message
	noack         int        // packets since the last AckReq
	rdAtomOut     int        // READ/atomic WQEs outstanding
	credUnlimited bool
	lsn           seqnum.MSN // limit sequence number from AETH credits
	rnrUntil      int64      // after an RNR NAK: no sending before this time
}

// resolve maps an SGL onto registered memory, checking key, PD, bounds and
// (for write) local write access.
func (q *QP) resolve(sgl []verbs.SGE, segs *[][]byte, write bool) verbs.WCStatus {
	s := (*segs)[:0]
	for _, e := range sgl {
		if e.Length == 0 {
			continue
		}
		mr := q.dev.keys.lookup(e.LKey)
		if mr == nil {
			*segs = s
			return verbs.WCLocProtErr
		}
		m := mr.m.Load()
		if m.pd != q.pd || (write && m.access&verbs.AccessLocalWrite == 0) {
			*segs = s
			return verbs.WCLocProtErr
		}
		var ok bool
		if s, ok = m.appendSegs(s, e.Addr, e.Length); !ok {
			*segs = s
			return verbs.WCLocProtErr
		}
	}
	*segs = s
	return verbs.WCSuccess
}

// gather copies an SGL's bytes into w.data (inline sends).
func (q *QP) gather(w *sendWQE) verbs.WCStatus {
	if st := q.resolve(w.sgl, &w.segs, false); st != verbs.WCSuccess {
		return st
	}
	for _, s := range w.segs {
		w.data = append(w.data, s...)
	}
	w.segs = w.segs[:0]
	return verbs.WCSuccess
}

// copyOut copies bytes [off, off+len(dst)) of the scattered buffer segs
// into dst.
func copyOut(dst []byte, segs [][]byte, off int) {
	for _, s := range segs {
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n := copy(dst, s[off:])
		dst = dst[n:]
		off = 0
		if len(dst) == 0 {
			return
		}
	}
}

// copyIn copies src into the scattered buffer segs at offset off.
func copyIn(segs [][]byte, off int, src []byte) {
	for _, s := range segs {
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n := copy(s[off:], src)
		src = src[n:]
		off = 0
		if len(src) == 0 {
			return
		}
	}
}

func segsLen(segs [][]byte) int {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	return n
}

// npkts returns the number of packets (and PSNs) a message of n bytes
// takes at the path MTU.
func (q *QP) npkts(n uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + uint32(q.mtu) - 1) / uint32(q.mtu)
}

// runRequester turns WQEs into packets until the budget is used, the
// window is full, or a WQE has to wait. It reports whether it stopped for
// the budget.
func (q *QP) runRequester(now int64, budget int) bool {
	if q.state != verbs.QPStateRTS {
		return false
	}
	if q.req.rnrUntil != 0 {
		return false
	}
	for budget > 0 && q.req.pos < q.sq.tail {
		w := q.sq.at(q.req.pos)
		if w.state != wqePosted {
			q.req.pos++
			continue
		}
		if !w.started && !q.start(w) {
			return false
		}
		if w.state == wqeDone { // a local operation, or failed to start
			q.req.pos++
			if q.state != verbs.QPStateRTS {
				return false
			}
			continue
		}
		psn := w.firstPSN.Add(int(w.off / uint32(q.mtu)))
		if q.typ == verbs.QPTypeRC && psn.Diff(q.comp.psn) >= maxUnackedPSNs {
			return false
		}
		q.sendPacket(w, psn, now)
		budget--
	}
	return budget == 0
}

// start runs the checks before a WQE's first packet (fence, local
// operations, max_rd_atomic, credits) and assigns its PSNs. It reports
// false when the WQE has to wait.
func (q *QP) start(w *sendWQE) bool {
	idle := q.sq.head == q.req.pos // every earlier WQE has completed
	// Local operations (rxe_do_local_ops). LOCAL_INV waits for earlier
	// work requests, which may still use the key; a failure completes
	// with rxe's status and moves the QP to the error state.
	switch w.opcode {
	case verbs.WRLocalInv:
		if !idle {
			return false
		}
		q.localOpDone(w, q.invalidate(w.invRKey), verbs.WCLocQPOpErr)
		return true
	case verbs.WRRegMR:
		q.localOpDone(w, q.register(&w.reg), verbs.WCLocQPOpErr)
		return true
	case verbs.WRBindMW:
		q.localOpDone(w, q.bind(&w.bind), verbs.WCMWBindErr)
		return true
	}
	if w.flags&verbs.SendFence != 0 && !idle {
		return false
	}
	if q.typ == verbs.QPTypeRC {
		if w.isReadAtomic() && q.req.rdAtomOut >= max(int(q.attr.MaxRdAtomic), 1) {
			return false
		}
		if w.isSend() && !q.req.credUnlimited && q.req.lsn.Less(q.req.ssn.Next()) && !idle {
			return false
		}
	}
	if !w.inline && w.length > 0 {
		if st := q.resolve(w.sgl, &w.segs, w.isReadAtomic()); st != verbs.WCSuccess {
			q.wqeDone(w, st)
			q.fail(verbs.EventQPFatal)
			return true
		}
	}
	w.started = true
	w.off = 0
	q.req.ssn = q.req.ssn.Next()
	w.ssn = q.req.ssn
	n := q.npkts(w.length)
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI || w.opcode == verbs.WRAtomicCmpAndSwp || w.opcode == verbs.WRAtomicFetchAndAdd {
		n = 1
	}
	w.firstPSN = q.req.psn
	w.lastPSN = q.req.psn.Add(int(n) - 1)
	q.req.psn = q.req.psn.Add(int(n))
	if w.isReadAtomic() {
		w.counted = true
		q.req.rdAtomOut++
	}
	return true
}

// localOpDone finishes a local operation: success, or status bad and the
// QP in error.
func (q *QP) localOpDone(w *sendWQE, ok bool, bad verbs.WCStatus) {
	w.reg, w.bind = verbs.RegWR{}, verbs.BindWR{}
	if !ok {
		q.wqeDone(w, bad)
		q.fail(verbs.EventQPFatal)
		return
	}
	q.wqeDone(w, verbs.WCSuccess)
}

// wqeDone finishes a send WQE with status st.
func (q *QP) wqeDone(w *sendWQE, st verbs.WCStatus) {
	w.state, w.status = wqeDone, st
	if w.counted {
		w.counted = false
		q.req.rdAtomOut--
	}
}

// opcodeFor picks the wire opcode of a packet by message position (IBTA
// §9.4, rxe next_opcode).
func (q *QP) opcodeFor(w *sendWQE, first, last bool) roce.Opcode {
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
	switch q.typ {
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
func (q *QP) sendPacket(w *sendWQE, psn seqnum.PSN, now int64) {
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
	op := q.opcodeFor(w, first, last)
	dst, dqpn := q.dst, q.attr.DestQPN
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI {
		dst, dqpn = w.dst, w.rqpn
	}
	ackReq := false
	if q.typ == verbs.QPTypeRC {
		q.req.noack++
		if last || q.req.noack > maxPktPerAck {
			ackReq = true
			q.req.noack = 0
		}
	}
	se := last && w.flags&verbs.SendSolicited != 0 && (w.isSend() || w.opcode == verbs.WRRDMAWriteWithImm)
	p, pay := q.newPacket(op, psn, dqpn, int(size), dst, ackReq, se)
	info := op.Info()
	if o := info.Offset(roce.HdrRETH); o >= 0 {
		r := roce.RETH(p.buf[o:])
		r.SetVA(w.raddr + uint64(w.off))
		r.SetRKey(w.rkey)
		if w.opcode == verbs.WRRDMARead {
			r.SetDMALen(w.length - w.off)
		} else {
			r.SetDMALen(w.length)
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
			q.wqeDone(w, verbs.WCSuccess)
		}
		q.req.pos++
	}
	if q.typ == verbs.QPTypeRC && q.comp.timeoutAt == 0 {
		if rto := ackTimeout(q.attr.Timeout); rto > 0 {
			q.comp.timeoutAt = now + int64(rto)
		}
	}
}

// newPacket takes a buffer and writes the BTH of a packet with a payload
// of size bytes; it returns the packet and its payload area. Extension
// headers are left for the caller.
func (q *QP) newPacket(op roce.Opcode, psn seqnum.PSN, dqpn uint32, size int, dst netip.AddrPort, ackReq, se bool) (*packet, []byte) {
	p := q.dev.getPacket()
	hl := op.HeaderLen()
	pad := -size & 3
	p.op, p.hdr, p.pay, p.psn, p.addr = op, hl, size, psn, dst
	p.n = hl + size + pad + roce.ICRCSize
	roce.BTH(p.buf[:roce.BTHSize]).Encode(&roce.BTHFields{
		Opcode: op, SE: se, PadCnt: uint8(pad), PKey: DefaultPKey,
		DestQP: dqpn, AckReq: ackReq, PSN: psn,
	})
	clear(p.buf[roce.BTHSize:hl])
	clear(p.buf[hl+size : hl+size+pad])
	return p, p.buf[hl : hl+size]
}

// finish writes the ICRC of a built packet (IPv4: ID 0 and DF, which the
// udp package's unconnected IP_PMTUDISC_DO socket puts on the wire).
func (q *QP) finish(p *packet) {
	if q.sport.pending {
		q.openSport()
	}
	q.encap.get(q.srcAddr(), p.addr).SetICRC(p.buf[:p.n])
}
