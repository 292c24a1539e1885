//go:build ibverbs && linux && cgo

package ibverbs

/*
#include "sib.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"softib/verbs"
)

// pd is a protection domain. It tracks its MRs and AHs so that closing the
// device can release them.
type pd struct {
	dev *device
	pd  *C.struct_ibv_pd

	mu  sync.Mutex
	mrs map[*mr]struct{}
	ahs map[*ah]struct{}
}

func (p *pd) Device() verbs.Device { return p.dev }

func (p *pd) track(m *mr, a *ah) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m != nil {
		if p.mrs == nil {
			p.mrs = map[*mr]struct{}{}
		}
		p.mrs[m] = struct{}{}
	}
	if a != nil {
		if p.ahs == nil {
			p.ahs = map[*ah]struct{}{}
		}
		p.ahs[a] = struct{}{}
	}
}

func (p *pd) untrack(m *mr, a *ah) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.mrs, m)
	delete(p.ahs, a)
}

// RegMR registers buf in place. The buffer is pinned until Dereg.
func (p *pd) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty buffer", verbs.ErrInvalidArgument)
	}
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE", verbs.ErrInvalidArgument)
	}
	m := &mr{pd: p, buf: buf, access: access}
	m.pin.Pin(&buf[0])
	c, err := C.ibv_reg_mr(p.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), C.int(access))
	if c == nil {
		m.pin.Unpin()
		return nil, fmt.Errorf("ibverbs: reg MR of %d bytes: %w", len(buf), createErr(err))
	}
	m.mr = c
	p.track(m, nil)
	return m, nil
}

// destroyChildren releases the PD's MRs and AHs (device close).
func (p *pd) destroyChildren() {
	p.mu.Lock()
	mrs := make([]*mr, 0, len(p.mrs))
	for m := range p.mrs {
		mrs = append(mrs, m)
	}
	ahs := make([]*ah, 0, len(p.ahs))
	for a := range p.ahs {
		ahs = append(ahs, a)
	}
	p.mu.Unlock()
	for _, m := range mrs {
		_ = m.Dereg()
	}
	for _, a := range ahs {
		_ = a.Destroy()
	}
}

func (p *pd) destroy() {
	p.dev.mu.Lock()
	_, live := p.dev.pds[p]
	delete(p.dev.pds, p)
	p.dev.mu.Unlock()
	if live {
		C.ibv_dealloc_pd(p.pd)
	}
}

// Dealloc frees the PD; ErrBusy while MRs, AHs or QPs use it.
func (p *pd) Dealloc() error {
	p.mu.Lock()
	busy := len(p.mrs) + len(p.ahs)
	p.mu.Unlock()
	if busy > 0 {
		return fmt.Errorf("%w: PD still has %d MRs/AHs", verbs.ErrBusy, busy)
	}
	p.dev.mu.Lock()
	_, live := p.dev.pds[p]
	p.dev.mu.Unlock()
	if !live {
		return verbs.ErrClosed
	}
	if err := rcErr(C.ibv_dealloc_pd(p.pd), "ibverbs: dealloc PD"); err != nil {
		return err
	}
	p.dev.mu.Lock()
	delete(p.dev.pds, p)
	p.dev.mu.Unlock()
	return nil
}

func (p *pd) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if attr.DPort != 0 && attr.DPort != 4791 {
		return nil, fmt.Errorf("%w: a kernel RDMA device sends to UDP port 4791 only (AHAttr.DPort %d)", verbs.ErrNotSupported, attr.DPort)
	}
	var ca C.struct_ibv_ah_attr
	fillAH(&ca, attr)
	c, err := C.ibv_create_ah(p.pd, &ca)
	if c == nil {
		return nil, fmt.Errorf("ibverbs: create AH: %w", createErr(err))
	}
	a := &ah{pd: p, ah: c, attr: *attr}
	p.track(nil, a)
	return a, nil
}

func fillAH(ca *C.struct_ibv_ah_attr, a *verbs.AHAttr) {
	C.sib_set_gid(&ca.grh.dgid, (*C.uint8_t)(unsafe.Pointer(&a.GRH.DGID[0])))
	ca.grh.flow_label = C.uint32_t(a.GRH.FlowLabel)
	ca.grh.sgid_index = C.uint8_t(a.GRH.SGIDIndex)
	ca.grh.hop_limit = C.uint8_t(a.GRH.HopLimit)
	ca.grh.traffic_class = C.uint8_t(a.GRH.TrafficClass)
	ca.dlid = C.uint16_t(a.DLID)
	ca.sl = C.uint8_t(a.SL)
	ca.src_path_bits = C.uint8_t(a.SrcPathBits)
	ca.static_rate = C.uint8_t(a.StaticRate)
	ca.is_global = 0
	if a.IsGlobal {
		ca.is_global = 1
	}
	ca.port_num = C.uint8_t(a.PortNum)
	if ca.port_num == 0 {
		ca.port_num = 1
	}
}

func readAH(ca *C.struct_ibv_ah_attr) verbs.AHAttr {
	var a verbs.AHAttr
	C.sib_get_gid(&ca.grh.dgid, (*C.uint8_t)(unsafe.Pointer(&a.GRH.DGID[0])))
	a.GRH.FlowLabel = uint32(ca.grh.flow_label)
	a.GRH.SGIDIndex = uint8(ca.grh.sgid_index)
	a.GRH.HopLimit = uint8(ca.grh.hop_limit)
	a.GRH.TrafficClass = uint8(ca.grh.traffic_class)
	a.DLID = uint16(ca.dlid)
	a.SL = uint8(ca.sl)
	a.SrcPathBits = uint8(ca.src_path_bits)
	a.StaticRate = uint8(ca.static_rate)
	a.IsGlobal = ca.is_global != 0
	a.PortNum = uint8(ca.port_num)
	return a
}

// mr is a registration of pinned Go memory.
type mr struct {
	pd     *pd
	mr     *C.struct_ibv_mr
	buf    []byte
	access verbs.AccessFlags
	pin    runtime.Pinner
	once   sync.Once
}

func (m *mr) Addr() uint64              { return uint64(uintptr(unsafe.Pointer(&m.buf[0]))) }
func (m *mr) Len() int                  { return len(m.buf) }
func (m *mr) LKey() uint32              { return uint32(m.mr.lkey) }
func (m *mr) RKey() uint32              { return uint32(m.mr.rkey) }
func (m *mr) Access() verbs.AccessFlags { return m.access }
func (m *mr) Buf() []byte               { return m.buf }
func (m *mr) SGE(off, length int) verbs.SGE {
	return verbs.SGE{Addr: m.Addr() + uint64(off), Length: uint32(length), LKey: m.LKey()}
}

// Dereg deregisters the MR and unpins its buffer.
func (m *mr) Dereg() error {
	err := verbs.ErrClosed
	m.once.Do(func() {
		err = rcErr(C.ibv_dereg_mr(m.mr), "ibverbs: dereg MR")
		m.pin.Unpin()
		m.pd.untrack(m, nil)
	})
	return err
}

type ah struct {
	pd   *pd
	ah   *C.struct_ibv_ah
	attr verbs.AHAttr
	once sync.Once
}

func (a *ah) Attr() verbs.AHAttr { return a.attr }

func (a *ah) Destroy() error {
	err := verbs.ErrClosed
	a.once.Do(func() {
		err = rcErr(C.ibv_destroy_ah(a.ah), "ibverbs: destroy AH")
		a.pd.untrack(nil, a)
	})
	return err
}

// srq is a shared receive queue with its own C staging area for posts.
type srq struct {
	dev  *device
	srq  *C.struct_ibv_srq
	ctx  any
	mu   sync.Mutex // serialises posts (the staging area)
	rs   recvStage
	dead bool // guarded by mu
}

func (p *pd) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQ, error) {
	var ia C.struct_ibv_srq_init_attr
	ia.attr.max_wr = C.uint32_t(attr.Attr.MaxWR)
	ia.attr.max_sge = C.uint32_t(max(attr.Attr.MaxSGE, 1))
	ia.attr.srq_limit = C.uint32_t(attr.Attr.Limit)
	c, err := C.ibv_create_srq(p.pd, &ia)
	if c == nil {
		return nil, fmt.Errorf("ibverbs: create SRQ: %w", createErr(err))
	}
	s := &srq{dev: p.dev, srq: c, ctx: attr.Context}
	s.rs.init(int(ia.attr.max_sge))
	p.dev.mu.Lock()
	p.dev.srqs[uintptr(unsafe.Pointer(c))] = s
	p.dev.mu.Unlock()
	return s, nil
}

func (s *srq) PostRecv(wrs []verbs.RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rs.post(nil, s.srq, wrs)
}

func (s *srq) Modify(attr verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	var a C.struct_ibv_srq_attr
	a.max_wr = C.uint32_t(attr.MaxWR)
	a.srq_limit = C.uint32_t(attr.Limit)
	return rcErr(C.ibv_modify_srq(s.srq, &a, C.int(mask)), "ibverbs: modify SRQ")
}

func (s *srq) Query() (verbs.SRQAttr, error) {
	var a C.struct_ibv_srq_attr
	if err := rcErr(C.ibv_query_srq(s.srq, &a), "ibverbs: query SRQ"); err != nil {
		return verbs.SRQAttr{}, err
	}
	return verbs.SRQAttr{MaxWR: int(a.max_wr), MaxSGE: int(a.max_sge), Limit: int(a.srq_limit)}, nil
}

func (s *srq) Context() any { return s.ctx }

func (s *srq) destroy() { _ = s.Destroy() }

func (s *srq) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrClosed
	}
	if err := rcErr(C.ibv_destroy_srq(s.srq), "ibverbs: destroy SRQ"); err != nil {
		return err
	}
	s.dead = true
	s.dev.mu.Lock()
	delete(s.dev.srqs, uintptr(unsafe.Pointer(s.srq)))
	s.dev.mu.Unlock()
	s.rs.free()
	return nil
}
