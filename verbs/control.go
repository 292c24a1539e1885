package verbs

import (
	"errors"
	"fmt"
	"sync"
)

// ErrNotFound: FindGID or FindPKey found no such entry.
var ErrNotFound = errors.New("verbs: not found")

// Control-path verbs that not every provider has: each is an optional
// interface with a function that reports ErrNotSupported for providers
// without it, as AttachMcast does.

// DeviceModifyMask selects DeviceModify fields (ib_device_modify_flags).
type DeviceModifyMask uint8

// Device modify mask bits, numbered as the kernel's.
const (
	DeviceModifySysImageGUID DeviceModifyMask = 1 << 0
	DeviceModifyNodeDesc     DeviceModifyMask = 1 << 1
)

// NodeDescMax is the length limit of a node description
// (IB_DEVICE_NODE_DESC_MAX).
const NodeDescMax = 64

// DeviceModify are the modifiable device attributes (ib_device_modify).
type DeviceModify struct {
	SysImageGUID uint64
	NodeDesc     string
}

// PortModifyMask selects what ModifyPort does (ib_port_modify_flags).
type PortModifyMask uint8

// Port modify mask bits, numbered as the kernel's.
const (
	PortShutdown      PortModifyMask = 1 << 0
	PortInitType      PortModifyMask = 1 << 2
	PortResetQKeyCntr PortModifyMask = 1 << 3
)

// PortModify are the port capability bits to set and clear
// (ib_port_modify); InitType is for PortInitType.
type PortModify struct {
	SetPortCapMask uint32
	ClrPortCapMask uint32
	InitType       uint8
}

// DeviceModifier is implemented by devices whose attributes and ports can
// be modified (ib_modify_device, ib_modify_port).
type DeviceModifier interface {
	// ModifyDevice changes the attributes mask selects.
	ModifyDevice(mask DeviceModifyMask, attr *DeviceModify) error
	// ModifyPort sets and clears port capability bits (always) and does
	// what mask asks; ErrNotSupported for what the port cannot do.
	ModifyPort(port uint8, mask PortModifyMask, attr *PortModify) error
	// NodeDesc returns the node description.
	NodeDesc() string
}

// ModifyDevice changes dev's attributes (ib_modify_device).
func ModifyDevice(dev Device, mask DeviceModifyMask, attr *DeviceModify) error {
	m, ok := dev.(DeviceModifier)
	if !ok {
		return fmt.Errorf("verbs: modify device: %w", ErrNotSupported)
	}
	return m.ModifyDevice(mask, attr)
}

// ModifyPort changes a port of dev (ib_modify_port).
func ModifyPort(dev Device, port uint8, mask PortModifyMask, attr *PortModify) error {
	m, ok := dev.(DeviceModifier)
	if !ok {
		return fmt.Errorf("verbs: modify port: %w", ErrNotSupported)
	}
	return m.ModifyPort(port, mask, attr)
}

// CQPeeker is implemented by CQs that can count their completions
// without consuming them (ib_peek_cq).
type CQPeeker interface {
	// Peek returns how many completions are queued, at most n.
	Peek(n int) int
}

// PeekCQ returns the number of completions queued on cq, at most n
// (ib_peek_cq).
func PeekCQ(cq CQ, n int) (int, error) {
	p, ok := cq.(CQPeeker)
	if !ok {
		return 0, fmt.Errorf("verbs: peek CQ: %w", ErrNotSupported)
	}
	return p.Peek(n), nil
}

