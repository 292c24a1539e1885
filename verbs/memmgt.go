package verbs

import "fmt"

// Memory management extensions: fast-registration MRs and memory windows
// (IBTA Vol 1 §10.6.7-10.6.9, the kernel's ib_alloc_mr/ib_map_mr_sg and
// ib_alloc_mw). They are optional interfaces, so a provider without them
// keeps compiling and callers ask with AllocMR/AllocMW, which return
// ErrNotSupported for such a provider.

// Device capability flags (ibv_device_cap_flags) a caller checks in
// DeviceAttr.DeviceCapFlags before using the extensions.
const (
	// DeviceMemWindow: type 1 memory windows.
	DeviceMemWindow uint64 = 1 << 17
	// DeviceMemMgtExtensions: fast registration (AllocMR, MapMRSG,
	// WRRegMR) and local/remote invalidation.
	DeviceMemMgtExtensions uint64 = 1 << 21
	// DeviceMemWindowType2B: type 2B memory windows (bound by WRBindMW,
	// owned by one QP).
	DeviceMemWindowType2B uint64 = 1 << 24
)

// WRRegMR is the fast-registration work request (IB_WR_REG_MR): it makes
// SendWR.Reg.MR valid with the page list of its last MapMRSG, the key in
// Reg.Key and the rights in Reg.Access. The kernel numbers it 0x20, outside
// libibverbs' user opcodes.
const WRRegMR WROpcode = 0x20

// WCRegMR is the completion opcode of WRRegMR (IB_WC_REG_MR).
const WCRegMR WCOpcode = 10

// MRType is the kind of MR AllocMR creates (ib_mr_type).
type MRType uint8

// MR types. Linux rxe supports only MRTypeMemReg.
const (
	// MRTypeMemReg: page-list registration; every element of a mapped
	// scatter list but the first starts on a page boundary and every one
	// but the last ends on one.
	MRTypeMemReg MRType = iota
	// MRTypeSGGaps: arbitrary scatter lists (IB_MR_TYPE_SG_GAPS).
	MRTypeSGGaps
	// MRTypeIntegrity: signature/integrity MRs (IB_MR_TYPE_INTEGRITY).
	MRTypeIntegrity
)

func (t MRType) String() string {
	switch t {
	case MRTypeMemReg:
		return "MEM_REG"
	case MRTypeSGGaps:
		return "SG_GAPS"
	case MRTypeIntegrity:
		return "INTEGRITY"
	}
	return fmt.Sprintf("MRType(%d)", uint8(t))
}

// FastRegMR is an MR allocated by AllocMR (ib_alloc_mr): it starts invalid
// (its keys match no access) and becomes valid through a WRRegMR work
// request after MapMRSG; LOCAL_INV or a peer's SEND_WITH_INV makes it
// invalid again, and the next WRRegMR may give it a new key byte.
type FastRegMR interface {
	MR
	// MaxSG is the page-list capacity given to AllocMR.
	MaxSG() int
	// MapMRSG maps the scatter list onto the MR's page list
	// (ib_map_mr_sg): every element names registered memory of the same
	// PD by lkey; sgOffset skips bytes of the first element. The MR's
	// IOVA becomes the first mapped byte's address and its length the
	// mapped bytes. It returns how many elements were mapped: fewer than
	// len(sgl) when the page list is full or an element would leave a gap
	// inside a page (the caller registers the rest with another MR). The
	// MR must be invalid (ErrInvalidArgument otherwise, as the page list
	// of a valid MR is in use).
	MapMRSG(sgl []SGE, sgOffset uint32, pageSize int) (int, error)
	// IOVA is the address the next (or current) registration starts at;
	// SetIOVA moves it, as a kernel ULP writes mr->iova after mapping.
	IOVA() uint64
	SetIOVA(iova uint64)
	// Valid reports whether the MR is registered (between a successful
	// WRRegMR and its invalidation).
	Valid() bool
}

// MemMgtPD is the optional PD interface of providers with fast
// registration.
type MemMgtPD interface {
	AllocMR(typ MRType, maxSG int) (FastRegMR, error)
}

// AllocMR allocates a fast-registration MR of pd with room for maxSG
// pages (ib_alloc_mr); ErrNotSupported when the provider has none.
func AllocMR(pd PD, typ MRType, maxSG int) (FastRegMR, error) {
	p, ok := pd.(MemMgtPD)
	if !ok {
		return nil, fmt.Errorf("verbs: alloc MR: %w", ErrNotSupported)
	}
	return p.AllocMR(typ, maxSG)
}

// IncKey returns key with its low (key) byte incremented, as
// ib_inc_rkey/ibv_inc_rkey do before a re-registration or rebind.
func IncKey(key uint32) uint32 { return key&^0xFF | (key+1)&0xFF }

// RegWR is the fast-registration part of a WRRegMR send work request
// (ib_reg_wr).
type RegWR struct {
	MR     FastRegMR
	Key    uint32 // the MR's key with the new key byte
	Access AccessFlags
}

