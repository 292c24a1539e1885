package rxe

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"unsafe"

	"softib/verbs"
)

// PD is a protection domain.
type PD struct {
	dev   *Device
	users atomic.Int32 // MRs, QPs, SRQs and AHs using the PD
	dead  atomic.Bool
}

var _ verbs.PD = (*PD)(nil)

// Device returns the device the PD belongs to.
func (pd *PD) Device() verbs.Device { return pd.dev }

// Dealloc frees the PD; ErrBusy while objects still use it.
func (pd *PD) Dealloc() error {
	if pd.users.Load() != 0 {
		return fmt.Errorf("rxe: dealloc PD: %w", verbs.ErrBusy)
	}
	if pd.dead.Swap(true) {
		return verbs.ErrClosed
	}
	pd.dev.pds.Add(-1)
	return nil
}

func (pd *PD) check() error {
	if pd.dead.Load() || pd.dev.closed.Load() {
		return verbs.ErrClosed
	}
	return nil
}

// MR is a registered memory region. Its lkey and rkey are equal, as in rxe:
// the 24-bit table index shifted left by 8 plus a random key byte.
//
// An ordinary MR (RegMR) is valid from registration to Dereg and cannot
// be invalidated. A fast-registration MR (AllocMR, fastreg.go) starts
// invalid (rxe's FREE state), becomes valid through a REG_MR work request
// and invalid again through LOCAL_INV or a peer's SEND_WITH_INV.
type MR struct {
	pd   *PD
	buf  []byte
	addr uint64
	key  uint32 // changed by REG_MR under dev.keys.mu
	// wireKey mirrors key for keyTable.lookup, which reads it without
	// dev.keys.mu; written with key, under dev.keys.mu.
	wireKey atomic.Uint32
	access  verbs.AccessFlags
	// valid is cleared by Dereg and by invalidation; a cleared MR's key
	// matches no access until a REG_MR makes it valid again.
	valid   atomic.Bool
	dereged atomic.Bool
	// m is the mapping accesses go through (address range, rights,
	// memory), replaced whole by REG_MR so that a data path holding the
	// old one never sees a torn update.
	m     atomic.Pointer[mrMap]
	fast  *fastMR      // non-nil for AllocMR MRs
	numMW atomic.Int32 // memory windows bound to the MR
}

var _ verbs.MR = (*MR)(nil)

// keyTable maps MR indices to MRs. Indices are handed out round robin over
// the 24-bit space, so a stale key cannot name a new MR until 2^24 more
// registrations have happened (and then only with the same random key
// byte): keys of deregistered MRs that may still be in flight stay invalid.
type keyTable struct {
	mu     sync.RWMutex
	m      map[uint32]*MR
	next   uint32
	mws    map[uint32]*MW // memory windows (mw.go)
	nextMW uint32

	// idx holds m's MRs again for lookup, which every WRITE, READ and
	// SEND of the data path makes (an lkey at the requester, an rkey at
	// the responder) and which so reads no lock: a read-locked RWMutex
	// costs two atomic additions on one cache line that both sides'
	// goroutines share (4-5 % of the CPU of the 8 B WRITE stream).
	// idx[i>>keyChunkBits][i&keyChunkMask] is MR index i; chunks are made
	// as indices are handed out (round robin from 1, so a few chunks
	// for most devices). Written under mu, with m.
	idx [mrChunks]atomic.Pointer[keyChunk]
}

const keyIndexMask = 0xFFFFFF

// keyChunk is one chunk of keyTable.idx.
type keyChunk [1 << keyChunkBits]atomic.Pointer[MR]

const (
	keyChunkBits = 12
	keyChunkMask = 1<<keyChunkBits - 1
	mrChunks     = (mrIndexMask + 1) >> keyChunkBits
)

// setIdx publishes mr (or nil) at MR index i (mu held).
func (t *keyTable) setIdx(i uint32, mr *MR) {
	c := t.idx[i>>keyChunkBits].Load()
	if c == nil {
		if mr == nil {
			return
		}
		c = new(keyChunk)
		t.idx[i>>keyChunkBits].Store(c)
	}
	c[i&keyChunkMask].Store(mr)
}

