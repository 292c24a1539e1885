package rxe

import (
	"fmt"
	"net/netip"

	"softib/internal/seqnum"
	"softib/verbs"
	"softib/wire/roce"
)

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
	// A CNP is for the RC, UC or UD QP that sent CE-marked packets
	// (congestion.go; not the GSI QP).
	return op == roce.CNP && (q.typ == verbs.QPTypeRC || q.typ == verbs.QPTypeUC || q.typ == verbs.QPTypeUD)
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
		q.comp.setRetryCnt(attr.RetryCnt)
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
		q.comp.setRNRRetry(attr.RNRRetry)
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN & seqnum.Mask
		q.resp.setPSN(seqnum.NewPSN(attr.RQPSN))
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
		q.req.setPSN(psn)
		q.comp.setPSN(psn)
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
			q.comp.resetRetries()
			q.req.onRTS()
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
	q.req.reset()
	q.comp.reset()
	q.resp.reset()
	q.timerAt = 0
	q.cc = nil // a new connection starts at full rate (congestion.go)
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
	q.comp.completeSends()
	q.resp.flushRWQE()
	for q.rq.len() > 0 {
		r := q.rq.at(q.rq.head)
		q.pushCQ(q.recvCQ, hdueRecv, &verbs.WC{WRID: r.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn}, false)
		q.rq.pop()
	}
	q.resp.reset()
	q.timerAt = 0
	q.drainC.Broadcast()
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

// checkSQDrained raises SQ_DRAINED once in SQD when the SQ is empty.
func (q *QP) checkSQDrained() {
	if q.state == verbs.QPStateSQD && q.sqdEvent && q.sq.len() == 0 {
		q.sqdEvent = false
		q.dev.raise(verbs.AsyncEvent{Type: verbs.EventSQDrained, QP: q})
	}
}
