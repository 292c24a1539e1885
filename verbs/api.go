package verbs

import (
	"fmt"
	"sort"
	"sync"
)

// Device is an open RDMA device (ibv_context). Port numbers start at 1.
type Device interface {
	// Name is the device name, e.g. "rxe0".
	Name() string
	// Query returns the device attributes.
	Query() DeviceAttr
	// QueryPort returns a port's attributes.
	QueryPort(port uint8) (PortAttr, error)
	// QueryGID returns the GID at index of port's table; an unpopulated
	// index yields the zero GID.
	QueryGID(port uint8, index int) (GID, error)
	// GIDTable lists the populated GID table entries of port.
	GIDTable(port uint8) ([]GIDEntry, error)
	// QueryPKey returns the P_Key at index of port's table.
	QueryPKey(port uint8, index int) (uint16, error)
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue.
	CreateCQ(attr CQAttr) (CQ, error)
	// Events delivers asynchronous events (ibv_get_async_event). The
	// channel is buffered; when the application does not keep up, the
	// oldest events are dropped and counted.
	Events() <-chan AsyncEvent
	// Close releases the device. Objects still alive are destroyed and
	// their QPs flushed.
	Close() error
}

// PD is a protection domain (ibv_pd).
type PD interface {
	// Device returns the device the PD belongs to.
	Device() Device
	// RegMR registers buf for access as an MR with the given rights.
	// REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE, as in IBA.
	RegMR(buf []byte, access AccessFlags) (MR, error)
	// CreateQP creates a queue pair in the RESET state.
	CreateQP(attr *QPInitAttr) (QP, error)
	// CreateSRQ creates a shared receive queue.
	CreateSRQ(attr *SRQInitAttr) (SRQ, error)
	// CreateAH creates an address handle for UD sends.
	CreateAH(attr *AHAttr) (AH, error)
	// Dealloc frees the PD; ErrBusy while objects still use it.
	Dealloc() error
}

// MR is a registered memory region (ibv_mr).
type MR interface {
	// Addr is the virtual address of the first byte (the address peers
	// use in RDMA requests).
	Addr() uint64
	// Len is the length in bytes.
	Len() int
	// LKey is the local key used in SGEs.
	LKey() uint32
	// RKey is the remote key peers use in RDMA and atomic requests.
	RKey() uint32
	// Access returns the access rights.
	Access() AccessFlags
	// Buf returns the registered memory.
	Buf() []byte
	// SGE returns the SGE covering length bytes at offset off in the MR.
	SGE(off, length int) SGE
	// Dereg deregisters the MR. Its keys become invalid at once and are
	// not handed out again while a stale key could still arrive.
	Dereg() error
}

// CQ is a completion queue (ibv_cq).
type CQ interface {
	// Poll moves up to len(wcs) completions into wcs and returns how many.
	// It never blocks. It returns ErrCQOverrun once the CQ overflowed.
	Poll(wcs []WC) (int, error)
	// ReqNotify arms the CQ: the next completion (or the next solicited
	// or error one when solicitedOnly) signals the CQ's completion channel
	// once.
	ReqNotify(solicitedOnly bool) error
	// Resize changes the capacity to at least cqe entries; it fails with
	// ErrInvalidArgument if fewer than the queued completions.
	Resize(cqe int) error
	// CQE returns the current capacity.
	CQE() int
	// Channel returns the completion channel given at creation, or nil.
	Channel() *CompChannel
	// Context returns CQAttr.Context.
	Context() any
	// Destroy frees the CQ; ErrBusy while QPs use it.
	Destroy() error
}