func (t *keyTable) add(mr *MR) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uint32]*MR)
	}
	if len(t.m) >= MaxMR {
		return fmt.Errorf("rxe: reg MR: %w", verbs.ErrResourceLimit)
	}
	for {
		t.next = (t.next + 1) & mrIndexMask
		if t.next == 0 {
			continue
		}
		if _, used := t.m[t.next]; !used {
			break
		}
	}
	mr.key = t.next<<8 | uint32(rand.N(256))
	mr.wireKey.Store(mr.key)
	t.m[t.next] = mr
	t.setIdx(t.next, mr)
	return nil
}

// mrIndexMask bounds MR indices to the lower half of the 24-bit index
// space; memory windows take the upper half (mw.go), so a key tells
// which kind it names, as rxe's separate MR and MW index ranges do.
const mrIndexMask = keyIndexMask >> 1

func (t *keyTable) remove(mr *MR) {
	t.mu.Lock()
	if t.m[mr.key>>8] == mr {
		delete(t.m, mr.key>>8)
		t.setIdx(mr.key>>8, nil)
	}
	t.mu.Unlock()
}

// lookup returns the valid MR whose key is exactly key, or nil.
//
// It takes no lock (keyTable.idx): a REG_MR that changes the MR's key
// byte stores wireKey before it sets valid, so a lookup sees the old key
// or the new one, and the new one only once the MR is valid again or
// about to be (as if the lookup came just before REG_MR).
func (t *keyTable) lookup(key uint32) *MR {
	i := key >> 8
	if i > mrIndexMask {
		return nil // a memory window's index (mw.go)
	}
	c := t.idx[i>>keyChunkBits].Load()
	if c == nil {
		return nil
	}
	mr := c[i&keyChunkMask].Load()
	if mr == nil || mr.wireKey.Load() != key || !mr.valid.Load() {
		return nil
	}
	return mr
}

// RegMR registers buf. REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE.
func (pd *PD) RegMR(buf []byte, access verbs.AccessFlags) (verbs.MR, error) {
	if err := pd.check(); err != nil {
		return nil, err
	}
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("rxe: reg MR: remote write/atomic without local write: %w", verbs.ErrInvalidArgument)
	}
	if access&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessMWBind|verbs.AccessZeroBased) != 0 {
		return nil, fmt.Errorf("rxe: reg MR: unknown access %v: %w", access, verbs.ErrInvalidArgument)
	}
	mr := &MR{pd: pd, buf: buf, access: access}
	if len(buf) > 0 && access&verbs.AccessZeroBased == 0 {
		mr.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	mr.m.Store(&mrMap{pd: pd, addr: mr.addr, length: uint64(len(buf)), access: access, frags: []mrFrag{{b: buf}}})
	if err := pd.dev.keys.add(mr); err != nil {
		return nil, err
	}
	mr.valid.Store(true)
	pd.users.Add(1)
	return mr, nil
}

// Addr is the virtual address of the first byte (of a fast-reg MR: its
// IOVA, from the last MapMRSG or SetIOVA).
func (mr *MR) Addr() uint64 {
	if mr.fast != nil {
		return mr.IOVA()
	}
	return mr.addr
}

// Len is the length in bytes (of a fast-reg MR: the bytes its last
// MapMRSG mapped).
func (mr *MR) Len() int {
	if mr.fast != nil {
		mr.fast.mu.Lock()
		defer mr.fast.mu.Unlock()
		return int(mr.fast.staged.length)
	}
	return len(mr.buf)
}

// LKey is the local key.
func (mr *MR) LKey() uint32 {
	k := &mr.pd.dev.keys
	k.mu.RLock()
	defer k.mu.RUnlock()
	return mr.key
}

// RKey is the remote key (equal to the local key).
func (mr *MR) RKey() uint32 { return mr.LKey() }

// Access returns the access rights (of a fast-reg MR: those of its
// current or last registration).
func (mr *MR) Access() verbs.AccessFlags { return mr.m.Load().access }

