package rdmacm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// ID is an RDMA CM identifier (struct rdma_cm_id): a listener, one
// connection, or one UD service resolution.
type ID struct {
	m      *Manager
	ch     *EventChannel
	ps     PortSpace
	qpType verbs.QPType

	mu      sync.Mutex // guards everything below; taken before any CM lock
	ctx     any
	state   State
	dev     *device
	local   netip.AddrPort
	remote  netip.AddrPort
	port    uint16 // bound port (0 = none)
	path    mad.Path
	cmID    *cm.ID
	listens map[*device]*cm.ID
	backlog int
	pending int // CONNECT_REQUESTs not yet accepted or rejected
	parent  *ID // listener of a passive ID until accepted/rejected
	qp      verbs.QP
	tos     uint8
	req     ConnParam // what the peer asked for (passive)
	// seq is a passive ID's starting PSN, chosen with the request so that
	// InitQPAttr before Accept (a QP the application moves itself) and
	// the REP agree, as the kernel's id_priv->seq_num does.
	seq      uint32
	ud       UDParam            // the peer's UD QP (after SIDR_REP)
	mcs      map[netip.Addr]any // joined multicast groups and their contexts (mcast.go)
	rejected bool
	// k is the kernel's rdma_cm_id when the manager serves kernel
	// devices (kernel.go); nil on softib devices.
	k kernelID
}

// CreateID creates an ID in a port space (rdma_create_id). The QP type
// follows librdmacm: UD for RDMA_PS_UDP and RDMA_PS_IPOIB, RC otherwise.
func (m *Manager) CreateID(ch *EventChannel, ctx any, ps PortSpace) (*ID, error) {
	t := verbs.QPTypeRC
	if ps == PSUDP || ps == PSIPoIB {
		t = verbs.QPTypeUD
	}
	return m.CreateIDType(ch, ctx, ps, t)
}

// CreateIDType creates an ID with an explicit QP type (rdma_create_id2
// style): RC, UC or UD.
func (m *Manager) CreateIDType(ch *EventChannel, ctx any, ps PortSpace, t verbs.QPType) (*ID, error) {
	switch ps {
	case PSTCP, PSUDP, PSIB, PSIPoIB:
	default:
		return nil, fmt.Errorf("rdmacm: port space %v: %w", ps, ErrInvalid)
	}
	if t != verbs.QPTypeRC && t != verbs.QPTypeUC && t != verbs.QPTypeUD {
		return nil, fmt.Errorf("rdmacm: QP type %v: %w", t, ErrInvalid)
	}
	if ch == nil {
		return nil, fmt.Errorf("rdmacm: nil event channel: %w", ErrInvalid)
	}
	id := &ID{m: m, ch: ch, ps: ps, qpType: t, ctx: ctx}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.kern != nil {
		k, err := m.kern.newID(id, ps, t)
		if err != nil {
			return nil, err
		}
		id.k = k
	}
	m.ids[id] = struct{}{}
	return id, nil
}

// Context returns the user context.
func (id *ID) Context() any {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ctx
}

// SetContext replaces the user context (IDs of incoming requests start
// with the listener's).
func (id *ID) SetContext(ctx any) {
	id.mu.Lock()
	id.ctx = ctx
	id.mu.Unlock()
}

// State returns the ID's state.
func (id *ID) State() State {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state
}

// PortSpace returns the port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QPType returns the QP type of the ID.
func (id *ID) QPType() verbs.QPType { return id.qpType }

// LocalAddr returns the bound local address and port.
func (id *ID) LocalAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.local
}

// RemoteAddr returns the peer's address and port.
func (id *ID) RemoteAddr() netip.AddrPort {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.remote
}

// Device returns the device the ID is bound to, or nil.
func (id *ID) Device() verbs.Device {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil {
		return nil
	}
	return id.dev.dev
}

// PD returns the device's default protection domain (used by CreateQP
// when given none), or nil before address resolution.
func (id *ID) PD() verbs.PD {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil {
		return nil
	}
	return id.dev.pd
}

// QP returns the QP created by CreateQP, or nil.
func (id *ID) QP() verbs.QP {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.qp
}

