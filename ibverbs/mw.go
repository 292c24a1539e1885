//go:build ibverbs && linux && cgo

package ibverbs

/*
#include "sib.h"
*/
import "C"

import (
	"fmt"
	"sync"

	"softib/verbs"
)

// mw is a memory window (ibv_mw). The kernel keeps the binding; the window
// remembers the last one it was given for Query (a LOCAL_INV or
// SEND_WITH_INV the kernel executes is not reported back to it).
type mw struct {
	pd  *pd
	mw  *C.struct_ibv_mw
	typ verbs.MWType

	mu   sync.Mutex // guards the fields below
	bind verbs.MWBind
	rkey uint32
	dead bool
}

// AllocMW allocates a type 1 or type 2 window (verbs.MWPD).
func (p *pd) AllocMW(typ verbs.MWType) (verbs.MW, error) {
	ct := C.enum_ibv_mw_type(C.IBV_MW_TYPE_1)
	switch typ {
	case verbs.MWType1:
	case verbs.MWType2:
		ct = C.IBV_MW_TYPE_2
	default:
		return nil, fmt.Errorf("%w: window type %v", verbs.ErrInvalidArgument, typ)
	}
	c, err := C.ibv_alloc_mw(p.pd, ct)
	if c == nil {
		return nil, fmt.Errorf("ibverbs: alloc MW type %v: %w", typ, createErr(err))
	}
	return &mw{pd: p, mw: c, typ: typ, rkey: uint32(c.rkey)}, nil
}

func (m *mw) Type() verbs.MWType { return m.typ }

func (m *mw) RKey() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rkey
}

func (m *mw) setBinding(b verbs.MWBind, rkey uint32) {
	m.mu.Lock()
	m.bind, m.rkey = b, rkey
	m.mu.Unlock()
}

// Bind binds a type 1 window through qp (ibv_bind_mw).
func (m *mw) Bind(q verbs.QP, id uint64, flags verbs.SendFlags, b verbs.MWBind) (uint32, error) {
	if m.typ != verbs.MWType1 {
		return 0, fmt.Errorf("%w: Bind is for type 1 windows; a type 2 window is bound with a WRBindMW work request", verbs.ErrInvalidArgument)
	}
	x, ok1 := q.(*qp)
	r, ok2 := b.MR.(*mr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("%w: QP and MR must be of this device", verbs.ErrInvalidArgument)
	}
	x.smu.Lock()
	rc := C.sib_bind_mw(x.qp, m.mw, C.uint64_t(id), C.uint(flags), r.mr, C.uint64_t(b.Addr), C.uint64_t(b.Length), C.uint(b.Access))
	x.smu.Unlock()
	if rc != 0 {
		return 0, rcErr(rc, "ibverbs: bind MW")
	}
	rkey := uint32(m.mw.rkey)
	m.setBinding(b, rkey)
	return rkey, nil
}

func (m *mw) Query() (verbs.MWBind, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return verbs.MWBind{}, 0, verbs.ErrClosed
	}
	return m.bind, m.rkey, nil
}

func (m *mw) Dealloc() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return verbs.ErrClosed
	}
	if err := rcErr(C.ibv_dealloc_mw(m.mw), "ibverbs: dealloc MW"); err != nil {
		return err
	}
	m.dead = true
	return nil
}
