package cm

import (
	"fmt"
	"time"

	"softib/verbs"
	"softib/wire/mad"
)

// Handler receives the events of an ID. Handlers of one CM run one at a
// time on the CM's dispatch goroutine, never with CM locks held, so they
// may call any CM method (including Destroy on their own ID). Returning
// a non-nil error destroys the ID, as a non-zero return of an ib_cm
// handler does.
type Handler func(id *ID, ev *Event) error

// Event is one CM event. Exactly the message field matching Type is set
// (REQ for REQ_RECEIVED, ...); all byte slices are private copies.
type Event struct {
	Type EventType
	// Listener is the listening ID a REQ or SIDR_REQ matched
	// (REQ_RECEIVED, SIDR_REQ_RECEIVED); the event itself is delivered
	// to a new ID created for the request.
	Listener *ID
	// From is the address the message came from.
	From Addr
	// PrivateData is the private data of the received message.
	PrivateData []byte
	// Err is set for *_ERROR events (wrapping ErrTimeout) and for stale
	// connection failures (*RejectError).
	Err error

	REQ     *mad.REQ
	REP     *mad.REP
	REJ     *mad.REJ
	MRA     *mad.MRA
	RTU     *mad.RTU
	DREQ    *mad.DREQ
	DREP    *mad.DREP
	LAP     *mad.LAP
	APR     *mad.APR
	SIDRREQ *mad.SIDRREQ
	SIDRREP *mad.SIDRREP
}

// ID is a CM identifier: one listen, one connection or one SIDR
// exchange. Its fields are guarded by the CM lock.
type ID struct {
	cm      *CM
	handler Handler
	ctx     any

	state       State
	destroyed   bool
	localID     uint32
	remoteID    uint32
	remoteGUID  uint64
	serviceID   uint64
	serviceMask uint64
	tid         uint64
	remote      Addr
	sidr        sidrKey

	// connection parameters
	qpType    mad.TransportType
	localQPN  uint32
	remoteQPN uint32
	localQKey uint32
	// A CM StartingPSN is the PSN its sender's receive queue starts at,
	// i.e. the PSN the peer sends first (cm.c: rq_psn is set from the
	// local REQ/REP, sq_psn from the peer's).
	sqPSN, rqPSN   uint32
	respRes        uint8 // max_dest_rd_atomic (incoming RDMA reads we serve)
	initDepth      uint8 // max_rd_atomic (outgoing RDMA reads)
	retryCount     uint8
	rnrRetryCount  uint8
	pathMTU        mad.MTU
	primary        mad.Path // our view: Local* are ours
	alt            mad.Path
	ackTimeout     mad.Timeout // QP local ACK timeout
	targetAckDelay mad.Timeout
	maxCMRetries   int
	timeout        time.Duration // per-try wait for our requests on this ID
	pkeyIndex      uint16
	srq            bool
	pendingAlt     mad.Path // LAP path awaiting APR

	// outstanding request (retransmitted until answered)
	out        []byte
	outTimeout time.Duration
	outRetries int
	deadline   time.Time
	// lastReply is the last reply sent (RTU, MRA, DREP, APR); duplicates
	// of the message it answers get it again.
	lastReply []byte
}

// CreateID allocates a CM ID (ib_create_cm_id).
func (c *CM) CreateID(h Handler, ctx any) (*ID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	return c.newIDLocked(h, ctx), nil
}

func (c *CM) newIDLocked(h Handler, ctx any) *ID {
	id := &ID{cm: c, handler: h, ctx: ctx, localID: c.allocID()}
	c.ids[id.localID] = id
	return id
}

// Context returns the context given to CreateID.
func (id *ID) Context() any { return id.ctx }

// SetContext replaces the context (the CM never reads it).
func (id *ID) SetContext(ctx any) {
	id.cm.mu.Lock()
	id.ctx = ctx
	id.cm.mu.Unlock()
}