// Buf returns the registered memory; nil for a fast-reg MR, whose memory
// is the scatter list it maps.
func (mr *MR) Buf() []byte { return mr.buf }

// SGE returns the SGE covering length bytes at offset off.
func (mr *MR) SGE(off, length int) verbs.SGE {
	return verbs.SGE{Addr: mr.Addr() + uint64(off), Length: uint32(length), LKey: mr.LKey()}
}

// Dereg deregisters the MR; its key is never valid again. It fails with
// ErrBusy while memory windows are bound to it (rxe: EINVAL).
func (mr *MR) Dereg() error {
	if mr.numMW.Load() > 0 {
		return fmt.Errorf("rxe: dereg MR: %d memory windows bound: %w", mr.numMW.Load(), verbs.ErrBusy)
	}
	if mr.dereged.Swap(true) {
		return verbs.ErrClosed
	}
	mr.valid.Store(false)
	mr.pd.dev.keys.remove(mr)
	mr.pd.users.Add(-1)
	return nil
}

// AH is an address handle. Its address vector is replaced whole by
// Modify (modify_av), so a post reading it never sees half of each.
type AH struct {
	pd   *PD
	av   atomic.Pointer[ahAV]
	mu   sync.Mutex // serialises Modify
	dead atomic.Bool
}

// ahAV is an AH's address vector with what a send needs of it; a
// published ahAV is never modified.
type ahAV struct {
	attr verbs.AHAttr
	dst  netip.AddrPort
	cls  ipClass // tclass.go
}

var _ verbs.AH = (*AH)(nil)

// CreateAH creates an address handle. RoCE needs a GRH: the DGID is the
// destination IP address.
func (pd *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if err := pd.check(); err != nil {
		return nil, err
	}
	av, err := pd.dev.newAV(attr)
	if err != nil {
		return nil, err
	}
	if pd.dev.ahs.Add(1) > MaxAH {
		pd.dev.ahs.Add(-1)
		return nil, fmt.Errorf("rxe: create AH: %d AHs: %w", MaxAH, verbs.ErrResourceLimit)
	}
	pd.users.Add(1)
	ah := &AH{pd: pd}
	ah.av.Store(av)
	return ah, nil
}

// newAV checks an address vector and resolves its destination.
func (d *Device) newAV(attr *verbs.AHAttr) (*ahAV, error) {
	if attr.PortNum > 1 {
		return nil, fmt.Errorf("rxe: address vector: port %d (the device has port 1): %w", attr.PortNum, verbs.ErrInvalidArgument)
	}
	dst, err := d.resolveAV(attr)
	if err != nil {
		return nil, err
	}
	return &ahAV{attr: *attr, dst: dst, cls: routeClass(&attr.GRH)}, nil
}

// Attr returns the address vector.
func (ah *AH) Attr() verbs.AHAttr { return ah.av.Load().attr }

var _ verbs.AHModifier = (*AH)(nil)

// Modify implements verbs.AHModifier (modify_av): the new vector is
// checked as CreateAH checks one and replaces the old whole. A UD work
// request takes the AH's destination when it is posted (as rxe copies
// the AV into the WQE), so sends posted before keep the old address.
// Linux rxe has no modify_ah; this follows ib_ci.h's modify_av.
func (ah *AH) Modify(attr *verbs.AHAttr) error {
	ah.mu.Lock()
	defer ah.mu.Unlock()
	if ah.dead.Load() {
		return verbs.ErrClosed
	}
	if err := ah.pd.check(); err != nil {
		return err
	}
	av, err := ah.pd.dev.newAV(attr)
	if err != nil {
		return fmt.Errorf("rxe: modify AH: %w", err)
	}
	ah.av.Store(av)
	return nil
}

// Destroy frees the AH.
func (ah *AH) Destroy() error {
	ah.mu.Lock()
	defer ah.mu.Unlock()
	if ah.dead.Swap(true) {
		return verbs.ErrClosed
	}
	ah.pd.users.Add(-1)
	ah.pd.dev.ahs.Add(-1)
	return nil
}

