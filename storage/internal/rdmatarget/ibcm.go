package rdmatarget

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// This file is the IB CM side of a target: a listener on a service ID
// of one device's CM (the way Linux's ib_srpt listens with its
// service_id), and the passive connection it hands the protocol, which
// accepts with a REP or refuses with a REJ, both carrying the
// protocol's private data.
//
// Flow (all on the CM's dispatch goroutine):
//
//	REQ ──▶ listen handler ──▶ accept(conn, REQ private data)
//	          the protocol: Conn.Setup(conn) then conn.Accept(rep) (QP
//	          INIT→RTR→RTS, REP) or conn.Reject(rej) (REJ)
//	RTU / USER_ESTABLISHED ──▶ "established" log
//	DREQ, DREP, DREQ error, REJ, REP error, timewait ──▶ Conn.Shutdown

// ibListen is one IB CM listen ID with the PD its connections use.
type ibListen struct {
	id  *cm.ID
	dev verbs.Device
	pd  verbs.PD
}

// errRefused makes the CM destroy the ID of a refused request.
var errRefused = errors.New("rdmatarget: request refused")

// ListenIBCM listens on c (one device's IB CM; c.Port() is its GSI) for
// REQs with serviceID (all 64 bits). accept gets every REQ with its
// private data (92 bytes) on the CM's dispatch goroutine; it must
// Accept or Reject the connection before it returns. Close stops it.
func (l *Listener) ListenIBCM(c *cm.CM, serviceID uint64, accept func(conn *IBCMConn, privateData []byte)) error {
	g, ok := c.Port().(*cm.GSI)
	if !ok {
		return fmt.Errorf("%s: IB CM without a GSI agent (its device is unknown)", l.Prefix)
	}
	dev := g.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	il := &ibListen{dev: dev, pd: pd}
	id, err := c.CreateID(l.ibHandler(il, accept), nil)
	if err != nil {
		pd.Dealloc()
		return err
	}
	il.id = id
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		id.Destroy()
		pd.Dealloc()
		return fmt.Errorf("%s: listener closed", l.Prefix)
	}
	l.ib = append(l.ib, il)
	l.mu.Unlock()
	if err := id.Listen(serviceID, 0); err != nil {
		return fmt.Errorf("%s: IB CM listen on service ID %#016x: %w", l.Prefix, serviceID, err)
	}
	return nil
}

// ibHandler handles the events of the listen ID and of the connection
// IDs the CM creates from it (they inherit its handler).
func (l *Listener) ibHandler(il *ibListen, accept func(*IBCMConn, []byte)) cm.Handler {
	return func(id *cm.ID, ev *cm.Event) error {
		if ev.Type == cm.EventREQReceived {
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				_ = id.SendREJ(mad.RejConsumerDefined, nil, nil)
				return errRefused
			}
			l.ibBusy.Add(1)
			l.mu.Unlock()
			defer l.ibBusy.Done()
			conn := &IBCMConn{id: id, dev: il.dev, pd: il.pd, req: ev.REQ,
				peer: ev.From.GID().Addr().Unmap().String(), psn: rand.Uint32() & 0xFFFFFF}
			id.SetContext(conn)
			if ev.REQ.TransportType != mad.TransportRC {
				conn.Reject(nil)
			} else {
				accept(conn, ev.PrivateData)
			}
			conn.mu.Lock()
			refused := conn.refused || !conn.accepted
			conn.mu.Unlock()
			if refused {
				return errRefused
			}
			return nil
		}
		conn, _ := id.Context().(*IBCMConn)
		if conn == nil {
			return nil
		}
		conn.mu.Lock()
		c := conn.ctx
		conn.mu.Unlock()
		if c == nil {
			return nil
		}
		switch ev.Type {
		case cm.EventRTUReceived, cm.EventUserEstablished:
			l.Logf("%s: %s from %v established (IB CM)", l.Prefix, l.Kind, conn.peer)
		case cm.EventDREQReceived, cm.EventDREPReceived, cm.EventDREQError, cm.EventREJReceived,
			cm.EventREPError, cm.EventTimewaitExit:
			c.Shutdown(fmt.Sprintf("IB CM %v", ev.Type))
		}
		return nil
	}
}

// closeIB stops the IB CM listeners and waits for handlers at work.
func (l *Listener) closeIB() {
	l.mu.Lock()
	l.closed = true
	ib := l.ib
	l.mu.Unlock()
	for _, il := range ib {
		il.id.Destroy()
	}
	l.ibBusy.Wait()
}

// releaseIB frees the listeners' PDs once their connections are gone.
func (l *Listener) releaseIB() {
	l.mu.Lock()
	ib := l.ib
	l.ib = nil
	l.mu.Unlock()
	for _, il := range ib {
		il.pd.Dealloc()
	}
}

// IBCMConn is a passive IB CM connection: the Endpoint of a REQ that a
// listener from [Listener.ListenIBCM] received.
type IBCMConn struct {
	id   *cm.ID
	dev  verbs.Device
	pd   verbs.PD
	req  *mad.REQ
	peer string
	psn  uint32

	mu       sync.Mutex // guards the fields below
	qp       verbs.QP
	ctx      *Conn
	accepted bool
	refused  bool
}

