package rdmacm

import (
	"fmt"
	"net/netip"
	"time"

	"softib/verbs"
)

// Kernel RDMA devices (the ibverbs provider, build tag ibverbs) have their
// connection manager in the kernel: a Manager whose devices are kernel
// devices runs every ID through librdmacm (kernel_ibverbs.go) instead of
// softib's IB CM, with the same Go API, so rping, perftest -R and LND code
// run unchanged on a ConnectX or on the kernel's rdma_rxe.
//
// The QPs stay the application's (created on the ibverbs device's own
// context): librdmacm is used as rdma-core's manual-QP mode does it,
// advertising the QP number in the REQ/REP and moving the QP with the
// attributes rdma_init_qp_attr returns.

// KernelDevice is implemented by verbs devices that are kernel RDMA
// devices; it returns the kernel's device name (e.g. "rxe0", "mlx5_0").
type KernelDevice interface {
	KernelDevice() string
}

// kernelBackend is the kernel's RDMA CM; nil in builds without it.
var kernelBackend func(m *Manager) (kernelCM, error)

// kernelCM is one Manager's librdmacm event channel.
type kernelCM interface {
	newID(id *ID, ps PortSpace, t verbs.QPType) (kernelID, error)
	close()
}

// kernelID is one rdma_cm_id. Calls that complete asynchronously report
// through events the backend delivers with (*ID).kernelEvent.
type kernelID interface {
	bind(a netip.AddrPort) error
	resolveAddr(src, dst netip.AddrPort, timeout time.Duration) error
	resolveRoute(timeout time.Duration) error
	listen(backlog int) error
	connect(p *ConnParam) error
	accept(p *ConnParam) error
	reject(privateData []byte) error
	establish() error
	disconnect() error
	setTOS(tos uint8) error
	initQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error)
	addrs() (local, remote netip.AddrPort)
	deviceName() string
	destroy() error
}

// addKernelDevice makes dev (a kernel device) one of the manager's; a
// manager serves kernel devices or softib devices, not both.
func (m *Manager) addKernelDevice(dev verbs.Device, kd KernelDevice) error {
	if kernelBackend == nil {
		return fmt.Errorf("rdmacm: %s is a kernel RDMA device, and this build has no librdmacm backend (build with -tags ibverbs): %w", kd.KernelDevice(), verbs.ErrNotSupported)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		pd.Dealloc()
		return ErrClosed
	}
	if len(m.devs) > 0 {
		pd.Dealloc()
		return fmt.Errorf("rdmacm: a manager serves softib devices or kernel devices, not both (use a second Manager): %w", ErrInvalid)
	}
	if m.kern == nil {
		k, err := kernelBackend(m)
		if err != nil {
			pd.Dealloc()
			return err
		}
		m.kern = k
		m.kdevs = map[string]*device{}
	}
	m.kdevs[kd.KernelDevice()] = &device{dev: dev, pd: pd}
	return nil
}

// kernelDeviceLocked returns the manager's device of a kernel name (m.mu
// held).
func (m *Manager) kernelDeviceLocked(name string) *device { return m.kdevs[name] }

// kernelEvent delivers an event of the kernel CM for id: it keeps the ID's
// state and device in step (so State, Device, PD, LocalAddr work as on
// softib), moves the ID's QP where librdmacm would have, and queues the
// event. It runs on the backend's event goroutine.
func (id *ID) kernelEvent(e *Event) {
	id.mu.Lock()
	switch e.Type {
	case EventAddrResolved:
		id.state = StateAddrResolved
		id.kernelRefreshLocked()
	case EventAddrError:
		id.state = StateAddrBound
	case EventRouteResolved:
		id.state = StateRouteResolved
		id.kernelRefreshLocked()
	case EventRouteError:
		id.state = StateAddrResolved
	case EventConnectRequest:
		// e.ID is the new passive ID (set up by the backend).
	case EventConnectResponse:
		// The peer accepted: with a QP of ours, move it (INIT again for
		// the access flags of the negotiated read depth, then RTR, RTS)
		// and send the RTU, as librdmacm does for a QP it owns.
		if id.qp != nil {
			err := id.kernelMoveQPLocked(verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS)
			if err == nil {
				err = id.k.establish()
			}
			if err != nil {
				id.qpErrLocked()
				e = &Event{Type: EventConnectError, Status: -EINVAL, Err: err}
			} else {
				// librdmacm reports this as ESTABLISHED too.
				e = &Event{Type: EventEstablished, Conn: e.Conn}
			}
		}
	case EventEstablished:
		if id.parent != nil {
			id.parent = nil
		}
	case EventConnectError, EventUnreachable, EventRejected:
		id.qpErrLocked()
	case EventDisconnected:
		id.qpErrLocked()
		id.state = StateDisconnect
	case EventDeviceRemoval:
		id.state = StateDeviceRemoval
	}
	id.mu.Unlock()
	id.emit(e)
}

// kernelRefreshLocked picks up the device and addresses the kernel bound
// the ID to.
func (id *ID) kernelRefreshLocked() {
	id.local, id.remote = id.k.addrs()
	id.m.mu.Lock()
	if d := id.m.kernelDeviceLocked(id.k.deviceName()); d != nil {
		id.dev = d
	}
	id.m.mu.Unlock()
}