// Path returns the resolved route (our point of view).
func (id *ID) Path() mad.Path {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.path
}

// setState moves the ID along the state table.
func (id *ID) setState(next State) error {
	if !CanTransition(id.state, next) {
		return fmt.Errorf("rdmacm: %v → %v: %w", id.state, next, ErrState)
	}
	id.state = next
	return nil
}

func (id *ID) emit(e *Event) {
	if e.ID == nil {
		e.ID = id
	}
	id.ch.push(e)
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr).
// An unspecified address binds to every device; port 0 picks an
// ephemeral port.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	if id.k != nil {
		return id.kernelBind(addr)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateIdle {
		return fmt.Errorf("rdmacm: bind in %v: %w", id.state, ErrState)
	}
	a := addr.Addr().Unmap()
	var d *device
	if a.IsValid() && !a.IsUnspecified() {
		if d = id.m.deviceFor(a); d == nil {
			return fmt.Errorf("rdmacm: bind %v: %w", a, ErrNoDevice)
		}
	}
	port, err := id.m.bind(id, a, addr.Port())
	if err != nil {
		return err
	}
	id.port = port
	id.local = netip.AddrPortFrom(a, port)
	id.dev = d
	return id.setState(StateAddrBound)
}

// ResolveAddr picks the local device for dst and binds to it
// (rdma_resolve_addr); ADDR_RESOLVED or ADDR_ERROR follows on the
// channel. A zero src means any local address.
func (id *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	if id.k != nil {
		return id.kernelResolveAddr(src, dst, timeout)
	}
	_ = timeout // resolution is local: softib devices are known, no ARP
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateIdle && id.state != StateAddrBound && id.state != StateAddrResolved {
		return fmt.Errorf("rdmacm: resolve address in %v: %w", id.state, ErrState)
	}
	if !dst.Addr().IsValid() || dst.Addr().IsUnspecified() {
		return fmt.Errorf("rdmacm: destination %v: %w", dst, ErrInvalid)
	}
	s := src.Addr().Unmap()
	if id.state == StateAddrBound && id.local.Addr().IsValid() && !id.local.Addr().IsUnspecified() {
		s = id.local.Addr()
	}
	var d *device
	if s.IsValid() && !s.IsUnspecified() {
		if d = id.m.deviceFor(s); d == nil {
			return fmt.Errorf("rdmacm: source %v: %w", s, ErrNoDevice)
		}
	} else {
		d = id.m.routeTo(dst.Addr())
	}
	from := id.state
	if err := id.setState(StateAddrQuery); err != nil {
		return err
	}
	if d == nil || d.addr.Is4() != dst.Addr().Unmap().Is4() {
		back := StateAddrBound
		if from == StateIdle {
			// Bind anyway so the ID can retry, as the kernel does.
			port, err := id.m.bind(id, netip.IPv4Unspecified(), 0)
			if err != nil {
				return err
			}
			id.port = port
		}
		if err := id.setState(back); err != nil {
			return err
		}
		id.emit(&Event{Type: EventAddrError, Status: -EADDRNOTAVAIL, Err: ErrNoDevice})
		return nil
	}
	if id.port == 0 {
		port, err := id.m.bind(id, d.addr, src.Port())
		if err != nil {
			_ = id.setState(from) // back out: ADDR_QUERY → IDLE/ADDR_BOUND/ADDR_RESOLVED
			return err
		}
		id.port = port
	}
	id.dev = d
	id.local = netip.AddrPortFrom(d.addr, id.port)
	id.remote = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if err := id.setState(StateAddrResolved); err != nil {
		return err
	}
	id.emit(&Event{Type: EventAddrResolved})
	return nil
}

