package rxe

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"softib/verbs"
)

// Fast-registration MRs (rxe_mr.c: rxe_alloc_mr, rxe_map_mr_sg,
// rxe_reg_fast_mr, rxe_invalidate_mr) and the MR mapping every access
// goes through.

// MaxFastRegPageList is the page-list capacity limit of one fast-reg MR
// (RXE_MAX_FMR_PAGE_LIST_LEN).
const MaxFastRegPageList = 512

// mrMap is what an MR maps: length bytes of address space from addr, with
// access rights, onto frags (memory pieces in address order). An ordinary
// MR has one fragment; a fast-reg MR one per run of contiguous memory of
// the scatter list it mapped. A published mrMap is never modified.
type mrMap struct {
	pd     *PD // the PD accesses are checked against (Rereg may move it)
	addr   uint64
	length uint64
	access verbs.AccessFlags
	frags  []mrFrag
}

// mrFrag is a piece of mapped memory starting off bytes after mrMap.addr.
type mrFrag struct {
	off uint64
	b   []byte
}

// inRange reports whether [va, va+n) lies inside the mapping.
func (m *mrMap) inRange(va, n uint64) bool {
	off := va - m.addr
	return va >= m.addr && off <= m.length && n <= m.length-off
}

// frag returns the index of the fragment holding byte off.
func (m *mrMap) frag(off uint64) int {
	if len(m.frags) == 1 {
		return 0
	}
	return sort.Search(len(m.frags), func(i int) bool { return m.frags[i].off+uint64(len(m.frags[i].b)) > off })
}

// span returns the bytes [va, va+n) if they are inside the mapping and in
// one fragment.
func (m *mrMap) span(va uint64, n uint32) ([]byte, bool) {
	if !m.inRange(va, uint64(n)) {
		return nil, false
	}
	off := va - m.addr
	i := m.frag(off)
	if i == len(m.frags) {
		return nil, n == 0
	}
	f := m.frags[i]
	o := off - f.off
	if o+uint64(n) > uint64(len(f.b)) {
		return nil, false
	}
	return f.b[o : o+uint64(n)], true
}

// appendSegs appends the memory of [va, va+n) to segs, one slice per
// fragment it touches.
func (m *mrMap) appendSegs(segs [][]byte, va uint64, n uint32) ([][]byte, bool) {
	if !m.inRange(va, uint64(n)) {
		return segs, false
	}
	off, left := va-m.addr, uint64(n)
	for i := m.frag(off); left > 0 && i < len(m.frags); i++ {
		f := m.frags[i]
		o := off - f.off
		k := min(left, uint64(len(f.b))-o)
		segs = append(segs, f.b[o:o+k])
		off, left = off+k, left-k
	}
	return segs, left == 0
}

// copyIn copies src to va; the range must be inside the mapping.
func (m *mrMap) copyIn(va uint64, src []byte) {
	raceMemLock()
	off := va - m.addr
	for i := m.frag(off); len(src) > 0 && i < len(m.frags); i++ {
		f := m.frags[i]
		n := copy(f.b[off-f.off:], src)
		src, off = src[n:], off+uint64(n)
	}
	raceMemUnlock()
}

// copyOut fills dst from va; the range must be inside the mapping.
func (m *mrMap) copyOut(dst []byte, va uint64) {
	raceMemLock()
	off := va - m.addr
	for i := m.frag(off); len(dst) > 0 && i < len(m.frags); i++ {
		f := m.frags[i]
		n := copy(dst, f.b[off-f.off:])
		dst, off = dst[n:], off+uint64(n)
	}
	raceMemUnlock()
}

// fastMR is the fast-registration state of an MR.
type fastMR struct {
	maxSG  int
	mu     sync.Mutex // staged; serialises MapMRSG against REG_MR
	staged *mrMap     // the last MapMRSG's mapping (access unset)
	segs   [][]byte   // MapMRSG's scratch (guarded by mu): no allocation per element
}

var _ verbs.FastRegMR = (*MR)(nil)
var _ verbs.MemMgtPD = (*PD)(nil)

