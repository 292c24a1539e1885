package rxe

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"softib/verbs"
)

// Memory windows, type 1 and type 2B, with the rules of Linux rxe
// (rxe_mw.c) and IBA §10.6.7: a window grants remote access to a range of
// an MR that has MW_BIND access. A type 1 window is bound by MW.Bind
// (which posts a bind work request, as libibverbs' ibv_bind_mw does) and
// stays usable by any QP of its PD until rebound or deallocated; a type 2
// window is bound by a BIND_MW work request, is usable only through the
// QP that bound it, and is invalidated by LOCAL_INV or SEND_WITH_INV.
// Unlike rxe 6.1, which checks an access against the underlying MR's
// range only, an access must also lie inside the window, as IBA requires
// (a peer that stays inside its window sees no difference).

// MaxMW is the number of memory windows a device holds (RXE_MAX_MW).
const MaxMW = 0x1000

// mwSupportedAccess are the rights a window may grant
// (RXE_ACCESS_SUPPORTED_MW).
const mwSupportedAccess = verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic | verbs.AccessZeroBased | verbs.AccessLocalWrite | verbs.AccessMWBind

type mwState uint8

const (
	mwInvalid mwState = iota // deallocated
	mwFree                   // type 2, unbound
	mwValid                  // bound (type 1 windows are always valid)
)

// MW is a memory window.
type MW struct {
	pd  *PD
	typ verbs.MWType

	mu     sync.Mutex
	key    uint32 // also changed under dev.keys.mu
	next   uint32 // the rkey the last Bind handed out
	state  mwState
	mr     *MR
	addr   uint64
	length uint64
	access verbs.AccessFlags
	qp     *QP // type 2: the QP that bound it
}

var _ verbs.MW = (*MW)(nil)
var _ verbs.MWPD = (*PD)(nil)

// isMWKey reports whether key names a window: window indices are the
// upper half of the 24-bit index space (mr.go's mrIndexMask).
func isMWKey(key uint32) bool { return key&(1<<31) != 0 }

// AllocMW allocates a memory window (rxe_alloc_mw): a type 2 window starts
// free, a type 1 window valid with nothing bound.
func (pd *PD) AllocMW(typ verbs.MWType) (verbs.MW, error) {
	if err := pd.check(); err != nil {
		return nil, err
	}
	if typ != verbs.MWType1 && typ != verbs.MWType2 {
		return nil, fmt.Errorf("rxe: alloc MW: type %v: %w", typ, verbs.ErrInvalidArgument)
	}
	mw := &MW{pd: pd, typ: typ, state: mwValid}
	if typ == verbs.MWType2 {
		mw.state = mwFree
	}
	t := &pd.dev.keys
	t.mu.Lock()
	if t.mws == nil {
		t.mws = make(map[uint32]*MW)
	}
	if len(t.mws) >= MaxMW {
		t.mu.Unlock()
		return nil, fmt.Errorf("rxe: alloc MW: %d windows: %w", MaxMW, verbs.ErrResourceLimit)
	}
	for {
		t.nextMW = (t.nextMW + 1) & mrIndexMask
		if _, used := t.mws[t.nextMW|^mrIndexMask&keyIndexMask]; !used {
			break
		}
	}
	idx := t.nextMW | ^mrIndexMask&keyIndexMask
	mw.key = idx<<8 | uint32(rand.N(256))
	mw.next = mw.key
	t.mws[idx] = mw
	t.mu.Unlock()
	pd.users.Add(1)
	return mw, nil
}

// Type is the window type.
func (mw *MW) Type() verbs.MWType { return mw.typ }

// RKey is the window's current rkey (the key byte of the last executed
// bind).
func (mw *MW) RKey() uint32 {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.key
}

// Query returns the current binding and rkey.
func (mw *MW) Query() (verbs.MWBind, uint32, error) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.state == mwInvalid {
		return verbs.MWBind{}, 0, verbs.ErrClosed
	}
	b := verbs.MWBind{Addr: mw.addr, Length: mw.length, Access: mw.access}
	if mw.mr != nil {
		b.MR = mw.mr
	}
	return b, mw.key, nil
}

// Bind binds a type 1 window by posting a bind work request on qp
// (rdma-core's rxe_bind_mw): it returns the rkey the window has once the
// request executes. A failed bind completes with MW_BIND_ERR and moves the
// QP to the error state, as in rxe.
func (mw *MW) Bind(qp verbs.QP, id uint64, flags verbs.SendFlags, b verbs.MWBind) (uint32, error) {
	if mw.typ != verbs.MWType1 {
		return 0, fmt.Errorf("rxe: bind MW: type %v is bound by a BIND_MW work request: %w", mw.typ, verbs.ErrInvalidArgument)
	}
	if b.MR == nil && (b.Addr != 0 || b.Length != 0) {
		return 0, fmt.Errorf("rxe: bind MW: a range without an MR: %w", verbs.ErrInvalidArgument)
	}
	if b.Access&verbs.AccessZeroBased != 0 {
		return 0, fmt.Errorf("rxe: bind MW: type 1 windows are not zero based: %w", verbs.ErrInvalidArgument)
	}
	if b.MR != nil {
		if mr, ok := b.MR.(*MR); !ok || mr.pd != mw.pd {
			return 0, fmt.Errorf("rxe: bind MW: MR of another PD: %w", verbs.ErrInvalidArgument)
		}
	}
	mw.mu.Lock()
	key := verbs.IncKey(mw.next)
	mw.mu.Unlock()
	wr := verbs.SendWR{ID: id, Opcode: verbs.WRBindMW, Flags: flags, BindMW: verbs.BindWR{MW: mw, RKey: key, Bind: b}}
	if _, err := qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return 0, err
	}
	mw.mu.Lock()
	mw.next = key
	mw.mu.Unlock()
	return key, nil
}