// ResolveRoute builds the RoCEv2 path to the resolved address
// (rdma_resolve_route); ROUTE_RESOLVED or ROUTE_ERROR follows.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	if id.k != nil {
		return id.kernelResolveRoute(timeout)
	}
	_ = timeout
	id.mu.Lock()
	defer id.mu.Unlock()
	if err := id.setState(StateRouteQuery); err != nil {
		return err
	}
	if id.dev.removed {
		if err := id.setState(StateAddrResolved); err != nil {
			return err
		}
		id.emit(&Event{Type: EventRouteError, Status: -ENODEV, Err: ErrNoDevice})
		return nil
	}
	id.path = mad.RoCEv2Path(mad.RoCEv2PathParams{
		Src: id.local.Addr(), Dst: id.remote.Addr(), TrafficClass: id.tos,
		PacketLifeTime: id.m.cfg.PacketLifeTime, CAAckDelay: id.dev.caAckDelay,
	})
	if err := id.setState(StateRouteResolved); err != nil {
		return err
	}
	id.emit(&Event{Type: EventRouteResolved})
	return nil
}

// SetTOS sets the type of service (rdma_set_option RDMA_OPTION_ID_TOS):
// the traffic class of the route resolved afterwards, carried in the REQ
// path and used for the QP's address vector.
func (id *ID) SetTOS(tos uint8) {
	id.mu.Lock()
	id.tos = tos
	id.mu.Unlock()
}

// Migrate moves the ID to another event channel (rdma_migrate_id);
// events already queued stay on the old one.
func (id *ID) Migrate(ch *EventChannel) error {
	if ch == nil {
		return fmt.Errorf("rdmacm: nil event channel: %w", ErrInvalid)
	}
	id.mu.Lock()
	id.ch = ch
	id.mu.Unlock()
	return nil
}

// CreateQP creates the ID's QP on its device (rdma_create_qp) and moves
// it to INIT (UD: to RTS with Q_Key 0x01234567). A nil pd means the
// device's default PD. attr.Type is set from the ID.
func (id *ID) CreateQP(pd verbs.PD, attr *verbs.QPInitAttr) (verbs.QP, error) {
	if id.k != nil {
		return id.kernelCreateQP(pd, attr)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
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
	if id.qpType == verbs.QPTypeUD {
		err = modifyAll(qp,
			step{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: mad.RDMAUDPQKey},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
			step{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
			step{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: rand.Uint32() & 0xFFFFFF}, verbs.QPAttrState | verbs.QPAttrSQPSN})
	} else {
		err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	}
	if err != nil {
		qp.Destroy()
		return nil, err
	}
	id.qp = qp
	return qp, nil
}

// DestroyQP destroys the QP created by CreateQP (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	id.mu.Lock()
	qp := id.qp
	id.qp = nil
	id.mu.Unlock()
	if qp == nil {
		return nil
	}
	return qp.Destroy()
}

type step struct {
	a verbs.QPAttr
	m verbs.QPAttrMask
}

func modifyAll(qp verbs.QP, steps ...step) error {
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.m); err != nil {
			return err
		}
	}
	return nil
}

// InitQPAttr returns the attributes for moving the connection's QP to
// state (rdma_init_qp_attr).
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	if id.k != nil {
		return id.k.initQPAttr(state)
	}
	id.mu.Lock()
	c, passive, seq := id.cmID, id.parent != nil, id.seq
	id.mu.Unlock()
	if c == nil {
		return verbs.QPAttr{}, 0, fmt.Errorf("rdmacm: no connection: %w", ErrState)
	}
	a, m, err := c.InitQPAttr(state)
	if err == nil && passive && state == verbs.QPStateRTR {
		// Before Accept the IB CM has no receive PSN yet: use the one the
		// REP will carry (rdma_init_qp_attr sets rq_psn = seq_num).
		a.RQPSN = seq
	}
	return a, m, err
}

// moveQPLocked applies the CM's attributes to the ID's QP for each state.
func (id *ID) moveQPLocked(states ...verbs.QPState) error {
	if id.qp == nil {
		return nil
	}
	for _, s := range states {
		a, m, err := id.cmID.InitQPAttr(s)
		if err != nil {
			return err
		}
		if err := id.qp.Modify(&a, m); err != nil {
			return err
		}
	}
	return nil
}

func (id *ID) qpErrLocked() {
	if id.qp != nil {
		_ = id.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	}
}