// MWType is a memory window type (ib_mw_type).
type MWType uint8

// Memory window types.
const (
	// MWType1 is bound with MW.Bind and invalidated only by rebinding
	// with length 0 or by deallocation.
	MWType1 MWType = 1
	// MWType2 (2B) is bound with a WRBindMW work request, used only by
	// the QP that bound it, and invalidated by LOCAL_INV or SEND_WITH_INV.
	MWType2 MWType = 2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "1"
	case MWType2:
		return "2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// MWBind describes a window binding (ibv_mw_bind_info): Length bytes at
// Addr inside MR (MR needs AccessMWBind), with Access among REMOTE_READ,
// REMOTE_WRITE, REMOTE_ATOMIC and ZERO_BASED. Length 0 unbinds a type 1
// window.
type MWBind struct {
	MR     MR
	Addr   uint64
	Length uint64
	Access AccessFlags
}

// BindWR is the binding part of a WRBindMW send work request
// (ibv_send_wr.bind_mw): the window, its rkey with the new key byte, and
// the binding.
type BindWR struct {
	MW   MW
	RKey uint32
	Bind MWBind
}

// MW is a memory window (ibv_mw).
type MW interface {
	// Type is the window type.
	Type() MWType
	// RKey is the window's current rkey (0 bits never change but the key
	// byte, which each bind sets).
	RKey() uint32
	// Bind binds a type 1 window through qp (ibv_bind_mw): it posts a
	// bind work request with id and flags (its completion is WCBindMW
	// when signaled) and returns the rkey the window has once it
	// executes. ErrInvalidArgument for a type 2 window.
	Bind(qp QP, id uint64, flags SendFlags, b MWBind) (uint32, error)
	// Query returns the window's current binding (zero Length when
	// unbound or invalidated) and rkey.
	Query() (MWBind, uint32, error)
	// Dealloc frees the window; its rkey stops working at once.
	Dealloc() error
}

// MWPD is the optional PD interface of providers with memory windows.
type MWPD interface {
	AllocMW(typ MWType) (MW, error)
}

// AllocMW allocates a memory window of pd (ibv_alloc_mw); ErrNotSupported
// when the provider has none.
func AllocMW(pd PD, typ MWType) (MW, error) {
	p, ok := pd.(MWPD)
	if !ok {
		return nil, fmt.Errorf("verbs: alloc MW: %w", ErrNotSupported)
	}
	return p.AllocMW(typ)
}

// RereggableMR is the optional MR interface for re-registration
// (ibv_rereg_mr).
type RereggableMR interface {
	// Rereg changes what flags selects: the PD, the access rights, or
	// the memory (buf). The keys stay the same. It fails with ErrBusy
	// while memory windows are bound to the MR.
	Rereg(flags ReregFlags, pd PD, buf []byte, access AccessFlags) error
}

// ReregFlags select what Rereg changes (ibv_rereg_mr_flags).
type ReregFlags uint8

// Re-registration flags, numbered as ibv_rereg_mr_flags.
const (
	ReregTranslation ReregFlags = 1 << 0 // buf
	ReregPD          ReregFlags = 1 << 1
	ReregAccess      ReregFlags = 1 << 2
)

// Rereg re-registers mr (ibv_rereg_mr); ErrNotSupported when the provider
// cannot.
func Rereg(mr MR, flags ReregFlags, pd PD, buf []byte, access AccessFlags) error {
	r, ok := mr.(RereggableMR)
	if !ok {
		return fmt.Errorf("verbs: rereg MR: %w", ErrNotSupported)
	}
	return r.Rereg(flags, pd, buf, access)
}

// SharedMRPD is the optional PD interface of providers with shared
// memory regions (ib_ci.h's register_smr, IBA's Register Shared Memory
// Region).
type SharedMRPD interface {
	// RegSharedMR registers a new MR of this PD over the memory mr
	// registers: its own keys, access rights and start address vaddr
	// (the returned MR's Addr). The two are independent from then on:
	// deregistering either leaves the other valid.
	RegSharedMR(mr MR, access AccessFlags, vaddr uint64) (MR, error)
}

// RegSharedMR registers the memory of mr again, in pd, with its own keys
// and access, starting at address vaddr (ib_ci.h register_smr; 0 with
// AccessZeroBased for a zero-based region). The checks are those of
// RegMR (REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE); mr must be a
// valid MR of pd's device with memory of its own (not a fast-reg MR).
// ErrNotSupported when the provider has no shared MRs.
func RegSharedMR(pd PD, mr MR, access AccessFlags, vaddr uint64) (MR, error) {
	p, ok := pd.(SharedMRPD)
	if !ok {
		return nil, fmt.Errorf("verbs: register shared MR: %w", ErrNotSupported)
	}
	if mr == nil {
		return nil, fmt.Errorf("verbs: register shared MR: nil MR: %w", ErrInvalidArgument)
	}
	return p.RegSharedMR(mr, access, vaddr)
}