// AllocMR allocates a fast-registration MR for up to maxSG pages
// (rxe_alloc_mr): invalid until a REG_MR work request registers it. Only
// MRTypeMemReg exists, as in rxe.
func (pd *PD) AllocMR(typ verbs.MRType, maxSG int) (verbs.FastRegMR, error) {
	if err := pd.check(); err != nil {
		return nil, err
	}
	if typ != verbs.MRTypeMemReg {
		return nil, fmt.Errorf("rxe: alloc MR: type %v: %w", typ, verbs.ErrInvalidArgument)
	}
	if maxSG < 1 || maxSG > MaxFastRegPageList {
		return nil, fmt.Errorf("rxe: alloc MR: %d pages (1..%d): %w", maxSG, MaxFastRegPageList, verbs.ErrInvalidArgument)
	}
	mr := &MR{pd: pd, fast: &fastMR{maxSG: maxSG, staged: &mrMap{pd: pd}}}
	mr.m.Store(&mrMap{pd: pd})
	if err := pd.dev.keys.add(mr); err != nil {
		return nil, err
	}
	pd.users.Add(1)
	return mr, nil
}

// MaxSG is the page-list capacity.
func (mr *MR) MaxSG() int {
	if mr.fast == nil {
		return 0
	}
	return mr.fast.maxSG
}

// Valid reports whether the MR is registered.
func (mr *MR) Valid() bool { return mr.valid.Load() }

// IOVA is the address the mapping starts at.
func (mr *MR) IOVA() uint64 {
	if mr.fast == nil {
		return mr.addr
	}
	mr.fast.mu.Lock()
	defer mr.fast.mu.Unlock()
	return mr.fast.staged.addr
}

// SetIOVA moves the start address of the next registration (a ULP's
// mr->iova = ...); it does nothing to a registered MR or an ordinary one.
func (mr *MR) SetIOVA(iova uint64) {
	if mr.fast == nil || mr.valid.Load() {
		return
	}
	mr.fast.mu.Lock()
	defer mr.fast.mu.Unlock()
	m := *mr.fast.staged
	m.addr = iova
	mr.fast.staged = &m
}

// MapMRSG maps a scatter list onto the MR's page list with the rules of
// the kernel's ib_sg_to_pages: every element but the first starts on a
// page boundary and every one but the last ends on one; mapping stops at
// the first element that breaks the rule or does not fit the page list,
// and the count of mapped elements tells the caller where to continue.
// The elements name registered memory of the MR's PD by lkey.
func (mr *MR) MapMRSG(sgl []verbs.SGE, sgOffset uint32, pageSize int) (int, error) {
	if mr.fast == nil {
		return 0, fmt.Errorf("rxe: map MR SG: not a fast-reg MR: %w", verbs.ErrInvalidArgument)
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		return 0, fmt.Errorf("rxe: map MR SG: page size %d: %w", pageSize, verbs.ErrInvalidArgument)
	}
	if mr.dereged.Load() {
		return 0, verbs.ErrClosed
	}
	mr.fast.mu.Lock()
	defer mr.fast.mu.Unlock()
	if mr.valid.Load() {
		return 0, fmt.Errorf("rxe: map MR SG: MR is registered (invalidate it first): %w", verbs.ErrInvalidArgument)
	}
	ps := uint64(pageSize)
	// One allocation for the map and one for its fragments: the
	// fragments merge when the pages are contiguous, and at most one
	// per page otherwise.
	m := &mrMap{pd: mr.pd, frags: make([]mrFrag, 0, min(len(sgl), mr.fast.maxSG))}
	pages, mapped := 0, 0
	var lastEnd uint64
	for i, e := range sgl {
		addr, n := e.Addr, uint64(e.Length)
		if i == 0 {
			if uint64(sgOffset) >= n {
				return 0, fmt.Errorf("rxe: map MR SG: offset %d beyond the first element: %w", sgOffset, verbs.ErrInvalidArgument)
			}
			addr, n = addr+uint64(sgOffset), n-uint64(sgOffset)
			m.addr = addr
		} else if addr%ps != 0 || lastEnd%ps != 0 {
			break // a gap inside a page: the next MR continues here
		}
		if n == 0 {
			break
		}
		np := int((addr+n-1)/ps - addr/ps + 1)
		if pages+np > mr.fast.maxSG {
			break
		}
		src := mr.pd.dev.keys.lookup(e.LKey)
		if src == nil || src.m.Load().pd != mr.pd || src.fast != nil {
			return mapped, fmt.Errorf("rxe: map MR SG: element %d: lkey %#x names no registered memory of this PD: %w", i, e.LKey, verbs.ErrInvalidLKey)
		}
		segs, ok := src.m.Load().appendSegs(mr.fast.segs[:0], addr, uint32(n))
		mr.fast.segs = segs
		if !ok {
			return mapped, fmt.Errorf("rxe: map MR SG: element %d outside its MR: %w", i, verbs.ErrInvalidLKey)
		}
		for _, b := range segs {
			m.frags = appendFrag(m.frags, m.length, b)
			m.length += uint64(len(b))
		}
		pages += np
		lastEnd = addr + n
		mapped++
	}
	clear(mr.fast.segs[:cap(mr.fast.segs)]) // hold no registered memory
	mr.fast.staged = m
	return mapped, nil
}