// SetHandler replaces the handler; IDs created for incoming requests
// start with their listener's handler.
func (id *ID) SetHandler(h Handler) {
	id.cm.mu.Lock()
	id.handler = h
	id.cm.mu.Unlock()
}

// State returns the current state.
func (id *ID) State() State {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.state
}

// LocalCommID returns the local communication ID.
func (id *ID) LocalCommID() uint32 { return id.localID }

// RemoteCommID returns the remote communication ID (0 until known).
func (id *ID) RemoteCommID() uint32 {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.remoteID
}

// ServiceID returns the service ID of the listen or connection.
func (id *ID) ServiceID() uint64 {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.serviceID
}

// RemoteAddr returns the GSI address of the peer.
func (id *ID) RemoteAddr() Addr {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.remote
}

// RemoteQPN returns the peer's QP number (0 until known).
func (id *ID) RemoteQPN() uint32 {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.remoteQPN
}

// PrimaryPath returns the primary path from this side's point of view.
func (id *ID) PrimaryPath() mad.Path {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.primary
}

func (id *ID) remoteKey() remoteKey {
	return remoteKey{id.remoteID, id.remoteGUID, id.remote.GID()}
}

func (id *ID) lock() error {
	id.cm.mu.Lock()
	if id.cm.closed {
		id.cm.mu.Unlock()
		return ErrClosed
	}
	if id.destroyed {
		id.cm.mu.Unlock()
		return ErrDestroyed
	}
	return nil
}

func (id *ID) unlock() { id.cm.mu.Unlock() }

func stateErr(op string, s State) error {
	return fmt.Errorf("cm: %s in state %v: %w", op, s, ErrState)
}

func fit(p []byte, n int) error {
	if len(p) > n {
		return fmt.Errorf("cm: %d bytes, max %d: %w", len(p), n, ErrPrivateDataTooLong)
	}
	return nil
}

// Destroy releases the ID (ib_destroy_cm_id), first doing what the IBTA
// requires for its state: a pending request is rejected (REJ), an
// established connection is disconnected (one DREQ) and its identifiers
// stay reserved through timewait, a received DREQ is answered (DREP).
// After Destroy returns no new handler call starts for the ID; it is safe
// to call from the ID's own handler. Destroying twice is a no-op.
func (id *ID) Destroy() error {
	c := id.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if id.destroyed {
		return nil
	}
	c.destroyLocked(id)
	return nil
}

func (c *CM) destroyLocked(id *ID) {
	if !c.closed {
		switch id.state {
		case StateListen:
			c.removeListener(id)
			c.setState(id, StateIdle)
		case StateREQSent, StateMRAREQRcvd:
			// cm.c sends REJ(TIMEOUT) with the CA GUID as ARI.
			var ari [8]byte
			putUint64(ari[:], c.cfg.CAGUID)
			c.sendREJLocked(id, mad.MsgOther, mad.RejTimeout, ari[:], nil)
			c.cancel(id)
			c.setState(id, StateIdle)
			c.releaseLocked(id)
		case StateREQRcvd, StateMRAREQSent:
			c.sendREJLocked(id, mad.MsgREQ, mad.RejConsumerDefined, nil, nil)
			c.setState(id, StateIdle)
			c.releaseLocked(id)
		case StateREPSent, StateMRAREPRcvd:
			c.sendREJLocked(id, mad.MsgOther, mad.RejConsumerDefined, nil, nil)
			c.cancel(id)
			c.setState(id, StateIdle)
			c.releaseLocked(id)
		case StateREPRcvd, StateMRAREPSent:
			c.sendREJLocked(id, mad.MsgREP, mad.RejConsumerDefined, nil, nil)
			c.enterTimewait(id)
		case StateEstablished, StateLAPSent, StateLAPRcvd, StateMRALAPSent, StateMRALAPRcvd:
			c.send(c.formTID(id.localID), &mad.DREQ{LocalCommID: id.localID, RemoteCommID: id.remoteID,
				RemoteQPN: id.remoteQPN}, id.remote)
			c.setState(id, StateDREQSent)
			c.enterTimewait(id)
		case StateDREQSent:
			c.enterTimewait(id)
		case StateDREQRcvd:
			id.lastReply = c.send(id.tid, &mad.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID}, id.remote)
			c.enterTimewait(id)
		case StateSIDRREQSent:
			c.cancel(id)
			c.setState(id, StateIdle)
		case StateSIDRREQRcvd:
			c.send(id.tid, &mad.SIDRREP{RequestID: id.remoteID, Status: mad.SIDRReject,
				ServiceID: id.serviceID}, id.remote)
			c.setState(id, StateIdle)
			c.releaseLocked(id)
		}
	}
	c.cancel(id)
	id.destroyed = true
	delete(c.ids, id.localID)
	if tw := c.timewait[id.localID]; tw != nil {
		tw.id = nil
	}
}