func (id *ID) kernelMoveQPLocked(states ...verbs.QPState) error {
	for _, s := range states {
		a, m, err := id.k.initQPAttr(s)
		if err != nil {
			return err
		}
		if err := id.qp.Modify(&a, m); err != nil {
			return fmt.Errorf("rdmacm: move QP %d to %v: %w", id.qp.QPN(), s, err)
		}
	}
	return nil
}

func (id *ID) kernelBind(addr netip.AddrPort) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateIdle {
		return fmt.Errorf("rdmacm: bind in %v: %w", id.state, ErrState)
	}
	if err := id.k.bind(addr); err != nil {
		return err
	}
	id.kernelRefreshLocked()
	id.state = StateAddrBound
	return nil
}

func (id *ID) kernelResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateIdle && id.state != StateAddrBound && id.state != StateAddrResolved {
		return fmt.Errorf("rdmacm: resolve address in %v: %w", id.state, ErrState)
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	id.state = StateAddrQuery
	if err := id.k.resolveAddr(src, dst, timeout); err != nil {
		id.state = StateIdle
		return err
	}
	return nil
}

func (id *ID) kernelResolveRoute(timeout time.Duration) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if err := id.setState(StateRouteQuery); err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if err := id.k.setTOS(id.tos); err != nil {
		return err
	}
	if err := id.k.resolveRoute(timeout); err != nil {
		id.state = StateAddrResolved
		return err
	}
	return nil
}

func (id *ID) kernelListen(backlog int) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == StateIdle {
		if err := id.k.bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
		id.state = StateAddrBound
	}
	if id.state != StateAddrBound {
		return fmt.Errorf("rdmacm: listen in %v: %w", id.state, ErrState)
	}
	if backlog <= 0 {
		backlog = 1024
	}
	if err := id.k.listen(backlog); err != nil {
		return err
	}
	id.local, _ = id.k.addrs()
	id.state = StateListen
	return nil
}

func (id *ID) kernelConnect(p *ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateRouteResolved {
		return fmt.Errorf("rdmacm: connect in %v: %w", id.state, ErrState)
	}
	if p == nil {
		// librdmacm's defaults for a NULL conn_param: the device's
		// maximum read/atomic depths, retries 7.
		maxRd := uint8(min(id.dev.dev.Query().MaxQPRdAtom, 255))
		p = &ConnParam{ResponderResources: maxRd, InitiatorDepth: maxRd, RetryCount: 7, RNRRetryCount: 7}
	}
	q := *p
	if id.qp != nil {
		q.QPNum = id.qp.QPN()
	}
	if err := id.k.connect(&q); err != nil {
		return err
	}
	id.state = StateConnect
	return nil
}

func (id *ID) kernelAccept(p *ConnParam) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateConnect || id.parent == nil {
		return fmt.Errorf("rdmacm: accept of an ID that is not a connection request (%v): %w", id.state, ErrState)
	}
	if p == nil {
		// librdmacm's defaults for a NULL conn_param: what the peer
		// asked for (the kernel reports it from our side), RNR retry 7.
		p = &ConnParam{ResponderResources: id.req.ResponderResources, InitiatorDepth: id.req.InitiatorDepth, RNRRetryCount: 7}
	}
	q := *p
	if id.qp != nil {
		// As rdma_accept does with the ID's QP: INIT again (the access
		// flags follow the negotiated read depth only now that the IB
		// CM has the connection), RTR and RTS before the REP.
		if err := id.kernelMoveQPLocked(verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS); err != nil {
			return err
		}
		q.QPNum = id.qp.QPN()
	}
	return id.k.accept(&q)
}

func (id *ID) kernelReject(privateData []byte) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.parent = nil
	return id.k.reject(privateData)
}

func (id *ID) kernelDisconnect() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.qpErrLocked()
	if err := id.k.disconnect(); err != nil {
		return err
	}
	id.state = StateDisconnect
	return nil
}

func (id *ID) kernelDestroy() error {
	id.mu.Lock()
	id.state = StateDestroying
	k := id.k
	id.mu.Unlock()
	id.m.mu.Lock()
	delete(id.m.ids, id)
	id.m.mu.Unlock()
	return k.destroy()
}

func (id *ID) kernelEstablish() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.k.establish()
}

func (id *ID) kernelCreateQP(pd verbs.PD, attr *verbs.QPInitAttr) (verbs.QP, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.qpType == verbs.QPTypeUD {
		return nil, fmt.Errorf("rdmacm: UD IDs on a kernel device: %w", verbs.ErrNotSupported)
	}
	if id.dev == nil {
		return nil, fmt.Errorf("rdmacm: create QP before address resolution: %w", ErrState)
	}
	if id.qp != nil {
		return nil, fmt.Errorf("rdmacm: QP exists: %w", ErrState)
	}
	if pd == nil {
		pd = id.dev.pd
	}
	a := *attr
	a.Type = id.qpType
	qp, err := pd.CreateQP(&a)
	if err != nil {
		return nil, err
	}
	id.qp = qp
	if err := id.kernelMoveQPLocked(verbs.QPStateInit); err != nil {
		id.qp = nil
		qp.Destroy()
		return nil, err
	}
	return qp, nil
}

// The librdmacm backend (kernel_ibverbs.go, build tag ibverbs) delivers
// its events through kernelEvent; the default build has no caller.
var _ = (*ID).kernelEvent