// FindGID returns the port and index of gid in dev's GID tables
// (ib_find_gid); ErrNotFound if no port has it.
func FindGID(dev Device, gid GID) (port uint8, index int, err error) {
	n := dev.Query().PhysPortCnt
	for p := uint8(1); p <= n; p++ {
		tbl, err := dev.GIDTable(p)
		if err != nil {
			return 0, 0, err
		}
		for _, e := range tbl {
			if e.GID == gid {
				return p, e.Index, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("verbs: GID %v: %w", gid, ErrNotFound)
}

// FindPKey returns the index of pkey in a port's P_Key table
// (ib_find_pkey): an exact match, else a match of the low 15 bits (a
// limited-member entry for a full-member key), as the kernel does.
func FindPKey(dev Device, port uint8, pkey uint16) (int, error) {
	pa, err := dev.QueryPort(port)
	if err != nil {
		return 0, err
	}
	partial := -1
	for i := range int(pa.PKeyTblLen) {
		k, err := dev.QueryPKey(port, i)
		if err != nil {
			return 0, err
		}
		if k == pkey {
			return i, nil
		}
		if partial < 0 && k&0x7FFF == pkey&0x7FFF && k != 0 {
			partial = i
		}
	}
	if partial >= 0 {
		return partial, nil
	}
	return 0, fmt.Errorf("verbs: P_Key %#x: %w", pkey, ErrNotFound)
}

// EventFanout hands a device's asynchronous events to several
// consumers (the kernel's ib_register_event_handler list): each
// Subscribe gets every event raised after it, on its own buffered
// channel; a consumer that does not keep up loses its oldest events,
// counted in Dropped, without holding up the others.
type EventFanout struct {
	mu      sync.Mutex
	subs    map[chan AsyncEvent]struct{}
	dropped uint64
	done    chan struct{}
}

// NewEventFanout starts reading dev.Events(); the device's channel then
// belongs to the fanout. It stops when the channel closes or Close is
// called.
func NewEventFanout(dev Device) *EventFanout {
	f := &EventFanout{subs: map[chan AsyncEvent]struct{}{}, done: make(chan struct{})}
	go f.run(dev.Events())
	return f
}

func (f *EventFanout) run(in <-chan AsyncEvent) {
	for {
		select {
		case <-f.done:
			return
		case e, ok := <-in:
			if !ok {
				f.Close()
				return
			}
			f.mu.Lock()
			for c := range f.subs {
				for {
					select {
					case c <- e:
					default:
						select { // full: drop its oldest
						case <-c:
							f.dropped++
						default:
						}
						continue
					}
					break
				}
			}
			f.mu.Unlock()
		}
	}
}

// Subscribe returns a channel of buffer size that receives every event
// from now on; it is closed by Unsubscribe or Close.
func (f *EventFanout) Subscribe(size int) <-chan AsyncEvent {
	c := make(chan AsyncEvent, max(size, 1))
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.done:
		close(c)
	default:
		f.subs[c] = struct{}{}
	}
	return c
}

// Unsubscribe stops and closes a channel Subscribe returned.
func (f *EventFanout) Unsubscribe(c <-chan AsyncEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if (<-chan AsyncEvent)(s) == c {
			delete(f.subs, s)
			close(s)
		}
	}
}

// Dropped returns how many events consumers lost by not keeping up.
func (f *EventFanout) Dropped() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}

// Close stops the fanout and closes every subscriber's channel.
func (f *EventFanout) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.done:
		return
	default:
	}
	close(f.done)
	for s := range f.subs {
		delete(f.subs, s)
		close(s)
	}
}

// QPDrainer is implemented by QPs that drain their send and receive
// queues separately (ib_drain_sq, ib_drain_rq).
type QPDrainer interface {
	// DrainSQ moves the QP to ERR and returns once every send work
	// request has completed (flushed if unfinished).
	DrainSQ() error
	// DrainRQ moves the QP to ERR and returns once every receive work
	// request has completed. For a QP on an SRQ it returns once the QP
	// holds no receive WQE, after the LAST_WQE_REACHED event.
	DrainRQ() error
}

// DrainSQ drains qp's send queue (ib_drain_sq).
func DrainSQ(qp QP) error {
	d, ok := qp.(QPDrainer)
	if !ok {
		return fmt.Errorf("verbs: drain SQ: %w", ErrNotSupported)
	}
	return d.DrainSQ()
}

// DrainRQ drains qp's receive queue (ib_drain_rq).
func DrainRQ(qp QP) error {
	d, ok := qp.(QPDrainer)
	if !ok {
		return fmt.Errorf("verbs: drain RQ: %w", ErrNotSupported)
	}
	return d.DrainRQ()
}

// QPLister is implemented by devices that can list their QPs (the
// kernel's rdma_restrack iteration over a device's QPs).
type QPLister interface {
	// QPs returns the device's live QPs, GSI included, in QPN order.
	QPs() []QP
}

// DeviceQPs returns dev's live QPs in QPN order.
func DeviceQPs(dev Device) ([]QP, error) {
	l, ok := dev.(QPLister)
	if !ok {
		return nil, fmt.Errorf("verbs: list QPs: %w", ErrNotSupported)
	}
	return l.QPs(), nil
}

// AHQuerier is implemented by AHs that report their PD (rdma_query_ah
// and the AH's pd).
type AHQuerier interface {
	PD() PD
}

// QueryAH returns ah's address vector and PD (rdma_query_ah).
func QueryAH(ah AH) (AHAttr, PD, error) {
	q, ok := ah.(AHQuerier)
	if !ok {
		return AHAttr{}, nil, fmt.Errorf("verbs: query AH: %w", ErrNotSupported)
	}
	return ah.Attr(), q.PD(), nil
}

// AHModifier is implemented by AHs whose address vector can be changed
// in place (ib_ci.h's modify_av, the kernel's rdma_modify_ah).
type AHModifier interface {
	// Modify replaces the address vector. UD work requests posted
	// afterwards go to the new address; those already posted keep the
	// one they were posted with. Attributes the AH could not be created
	// with are refused (ErrInvalidArgument) and leave it unchanged.
	Modify(attr *AHAttr) error
}

// ModifyAH changes ah's address vector (modify_av, rdma_modify_ah);
// ErrNotSupported when the provider cannot (libibverbs has no such verb,
// and Linux rxe implements no modify_ah).
func ModifyAH(ah AH, attr *AHAttr) error {
	m, ok := ah.(AHModifier)
	if !ok {
		return fmt.Errorf("verbs: modify AH: %w", ErrNotSupported)
	}
	if attr == nil {
		return fmt.Errorf("verbs: modify AH: nil attributes: %w", ErrInvalidArgument)
	}
	return m.Modify(attr)
}