func putUint64(b []byte, v uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

func (c *CM) removeListener(id *ID) {
	for i, l := range c.listeners {
		if l == id {
			c.listeners = append(c.listeners[:i], c.listeners[i+1:]...)
			return
		}
	}
}

// Listen makes the ID accept REQs and SIDR_REQs whose service ID matches
// serviceID under mask (ib_cm_listen); mask 0 means all bits.
func (id *ID) Listen(serviceID, mask uint64) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateIdle {
		return stateErr("listen", id.state)
	}
	if mask == 0 {
		mask = ^uint64(0)
	}
	for _, l := range c.listeners {
		m := l.serviceMask & mask
		if l.serviceID&m == serviceID&m {
			return fmt.Errorf("cm: listen %#x: %w", serviceID, ErrBusy)
		}
	}
	id.serviceID, id.serviceMask = serviceID&mask, mask
	c.setState(id, StateListen)
	c.listeners = append(c.listeners, id)
	return nil
}

// REQParam are the parameters of a connection request (ib_cm_req_param).
// Zero values of the timeouts and retry limits mean the RDMA CM defaults.
type REQParam struct {
	// Primary is the path from this side's point of view (Local* are
	// ours); mad.RoCEv2Path builds the Linux RoCEv2 one.
	Primary mad.Path
	// Alternate is an optional alternate path.
	Alternate *mad.Path
	// SGIDIndex is the local GID index; PKeyIndex the P_Key index;
	// DPort the peer's RoCEv2 UDP port (0 = 4791).
	SGIDIndex uint8
	PKeyIndex uint16
	DPort     uint16

	ServiceID     uint64
	QPN           uint32
	TransportType mad.TransportType // RC (default), UC or XRC
	// StartingPSN is the first PSN this side's QP expects to receive;
	// the peer starts sending at it (Linux semantics of the REQ field).
	StartingPSN uint32
	PKey        uint16 // 0 means 0xFFFF
	PathMTU     mad.MTU
	PrivateData []byte // up to 92 bytes

	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        bool
	RetryCount         uint8 // 0–7
	RNRRetryCount      uint8 // 0–7
	SRQ                bool

	RemoteCMResponseTimeout mad.Timeout // 0 means Config.ResponseTimeout
	LocalCMResponseTimeout  mad.Timeout // 0 means Config.ResponseTimeout
	MaxCMRetries            int         // 0 means 15
	PacketLifeTime          mad.Timeout // 0 means Config.PacketLifeTime
}