// appendFrag adds b at offset off, merging it into the last fragment when
// it continues the same backing array (never across allocations: a slice
// spanning two would hide the second from the collector).
func appendFrag(frags []mrFrag, off uint64, b []byte) []mrFrag {
	if k := len(frags) - 1; k >= 0 {
		l := frags[k].b
		if cap(l) > len(l) && len(b) > 0 && unsafe.Pointer(unsafe.SliceData(l[len(l):len(l)+1])) == unsafe.Pointer(unsafe.SliceData(b)) && cap(l)-len(l) >= len(b) {
			frags[k].b = l[:len(l)+len(b)]
			return frags
		}
	}
	return append(frags, mrFrag{off: off, b: b})
}

// register executes a REG_MR work request of q (rxe_reg_fast_mr): the MR
// must be a free fast-reg MR of q's PD, and only the key byte may change.
func (q *QP) register(wr *verbs.RegWR) bool {
	mr, ok := wr.MR.(*MR)
	if !ok || mr.fast == nil || mr.pd != q.pd || mr.dereged.Load() {
		return false
	}
	if wr.Access&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessMWBind|verbs.AccessZeroBased) != 0 {
		return false
	}
	mr.fast.mu.Lock()
	defer mr.fast.mu.Unlock()
	k := &q.dev.keys
	k.mu.Lock()
	defer k.mu.Unlock()
	if mr.valid.Load() || wr.Key&^0xFF != mr.key&^0xFF {
		return false
	}
	m := *mr.fast.staged
	m.access = wr.Access
	mr.m.Store(&m)
	mr.key, mr.access = wr.Key, wr.Access
	mr.wireKey.Store(wr.Key)
	mr.valid.Store(true)
	return true
}

// invalidate executes LOCAL_INV or the invalidation of a SEND_WITH_INV
// (rxe_invalidate_mr / rxe_invalidate_mw): key must name a fast-reg MR
// without bound windows, or a type 2 window, of q's PD. Ordinary MRs and
// type 1 windows cannot be invalidated.
func (q *QP) invalidate(key uint32) bool {
	if isMWKey(key) {
		return q.dev.keys.invalidateMW(q, key)
	}
	k := &q.dev.keys
	k.mu.RLock()
	mr := k.m[key>>8]
	ok := mr != nil && mr.key == key && mr.fast != nil && mr.pd == q.pd && mr.numMW.Load() == 0
	k.mu.RUnlock()
	if !ok {
		return false
	}
	mr.valid.Store(false)
	return true
}

// remoteMR resolves an rkey for a remote access of n bytes at va needing
// rights need (rxe_resp.c check_rkey): a valid MR of q's PD, or a window
// (mw.go). It returns the MR, the mapping to use and va translated into it
// (zero-based windows), or nil.
func (q *QP) remoteMR(rkey uint32, need verbs.AccessFlags, va uint64, n uint32) (*MR, *mrMap, uint64) {
	if isMWKey(rkey) {
		return q.dev.keys.lookupMW(q, rkey, need, va, n)
	}
	mr := q.dev.keys.lookup(rkey)
	if mr == nil {
		return nil, nil, 0
	}
	m := mr.m.Load()
	if m.pd != q.pd || m.access&need != need || !m.inRange(va, uint64(n)) {
		return nil, nil, 0
	}
	return mr, m, va
}

