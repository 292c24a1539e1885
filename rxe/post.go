package rxe

import (
	"fmt"

	"softib/internal/seqnum"
	"softib/verbs"
)

// PostSend posts send work requests.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return 0, verbs.ErrClosed
	}
	switch q.state {
	case verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr:
	default:
		q.mu.Unlock()
		return 0, fmt.Errorf("rxe: post send on QP %d in %v: %w", q.qpn, q.state, verbs.ErrQPState)
	}
	for i := range wrs {
		if err := q.postOne(&wrs[i]); err != nil {
			q.afterPost()
			return i, err
		}
	}
	q.afterPost()
	return len(wrs), nil
}

// afterPost runs the engine inline once and unlocks (mu held).
func (q *QP) afterPost() {
	if q.state == verbs.QPStateErr {
		q.flush()
		q.unlock()
		return
	}
	more := q.process()
	q.unlockAndSend(byApp)
	if more {
		q.kick()
	}
}

func (q *QP) postOne(wr *verbs.SendWR) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("rxe: post send wr %d: "+format+": %w", append(append([]any{wr.ID}, args...), verbs.ErrInvalidArgument)...)
	}
	switch q.typ {
	case verbs.QPTypeRC:
		if wr.Opcode > verbs.WRSendWithInv && wr.Opcode != verbs.WRRegMR {
			return fmt.Errorf("rxe: post send: opcode %v: %w", wr.Opcode, verbs.ErrNotSupported)
		}
		if err := checkMemWR(wr); err != nil {
			return err
		}
	case verbs.QPTypeUC:
		switch wr.Opcode {
		case verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		case verbs.WRBindMW: // as rxe_wr_opcode_info: RC and UC
			if err := checkMemWR(wr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("rxe: post send: opcode %v on UC: %w", wr.Opcode, verbs.ErrNotSupported)
		}
	default:
		if wr.Opcode != verbs.WRSend && wr.Opcode != verbs.WRSendWithImm {
			return fmt.Errorf("rxe: post send: opcode %v on %v: %w", wr.Opcode, q.typ, verbs.ErrNotSupported)
		}
	}
	if len(wr.SGL) > q.cap.MaxSendSGE {
		return bad("%d SGEs > max %d", len(wr.SGL), q.cap.MaxSendSGE)
	}
	var length uint64
	for _, s := range wr.SGL {
		length += uint64(s.Length)
	}
	inline := wr.Flags&verbs.SendInline != 0 && wr.Opcode != verbs.WRRDMARead && wr.Opcode != verbs.WRAtomicCmpAndSwp && wr.Opcode != verbs.WRAtomicFetchAndAdd && wr.Opcode != verbs.WRLocalInv &&
		wr.Opcode != verbs.WRRegMR && wr.Opcode != verbs.WRBindMW
	if inline && wr.InlineData != nil {
		length = uint64(len(wr.InlineData))
	}
	if inline && length > uint64(max(q.cap.MaxInlineData, 0)) {
		return bad("inline length %d > max %d", length, q.cap.MaxInlineData)
	}
	if length > MaxMsgSize {
		return bad("length %d > max message size", length)
	}
	var ah *AH
	if q.typ == verbs.QPTypeUD || q.typ == verbs.QPTypeGSI {
		a, ok := wr.AH.(*AH)
		if !ok || a.pd.dev != q.dev || a.dead.Load() {
			return bad("UD send needs an AH of this device")
		}
		if length > uint64(q.mtu) {
			return bad("UD message %d bytes > path MTU %d", length, q.mtu)
		}
		ah = a
	}
	if (wr.Opcode == verbs.WRAtomicCmpAndSwp || wr.Opcode == verbs.WRAtomicFetchAndAdd) && length != 8 {
		return bad("atomic needs one 8-byte result buffer, got %d bytes", length)
	}
	w := q.sq.push()
	if w == nil {
		return fmt.Errorf("rxe: post send: %w", verbs.ErrQueueFull)
	}
	w.id, w.opcode, w.flags = wr.ID, wr.Opcode, wr.Flags
	if q.init.SigAll {
		w.flags |= verbs.SendSignaled
	}
	w.imm, w.invRKey = wr.ImmData, wr.InvalidateRKey
	w.raddr, w.rkey, w.cmpAdd, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.rqpn, w.rqkey = wr.RemoteQPN&seqnum.Mask, wr.RemoteQKey
	w.reg, w.bind = wr.Reg, wr.BindMW
	if ah != nil {
		av := ah.av.Load() // modify_av replaces it whole
		w.dst, w.cls = av.dst, av.cls
	}
	w.length = uint32(length)
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.inline = inline
	w.data = w.data[:0]
	w.state, w.status = wqePosted, verbs.WCSuccess
	w.started, w.counted = false, false
	w.off = 0
	if inline {
		if wr.InlineData != nil {
			w.data = append(w.data, wr.InlineData...)
		} else if st := q.gather(w); st != verbs.WCSuccess {
			q.sq.tail-- // unpost
			return fmt.Errorf("rxe: post send wr %d: inline SGL: %w", wr.ID, verbs.ErrInvalidLKey)
		}
	}
	if q.state == verbs.QPStateErr {
		w.state, w.status = wqeDone, verbs.WCWRFlushErr
	}
	return nil
}

// PostRecv posts receive work requests.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.srq != nil {
		return 0, fmt.Errorf("rxe: post recv on a QP with an SRQ: %w", verbs.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.unlock()
	if q.dead {
		return 0, verbs.ErrClosed
	}
	if q.state == verbs.QPStateReset {
		return 0, fmt.Errorf("rxe: post recv on QP %d in RESET: %w", q.qpn, verbs.ErrQPState)
	}
	for i := range wrs {
		if len(wrs[i].SGL) > q.cap.MaxRecvSGE {
			return i, fmt.Errorf("rxe: post recv: %d SGEs > max %d: %w", len(wrs[i].SGL), q.cap.MaxRecvSGE, verbs.ErrInvalidArgument)
		}
		r := q.rq.push()
		if r == nil {
			return i, fmt.Errorf("rxe: post recv: %w", verbs.ErrQueueFull)
		}
		r.id = wrs[i].ID
		r.sgl = append(r.sgl[:0], wrs[i].SGL...)
	}
	if q.state == verbs.QPStateErr {
		q.flush()
	}
	return len(wrs), nil
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
