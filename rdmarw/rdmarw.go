// Package rdmarw turns a local scatter list and a remote address/rkey into
// the RDMA READ or WRITE work requests that move it, within the limits of
// the QP and its device, as the Linux kernel's rdma_rw API does for its
// storage targets (SRP, iSER, NVMe-oF, NFS/RDMA):
//
//	var c rdmarw.Ctx
//	n, err := c.Init(qp, pd, sgl, 0, remoteAddr, rkey, rdmarw.Write) // rdma_rw_ctx_init
//	...
//	wrs := c.WRs(finalSend, 0)   // rdma_rw_ctx_wrs: the chain, then the SEND
//	err = c.Post(finalSend, 0)  // rdma_rw_ctx_post
//	// after the completion of the last work request posted:
//	c.Destroy()                 // rdma_rw_ctx_destroy
//
// Direction Write moves the local list to the peer (RDMA WRITE, the
// kernel's DMA_TO_DEVICE); Read fetches the peer's bytes into the local
// list (RDMA READ, DMA_FROM_DEVICE). The local list names registered
// memory by lkey (an MR of the QP's PD with LOCAL_WRITE for Read).
//
// Splitting. Each RDMA work request carries at most the QP's send SGE
// limit (for Read also the device's MaxSGERd) and at most the device's
// and port's maximum message size; the remote address advances with the
// bytes, so the peer sees one contiguous range. READs beyond the QP's
// max_rd_atomic need no splitting here: the QP holds them until earlier
// ones complete, as hardware does. Only the last work request of the
// context is signaled (when no chain follows), so one completion ends an
// operation; a send queue needs Init's return value of entries per
// context.
//
// Fast registration. When the list has more elements than one work
// request may carry and the device advertises
// verbs.DeviceMemMgtExtensions, Mode Auto registers the list through
// fast-registration MRs instead (verbs.AllocMR, MapMRSG, a WRRegMR before
// each RDMA work request, which then has one SGE), as the kernel does
// where it must register. An MR maps whole pages, so this needs a list
// whose inner boundaries are page aligned (see verbs.FastRegMR.MapMRSG);
// a gap starts another MR. Auto falls back to splitting when registering
// would not need fewer RDMA work requests than splitting; ForceMR
// registers anyway and fails only when an element cannot be mapped.
// MRFactor says how many MRs an I/O of a given page count needs. The MRs
// belong to the context and are deregistered by Destroy.
//
// A Ctx is not safe for concurrent use; it may be reused after Destroy.
package rdmarw

import (
	"errors"
	"fmt"

	"softib/verbs"
)

// Direction is the direction of the transfer.
type Direction uint8

// Directions.
const (
	// Write sends the local list to the remote range (RDMA WRITE).
	Write Direction = iota + 1
	// Read fills the local list from the remote range (RDMA READ).
	Read
)