// Dealloc frees the window; its rkey stops working at once.
func (mw *MW) Dealloc() error {
	t := &mw.pd.dev.keys
	t.mu.Lock()
	mw.mu.Lock()
	if mw.state == mwInvalid {
		mw.mu.Unlock()
		t.mu.Unlock()
		return verbs.ErrClosed
	}
	delete(t.mws, mw.key>>8)
	mw.unbindLocked()
	mw.state = mwInvalid
	mw.mu.Unlock()
	t.mu.Unlock()
	mw.pd.users.Add(-1)
	return nil
}

// unbindLocked drops the window's MR and QP.
func (mw *MW) unbindLocked() {
	if mw.mr != nil {
		mw.mr.numMW.Add(-1)
	}
	mw.mr, mw.qp = nil, nil
	mw.addr, mw.length, mw.access = 0, 0, 0
}

// bind executes a BIND_MW work request of q (rxe_bind_mw and
// rxe_check_bind_mw).
func (q *QP) bind(wr *verbs.BindWR) bool {
	mw, ok := wr.MW.(*MW)
	if !ok || mw.pd.dev != q.dev {
		return false
	}
	var mr *MR
	if wr.Bind.Length > 0 {
		if mr, ok = wr.Bind.MR.(*MR); !ok || mr.pd.dev != q.dev || !mr.valid.Load() {
			return false
		}
	}
	access := wr.Bind.Access
	if access&^mwSupportedAccess != 0 {
		return false
	}
	t := &q.dev.keys
	t.mu.Lock()
	defer t.mu.Unlock()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	switch mw.typ {
	case verbs.MWType1:
		if mw.state != mwValid || access&verbs.AccessZeroBased != 0 { // o10-36.2.2
			return false
		}
	case verbs.MWType2:
		// o10-37.2.30, C10-72, o10-37.2.40
		if mw.state != mwFree || q.pd != mw.pd || mr == nil {
			return false
		}
	}
	if mr != nil {
		m := mr.m.Load()
		if m.pd != mw.pd || m.access&verbs.AccessZeroBased != 0 || m.access&verbs.AccessMWBind == 0 { // C10-73
			return false
		}
		if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && m.access&verbs.AccessLocalWrite == 0 { // C10-74
			return false
		}
		if !m.inRange(wr.Bind.Addr, wr.Bind.Length) { // C10-75
			return false
		}
	}
	mw.unbindLocked()
	mw.key = mw.key&^0xFF | wr.RKey&0xFF
	mw.state = mwValid
	mw.addr, mw.length, mw.access = wr.Bind.Addr, wr.Bind.Length, access
	if mw.length > 0 {
		mw.mr = mr
		mr.numMW.Add(1)
	}
	if mw.typ == verbs.MWType2 {
		mw.qp = q
	}
	return true
}

// invalidateMW invalidates a type 2 window (rxe_invalidate_mw); type 1
// windows cannot be invalidated (o10-37.2.26).
func (t *keyTable) invalidateMW(q *QP, key uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	mw := t.mws[key>>8]
	if mw == nil {
		return false
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.key != key || mw.state == mwInvalid || mw.typ != verbs.MWType2 || mw.pd != q.pd {
		return false
	}
	mw.unbindLocked()
	mw.state = mwFree
	return true
}

// lookupMW resolves a window rkey for a remote access (rxe_lookup_mw plus
// the window range): the window must be valid, of q's PD, bound by q if
// type 2, grant need, and hold [va, va+n) (offsets from 0 for a
// zero-based window).
func (t *keyTable) lookupMW(q *QP, rkey uint32, need verbs.AccessFlags, va uint64, n uint32) (*MR, *mrMap, uint64) {
	t.mu.RLock()
	mw := t.mws[rkey>>8]
	t.mu.RUnlock()
	if mw == nil {
		return nil, nil, 0
	}
	mw.mu.Lock()
	if mw.key != rkey || mw.state != mwValid || mw.pd != q.pd || (mw.typ == verbs.MWType2 && mw.qp != q) ||
		mw.length == 0 || mw.access&need != need || mw.mr == nil {
		mw.mu.Unlock()
		return nil, nil, 0
	}
	tva := va
	if mw.access&verbs.AccessZeroBased != 0 {
		if va > mw.length || uint64(n) > mw.length-va {
			mw.mu.Unlock()
			return nil, nil, 0
		}
		tva = mw.addr + va
	} else if va < mw.addr || va-mw.addr > mw.length || uint64(n) > mw.length-(va-mw.addr) {
		mw.mu.Unlock()
		return nil, nil, 0
	}
	mr := mw.mr
	mw.mu.Unlock()
	if !mr.valid.Load() {
		return nil, nil, 0
	}
	m := mr.m.Load()
	if !m.inRange(tva, uint64(n)) {
		return nil, nil, 0
	}
	return mr, m, tva
}
