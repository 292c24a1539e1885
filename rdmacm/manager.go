package rdmacm

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// Config configures a Manager; the zero value gives the Linux defaults.
type Config struct {
	// CM and GSI configure the IB CM attached to each device.
	CM  cm.Config
	GSI cm.GSIConfig
	// PacketLifeTime is the path packet life time (0 means 16,
	// CMA_IBOE_PACKET_LIFETIME).
	PacketLifeTime mad.Timeout
	// ResponseTimeout is the CM response timeout put into REQs (0 means
	// 20, CMA_CM_RESPONSE_TIMEOUT).
	ResponseTimeout mad.Timeout
	// MaxCMRetries bounds REQ and SIDR_REQ retransmissions (0 means 15).
	MaxCMRetries int
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.PacketLifeTime == 0 {
		c.PacketLifeTime = mad.CMAIBoEPacketLifeTime
	}
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = mad.CMAResponseTimeout
	}
	if c.MaxCMRetries <= 0 {
		c.MaxCMRetries = mad.CMAMaxCMRetries
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Manager is the RDMA CM of one process: the softib devices it resolves
// addresses on (each with an IB CM on its QP1) and the port bindings of
// its IDs.
type Manager struct {
	cfg Config

	mu     sync.Mutex // guards the fields below
	closed bool
	devs   []*device
	ids    map[*ID]struct{}
	bound  map[portKey][]*ID
	// kern is the kernel's RDMA CM when the manager serves kernel
	// devices (by kernel name in kdevs); see kernel.go.
	kern  kernelCM
	kdevs map[string]*device
}

type portKey struct {
	ps   PortSpace
	port uint16
}

// device is a softib device known to the manager.
type device struct {
	dev        verbs.Device
	cm         *cm.CM
	addr       netip.Addr
	gidIndex   uint8
	mtu        mad.MTU
	caAckDelay mad.Timeout
	maxRdAtom  uint8 // max_qp_rd_atom / max_qp_init_rd_atom
	pd         verbs.PD
	removed    bool
}

// NewManager creates a manager without devices.
func NewManager(cfg Config) *Manager {
	return &Manager{cfg: cfg.withDefaults(), ids: map[*ID]struct{}{}, bound: map[portKey][]*ID{}}
}

// AddDevice attaches an IB CM to dev's QP1 and makes its address
// resolvable.
func (m *Manager) AddDevice(dev verbs.Device) error {
	if kd, ok := dev.(KernelDevice); ok {
		return m.addKernelDevice(dev, kd)
	}
	m.mu.Lock()
	kern := m.kern != nil
	m.mu.Unlock()
	if kern {
		return fmt.Errorf("rdmacm: a manager serves softib devices or kernel devices, not both (use a second Manager): %w", ErrInvalid)
	}
	c, err := cm.Attach(dev, m.cfg.CM, m.cfg.GSI)
	if err != nil {
		return err
	}
	g := c.Port().(*cm.GSI)
	pa, err := dev.QueryPort(1)
	if err != nil {
		c.Close()
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		c.Close()
		return err
	}
	attr := dev.Query()
	d := &device{
		dev: dev, cm: c, addr: g.LocalGID().Addr(), gidIndex: g.GIDIndex(),
		mtu: mad.MTU(pa.ActiveMTU), caAckDelay: mad.Timeout(attr.LocalCAAckDelay),
		maxRdAtom: uint8(min(attr.MaxQPRdAtom, attr.MaxQPInitRdAtom, 255)), pd: pd,
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		c.Close()
		return ErrClosed
	}
	m.devs = append(m.devs, d)
	ids := make([]*ID, 0, len(m.ids))
	for id := range m.ids {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	// Wildcard listeners extend to the new device.
	for _, id := range ids {
		id.mu.Lock()
		if id.state == StateListen && (!id.local.Addr().IsValid() || id.local.Addr().IsUnspecified()) {
			id.listenOnLocked(d)
		}
		id.mu.Unlock()
	}
	m.mu.Lock() // for the deferred unlock
	return nil
}

// RemoveDevice detaches dev: every ID using it gets DEVICE_REMOVAL and
// its CM is closed.
func (m *Manager) RemoveDevice(dev verbs.Device) error {
	m.mu.Lock()
	var d *device
	for i, x := range m.devs {
		if x.dev == dev {
			d = x
			m.devs = append(m.devs[:i], m.devs[i+1:]...)
			break
		}
	}
	if d == nil {
		m.mu.Unlock()
		return fmt.Errorf("rdmacm: remove device: %w", ErrNoDevice)
	}
	d.removed = true
	ids := make([]*ID, 0, len(m.ids))
	for id := range m.ids {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		id.deviceRemoved(d)
	}
	err := d.cm.Close()
	d.pd.Dealloc()
	return err
}

// Close detaches every device. IDs become unusable.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.closed = true
	devs := m.devs
	m.devs = nil
	kern, kdevs := m.kern, m.kdevs
	m.mu.Unlock()
	if kern != nil {
		kern.close() // destroys the IDs left, then the event channel
		for _, d := range kdevs {
			d.pd.Dealloc()
		}
	}
	var errs []error
	for _, d := range devs {
		if err := d.cm.Close(); err != nil {
			errs = append(errs, err)
		}
		d.pd.Dealloc()
	}
	return errors.Join(errs...)
}

// deviceFor returns the device owning addr.
func (m *Manager) deviceFor(addr netip.Addr) *device {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.devs {
		if d.addr == addr.Unmap() {
			return d
		}
	}
	return nil
}

// routeTo picks the local device for reaching dst: the device that owns
// dst (loopback), else the first device of dst's address family.
func (m *Manager) routeTo(dst netip.Addr) *device {
	dst = dst.Unmap()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.devs {
		if d.addr == dst {
			return d
		}
	}
	for _, d := range m.devs {
		if d.addr.Is4() == dst.Is4() {
			return d
		}
	}
	return nil
}

// bind reserves (ps, port) on addr for id; port 0 picks an ephemeral
// port. It returns the port.
func (m *Manager) bind(id *ID, addr netip.Addr, port uint16) (uint16, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	free := func(p uint16) bool {
		for _, o := range m.bound[portKey{id.ps, p}] {
			oa := o.local.Addr()
			if !addr.IsValid() || addr.IsUnspecified() || !oa.IsValid() || oa.IsUnspecified() || oa == addr {
				return false
			}
		}
		return true
	}
	if port == 0 {
		// The Linux ephemeral range, starting at a random point.
		const lo, hi = 32768, 60999
		start := lo + rand.IntN(hi-lo+1)
		for i := range hi - lo + 1 {
			p := uint16(lo + (start-lo+i)%(hi-lo+1))
			if free(p) {
				port = p
				break
			}
		}
		if port == 0 {
			return 0, ErrAddrInUse
		}
	} else if !free(port) {
		return 0, fmt.Errorf("rdmacm: %v port %d: %w", id.ps, port, ErrAddrInUse)
	}
	k := portKey{id.ps, port}
	m.bound[k] = append(m.bound[k], id)
	return port, nil
}

func (m *Manager) unbind(id *ID, port uint16) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := portKey{id.ps, port}
	l := m.bound[k]
	for i, o := range l {
		if o == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(m.bound, k)
	} else {
		m.bound[k] = l
	}
}

// devices returns a snapshot of the devices.
func (m *Manager) devices() []*device {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*device(nil), m.devs...)
}