// SendREQ starts a connection (ib_send_cm_req). The ID must be idle.
func (id *ID) SendREQ(p *REQParam) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateIdle {
		return stateErr("send REQ", id.state)
	}
	if p.QPN == 0 || p.QPN > 0xFFFFFF {
		return fmt.Errorf("cm: REQ QPN %#x: %w", p.QPN, ErrInvalidParam)
	}
	if err := fit(p.PrivateData, mad.REQPrivateDataSize); err != nil {
		return err
	}
	if c.localQPNInTimewait(p.QPN) {
		return fmt.Errorf("cm: QPN %#x: %w", p.QPN, ErrQPNInTimewait)
	}
	rto := p.RemoteCMResponseTimeout
	if rto == 0 {
		rto = c.cfg.ResponseTimeout
	}
	lto := p.LocalCMResponseTimeout
	if lto == 0 {
		lto = c.cfg.ResponseTimeout
	}
	retries := p.MaxCMRetries
	if retries <= 0 {
		retries = mad.CMAMaxCMRetries
	}
	retries = min(retries, 15)
	plt := p.PacketLifeTime
	if plt == 0 {
		plt = c.cfg.PacketLifeTime
	}
	pkey := p.PKey
	if pkey == 0 {
		pkey = mad.DefaultPKey
	}
	mtu := p.PathMTU
	if mtu == 0 {
		mtu = mad.MTU1024
	}

	id.serviceID = p.ServiceID
	id.qpType = p.TransportType
	id.localQPN = p.QPN
	id.rqPSN = p.StartingPSN & 0xFFFFFF
	id.respRes, id.initDepth = p.ResponderResources, p.InitiatorDepth
	id.retryCount, id.rnrRetryCount = min(p.RetryCount, 7), min(p.RNRRetryCount, 7)
	id.pathMTU = mtu
	id.primary = p.Primary
	id.alt = mad.Path{}
	if p.Alternate != nil {
		id.alt = *p.Alternate
	}
	id.ackTimeout = p.Primary.LocalAckTimeout
	id.maxCMRetries = retries
	id.timeout = RetransmitInterval(plt, rto)
	id.pkeyIndex = p.PKeyIndex
	id.srq = p.SRQ
	id.remoteID, id.remoteQPN, id.remoteGUID = 0, 0, 0
	id.remote = pathAddr(&p.Primary, p.SGIDIndex, p.PKeyIndex, p.DPort)
	id.tid = c.formTID(id.localID)

	req := &mad.REQ{
		LocalCommID:             id.localID,
		ServiceID:               p.ServiceID,
		LocalCAGUID:             c.cfg.CAGUID,
		LocalQPN:                p.QPN,
		ResponderResources:      p.ResponderResources,
		InitiatorDepth:          p.InitiatorDepth,
		RemoteCMResponseTimeout: rto,
		TransportType:           p.TransportType,
		E2EFlowControl:          p.FlowControl,
		StartingPSN:             id.rqPSN,
		LocalCMResponseTimeout:  lto,
		RetryCount:              id.retryCount,
		PKey:                    pkey,
		PathMTU:                 mtu,
		RNRRetryCount:           id.rnrRetryCount,
		MaxCMRetries:            uint8(retries),
		SRQ:                     p.SRQ,
		Primary:                 p.Primary,
		Alternate:               id.alt,
		PrivateData:             p.PrivateData,
	}
	if p.TransportType == mad.TransportXRC {
		req.ExtTransportType = 1
	}
	c.setState(id, StateREQSent)
	b := c.send(id.tid, req, id.remote)
	c.arm(id, b, id.timeout, retries)
	return nil
}

// pathAddr returns the GSI address of the remote end of a path.
func pathAddr(p *mad.Path, sgid uint8, pkeyIndex, dport uint16) Addr {
	return Addr{
		AH: verbs.AHAttr{
			GRH: verbs.GlobalRoute{
				DGID:         verbs.GID(p.RemoteGID),
				FlowLabel:    p.FlowLabel,
				SGIDIndex:    sgid,
				HopLimit:     p.HopLimit,
				TrafficClass: p.TrafficClass,
			},
			DLID:     p.RemoteLID,
			SL:       p.SL,
			IsGlobal: true,
			PortNum:  1,
			DPort:    dport,
		},
		QPN:       mad.GSIQPN,
		QKey:      mad.GSIQKey,
		PKeyIndex: pkeyIndex,
	}
}