func (d Direction) String() string {
	switch d {
	case Write:
		return "WRITE"
	case Read:
		return "READ"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Mode chooses between SGE lists and fast registration.
type Mode uint8

// Modes.
const (
	// Auto registers through fast-reg MRs only when the list exceeds the
	// SGE limit, the device can, and the list maps onto pages.
	Auto Mode = iota
	// SGEOnly never registers: long lists become more work requests.
	SGEOnly
	// ForceMR always registers (the kernel's rdma_rw_force_mr), and
	// fails when the device cannot or the list does not map.
	ForceMR
)

// PageSize is the page size fast registrations map with (the kernel's
// PAGE_SIZE).
const PageSize = 4096

// maxPagesPerMR caps an MR's page list as rdma_rw_fr_page_list_len does.
const maxPagesPerMR = 256

// Ctx is one RDMA READ or WRITE operation (struct rdma_rw_ctx). Set Mode
// before Init; the zero value is Auto.
type Ctx struct {
	Mode Mode

	qp   verbs.QP
	dir  Direction
	ops  []verbs.SendWR // REG_MR (MR mode) and RDMA work requests
	sges []verbs.SGE
	mrs  []verbs.FastRegMR
	out  []verbs.SendWR // WRs' result, reused
}

// ErrNoMR means ForceMR could not register the list: the device has no
// fast registration or the list does not map onto pages.
var ErrNoMR = errors.New("rdmarw: list cannot be fast-registered")

// limits are what bounds one RDMA work request.
type limits struct {
	maxSGE      int
	maxMsg      uint64
	pagesPerMR  int
	canRegister bool
}

func queryLimits(qp verbs.QP, pd verbs.PD, dir Direction) (limits, error) {
	attr, init, err := qp.Query()
	if err != nil {
		return limits{}, err
	}
	if init.Type != verbs.QPTypeRC && !(init.Type == verbs.QPTypeUC && dir == Write) {
		return limits{}, fmt.Errorf("rdmarw: %v on a %v QP: %w", dir, init.Type, verbs.ErrNotSupported)
	}
	da := pd.Device().Query()
	l := limits{maxSGE: init.Cap.MaxSendSGE, maxMsg: da.MaxMsgSize}
	if dir == Read && da.MaxSGERd > 0 {
		l.maxSGE = min(l.maxSGE, da.MaxSGERd)
	}
	if port := attr.PortNum; port != 0 {
		if pa, err := pd.Device().QueryPort(port); err == nil && pa.MaxMsgSize != 0 {
			l.maxMsg = min(l.maxMsg, pa.MaxMsgSize)
		}
	}
	if l.maxSGE < 1 {
		return limits{}, fmt.Errorf("rdmarw: QP has no send SGEs: %w", verbs.ErrInvalidArgument)
	}
	if l.maxMsg == 0 {
		l.maxMsg = 1 << 31
	}
	l.canRegister = da.DeviceCapFlags&verbs.DeviceMemMgtExtensions != 0 && da.MaxFastRegPageListLen > 0
	l.pagesPerMR = min(da.MaxFastRegPageListLen, maxPagesPerMR)
	return l, nil
}

// Init prepares the work requests that move the bytes of sgl, after
// skipping sgOffset of them, to (Write) or from (Read) remoteAddr under
// rkey, through qp of pd. It returns how many work requests the context
// posts (rdma_rw_ctx_init's return value). A Ctx in use is destroyed
// first.
func (c *Ctx) Init(qp verbs.QP, pd verbs.PD, sgl []verbs.SGE, sgOffset uint32, remoteAddr uint64, rkey uint32, dir Direction) (int, error) {
	c.Destroy()
	if dir != Write && dir != Read {
		return 0, fmt.Errorf("rdmarw: %v: %w", dir, verbs.ErrInvalidArgument)
	}
	// Skip whole elements of the offset, as the kernel's sg walk does.
	for len(sgl) > 0 && sgOffset >= sgl[0].Length {
		sgOffset -= sgl[0].Length
		sgl = sgl[1:]
	}
	if len(sgl) == 0 {
		return 0, fmt.Errorf("rdmarw: empty scatter list: %w", verbs.ErrInvalidArgument)
	}
	l, err := queryLimits(qp, pd, dir)
	if err != nil {
		return 0, err
	}
	c.qp, c.dir = qp, dir
	useMR := c.Mode == ForceMR || (c.Mode == Auto && len(sgl) > l.maxSGE && l.canRegister)
	if useMR {
		err := c.initMR(pd, l, sgl, sgOffset, remoteAddr, rkey)
		if err == nil && c.Mode == Auto && len(c.mrs) >= (len(sgl)+l.maxSGE-1)/l.maxSGE {
			// Gaps cut the list into as many MRs as splitting needs
			// work requests: registering would only cost more.
			err = fmt.Errorf("%w: %d MRs for %d elements", ErrNoMR, len(c.mrs), len(sgl))
		}
		if err == nil {
			return len(c.ops), nil
		}
		c.Destroy()
		if c.Mode == ForceMR || !errors.Is(err, ErrNoMR) {
			return 0, err
		}
		c.qp, c.dir = qp, dir
	}
	c.initSGE(l, sgl, sgOffset, remoteAddr, rkey)
	return len(c.ops), nil
}

func (c *Ctx) opcode() verbs.WROpcode {
	if c.dir == Read {
		return verbs.WRRDMARead
	}
	return verbs.WRRDMAWrite
}

// initSGE splits the list into RDMA work requests of at most l.maxSGE
// elements and l.maxMsg bytes (rdma_rw_init_map_wrs).
func (c *Ctx) initSGE(l limits, sgl []verbs.SGE, off uint32, raddr uint64, rkey uint32) {
	// First the SGEs, cut where a work request ends; then the work
	// requests slice them (no slice is taken while c.sges may grow).
	type cut struct{ start, end int }
	var cuts []cut
	start, bytes := 0, uint64(0)
	for _, e := range sgl {
		e.Addr += uint64(off)
		e.Length -= off
		off = 0
		for e.Length > 0 {
			if len(c.sges)-start == l.maxSGE || bytes == l.maxMsg {
				cuts = append(cuts, cut{start, len(c.sges)})
				start, bytes = len(c.sges), 0
			}
			n := uint64(e.Length)
			if n > l.maxMsg-bytes {
				n = l.maxMsg - bytes
			}
			c.sges = append(c.sges, verbs.SGE{Addr: e.Addr, Length: uint32(n), LKey: e.LKey})
			bytes += n
			e.Addr += n
			e.Length -= uint32(n)
		}
	}
	if len(c.sges) > start {
		cuts = append(cuts, cut{start, len(c.sges)})
	}
	for _, k := range cuts {
		sg := c.sges[k.start:k.end:k.end]
		var n uint64
		for _, e := range sg {
			n += uint64(e.Length)
		}
		c.ops = append(c.ops, verbs.SendWR{Opcode: c.opcode(), SGL: sg, RemoteAddr: raddr, RKey: rkey})
		raddr += n
	}
}

// initMR registers the list through fast-reg MRs, one REG_MR and one
// single-SGE RDMA work request per MR (rdma_rw_init_mr_wrs).
func (c *Ctx) initMR(pd verbs.PD, l limits, sgl []verbs.SGE, off uint32, raddr uint64, rkey uint32) error {
	if !l.canRegister {
		return fmt.Errorf("%w: device has no fast registration", ErrNoMR)
	}
	access := verbs.AccessLocalWrite // Read: the READ responses land in the MR
	c.sges = make([]verbs.SGE, 0, len(sgl))
	for len(sgl) > 0 {
		mr, err := verbs.AllocMR(pd, verbs.MRTypeMemReg, l.pagesPerMR)
		if err != nil {
			if errors.Is(err, verbs.ErrNotSupported) {
				return fmt.Errorf("%w: %v", ErrNoMR, err)
			}
			return err
		}
		c.mrs = append(c.mrs, mr)
		n, err := mr.MapMRSG(sgl, off, PageSize)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: element of %d bytes at %#x does not map onto %d pages", ErrNoMR, sgl[0].Length, sgl[0].Addr, l.pagesPerMR)
		}
		if uint64(mr.Len()) > l.maxMsg {
			return fmt.Errorf("%w: MR of %d bytes exceeds the message size", ErrNoMR, mr.Len())
		}
		sgl, off = sgl[n:], 0
		key := verbs.IncKey(mr.LKey())
		c.sges = append(c.sges, verbs.SGE{Addr: mr.IOVA(), Length: uint32(mr.Len()), LKey: key})
	}
	for i, mr := range c.mrs {
		key := c.sges[i].LKey
		c.ops = append(c.ops,
			verbs.SendWR{Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: mr, Key: key, Access: access}},
			verbs.SendWR{Opcode: c.opcode(), SGL: c.sges[i : i+1 : i+1], RemoteAddr: raddr, RKey: rkey})
		raddr += uint64(c.sges[i].Length)
	}
	return nil
}