// QP is a queue pair (ibv_qp).
type QP interface {
	// QPN is the queue pair number.
	QPN() uint32
	// Type is the transport service.
	Type() QPType
	// State is the current state.
	State() QPState
	// Modify applies the attributes selected by mask, following the IBA
	// transition rules (see ModifyCheck). Illegal transitions or masks
	// return ErrQPState or ErrInvalidAttr and change nothing.
	Modify(attr *QPAttr, mask QPAttrMask) error
	// Query returns the current attributes and the creation attributes.
	Query() (QPAttr, QPInitAttr, error)
	// PostSend posts send work requests in order and returns how many were
	// accepted; on error, wrs[n] is the first one rejected (the bad_wr of
	// ibv_post_send) and none after it was posted.
	PostSend(wrs []SendWR) (int, error)
	// PostRecv posts receive work requests, like PostSend. It fails with
	// ErrInvalidArgument on a QP attached to an SRQ.
	PostRecv(wrs []RecvWR) (int, error)
	// Drain moves the QP to ERR and returns once every outstanding work
	// request has completed (with WR_FLUSH_ERR if it had not finished),
	// like ib_drain_qp. The completions still go to the CQs.
	Drain() error
	// Context returns QPInitAttr.Context.
	Context() any
	// Destroy frees the QP.
	Destroy() error
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ interface {
	// PostRecv posts receive work requests to the SRQ.
	PostRecv(wrs []RecvWR) (int, error)
	// Modify changes MaxWR (resize) and/or arms the limit.
	Modify(attr SRQAttr, mask SRQAttrMask) error
	// Query returns the current attributes.
	Query() (SRQAttr, error)
	// Context returns SRQInitAttr.Context.
	Context() any
	// Destroy frees the SRQ; ErrBusy while QPs use it.
	Destroy() error
}

// AH is an address handle (ibv_ah).
type AH interface {
	// Attr returns the address vector.
	Attr() AHAttr
	// Destroy frees the AH.
	Destroy() error
}

// Provider opens devices; a provider is the software (or hardware) that
// implements the interfaces above, as ib_ci.h's channel interface does.
type Provider interface {
	// Open creates a device as cfg describes.
	Open(cfg DeviceConfig) (Device, error)
}

var (
	providersMu sync.Mutex
	providers   = map[string]Provider{}
	firstName   string
)

// Register makes a provider available under name. It is meant to be
// called from a provider package's init function and panics on a
// duplicate name.
func Register(name string, p Provider) {
	providersMu.Lock()
	defer providersMu.Unlock()
	if _, dup := providers[name]; dup {
		panic("verbs: provider registered twice: " + name)
	}
	providers[name] = p
	if firstName == "" {
		firstName = name
	}
}

// Providers returns the registered provider names, sorted.
func Providers() []string {
	providersMu.Lock()
	defer providersMu.Unlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lister is implemented by providers whose devices exist apart from the
// process (a kernel's RDMA devices), so that tools can list them as
// ibv_devices does. softib's Soft-RoCE devices exist only once opened.
type Lister interface {
	DeviceNames() ([]string, error)
}

// DeviceNames lists the devices of the named provider, or ErrNotSupported
// when it has no standing devices to list.
func DeviceNames(provider string) ([]string, error) {
	providersMu.Lock()
	p, ok := providers[provider]
	providersMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoProvider, provider)
	}
	l, ok := p.(Lister)
	if !ok {
		return nil, fmt.Errorf("%w: provider %q has no standing devices to list", ErrNotSupported, provider)
	}
	return l.DeviceNames()
}

// Open opens a device with the provider cfg.Provider names (the first
// registered one when empty).
func Open(cfg DeviceConfig) (Device, error) {
	providersMu.Lock()
	name := cfg.Provider
	if name == "" {
		name = firstName
	}
	p, ok := providers[name]
	providersMu.Unlock()
	if !ok {
		if name == "" {
			return nil, fmt.Errorf("%w: none registered (import _ \"softib/rxe\")", ErrNoProvider)
		}
		return nil, fmt.Errorf("%w: %q", ErrNoProvider, name)
	}
	d, err := p.Open(cfg)
	if err == nil {
		announce(d) // registry.go
	}
	return d, err
}