// REPParam are the parameters of a connection reply (ib_cm_rep_param).
type REPParam struct {
	QPN uint32
	// StartingPSN is the first PSN this side's QP expects to receive;
	// the requester sends from it.
	StartingPSN        uint32
	PrivateData        []byte // up to 196 bytes
	ResponderResources uint8
	InitiatorDepth     uint8
	TargetAckDelay     mad.Timeout
	FailoverAccepted   uint8
	FlowControl        bool
	RNRRetryCount      uint8 // what the requester's QP should use, 0–7
	SRQ                bool
	QKey               uint32 // UD-style local Q_Key, normally 0
}

// SendREP accepts a received REQ (ib_send_cm_rep).
func (id *ID) SendREP(p *REPParam) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateREQRcvd && id.state != StateMRAREQSent {
		return stateErr("send REP", id.state)
	}
	if p.QPN == 0 || p.QPN > 0xFFFFFF {
		return fmt.Errorf("cm: REP QPN %#x: %w", p.QPN, ErrInvalidParam)
	}
	if err := fit(p.PrivateData, mad.REPPrivateDataSize); err != nil {
		return err
	}
	if c.localQPNInTimewait(p.QPN) {
		return fmt.Errorf("cm: QPN %#x: %w", p.QPN, ErrQPNInTimewait)
	}
	id.localQPN = p.QPN
	id.rqPSN = p.StartingPSN & 0xFFFFFF
	id.respRes, id.initDepth = p.ResponderResources, p.InitiatorDepth
	id.srq = p.SRQ
	id.localQKey = p.QKey
	rep := &mad.REP{
		LocalCommID:        id.localID,
		RemoteCommID:       id.remoteID,
		LocalQKey:          p.QKey,
		LocalQPN:           p.QPN,
		StartingPSN:        id.rqPSN,
		ResponderResources: p.ResponderResources,
		InitiatorDepth:     p.InitiatorDepth,
		TargetAckDelay:     p.TargetAckDelay,
		FailoverAccepted:   p.FailoverAccepted,
		E2EFlowControl:     p.FlowControl,
		RNRRetryCount:      min(p.RNRRetryCount, 7),
		SRQ:                p.SRQ,
		LocalCAGUID:        c.cfg.CAGUID,
		PrivateData:        p.PrivateData,
	}
	c.setState(id, StateREPSent)
	b := c.send(id.tid, rep, id.remote)
	c.arm(id, b, id.timeout, id.maxCMRetries)
	return nil
}

// SendRTU completes a connection after a REP (ib_send_cm_rtu).
func (id *ID) SendRTU(privateData []byte) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateREPRcvd && id.state != StateMRAREPSent {
		return stateErr("send RTU", id.state)
	}
	if err := fit(privateData, mad.RTUPrivateDataSize); err != nil {
		return err
	}
	c.setState(id, StateEstablished)
	id.lastReply = c.send(id.tid, &mad.RTU{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		PrivateData: privateData}, id.remote)
	return nil
}

// SendREJ rejects a REQ or REP, or abandons a connection attempt
// (ib_send_cm_rej). ari is the additional reject info (up to 72 bytes).
func (id *ID) SendREJ(reason mad.RejectReason, ari, privateData []byte) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if err := fit(ari, mad.REJARISize); err != nil {
		return err
	}
	if err := fit(privateData, mad.REJPrivateDataSize); err != nil {
		return err
	}
	switch id.state {
	case StateREQRcvd, StateMRAREQSent:
		c.sendREJLocked(id, mad.MsgREQ, reason, ari, privateData)
		c.setState(id, StateIdle)
		c.releaseLocked(id)
	case StateREPRcvd, StateMRAREPSent:
		c.sendREJLocked(id, mad.MsgREP, reason, ari, privateData)
		c.enterTimewait(id)
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd:
		c.sendREJLocked(id, mad.MsgOther, reason, ari, privateData)
		c.cancel(id)
		c.setState(id, StateIdle)
		c.releaseLocked(id)
	default:
		return stateErr("send REJ", id.state)
	}
	return nil
}