// WRs returns the context's work requests followed by chain (typically
// the final SEND of the protocol, rdma_rw_ctx_wrs). Without a chain the
// last RDMA work request is signaled and completes with id. The slice is
// the context's and valid until the next call.
func (c *Ctx) WRs(chain []verbs.SendWR, id uint64) []verbs.SendWR {
	c.out = append(append(c.out[:0], c.ops...), chain...)
	if len(chain) == 0 && len(c.ops) > 0 {
		last := &c.out[len(c.ops)-1]
		last.ID = id
		last.Flags |= verbs.SendSignaled
	}
	return c.out
}

// Post posts WRs(chain, id) on the context's QP (rdma_rw_ctx_post).
func (c *Ctx) Post(chain []verbs.SendWR, id uint64) error {
	if c.qp == nil {
		return fmt.Errorf("rdmarw: post before Init: %w", verbs.ErrInvalidArgument)
	}
	wrs := c.WRs(chain, id)
	n, err := c.qp.PostSend(wrs)
	if err != nil {
		return fmt.Errorf("rdmarw: posted %d of %d work requests: %w", n, len(wrs), err)
	}
	return nil
}

// NumMRs is how many fast-reg MRs the context registers (0 in SGE mode).
func (c *Ctx) NumMRs() int { return len(c.mrs) }

// Destroy releases the context's MRs (rdma_rw_ctx_destroy). Call it
// after the last posted work request completed (or the QP was drained).
func (c *Ctx) Destroy() error {
	var first error
	for _, mr := range c.mrs {
		if err := mr.Dereg(); err != nil && first == nil {
			first = err
		}
	}
	clear(c.mrs)
	clear(c.ops)
	c.mrs, c.ops, c.sges = c.mrs[:0], c.ops[:0], c.sges[:0]
	c.qp = nil
	return first
}

// MRFactor returns how many MRs (or, without fast registration, how many
// RDMA work requests of MaxSGERd elements) an I/O of maxPages pages needs
// on dev (rdma_rw_mr_factor): a ULP sizes its send queue and MR pools
// with it.
func MRFactor(dev verbs.Device, maxPages int) int {
	da := dev.Query()
	per := da.MaxSGERd
	if da.DeviceCapFlags&verbs.DeviceMemMgtExtensions != 0 && da.MaxFastRegPageListLen > 0 {
		per = min(da.MaxFastRegPageListLen, maxPagesPerMR)
	}
	if per < 1 {
		per = 1
	}
	return (maxPages + per - 1) / per
}
