//go:build ibverbs && linux && cgo

package ibverbs

/*
#include "sib.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"softib/verbs"
)

// pollChunk is how many completions one cgo call moves at most.
const pollChunk = 64

// cq is a completion queue. Poll converts completions from a C staging
// array owned by the CQ, so polling allocates nothing.
type cq struct {
	dev     *device
	cq      *C.struct_ibv_cq
	channel *verbs.CompChannel
	handler func(verbs.CQ)
	ctx     any

	mu   sync.Mutex // serialises Poll (the staging arrays) and Destroy
	tmp  *C.struct_ibv_wc
	out  *C.sib_wc
	dead bool

	// drains counts QPs waiting for their drain marker on this CQ.
	drains atomic.Int32
	qpsMu  sync.Mutex
	users  int // QPs attached
}

func (d *device) CreateCQ(attr verbs.CQAttr) (verbs.CQ, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if attr.CQE <= 0 {
		return nil, fmt.Errorf("%w: CQE %d", verbs.ErrInvalidArgument, attr.CQE)
	}
	if attr.Channel != nil {
		if err := attr.Channel.Attach(); err != nil {
			return nil, err
		}
	}
	c, err := C.ibv_create_cq(d.ctx, C.int(attr.CQE), nil, d.comp, 0)
	if c == nil {
		if attr.Channel != nil {
			attr.Channel.Detach()
		}
		return nil, fmt.Errorf("ibverbs: create CQ of %d entries: %w", attr.CQE, createErr(err))
	}
	x := &cq{dev: d, cq: c, channel: attr.Channel, handler: attr.Handler, ctx: attr.Context}
	x.tmp = (*C.struct_ibv_wc)(C.calloc(pollChunk, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{}))))
	x.out = (*C.sib_wc)(C.calloc(pollChunk, C.size_t(unsafe.Sizeof(C.sib_wc{}))))
	d.mu.Lock()
	d.cqs[uintptr(unsafe.Pointer(c))] = x
	d.mu.Unlock()
	return x, nil
}

// notify runs on the device's event goroutine for each completion event.
func (c *cq) notify() {
	if c.channel != nil {
		c.channel.Notify(c)
	}
	if c.handler != nil {
		c.handler(c)
	}
}

func (c *cq) Poll(wcs []verbs.WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return 0, verbs.ErrClosed
	}
	n := 0
	for n < len(wcs) {
		want := min(len(wcs)-n, pollChunk)
		got := int(C.sib_poll_cq(c.cq, C.int(want), c.tmp, c.out))
		if got < 0 {
			return n, fmt.Errorf("ibverbs: poll CQ: %w", verbs.ErrCQOverrun)
		}
		src := unsafe.Slice(c.out, got)
		for i := range src {
			s := &src[i]
			if c.drains.Load() > 0 && (uint64(s.wr_id) == drainMarker || uint64(s.wr_id) == drainRecvMarker) && c.dev.drainDone(uint32(s.qp_num), uint64(s.wr_id)) {
				continue
			}
			wcs[n] = verbs.WC{
				WRID: uint64(s.wr_id), Status: verbs.WCStatus(s.status), Opcode: verbs.WCOpcode(s.opcode),
				VendorErr: uint32(s.vendor_err), ByteLen: uint32(s.byte_len), QPN: uint32(s.qp_num),
				SrcQP: uint32(s.src_qp), Flags: verbs.WCFlags(s.wc_flags), PKeyIndex: uint16(s.pkey_index),
				SLID: uint16(s.slid), SL: uint8(s.sl), DLIDPathBits: uint8(s.dlid_path_bits),
			}
			if wcs[n].Flags&verbs.WCFlagWithInv != 0 {
				wcs[n].InvalidatedRKey = uint32(s.imm_or_inv)
			} else if wcs[n].Flags&verbs.WCFlagWithImm != 0 {
				wcs[n].ImmData = uint32(s.imm_or_inv)
			}
			n++
		}
		if got < want {
			break
		}
	}
	return n, nil
}

func (c *cq) ReqNotify(solicitedOnly bool) error {
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	return rcErr(C.sib_req_notify(c.cq, so), "ibverbs: arm CQ")
}

func (c *cq) Resize(cqe int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return rcErr(C.ibv_resize_cq(c.cq, C.int(cqe)), "ibverbs: resize CQ")
}

func (c *cq) CQE() int                    { return int(c.cq.cqe) }
func (c *cq) Channel() *verbs.CompChannel { return c.channel }
func (c *cq) Context() any                { return c.ctx }

func (c *cq) attach(delta int) {
	c.qpsMu.Lock()
	c.users += delta
	c.qpsMu.Unlock()
}

func (c *cq) destroy() { _ = c.Destroy() }

// Destroy frees the CQ; ErrBusy while QPs use it.
func (c *cq) Destroy() error {
	c.qpsMu.Lock()
	users := c.users
	c.qpsMu.Unlock()
	if users > 0 {
		return fmt.Errorf("%w: CQ used by %d QPs", verbs.ErrBusy, users)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return verbs.ErrClosed
	}
	if err := rcErr(C.ibv_destroy_cq(c.cq), "ibverbs: destroy CQ"); err != nil {
		return err
	}
	c.dead = true
	c.dev.mu.Lock()
	delete(c.dev.cqs, uintptr(unsafe.Pointer(c.cq)))
	c.dev.mu.Unlock()
	C.free(unsafe.Pointer(c.tmp))
	C.free(unsafe.Pointer(c.out))
	if c.channel != nil {
		c.channel.Detach()
	}
	return nil
}