// resolveAV turns an address vector into the UDP destination.
func (d *Device) resolveAV(a *verbs.AHAttr) (netip.AddrPort, error) {
	if a.GRH.DGID.IsZero() {
		return netip.AddrPort{}, fmt.Errorf("rxe: address vector without DGID (RoCE needs a GRH): %w", verbs.ErrInvalidArgument)
	}
	if int(a.GRH.SGIDIndex) >= len(d.gids) && a.GRH.SGIDIndex != 0 {
		return netip.AddrPort{}, fmt.Errorf("rxe: SGID index %d not populated: %w", a.GRH.SGIDIndex, verbs.ErrInvalidArgument)
	}
	ip := a.GRH.DGID.Addr()
	if ip.Is4() != d.addr.Is4() {
		return netip.AddrPort{}, fmt.Errorf("rxe: DGID %v: address family differs from device address %v: %w", a.GRH.DGID, d.addr, verbs.ErrInvalidArgument)
	}
	port := a.DPort
	if port == 0 {
		port = RoCEv2Port
	}
	return netip.AddrPortFrom(ip, port), nil
}

var _ verbs.SharedMRPD = (*PD)(nil)

// RegSharedMR implements verbs.SharedMRPD (ib_ci.h register_smr): a new
// ordinary MR of pd, with its own key, access and start address vaddr,
// over the memory src maps now. src must be a valid ordinary MR of this
// device (a fast-reg MR's memory is whatever its next REG_MR maps);
// its PD may differ from pd. The access rules are RegMR's. The new MR
// holds the memory itself, so deregistering either MR leaves the other
// valid; this differs from ib_ci.h's deregister_mr, which refuses while
// shared regions exist, and follows IBA (a shared region stays
// registered until its own deregistration). A later Rereg of src does
// not move the shared MR.
func (pd *PD) RegSharedMR(src verbs.MR, access verbs.AccessFlags, vaddr uint64) (verbs.MR, error) {
	if err := pd.check(); err != nil {
		return nil, err
	}
	s, ok := src.(*MR)
	if !ok || s.pd.dev != pd.dev {
		return nil, fmt.Errorf("rxe: register shared MR: MR of another device: %w", verbs.ErrInvalidArgument)
	}
	if s.fast != nil {
		return nil, fmt.Errorf("rxe: register shared MR: fast-reg MR %#x has no memory of its own: %w", s.LKey(), verbs.ErrInvalidArgument)
	}
	if s.dereged.Load() || !s.valid.Load() {
		return nil, fmt.Errorf("rxe: register shared MR: MR deregistered: %w", verbs.ErrClosed)
	}
	if err := checkAccess(access); err != nil {
		return nil, fmt.Errorf("rxe: register shared MR: %w", err)
	}
	if access&verbs.AccessZeroBased != 0 && vaddr != 0 {
		return nil, fmt.Errorf("rxe: register shared MR: zero-based region at %#x: %w", vaddr, verbs.ErrInvalidArgument)
	}
	sm := s.m.Load()
	mr := &MR{pd: pd, buf: s.buf, addr: vaddr, access: access}
	mr.m.Store(&mrMap{pd: pd, addr: vaddr, length: sm.length, access: access, frags: sm.frags})
	if err := pd.dev.keys.add(mr); err != nil {
		return nil, err
	}
	mr.valid.Store(true)
	pd.users.Add(1)
	return mr, nil
}

// checkAccess applies the access rules of registration (rxe_mr.c and
// ib_check_mr_access): known flags only, and remote write or atomic
// access only with local write.
func checkAccess(access verbs.AccessFlags) error {
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return fmt.Errorf("remote write/atomic without local write: %w", verbs.ErrInvalidArgument)
	}
	if access&^(verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic|verbs.AccessMWBind|verbs.AccessZeroBased) != 0 {
		return fmt.Errorf("unknown access %v: %w", access, verbs.ErrInvalidArgument)
	}
	return nil
}
