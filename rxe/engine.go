package rxe

import (
	"net/netip"

	"softib/internal/seqnum"
	"softib/verbs"
	"softib/wire/roce"
)

// The QP engine's files:
//
//	qp.go         the QP object and lifecycle (CreateQP, accessors,
//	              Query, Destroy)
//	qptable.go    the device's QPN → QP table, addQP/removeQP
//	modify.go     Modify and the state machine (setState, fail, reset,
//	              flush, Drain)
//	post.go       PostSend and PostRecv
//	process.go    the processing round and its run loop, kicks, timers,
//	              completion pushes and the send at a round's end
//	sched.go      the ACK policy: what a round sends at once, coalesces
//	              or holds for the reply (unlockAndSend)
//	txbatch.go    the two send lanes and their batches
//	requester.go  the requester role (rxe_req.c)
//	responder.go  the responder role (rxe_resp.c)
//	completer.go  the completer role (rxe_comp.c)
//	engine.go     what the roles share (below)
//	locking.go    every lock, the order, the scheduling invariants
//
// What the three roles (requester.go, responder.go, completer.go) share
// through their QP, all with QP.mu held: SGL resolution and copies,
// packet sizing and building, and the two send lanes (QP.reqTx for the
// requester, QP.respTx for the responder), which a round hands to the
// socket once mu is released (process.go). A role reaches the QP through
// its q field and writes only its own fields; the cross-role calls are
// few and named after their event (completer.onRequestSent,
// requester.rewind, requester.pauseUntil, requester.credits).

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

// copyOut copies bytes [off, off+len(dst)) of the scattered buffer segs
// into dst.
func copyOut(dst []byte, segs [][]byte, off int) {
	raceMemLock()
	scatterOut(dst, segs, off)
	raceMemUnlock()
}

func scatterOut(dst []byte, segs [][]byte, off int) {
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
	raceMemLock()
	scatterIn(segs, off, src)
	raceMemUnlock()
}

func scatterIn(segs [][]byte, off int, src []byte) {
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

// newPacket takes a buffer and writes the BTH of a packet with a payload
// of size bytes; it returns the packet and its payload area. Extension
// headers are left for the caller.
func (q *QP) newPacket(op roce.Opcode, psn seqnum.PSN, dqpn uint32, size int, dst netip.AddrPort, ackReq, se bool) (*packet, []byte) {
	p := q.dev.getPacket()
	hl := op.HeaderLen()
	pad := -size & 3
	p.op, p.hdr, p.pay, p.psn, p.addr = op, hl, size, psn, dst
	p.cls = routeClass(&q.attr.AH.GRH) // tclass.go; UD requests take their AH's
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
	q.markECT(p) // ECN on: ECT(0) (congestion.go)
	q.encap.get(q.srcAddr(), p.addr).SetICRC(p.buf[:p.n])
}