func (c *CM) sendREJLocked(id *ID, msg mad.MsgType, reason mad.RejectReason, ari, pd []byte) {
	c.send(id.tid, &mad.REJ{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		MessageRejected: msg, Reason: reason, ARI: ari, PrivateData: pd}, id.remote)
}

// SendMRA tells the peer that its REQ, REP or LAP was received and that
// the reply will take up to serviceTimeout (ib_send_cm_mra).
func (id *ID) SendMRA(serviceTimeout mad.Timeout, privateData []byte) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if err := fit(privateData, mad.MRAPrivateDataSize); err != nil {
		return err
	}
	var what mad.MsgType
	var next State
	switch id.state {
	case StateREQRcvd, StateMRAREQSent:
		what, next = mad.MsgREQ, StateMRAREQSent
	case StateREPRcvd, StateMRAREPSent:
		what, next = mad.MsgREP, StateMRAREPSent
	case StateLAPRcvd, StateMRALAPSent:
		what, next = mad.MsgOther, StateMRALAPSent
	default:
		return stateErr("send MRA", id.state)
	}
	if id.state != next {
		c.setState(id, next)
	}
	id.lastReply = c.send(id.tid, &mad.MRA{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		MessageMRAed: what, ServiceTimeout: serviceTimeout, PrivateData: privateData}, id.remote)
	return nil
}

// Establish moves a passive connection to ESTABLISHED before the RTU
// arrives, e.g. when data arrived on the QP first (ib_cm_establish). A
// USER_ESTABLISHED event follows.
func (id *ID) Establish() error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateREPSent && id.state != StateMRAREPRcvd {
		return stateErr("establish", id.state)
	}
	c.cancel(id)
	c.setState(id, StateEstablished)
	c.queue(id, &Event{Type: EventUserEstablished})
	return nil
}

// SendDREQ starts a disconnect (ib_send_cm_dreq).
func (id *ID) SendDREQ(privateData []byte) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if !id.state.isConnected() {
		return stateErr("send DREQ", id.state)
	}
	if err := fit(privateData, mad.DREQPrivateDataSize); err != nil {
		return err
	}
	c.cancel(id)
	c.setState(id, StateDREQSent)
	b := c.send(c.formTID(id.localID), &mad.DREQ{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		RemoteQPN: id.remoteQPN, PrivateData: privateData}, id.remote)
	c.arm(id, b, id.timeout, id.maxCMRetries)
	return nil
}

// SendDREP answers a received DREQ (ib_send_cm_drep); the ID enters
// timewait.
func (id *ID) SendDREP(privateData []byte) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateDREQRcvd {
		return stateErr("send DREP", id.state)
	}
	if err := fit(privateData, mad.DREPPrivateDataSize); err != nil {
		return err
	}
	id.lastReply = c.send(id.tid, &mad.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		PrivateData: privateData}, id.remote)
	c.enterTimewait(id)
	return nil
}

// SendLAP proposes an alternate path (ib_send_cm_lap). alt is from this
// side's point of view. Linux does not process LAP on RoCE ports; this
// is for IB-style peers and tests.
func (id *ID) SendLAP(alt *mad.Path, privateData []byte) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateEstablished {
		return stateErr("send LAP", id.state)
	}
	if err := fit(privateData, mad.LAPPrivateDataSize); err != nil {
		return err
	}
	id.pendingAlt = *alt
	c.setState(id, StateLAPSent)
	b := c.send(c.formTID(id.localID), &mad.LAP{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		RemoteQPN: id.remoteQPN, RemoteCMResponseTimeout: c.cfg.ResponseTimeout, Alternate: *alt,
		PrivateData: privateData}, id.remote)
	c.arm(id, b, id.timeout, id.maxCMRetries)
	return nil
}