// Listen starts accepting connection (or UD resolve) requests on the
// bound port (rdma_listen). backlog bounds the CONNECT_REQUESTs not yet
// accepted or rejected (0 means 1024); requests beyond it are rejected.
func (id *ID) Listen(backlog int) error {
	if id.k != nil {
		return id.kernelListen(backlog)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == StateIdle {
		port, err := id.m.bind(id, netip.IPv4Unspecified(), 0)
		if err != nil {
			return err
		}
		id.port = port
		id.local = netip.AddrPortFrom(netip.IPv4Unspecified(), port)
		if err := id.setState(StateAddrBound); err != nil {
			return err
		}
	}
	if err := id.setState(StateListen); err != nil {
		return err
	}
	if backlog <= 0 {
		backlog = 1024
	}
	id.backlog = backlog
	id.listens = map[*device]*cm.ID{}
	var devs []*device
	if id.dev != nil {
		devs = []*device{id.dev}
	} else {
		devs = id.m.devices()
	}
	for _, d := range devs {
		if err := id.listenOnLocked(d); err != nil {
			for _, l := range id.listens {
				l.Destroy()
			}
			id.listens = nil
			_ = id.setState(StateAddrBound)
			return err
		}
	}
	return nil
}

func (id *ID) listenOnLocked(d *device) error {
	l, err := d.cm.CreateID(id.listenHandler(d), id)
	if err != nil {
		return err
	}
	if err := l.Listen(mad.ServiceID(id.ps, id.port), 0); err != nil {
		l.Destroy()
		if errors.Is(err, cm.ErrBusy) {
			return fmt.Errorf("rdmacm: listen %v port %d: %w", id.ps, id.port, ErrAddrInUse)
		}
		return err
	}
	id.listens[d] = l
	return nil
}

// Connect starts a connection (rdma_connect): a REQ carrying the cma_hdr
// and up to 56 bytes of private data, or for UD IDs a SIDR_REQ with up to
// 180 bytes. ResponderResources and InitiatorDepth are capped to the
// device (0xFF asks for its maximum); a nil p uses librdmacm's defaults.
func (id *ID) Connect(p *ConnParam) error {
	if id.k != nil {
		return id.kernelConnect(p)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateRouteResolved {
		return fmt.Errorf("rdmacm: connect in %v: %w", id.state, ErrState)
	}
	if p == nil {
		// librdmacm's defaults for a NULL conn_param: the device's
		// maximum read/atomic depths, retries 7.
		p = &ConnParam{ResponderResources: 0xFF, InitiatorDepth: 0xFF, RetryCount: 7, RNRRetryCount: 7}
	}
	ud := id.qpType == verbs.QPTypeUD
	limit, op := mad.ConnectPrivateDataMax, "connect"
	if ud {
		limit, op = mad.UDResolvePrivateDataMax, "resolve"
	}
	if err := checkPD(op, p.PrivateData, limit); err != nil {
		return err
	}
	hdr := mad.CMAHdr{SrcPort: id.local.Port(), Src: id.local.Addr(), Dst: id.remote.Addr()}
	pd := append(hdr.Append(make([]byte, 0, mad.CMAHdrSize+len(p.PrivateData))), p.PrivateData...)
	c, err := id.dev.cm.CreateID(id.cmHandler, id)
	if err != nil {
		return err
	}
	sid := mad.ServiceID(id.ps, id.remote.Port())
	if ud {
		err = c.SendSIDRREQ(&cm.SIDRREQParam{
			Path: id.path, SGIDIndex: id.dev.gidIndex, ServiceID: sid, PrivateData: pd,
			Timeout:      cm.RetransmitInterval(id.m.cfg.PacketLifeTime, id.m.cfg.ResponseTimeout),
			MaxCMRetries: id.m.cfg.MaxCMRetries,
		})
	} else {
		qpn := p.QPNum
		srq := p.SRQ
		if id.qp != nil {
			qpn = id.qp.QPN()
			_, ia, qerr := id.qp.Query()
			if qerr == nil && ia.SRQ != nil {
				srq = true
			}
		}
		tt := mad.TransportRC
		if id.qpType == verbs.QPTypeUC {
			tt = mad.TransportUC
		}
		err = c.SendREQ(&cm.REQParam{
			Primary: id.path, SGIDIndex: id.dev.gidIndex, ServiceID: sid, QPN: qpn,
			TransportType: tt, StartingPSN: rand.Uint32() & 0xFFFFFF, PathMTU: id.dev.mtu,
			PrivateData:             pd,
			ResponderResources:      id.capRdAtom(p.ResponderResources),
			InitiatorDepth:          id.capRdAtom(p.InitiatorDepth),
			FlowControl:             p.FlowControl,
			RetryCount:              min(p.RetryCount, 7),
			RNRRetryCount:           min(p.RNRRetryCount, 7),
			SRQ:                     srq,
			RemoteCMResponseTimeout: id.m.cfg.ResponseTimeout,
			LocalCMResponseTimeout:  id.m.cfg.ResponseTimeout,
			MaxCMRetries:            id.m.cfg.MaxCMRetries,
			PacketLifeTime:          id.m.cfg.PacketLifeTime,
		})
	}
	if err != nil {
		c.Destroy()
		return err
	}
	id.cmID = c
	return id.setState(StateConnect)
}

// capRdAtom limits a requested RDMA read/atomic depth to the device;
// 0xFF (RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH) asks for the maximum.
func (id *ID) capRdAtom(v uint8) uint8 { return min(v, id.dev.maxRdAtom) }

// Accept accepts a CONNECT_REQUEST (rdma_accept): with a QP, it is moved
// to RTS first; a REP with up to 196 bytes of private data follows (UD:
// a SIDR_REP with the QPN and Q_Key 0x01234567, up to 136 bytes).
func (id *ID) Accept(p *ConnParam) error {
	if id.k != nil {
		return id.kernelAccept(p)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateConnect || id.cmID == nil {
		return fmt.Errorf("rdmacm: accept in %v: %w", id.state, ErrState)
	}
	if p == nil {
		// librdmacm's defaults for a NULL conn_param: what the peer asked
		// for, within the device's limits; RNR retry 7.
		p = &ConnParam{ResponderResources: id.req.ResponderResources, InitiatorDepth: id.req.InitiatorDepth,
			RNRRetryCount: 7}
	}
	qpn := p.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	if id.qpType == verbs.QPTypeUD {
		if err := checkPD("accept", p.PrivateData, mad.SIDRREPPrivateDataSize); err != nil {
			return err
		}
		if err := id.cmID.SendSIDRREP(&cm.SIDRREPParam{Status: mad.SIDRSuccess, QPN: qpn,
			QKey: mad.RDMAUDPQKey, PrivateData: p.PrivateData}); err != nil {
			return err
		}
		id.leaveBacklogLocked()
		return nil
	}
	if err := checkPD("accept", p.PrivateData, mad.AcceptPrivateDataMax); err != nil {
		return err
	}
	srq := p.SRQ
	if id.qp != nil {
		if _, ia, err := id.qp.Query(); err == nil && ia.SRQ != nil {
			srq = true
		}
	}
	// Like librdmacm, move the QP to RTS before the REP goes out, so it
	// can receive as soon as the peer may send.
	// The REP's StartingPSN is where our receive queue starts.
	psn := id.seq
	if id.qp != nil {
		if err := id.moveQPLocked(verbs.QPStateInit); err != nil {
			return err
		}
		a, m, err := id.cmID.InitQPAttr(verbs.QPStateRTR)
		if err != nil {
			return err
		}
		a.RQPSN = psn
		if err := id.qp.Modify(&a, m); err != nil {
			return err
		}
		if err := id.moveQPLocked(verbs.QPStateRTS); err != nil {
			return err
		}
	}
	rep := &cm.REPParam{
		QPN: qpn, StartingPSN: psn, PrivateData: p.PrivateData,
		ResponderResources: id.capRdAtom(p.ResponderResources),
		InitiatorDepth:     id.capRdAtom(p.InitiatorDepth),
		TargetAckDelay:     id.dev.caAckDelay,
		FlowControl:        p.FlowControl,
		RNRRetryCount:      min(p.RNRRetryCount, 7),
		SRQ:                srq,
	}
	if err := id.cmID.SendREP(rep); err != nil {
		return err
	}
	id.leaveBacklogLocked()
	return nil
}

// Reject refuses a CONNECT_REQUEST (rdma_reject) with up to 148 bytes of
// private data (REJ reason "consumer defined"; UD: SIDR_REP "reject").
func (id *ID) Reject(privateData []byte) error {
	if id.k != nil {
		return id.kernelReject(privateData)
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateConnect || id.cmID == nil || id.parent == nil {
		return fmt.Errorf("rdmacm: reject in %v: %w", id.state, ErrState)
	}
	var err error
	if id.qpType == verbs.QPTypeUD {
		if err = checkPD("reject", privateData, mad.SIDRREPPrivateDataSize); err != nil {
			return err
		}
		err = id.cmID.SendSIDRREP(&cm.SIDRREPParam{Status: mad.SIDRReject, PrivateData: privateData})
	} else {
		if err = checkPD("reject", privateData, mad.RejectPrivateDataMax); err != nil {
			return err
		}
		err = id.cmID.SendREJ(mad.RejConsumerDefined, nil, privateData)
	}
	if err != nil {
		return err
	}
	id.rejected = true
	id.leaveBacklogLocked()
	return nil
}

// leaveBacklogLocked releases the listener's backlog slot.
func (id *ID) leaveBacklogLocked() {
	if p := id.parent; p != nil {
		id.parent = nil
		p.mu.Lock()
		p.pending--
		p.mu.Unlock()
	}
}

// Establish completes a connection whose CONNECT_RESPONSE was delivered
// because the ID has no QP (rdma_establish): it sends the RTU.
func (id *ID) Establish() error {
	if id.k != nil {
		return id.kernelEstablish()
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateConnect || id.cmID == nil {
		return fmt.Errorf("rdmacm: establish in %v: %w", id.state, ErrState)
	}
	return id.cmID.SendRTU(nil)
}

// Disconnect tears the connection down (rdma_disconnect): the QP goes to
// ERR and a DREQ is sent, or the DREP if the peer disconnected first.
func (id *ID) Disconnect() error {
	if id.k != nil {
		return id.kernelDisconnect()
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if (id.state != StateConnect && id.state != StateDisconnect) || id.cmID == nil {
		return fmt.Errorf("rdmacm: disconnect in %v: %w", id.state, ErrState)
	}
	if id.qpType == verbs.QPTypeUD {
		return fmt.Errorf("rdmacm: disconnect of a UD ID: %w", ErrInvalid)
	}
	id.qpErrLocked()
	err := id.cmID.SendDREQ(nil)
	if errors.Is(err, cm.ErrState) {
		err = id.cmID.SendDREP(nil)
	}
	return err
}

// Destroy releases the ID (rdma_destroy_id): listens stop, a pending
// request is rejected, a connection is disconnected (through the IB
// CM's destroy rules), the port is released. The QP is not destroyed
// (DestroyQP).
func (id *ID) Destroy() error {
	if id.k != nil {
		return id.kernelDestroy()
	}
	id.mu.Lock()
	if id.state == StateDestroying {
		id.mu.Unlock()
		return nil
	}
	_ = id.setState(StateDestroying) // the table lets every other state go there
	for _, l := range id.listens {
		l.Destroy()
	}
	id.listens = nil
	if id.cmID != nil {
		id.cmID.Destroy()
	}
	id.leaveBacklogLocked()
	id.leaveAllLocked()
	port := id.port
	id.port = 0
	id.mu.Unlock()
	if port != 0 {
		id.m.unbind(id, port)
	}
	id.m.mu.Lock()
	delete(id.m.ids, id)
	id.m.mu.Unlock()
	return nil
}

// deviceRemoved reports DEVICE_REMOVAL to an ID using d.
func (id *ID) deviceRemoved(d *device) {
	id.mu.Lock()
	defer id.mu.Unlock()
	uses := id.dev == d
	if l, ok := id.listens[d]; ok {
		l.Destroy()
		delete(id.listens, d)
		uses = uses || len(id.listens) == 0
	}
	if !uses || id.state == StateDestroying || id.state == StateDeviceRemoval || id.state == StateIdle {
		return
	}
	id.qpErrLocked()
	if id.setState(StateDeviceRemoval) == nil {
		id.emit(&Event{Type: EventDeviceRemoval, Status: -ENODEV})
	}
}
