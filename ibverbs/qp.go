//go:build ibverbs && linux && cgo

package ibverbs

/*
#include "sib.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"softib/verbs"
)

// postChunk is how many work requests one cgo call posts at most.
const postChunk = 32

// drainMarker is the wr_id of the work requests Drain posts behind
// everything else; Poll consumes their flush completions.
const drainMarker = 0xd7a1_5eed_d7a1_5eed

// drainRecvMarker is the receive queue's marker.
const drainRecvMarker = drainMarker + 1

// drainTimeout bounds Drain: the markers complete only while the QP's CQs
// are polled (by the application, a CQWorker or a completion handler).
const drainTimeout = 30 * time.Second

// sendStage is a QP's C memory for posting sends.
type sendStage struct {
	swr    *C.sib_swr
	sge    *C.struct_ibv_sge
	wrs    *C.struct_ibv_send_wr
	inl    *C.uint8_t
	bad    *C.int // in C memory: a Go variable whose address cgo sees escapes
	maxSGE int
	maxInl int
}

func (s *sendStage) init(maxSGE, maxInl int) {
	maxSGE = max(maxSGE, 1)
	s.maxSGE, s.maxInl = maxSGE, maxInl
	s.swr = (*C.sib_swr)(C.calloc(postChunk, C.size_t(unsafe.Sizeof(C.sib_swr{}))))
	s.sge = (*C.struct_ibv_sge)(C.calloc(C.size_t(postChunk*maxSGE), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{}))))
	s.wrs = (*C.struct_ibv_send_wr)(C.calloc(postChunk, C.size_t(unsafe.Sizeof(C.struct_ibv_send_wr{}))))
	s.inl = (*C.uint8_t)(C.calloc(C.size_t(postChunk*max(maxInl, 1)), 1))
	s.bad = (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))
}

func (s *sendStage) free() {
	C.free(unsafe.Pointer(s.swr))
	C.free(unsafe.Pointer(s.sge))
	C.free(unsafe.Pointer(s.wrs))
	C.free(unsafe.Pointer(s.inl))
	C.free(unsafe.Pointer(s.bad))
	*s = sendStage{}
}

func (s *sendStage) post(q *C.struct_ibv_qp, ud bool, wrs []verbs.SendWR) (int, error) {
	swr := unsafe.Slice(s.swr, postChunk)
	sge := unsafe.Slice(s.sge, postChunk*s.maxSGE)
	inl := unsafe.Slice((*byte)(unsafe.Pointer(s.inl)), postChunk*max(s.maxInl, 1))
	done := 0
	for done < len(wrs) {
		n := min(len(wrs)-done, postChunk)
		so := 0
		for i := 0; i < n; i++ {
			w := &wrs[done+i]
			d := &swr[i]
			*d = C.sib_swr{}
			d.wr_id = C.uint64_t(w.ID)
			d.opcode = C.uint32_t(w.Opcode)
			d.flags = C.uint32_t(w.Flags)
			switch w.Opcode {
			case verbs.WRLocalInv, verbs.WRSendWithInv:
				d.imm_or_inv = C.uint32_t(w.InvalidateRKey)
			case verbs.WRBindMW:
				b := &w.BindMW
				m, ok1 := b.MW.(*mw)
				r, ok2 := b.Bind.MR.(*mr)
				if !ok1 || !ok2 || m.typ != verbs.MWType2 {
					return done + i, fmt.Errorf("%w: BIND_MW needs a type 2 window and an MR of this device", verbs.ErrInvalidArgument)
				}
				d.mw = C.uintptr_t(uintptr(unsafe.Pointer(m.mw)))
				d.bind_mr = C.uintptr_t(uintptr(unsafe.Pointer(r.mr)))
				d.bind_addr = C.uint64_t(b.Bind.Addr)
				d.bind_len = C.uint64_t(b.Bind.Length)
				d.bind_access = C.uint32_t(b.Bind.Access)
				// The window answers to this key once the bind executes
				// (libibverbs keeps the allocation's key in ibv_mw).
				m.setBinding(b.Bind, b.RKey)
			default:
				// libibverbs wants immediate data in network order.
				v := w.ImmData
				d.imm_or_inv = C.uint32_t(v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24)
			}
			d.remote_addr = C.uint64_t(w.RemoteAddr)
			d.rkey = C.uint32_t(w.RKey)
			if w.Opcode == verbs.WRBindMW {
				d.rkey = C.uint32_t(w.BindMW.RKey)
			}
			d.compare_add = C.uint64_t(w.CompareAdd)
			d.swap = C.uint64_t(w.Swap)
			if ud {
				a, ok := w.AH.(*ah)
				if !ok || a == nil {
					return done + i, fmt.Errorf("%w: UD send needs an AH of this device", verbs.ErrInvalidArgument)
				}
				d.ah = C.uintptr_t(uintptr(unsafe.Pointer(a.ah)))
				d.remote_qpn = C.uint32_t(w.RemoteQPN)
				d.remote_qkey = C.uint32_t(w.RemoteQKey)
			}
			d.sge_off = C.uint32_t(so)
			if w.Flags&verbs.SendInline != 0 && w.InlineData != nil {
				if len(w.InlineData) > s.maxInl {
					return done + i, fmt.Errorf("%w: %d bytes inline, the QP takes %d", verbs.ErrInvalidArgument, len(w.InlineData), s.maxInl)
				}
				// Inline bytes are copied by the post; stage them in C memory.
				off := i * s.maxInl
				copy(inl[off:], w.InlineData)
				if len(w.InlineData) > 0 {
					sge[so] = C.struct_ibv_sge{addr: C.uint64_t(uintptr(unsafe.Pointer(&inl[off]))), length: C.uint32_t(len(w.InlineData))}
					so++
					d.num_sge = 1
				}
				continue
			}
			if len(w.SGL) > s.maxSGE {
				return done + i, fmt.Errorf("%w: %d SGEs, the QP takes %d", verbs.ErrInvalidArgument, len(w.SGL), s.maxSGE)
			}
			so += stageSGL(sge[so:], w.SGL)
			d.num_sge = C.uint32_t(len(w.SGL))
		}
		rc := C.sib_post_send(q, s.swr, C.int(n), s.sge, s.wrs, s.bad)
		if rc != 0 {
			return done + int(*s.bad), rcErr(rc, "ibverbs: post send")
		}
		done += n
	}
	return done, nil
}

// stageSGL copies a scatter list into C memory and returns its length.
func stageSGL(dst []C.struct_ibv_sge, sgl []verbs.SGE) int {
	for i, g := range sgl {
		dst[i] = C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)}
	}
	return len(sgl)
}

// recvStage is the C memory for posting receives (a QP's or an SRQ's).
type recvStage struct {
	rwr    *C.sib_rwr
	sge    *C.struct_ibv_sge
	wrs    *C.struct_ibv_recv_wr
	bad    *C.int
	maxSGE int
}

func (r *recvStage) init(maxSGE int) {
	maxSGE = max(maxSGE, 1)
	r.maxSGE = maxSGE
	r.rwr = (*C.sib_rwr)(C.calloc(postChunk, C.size_t(unsafe.Sizeof(C.sib_rwr{}))))
	r.sge = (*C.struct_ibv_sge)(C.calloc(C.size_t(postChunk*maxSGE), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{}))))
	r.wrs = (*C.struct_ibv_recv_wr)(C.calloc(postChunk, C.size_t(unsafe.Sizeof(C.struct_ibv_recv_wr{}))))
	r.bad = (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))
}

func (r *recvStage) free() {
	C.free(unsafe.Pointer(r.rwr))
	C.free(unsafe.Pointer(r.sge))
	C.free(unsafe.Pointer(r.wrs))
	C.free(unsafe.Pointer(r.bad))
	*r = recvStage{}
}

func (r *recvStage) post(q *C.struct_ibv_qp, s *C.struct_ibv_srq, wrs []verbs.RecvWR) (int, error) {
	if r.rwr == nil {
		return 0, verbs.ErrClosed
	}
	rwr := unsafe.Slice(r.rwr, postChunk)
	sge := unsafe.Slice(r.sge, postChunk*r.maxSGE)
	done := 0
	for done < len(wrs) {
		n := min(len(wrs)-done, postChunk)
		so := 0
		for i := 0; i < n; i++ {
			w := &wrs[done+i]
			if len(w.SGL) > r.maxSGE {
				return done + i, fmt.Errorf("%w: %d SGEs, the queue takes %d", verbs.ErrInvalidArgument, len(w.SGL), r.maxSGE)
			}
			rwr[i] = C.sib_rwr{wr_id: C.uint64_t(w.ID), num_sge: C.uint32_t(len(w.SGL)), sge_off: C.uint32_t(so)}
			so += stageSGL(sge[so:], w.SGL)
		}
		rc := C.sib_post_recv(q, s, r.rwr, C.int(n), r.sge, r.wrs, r.bad)
		if rc != 0 {
			return done + int(*r.bad), rcErr(rc, "ibverbs: post recv")
		}
		done += n
	}
	return done, nil
}

// qp is a queue pair.
type qp struct {
	dev  *device
	pd   *pd
	qp   *C.struct_ibv_qp
	qpn  uint32
	typ  verbs.QPType
	init verbs.QPInitAttr
	scq  *cq
	rcq  *cq
	srq  *srq

	smu sync.Mutex // serialises PostSend
	ss  sendStage
	rmu sync.Mutex // serialises PostRecv
	rs  recvStage

	mu    sync.Mutex // guards dead and drain
	dead  bool
	drain chan uint64 // receives the wr_id of each marker's completion
}

func (p *pd) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	if attr.Type == verbs.QPTypeGSI {
		return nil, fmt.Errorf("%w: QP1 belongs to the kernel on a kernel RDMA device", verbs.ErrNotSupported)
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: send and receive CQs must be CQs of this device", verbs.ErrInvalidArgument)
	}
	var s *srq
	if attr.SRQ != nil {
		x, ok := attr.SRQ.(*srq)
		if !ok {
			return nil, fmt.Errorf("%w: SRQ of another provider", verbs.ErrInvalidArgument)
		}
		s = x
	}
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = scq.cq
	ia.recv_cq = rcq.cq
	if s != nil {
		ia.srq = s.srq
	}
	ia.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(max(attr.Cap.MaxSendSGE, 1))
	ia.cap.max_recv_sge = C.uint32_t(max(attr.Cap.MaxRecvSGE, 1))
	ia.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	ia.qp_type = C.enum_ibv_qp_type(attr.Type)
	if attr.SigAll {
		ia.sq_sig_all = 1
	}
	c, err := C.ibv_create_qp(p.pd, &ia)
	if c == nil {
		return nil, fmt.Errorf("ibverbs: create %v QP: %w", attr.Type, createErr(err))
	}
	q := &qp{dev: p.dev, pd: p, qp: c, qpn: uint32(c.qp_num), typ: attr.Type, init: *attr, scq: scq, rcq: rcq, srq: s}
	q.init.Cap = verbs.QPCap{MaxSendWR: int(ia.cap.max_send_wr), MaxRecvWR: int(ia.cap.max_recv_wr),
		MaxSendSGE: int(ia.cap.max_send_sge), MaxRecvSGE: int(ia.cap.max_recv_sge), MaxInlineData: int(ia.cap.max_inline_data)}
	q.ss.init(q.init.Cap.MaxSendSGE, q.init.Cap.MaxInlineData)
	if s == nil {
		q.rs.init(q.init.Cap.MaxRecvSGE)
	}
	scq.attach(1)
	rcq.attach(1)
	p.dev.mu.Lock()
	p.dev.qps[uint32(c.qp_num)] = q
	p.dev.mu.Unlock()
	return q, nil
}

func (q *qp) QPN() uint32        { return q.qpn }
func (q *qp) Type() verbs.QPType { return q.typ }
func (q *qp) Context() any       { return q.init.Context }

func (q *qp) State() verbs.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return verbs.QPStateErr
	}
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if C.ibv_query_qp(q.qp, &a, C.IBV_QP_STATE, &ia) != 0 {
		return verbs.QPStateErr
	}
	return verbs.QPState(a.qp_state)
}

// Modify checks the transition as the IBA state machine says (so errors
// are the typed ones the rxe provider returns) and applies it.
func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if _, err := verbs.ModifyCheck(q.typ, q.State(), attr, mask); err != nil {
		return err
	}
	if mask&verbs.QPAttrAV != 0 && attr.AH.DPort != 0 && attr.AH.DPort != 4791 {
		return fmt.Errorf("%w: a kernel RDMA device sends to UDP port 4791 only (AH.DPort %d)", verbs.ErrNotSupported, attr.AH.DPort)
	}
	var a C.struct_ibv_qp_attr
	a.qp_state = C.enum_ibv_qp_state(attr.State)
	a.cur_qp_state = C.enum_ibv_qp_state(attr.CurState)
	a.path_mtu = C.enum_ibv_mtu(attr.PathMTU)
	a.path_mig_state = C.enum_ibv_mig_state(attr.PathMigState)
	a.qkey = C.uint32_t(attr.QKey)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.dest_qp_num = C.uint32_t(attr.DestQPN)
	a.qp_access_flags = C.uint(attr.AccessFlags)
	a.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	fillAH(&a.ah_attr, &attr.AH)
	fillAH(&a.alt_ah_attr, &attr.AltAH)
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.alt_pkey_index = C.uint16_t(attr.AltPKeyIndex)
	if attr.EnSQDAsyncNotify {
		a.en_sqd_async_notify = 1
	}
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.port_num = C.uint8_t(attr.PortNum)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.alt_port_num = C.uint8_t(attr.AltPortNum)
	a.alt_timeout = C.uint8_t(attr.AltTimeout)
	rc := C.ibv_modify_qp(q.qp, &a, C.int(mask))
	if rc != 0 {
		return fmt.Errorf("ibverbs: modify QP %d (%v): %w", q.QPN(), mask, rcErr(rc, "kernel refused"))
	}
	return nil
}

func (q *qp) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	all := C.int((1 << 21) - 1)
	if rc := C.ibv_query_qp(q.qp, &a, all, &ia); rc != 0 {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, rcErr(rc, "ibverbs: query QP")
	}
	out := verbs.QPAttr{
		State: verbs.QPState(a.qp_state), CurState: verbs.QPState(a.cur_qp_state), PathMTU: verbs.MTU(a.path_mtu),
		PathMigState: verbs.MigState(a.path_mig_state), QKey: uint32(a.qkey), RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn),
		DestQPN: uint32(a.dest_qp_num), AccessFlags: verbs.AccessFlags(a.qp_access_flags),
		Cap: verbs.QPCap{MaxSendWR: int(a.cap.max_send_wr), MaxRecvWR: int(a.cap.max_recv_wr), MaxSendSGE: int(a.cap.max_send_sge),
			MaxRecvSGE: int(a.cap.max_recv_sge), MaxInlineData: int(a.cap.max_inline_data)},
		AH: readAH(&a.ah_attr), AltAH: readAH(&a.alt_ah_attr), PKeyIndex: uint16(a.pkey_index), AltPKeyIndex: uint16(a.alt_pkey_index),
		EnSQDAsyncNotify: a.en_sqd_async_notify != 0, SQDraining: a.sq_draining != 0, MaxRdAtomic: uint8(a.max_rd_atomic),
		MaxDestRdAtomic: uint8(a.max_dest_rd_atomic), MinRNRTimer: uint8(a.min_rnr_timer), PortNum: uint8(a.port_num),
		Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry), AltPortNum: uint8(a.alt_port_num),
		AltTimeout: uint8(a.alt_timeout),
	}
	return out, q.init, nil
}

func (q *qp) PostSend(wrs []verbs.SendWR) (int, error) {
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.ss.swr == nil {
		return 0, verbs.ErrClosed
	}
	return q.ss.post(q.qp, q.typ == verbs.QPTypeUD, wrs)
}

func (q *qp) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.srq != nil {
		return 0, fmt.Errorf("%w: the QP receives through an SRQ", verbs.ErrInvalidArgument)
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	return q.rs.post(q.qp, nil, wrs)
}

// Drain moves the QP to ERR and waits until every outstanding work request
// has completed, like ib_drain_qp: markers behind the send and receive
// queues complete last, and Poll consumes their completions. The QP's CQs
// must be polled meanwhile.
//
// Both markers are posted before the move to ERR (the send marker is a
// signaled zero-length RDMA WRITE, which needs no remote key): Linux 6.1's
// rdma_rxe flushes both queues when the QP enters ERR but completes
// nothing posted afterwards. The receive marker sits behind every posted
// receive, so an incoming message takes it only when it would otherwise
// have found no receive; its completion counts whatever its status.
func (q *qp) Drain() error {
	if q.typ == verbs.QPTypeUD {
		return fmt.Errorf("%w: Drain of a UD QP on the ibverbs provider", verbs.ErrNotSupported)
	}
	st := q.State()
	want := 0
	if st == verbs.QPStateReset {
		// Nothing is outstanding in RESET.
		return q.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	}
	// In ERR already, the queues were flushed when the QP entered it.
	// Sends can be posted from RTS on, receives from INIT on.
	sendMarker := st == verbs.QPStateRTS || st == verbs.QPStateSQD || st == verbs.QPStateSQE
	recvMarker := st != verbs.QPStateErr && q.srq == nil
	if sendMarker {
		want++
	}
	if recvMarker {
		want++
	}
	ch := make(chan uint64, want)
	q.mu.Lock()
	q.drain = ch
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.drain = nil
		q.mu.Unlock()
	}()
	if sendMarker {
		q.scq.drains.Add(1)
		defer q.scq.drains.Add(-1)
		if _, err := q.PostSend([]verbs.SendWR{{ID: drainMarker, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled}}); err != nil {
			return err
		}
	}
	if recvMarker {
		q.rcq.drains.Add(1)
		defer q.rcq.drains.Add(-1)
		if _, err := q.PostRecv([]verbs.RecvWR{{ID: drainRecvMarker}}); err != nil {
			return err
		}
	}
	if st != verbs.QPStateErr {
		if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
			return err
		}
	}
	deadline := time.NewTimer(drainTimeout)
	defer deadline.Stop()
	var seen []string
	for i := 0; i < want; i++ {
		select {
		case id := <-ch:
			seen = append(seen, map[uint64]string{drainMarker: "send", drainRecvMarker: "recv"}[id])
		case <-deadline.C:
			return fmt.Errorf("%w: drain of QP %d: marker completions within %v: %v of %d (is the CQ polled?)", verbs.ErrBusy, q.QPN(), drainTimeout, seen, want)
		}
	}
	return nil
}

// drainDone is called by Poll for a drain marker's completion of qpn; it
// reports whether a Drain was waiting for it.
func (d *device) drainDone(qpn uint32, id uint64) bool {
	d.mu.Lock()
	q := d.qps[qpn]
	d.mu.Unlock()
	if q == nil {
		return false
	}
	q.mu.Lock()
	ch := q.drain
	q.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case ch <- id:
	default:
	}
	return true
}

func (q *qp) destroy() { _ = q.Destroy() }

func (q *qp) Destroy() error {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	if err := rcErr(C.ibv_destroy_qp(q.qp), "ibverbs: destroy QP"); err != nil {
		q.mu.Unlock()
		return err
	}
	q.dead = true
	q.mu.Unlock()
	qpn := q.qpn
	q.dev.mu.Lock()
	delete(q.dev.qps, qpn)
	q.dev.mu.Unlock()
	q.scq.attach(-1)
	q.rcq.attach(-1)
	q.smu.Lock()
	q.ss.free()
	q.smu.Unlock()
	q.rmu.Lock()
	if q.rs.rwr != nil {
		q.rs.free()
	}
	q.rmu.Unlock()
	return nil
}