// checkMemWR checks a REG_MR or BIND_MW work request at post time.
func checkMemWR(wr *verbs.SendWR) error {
	switch wr.Opcode {
	case verbs.WRRegMR:
		if mr, ok := wr.Reg.MR.(*MR); !ok || mr.fast == nil {
			return fmt.Errorf("rxe: post send wr %d: REG_MR needs a fast-reg MR of this provider: %w", wr.ID, verbs.ErrInvalidArgument)
		}
	case verbs.WRBindMW:
		if _, ok := wr.BindMW.MW.(*MW); !ok {
			return fmt.Errorf("rxe: post send wr %d: BIND_MW needs a memory window of this provider: %w", wr.ID, verbs.ErrInvalidArgument)
		}
	}
	return nil
}

var _ verbs.RereggableMR = (*MR)(nil)

// Rereg re-registers an ordinary MR (ibv_rereg_mr): a new PD, new access
// rights and/or new memory (buf, whose address becomes Addr as in RegMR),
// keeping its keys. Accesses in flight finish with the old mapping or
// see the new one whole. It fails with ErrBusy while windows are bound
// to the MR and with ErrInvalidArgument for a fast-reg MR (REG_MR
// re-registers those). Linux 6.2+ rxe supports the PD and access cases
// (6.1 has no rereg); the translation case goes beyond it.
func (mr *MR) Rereg(flags verbs.ReregFlags, pd verbs.PD, buf []byte, access verbs.AccessFlags) error {
	const all = verbs.ReregTranslation | verbs.ReregPD | verbs.ReregAccess
	if mr.fast != nil {
		return fmt.Errorf("rxe: rereg MR: fast-reg MRs are registered by REG_MR: %w", verbs.ErrInvalidArgument)
	}
	if flags == 0 || flags&^all != 0 {
		return fmt.Errorf("rxe: rereg MR: flags %#x: %w", uint8(flags), verbs.ErrInvalidArgument)
	}
	if mr.dereged.Load() {
		return verbs.ErrClosed
	}
	if n := mr.numMW.Load(); n > 0 {
		return fmt.Errorf("rxe: rereg MR: %d memory windows bound: %w", n, verbs.ErrBusy)
	}
	t := &mr.pd.dev.keys
	t.mu.Lock()
	defer t.mu.Unlock()
	newPD, newBuf, newAccess := mr.pd, mr.buf, mr.access
	if flags&verbs.ReregPD != 0 {
		p, ok := pd.(*PD)
		if !ok || p.dev != mr.pd.dev {
			return fmt.Errorf("rxe: rereg MR: PD of another device: %w", verbs.ErrInvalidArgument)
		}
		if err := p.check(); err != nil {
			return err
		}
		newPD = p
	}
	if flags&verbs.ReregAccess != 0 {
		newAccess = access
	}
	if flags&verbs.ReregTranslation != 0 {
		newBuf = buf
	}
	if newAccess&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && newAccess&verbs.AccessLocalWrite == 0 {
		return fmt.Errorf("rxe: rereg MR: remote write/atomic without local write: %w", verbs.ErrInvalidArgument)
	}
	if newAccess&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessMWBind|verbs.AccessZeroBased) != 0 {
		return fmt.Errorf("rxe: rereg MR: unknown access %v: %w", newAccess, verbs.ErrInvalidArgument)
	}
	var addr uint64
	if len(newBuf) > 0 && newAccess&verbs.AccessZeroBased == 0 {
		addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(newBuf))))
	}
	if newPD != mr.pd {
		newPD.users.Add(1)
		mr.pd.users.Add(-1)
	}
	mr.pd, mr.buf, mr.addr, mr.access = newPD, newBuf, addr, newAccess
	mr.m.Store(&mrMap{pd: newPD, addr: addr, length: uint64(len(newBuf)), access: newAccess, frags: []mrFrag{{b: newBuf}}})
	return nil
}