// REQ returns the connection request.
func (c *IBCMConn) REQ() *mad.REQ { return c.req }

// Device returns the device the request came in on.
func (c *IBCMConn) Device() verbs.Device { return c.dev }

// PD returns the listener's protection domain on the device.
func (c *IBCMConn) PD() verbs.PD { return c.pd }

// Peer returns the requester's IP address (its GID).
func (c *IBCMConn) Peer() string { return c.peer }

// SetContext records the target connection (a *Conn) the CM events of
// this connection go to.
func (c *IBCMConn) SetContext(ctx any) {
	c.mu.Lock()
	c.ctx, _ = ctx.(*Conn)
	c.mu.Unlock()
}

// CreateQP creates the connection's RC QP (attr.Type is set to RC).
func (c *IBCMConn) CreateQP(pd verbs.PD, attr *verbs.QPInitAttr) (verbs.QP, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.qp != nil {
		return nil, errors.New("rdmatarget: QP exists")
	}
	if pd == nil {
		pd = c.pd
	}
	a := *attr
	a.Type = verbs.QPTypeRC
	qp, err := pd.CreateQP(&a)
	if err != nil {
		return nil, err
	}
	// INIT at once, as rdma_create_qp does, so receives can be posted.
	at, m, err := c.id.InitQPAttr(verbs.QPStateInit)
	if err == nil {
		err = qp.Modify(&at, m)
	}
	if err != nil {
		qp.Destroy()
		return nil, err
	}
	c.qp = qp
	return qp, nil
}

// DestroyQP destroys the QP.
func (c *IBCMConn) DestroyQP() error {
	c.mu.Lock()
	qp := c.qp
	c.qp = nil
	c.mu.Unlock()
	if qp == nil {
		return nil
	}
	return qp.Destroy()
}

// REPParam are the parameters of an accept that the protocol chooses.
type REPParam struct {
	// PrivateData is the REP's private data (up to 196 bytes).
	PrivateData []byte
	// ResponderResources and InitiatorDepth are the RDMA READs this
	// side serves and issues (capped by the device and the REQ).
	ResponderResources, InitiatorDepth uint8
	// FlowControl is the REP's end-to-end flow control bit.
	FlowControl bool
}

// Accept moves the QP to RTS with the CM's attributes (as rdma_accept
// does before its REP, so the QP receives as soon as the peer may
// send) and sends the REP.
func (c *IBCMConn) Accept(p REPParam) error {
	c.mu.Lock()
	qp := c.qp
	c.mu.Unlock()
	if qp == nil {
		return errors.New("rdmatarget: accept without a QP")
	}
	attr := c.dev.Query()
	maxRd := uint8(min(attr.MaxQPRdAtom, attr.MaxQPInitRdAtom, 255))
	// What we serve is bounded by what the requester initiates, and
	// the reverse (ib_cm's REQ fields seen from our side).
	resp := min(p.ResponderResources, maxRd, c.req.InitiatorDepth)
	init := min(p.InitiatorDepth, maxRd, c.req.ResponderResources)
	for _, s := range []verbs.QPState{verbs.QPStateRTR, verbs.QPStateRTS} {
		a, m, err := c.id.InitQPAttr(s)
		if err != nil {
			return err
		}
		switch s {
		case verbs.QPStateRTR:
			// The receive PSN is the one the REP announces; the CM has
			// none before SendREP.
			a.RQPSN = c.psn
			a.MaxDestRdAtomic = resp
		case verbs.QPStateRTS:
			a.MaxRdAtomic = init
		}
		if err := qp.Modify(&a, m); err != nil {
			return fmt.Errorf("QP to %v: %w", s, err)
		}
	}
	err := c.id.SendREP(&cm.REPParam{QPN: qp.QPN(), StartingPSN: c.psn, PrivateData: p.PrivateData,
		ResponderResources: resp, InitiatorDepth: init, TargetAckDelay: mad.Timeout(attr.LocalCAAckDelay),
		FlowControl: p.FlowControl, RNRRetryCount: 7})
	if err == nil {
		c.mu.Lock()
		c.accepted = true
		c.mu.Unlock()
	}
	return err
}

// Reject refuses the request with a REJ (reason "consumer defined")
// carrying up to 148 bytes of private data; the listener destroys the
// ID when the accept function returns.
func (c *IBCMConn) Reject(privateData []byte) error {
	c.mu.Lock()
	c.refused = true
	c.mu.Unlock()
	return c.id.SendREJ(mad.RejConsumerDefined, nil, privateData)
}

// Disconnect moves the QP to ERR and sends a DREQ, or the DREP if the
// peer's DREQ came first.
func (c *IBCMConn) Disconnect() error {
	c.mu.Lock()
	qp := c.qp
	c.mu.Unlock()
	if qp != nil {
		_ = qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	}
	err := c.id.SendDREQ(nil)
	if errors.Is(err, cm.ErrState) {
		err = c.id.SendDREP(nil)
	}
	return err
}

// Destroy releases the CM ID (the CM's destroy rules send what the
// state needs: a REJ for a request never answered, a DREQ for a live
// connection).
func (c *IBCMConn) Destroy() error {
	c.mu.Lock()
	c.ctx = nil
	c.mu.Unlock()
	return c.id.Destroy()
}