// SendAPR answers a received LAP (ib_send_cm_apr). On APRSuccess the
// proposed path becomes the alternate path.
func (id *ID) SendAPR(status mad.APStatus, info, privateData []byte) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateLAPRcvd && id.state != StateMRALAPSent {
		return stateErr("send APR", id.state)
	}
	if err := fit(info, mad.APRInfoSize); err != nil {
		return err
	}
	if err := fit(privateData, mad.APRPrivateDataSize); err != nil {
		return err
	}
	if status == mad.APRSuccess {
		id.alt = id.pendingAlt
	}
	c.setState(id, StateEstablished)
	id.lastReply = c.send(id.tid, &mad.APR{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		Status: status, Info: info, PrivateData: privateData}, id.remote)
	return nil
}

// SIDRREQParam are the parameters of a service ID resolution request
// (ib_cm_sidr_req_param).
type SIDRREQParam struct {
	// Path leads to the remote port (Local* are ours).
	Path         mad.Path
	SGIDIndex    uint8
	PKeyIndex    uint16
	DPort        uint16
	ServiceID    uint64
	PKey         uint16        // 0 means 0xFFFF
	Timeout      time.Duration // per try; 0 means RetransmitInterval(PacketLifeTime, ResponseTimeout)
	MaxCMRetries int           // 0 means Config.MaxCMRetries
	PrivateData  []byte        // up to 216 bytes
}

// SendSIDRREQ asks the peer for the UD QP serving a service ID
// (ib_send_cm_sidr_req).
func (id *ID) SendSIDRREQ(p *SIDRREQParam) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateIdle {
		return stateErr("send SIDR_REQ", id.state)
	}
	if err := fit(p.PrivateData, mad.SIDRREQPrivateDataSize); err != nil {
		return err
	}
	to := p.Timeout
	if to <= 0 {
		to = RetransmitInterval(c.cfg.PacketLifeTime, c.cfg.ResponseTimeout)
	}
	retries := p.MaxCMRetries
	if retries <= 0 {
		retries = c.cfg.MaxCMRetries
	}
	pkey := p.PKey
	if pkey == 0 {
		pkey = mad.DefaultPKey
	}
	id.serviceID = p.ServiceID
	id.primary = p.Path
	id.remote = pathAddr(&p.Path, p.SGIDIndex, p.PKeyIndex, p.DPort)
	id.tid = c.formTID(id.localID)
	c.setState(id, StateSIDRREQSent)
	b := c.send(id.tid, &mad.SIDRREQ{RequestID: id.localID, PKey: pkey, ServiceID: p.ServiceID,
		PrivateData: p.PrivateData}, id.remote)
	c.arm(id, b, to, retries)
	return nil
}

// SIDRREPParam are the parameters of a SIDR reply (ib_cm_sidr_rep_param).
type SIDRREPParam struct {
	Status      mad.SIDRStatus
	QPN         uint32
	QKey        uint32
	Info        []byte // up to 72 bytes
	PrivateData []byte // up to 136 bytes
}

// SendSIDRREP answers a received SIDR_REQ (ib_send_cm_sidr_rep); the ID
// returns to idle.
func (id *ID) SendSIDRREP(p *SIDRREPParam) error {
	if err := id.lock(); err != nil {
		return err
	}
	defer id.unlock()
	c := id.cm
	if id.state != StateSIDRREQRcvd {
		return stateErr("send SIDR_REP", id.state)
	}
	if err := fit(p.Info, mad.SIDRREPInfoSize); err != nil {
		return err
	}
	if err := fit(p.PrivateData, mad.SIDRREPPrivateDataSize); err != nil {
		return err
	}
	c.send(id.tid, &mad.SIDRREP{RequestID: id.remoteID, Status: p.Status, QPN: p.QPN,
		ServiceID: id.serviceID, QKey: p.QKey, Info: p.Info, PrivateData: p.PrivateData}, id.remote)
	c.setState(id, StateIdle)
	c.releaseLocked(id)
	return nil
}
