package o2iblnd

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"softib/lnet/lnd"
	"softib/rdmacm"
	"softib/wire/lnetwire"
	"softib/wire/mad"
)

// connd handles the NI's RDMA CM events: the active side's resolve →
// route → connect → CONNACK steps, incoming CONNREQs, rejects and
// disconnects (kiblnd_cm_callback).
func (d *Driver) connd() {
	defer d.wg.Done()
	for {
		ev, err := d.ch.GetEvent(d.ctx)
		if err != nil {
			return
		}
		if ev.Type == rdmacm.EventConnectRequest {
			d.passiveConnect(ev)
			continue
		}
		c, _ := ev.ID.Context().(*conn)
		if c == nil {
			continue // the listener's own events
		}
		switch ev.Type {
		case rdmacm.EventAddrResolved:
			if err := ev.ID.ResolveRoute(DefaultResolveTimeout); err != nil {
				c.connectFailed(err)
			}
		case rdmacm.EventRouteResolved:
			c.activeConnect()
		case rdmacm.EventUnreachable:
			if c.active && ev.Status == int(mad.RejStaleConn) {
				// Our CM refused the REP: the responder's QPN is one an
				// old connection to it still holds. The CM disconnects
				// that one; try again once it is gone.
				c.cmStale(ev)
				break
			}
			c.connectFailed(fmt.Errorf("%w: %v (status %d): %v", lnd.ErrPeerDown, ev.Type, ev.Status, ev.Err))
		case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError:
			c.connectFailed(fmt.Errorf("%w: %v (status %d): %v", lnd.ErrPeerDown, ev.Type, ev.Status, ev.Err))
		case rdmacm.EventRejected:
			c.rejected(ev)
		case rdmacm.EventEstablished:
			if c.active {
				c.activeEstablished(ev.Conn.PrivateData)
			} else {
				d.established(c)
			}
		case rdmacm.EventDisconnected, rdmacm.EventDeviceRemoval:
			c.close(errConnClosed)
		}
	}
}

// startConnect launches conns_per_peer active connection attempts to p
// (kiblnd_launch_tx for a new peer) unless one is running, a connection
// is up, or a reconnect delay holds. Called with d.mu held.
func (d *Driver) startConnect(p *peer, now time.Time) {
	if p.connecting > 0 || d.closed || now.Before(p.retryAt) || p.activeConn() != nil || p.reconnect {
		return
	}
	for range d.cfg.ConnsPerPeer {
		if !d.connectOne(p) {
			return
		}
	}
}

// connectOne starts one active connection attempt to p
// (kiblnd_connect_peer); false if no CM ID could be made. Called with
// d.mu held.
func (d *Driver) connectOne(p *peer) bool {
	c := newConn(d, p, true, p.version, p.queueDepth, p.maxFrags)
	c.setState(connActiveConnect)
	id, err := d.cm.CreateID(d.ch, c, rdmacm.PSTCP)
	if err != nil {
		d.log.Warn("create CM ID", "err", err)
		return false
	}
	c.id = id
	if d.cfg.TOS > 0 {
		// tos: kiblnd_connect_peer's rdma_set_service_type, before the
		// route is resolved; the passive side's QP takes the class
		// from the REQ's path.
		id.SetTOS(uint8(d.cfg.TOS))
	}
	src := netip.AddrPortFrom(d.addr, 0)
	if !d.cfg.AnySourcePort {
		// use_privileged_port: the first free port from 1023 down.
		for port := privPortHi; port >= privPortLo; port-- {
			if id.BindAddr(netip.AddrPortFrom(d.addr, uint16(port))) == nil {
				break
			}
		}
	}
	p.connecting++
	c.pending = true
	p.conns = append(p.conns, c)
	d.conns[c] = struct{}{}
	d.stats.ConnsActive.Add(1)
	dst := netip.AddrPortFrom(nidAddr(p.nid), uint16(d.cfg.Service))
	if err := id.ResolveAddr(src, dst, DefaultResolveTimeout); err != nil {
		// Reported like an ADDR_ERROR, after d.mu is released.
		go c.connectFailed(fmt.Errorf("%w: resolve %v: %w", lnd.ErrPeerDown, dst, err))
	}
	return true
}

// connReqMsg builds the CONNREQ/CONNACK of c (56 bytes).
func (c *conn) connMsg(typ lnetwire.KibMsgType) []byte {
	d := c.d
	f := lnetwire.KibMsgFields{
		KibMsgHdr: lnetwire.KibMsgHdr{Version: c.version, Type: typ, SrcNID: d.nid, SrcStamp: d.incarnation,
			DstNID: c.nid, DstStamp: c.peerStamp},
		ConnParams: lnetwire.KibConnParams{QueueDepth: uint16(c.queueDepth), MaxFrags: uint16(c.maxFrags),
			MaxMsgSize: lnetwire.KibMsgSize},
	}
	b := f.Append(make([]byte, 0, lnetwire.KibConnMsgLen))
	if d.cfg.Cksum {
		lnetwire.SetKibCksum(b)
	}
	return b
}

// connParam is the rdma_conn_param of every o2iblnd connection:
// no RDMA READ (responder resources and initiator depth 0), flow control,
// retry_count and rnr_retry_count from the tunables.
func (d *Driver) connParam(pd []byte) *rdmacm.ConnParam {
	return &rdmacm.ConnParam{PrivateData: pd, FlowControl: true,
		RetryCount: uint8(d.cfg.RetryCount), RNRRetryCount: uint8(d.cfg.RNRRetryCount)}
}

// activeConnect creates the QP and sends the CONNREQ (kiblnd_active_connect).
func (c *conn) activeConnect() {
	d := c.d
	d.mu.Lock()
	c.peerStamp = c.peer.incarnation // 0 when unknown
	d.mu.Unlock()
	c.setupMu.Lock()
	err := c.setup(c.id)
	if err == nil {
		if err = c.id.Connect(d.connParam(c.connMsg(lnetwire.KibCONNREQ))); err != nil {
			err = fmt.Errorf("%w: connect: %w", lnd.ErrPeerDown, err)
		}
	} else {
		err = fmt.Errorf("%w: %w", lnd.ErrNoMem, err)
	}
	c.setupMu.Unlock()
	if err != nil {
		c.connectFailed(err)
	}
}

// activeEstablished checks the CONNACK of the REP and brings the
// connection up (kiblnd_check_connreply).
func (c *conn) activeEstablished(pd []byte) {
	d := c.d
	m, err := lnetwire.UnpackKibMsg(append([]byte(nil), pd...))
	switch {
	case err != nil:
	case m.Type() != lnetwire.KibCONNACK:
		err = fmt.Errorf("%v instead of CONNACK", m.Type())
	case m.Version() != c.version:
		err = fmt.Errorf("CONNACK version %#x, asked %#x", m.Version(), c.version)
	case m.SrcNID() != c.nid || m.DstNID() != d.nid || m.DstStamp() != d.incarnation:
		err = fmt.Errorf("CONNACK from %v to %v stamp %#x: %w", m.SrcNID(), m.DstNID(), m.DstStamp(), ErrStale)
	default:
		cp := m.ConnParams()
		if cp.QueueDepth == 0 || int(cp.QueueDepth) > c.queueDepth || cp.MaxFrags == 0 || int(cp.MaxFrags) > c.maxFrags ||
			cp.MaxMsgSize > lnetwire.KibMsgSize {
			err = fmt.Errorf("CONNACK parameters %+v exceed ours (%d, %d)", cp, c.queueDepth, c.maxFrags)
		} else {
			c.queueDepth, c.maxFrags = int(cp.QueueDepth), int(cp.MaxFrags)
			c.peerStamp = m.SrcStamp()
		}
	}
	if err != nil {
		d.stats.Malformed.Add(1)
		c.connectFailed(fmt.Errorf("%w: bad CONNACK: %w", errProto, err))
		return
	}
	d.established(c)
}

// established brings c up (kiblnd_connreq_done): flow state, the peer's
// incarnation, stale connections closed, queued txs handed over, and
// early receives handled.
func (d *Driver) established(c *conn) {
	now := time.Now()
	c.mu.Lock()
	if !c.setState(connEstablished) {
		c.mu.Unlock()
		return
	}
	c.flow = NewFlow[*tx](c.flowParams(), now)
	c.lastRx.Store(now.UnixNano())
	early := c.early
	c.early = nil
	c.mu.Unlock()

	d.mu.Lock()
	p := c.peer
	if c.pending {
		if c.active {
			p.connecting--
		} else {
			p.accepting--
		}
		c.pending = false
	}
	var stale []*conn
	for _, o := range p.conns {
		if o != c && o.getState() == connEstablished && (o.peerStamp != c.peerStamp || o.version != c.version) {
			stale = append(stale, o)
		}
	}
	rebooted := p.lastStamp != 0 && p.lastStamp != c.peerStamp
	oldStamp := p.lastStamp
	p.incarnation, p.version, p.lastStamp = c.peerStamp, c.version, c.peerStamp
	p.reconnects, p.races = 0, 0
	p.lastAlive = now
	q := p.txq
	p.txq = nil
	closed := d.closed
	d.mu.Unlock()
	d.stats.ConnsEstablished.Add(1)
	if rebooted {
		d.stats.PeerReboots.Add(1)
		d.log.Info("o2iblnd: peer restarted", "peer", c.nid.String(),
			"old_incarnation", fmt.Sprintf("%#x", oldStamp), "incarnation", fmt.Sprintf("%#x", c.peerStamp))
	}
	if closed {
		c.close(lnd.ErrShutdown)
	}
	for _, o := range stale {
		d.stats.Stale.Add(1)
		o.close(errStaleConn)
	}
	d.ni.NotifyPeer(c.nid, true, now)
	for _, t := range q {
		c.queueTx(t)
	}
	for _, r := range early {
		c.checkAndHandle(r)
	}
}

// connectFailed ends an attempt that never got up.
func (c *conn) connectFailed(err error) {
	c.d.stats.ConnectFailures.Add(1)
	c.close(err)
}

// rejected handles a REJ of our CONNREQ (kiblnd_rejected,
// kiblnd_check_reconnect): reasons that can be fixed retry once this
// attempt is destroyed, adopting the peer's version, queue depth or
// max_frags.
func (c *conn) rejected(ev *rdmacm.Event) {
	d := c.d
	if !c.active {
		// The active side refused our REP (a bad CONNACK, a stale QPN,
		// or it gave up): nothing here to retry, it reconnects if it
		// wants to.
		c.connectFailed(fmt.Errorf("%w: REP rejected, CM reason %d: %v", lnd.ErrPeerDown, ev.Status, ev.Err))
		return
	}
	switch ev.Status {
	case int(mad.RejConsumerDefined):
	case int(mad.RejStaleConn):
		// The peer's CM still holds a connection with our QPN (we, or
		// this device, restarted): it disconnects that one; retry
		// (kiblnd_rejected: IB_CM_REJ_STALE_CONN).
		c.cmStale(ev)
		return
	default:
		c.connectFailed(fmt.Errorf("%w: CM reject reason %d: %v", lnd.ErrPeerDown, ev.Status, ev.Err))
		return
	}
	if isZero(ev.Conn.PrivateData) {
		// A consumer reject without a kib_rej (an RDMA CM refusing
		// before o2iblnd saw the request, a destroyed listener): a plain
		// refusal, not a malformed message.
		c.connectFailed(fmt.Errorf("%w: rejected without a kib_rej", lnd.ErrPeerDown))
		return
	}
	rej, err := lnetwire.ParseKibRej(ev.Conn.PrivateData)
	if err != nil {
		d.stats.Malformed.Add(1)
		c.connectFailed(fmt.Errorf("%w: bad kib_rej: %w", lnd.ErrPeerDown, err))
		return
	}
	d.stats.RejectsRecv[rej.Why&15].Add(1)
	now := time.Now()
	d.mu.Lock()
	p := c.peer
	retry := false
	var stale []*conn
	switch rej.Why {
	case lnetwire.KibRejConnRace:
		d.stats.Races.Add(1)
		// The peer's own connection wins; retry only if it does not come.
		retry = p.accepting == 0 && p.activeConn() == nil
	case lnetwire.KibRejConnStale:
		if rej.HasParams {
			p.incarnation = rej.Incarnation
		} else {
			p.incarnation = 0
		}
		// The peer is another incarnation than the one our CONNREQ
		// named (c.peerStamp): connections to that one are dead, fail
		// what they hold now rather than at their timeouts.
		for _, o := range p.conns {
			// peerStamp is final once a connection is established.
			if o == c || o.getState() != connEstablished {
				continue
			}
			if (rej.HasParams && o.peerStamp != rej.Incarnation) || (!rej.HasParams && o.peerStamp == c.peerStamp) {
				stale = append(stale, o)
			}
		}
		retry = true
	case lnetwire.KibRejConnUncompat:
		if (rej.Version == lnetwire.KibVersion1 || rej.Version == lnetwire.KibVersion2) && rej.Version != c.version {
			p.version = rej.Version
			if rej.Version == lnetwire.KibVersion1 {
				p.queueDepth = lnetwire.KibQueueDepthV1
			}
			retry = true
		}
	case lnetwire.KibRejMsgQueueSize:
		if rej.HasParams && rej.ConnParams.QueueDepth > 0 && int(rej.ConnParams.QueueDepth) < c.queueDepth {
			p.queueDepth = int(rej.ConnParams.QueueDepth)
			retry = true
		}
	case lnetwire.KibRejRDMAFrags:
		if rej.HasParams && rej.ConnParams.MaxFrags > 0 && int(rej.ConnParams.MaxFrags) < c.maxFrags {
			p.maxFrags = int(rej.ConnParams.MaxFrags)
			retry = true
		}
	}
	if retry && p.upExcept(stale) {
		// Another connection of the round (conns_per_peer) is up: the
		// peer is reachable, nothing to retry.
		retry = false
	}
	if retry {
		d.planReconnectLocked(p, now)
	}
	d.mu.Unlock()
	d.log.Debug("connection rejected", "peer", c.nid, "why", rej.Why, "retry", retry)
	for _, o := range stale {
		d.stats.Stale.Add(1)
		o.close(errStaleConn)
	}
	c.connectFailed(&RejectError{Rej: rej})
}

// planReconnectLocked makes p reconnect once its failed connections are
// destroyed (all of them: a round of conns_per_peer attempts is retried
// as one); past reconnHighRace consecutive tries it waits a second.
// Called with d.mu held.
func (d *Driver) planReconnectLocked(p *peer, now time.Time) {
	if p.reconnect {
		return // another attempt of the same round asked already
	}
	p.reconnect = true
	p.reconnects++
	d.stats.Reconnects.Add(1)
	if p.reconnects > reconnHighRace {
		p.retryAt = now.Add(time.Second)
	}
}

// cmStale ends an active attempt the CM found stale (REJ STALE_CONN
// from the peer's CM, or our CM refusing a REP whose QPN an old
// connection holds) and plans a reconnect: a new QP gets a new QPN, and
// the CM takes the stale connection down meanwhile.
func (c *conn) cmStale(ev *rdmacm.Event) {
	d := c.d
	d.stats.Stale.Add(1)
	d.mu.Lock()
	d.planReconnectLocked(c.peer, time.Now())
	d.mu.Unlock()
	d.log.Info("o2iblnd: stale connection, reconnecting", "peer", c.nid.String(), "event", ev.Type.String(), "status", ev.Status)
	c.connectFailed(fmt.Errorf("%w: CM %v status %d: %w", lnd.ErrPeerDown, ev.Type, ev.Status, ErrStale))
}

// isZero reports whether b holds no byte but zero (REJ private data is
// zero-padded on the wire).
func isZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// rejData is the kib_rej refusing a request for why: our version (V1
// for a V1 peer), incarnation and connection parameters.
func (d *Driver) rejData(version uint16, why lnetwire.KibRejReason) []byte {
	if version != lnetwire.KibVersion1 {
		version = lnetwire.KibVersion2
	}
	rej := lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: version, Why: why, Incarnation: d.incarnation,
		ConnParams: lnetwire.KibConnParams{QueueDepth: uint16(d.cfg.PeerCredits), MaxFrags: uint16(d.cfg.MaxFrags),
			MaxMsgSize: lnetwire.KibMsgSize}}
	d.stats.RejectsSent[why&15].Add(1)
	return rej.Append(make([]byte, 0, lnetwire.KibRejLen))
}

// reject refuses an incoming request with a kib_rej and frees its ID.
func (d *Driver) reject(id *rdmacm.ID, version uint16, why lnetwire.KibRejReason) {
	_ = id.Reject(d.rejData(version, why))
	_ = id.Destroy()
}

// passiveConnect checks an incoming CONNREQ and accepts it with a CONNACK
// or rejects it (kiblnd_passive_connect).
func (d *Driver) passiveConnect(ev *rdmacm.Event) {
	id := ev.ID
	m, why, ok := d.vetConnReq(ev.Conn.PrivateData, id.LocalAddr().Port())
	ver := lnetwire.KibVersion2
	if m != nil {
		ver = m.Version()
	}
	if !ok {
		if why == lnetwire.KibRejConnStale {
			d.stats.Stale.Add(1)
		}
		d.reject(id, ver, why)
		return
	}
	cp := m.ConnParams()
	src := m.SrcNID()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.reject(id, ver, lnetwire.KibRejEarly)
		return
	}
	p := d.findPeer(src)
	if p.incarnation != 0 && (p.incarnation != m.SrcStamp() || p.version != ver) {
		// The peer rebooted: drop its old connections and make it retry
		// once they are gone.
		stale := append([]*conn(nil), p.conns...)
		p.incarnation = 0
		d.mu.Unlock()
		d.stats.Stale.Add(1)
		for _, o := range stale {
			o.close(errStaleConn)
		}
		d.reject(id, ver, lnetwire.KibRejConnStale)
		return
	}
	// Connection race: the higher NID wins, unless we keep winning
	// against what is likely a zombie.
	if p.connecting > 0 && src < d.nid && p.races < maxConnRaces {
		p.races++
		d.mu.Unlock()
		d.stats.Races.Add(1)
		d.reject(id, ver, lnetwire.KibRejConnRace)
		return
	}
	if p.races >= maxConnRaces {
		d.log.Warn("connection race limit: letting the lower NID win", "peer", src)
	}
	p.races = 0
	c := newConn(d, p, false, ver, int(cp.QueueDepth), int(cp.MaxFrags))
	c.peerStamp = m.SrcStamp()
	c.id = id
	c.setState(connPassiveWait)
	c.pending = true
	p.accepting++
	p.conns = append(p.conns, c)
	d.conns[c] = struct{}{}
	d.stats.ConnsActive.Add(1)
	d.mu.Unlock()
	id.SetContext(c)
	c.setupMu.Lock()
	if err := c.setup(id); err != nil {
		c.setupMu.Unlock()
		d.log.Warn("accept: no resources", "peer", src, "err", err)
		_ = id.Reject(d.rejData(ver, lnetwire.KibRejNoResources))
		c.close(fmt.Errorf("%w: %w", lnd.ErrNoMem, err)) // destroys the ID and what setup made
		return
	}
	err := id.Accept(d.connParam(c.connMsg(lnetwire.KibCONNACK)))
	c.setupMu.Unlock()
	if err != nil {
		c.close(fmt.Errorf("%w: accept: %w", lnd.ErrPeerDown, err))
	}
}

// vetConnReq applies the stateless checks of kiblnd_passive_connect to
// CONNREQ private data received on port: a malformed or wrong message,
// a stale dststamp, a queue depth or fragment count above ours, a message
// size above 4 KiB. It returns the normalized message (nil if it did not
// parse) and, when refused, the reject reason.
func (d *Driver) vetConnReq(pd []byte, port uint16) (lnetwire.KibMsg, lnetwire.KibRejReason, bool) {
	m, err := lnetwire.UnpackKibMsg(append([]byte(nil), pd...))
	if err != nil {
		d.stats.Malformed.Add(1)
		if errors.Is(err, lnetwire.ErrBadVersion) {
			return nil, lnetwire.KibRejConnUncompat, false
		}
		return nil, lnetwire.KibRejFatal, false
	}
	if m.Type() != lnetwire.KibCONNREQ {
		return m, lnetwire.KibRejFatal, false // and its body is not connparams
	}
	cp := m.ConnParams()
	local := d.cfg.PeerCredits
	if m.Version() == lnetwire.KibVersion1 {
		local = lnetwire.KibQueueDepthV1
	}
	switch {
	case port != uint16(d.cfg.Service):
		return m, lnetwire.KibRejInvalidSrvID, false
	case m.DstNID() != d.nid || m.SrcNID().Net() != d.nid.Net():
		return m, lnetwire.KibRejFatal, false
	case m.DstStamp() != 0 && m.DstStamp() != d.incarnation:
		return m, lnetwire.KibRejConnStale, false
	case int(cp.QueueDepth) > local:
		return m, lnetwire.KibRejMsgQueueSize, false
	case int(cp.MaxFrags) > d.cfg.MaxFrags:
		return m, lnetwire.KibRejRDMAFrags, false
	case cp.QueueDepth == 0 || cp.MaxFrags == 0 || cp.MaxMsgSize > lnetwire.KibMsgSize:
		return m, lnetwire.KibRejFatal, false
	}
	return m, 0, true
}

// connClosing detaches a closing connection from its peer; when it was
// the last way to reach the peer and no retry is planned, the peer's
// queued txs fail and the core hears the peer is down.
func (d *Driver) connClosing(c *conn, err error) {
	d.mu.Lock()
	p := c.peer
	for i, o := range p.conns {
		if o == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			break
		}
	}
	if c.pending {
		if c.active {
			p.connecting--
		} else {
			p.accepting--
		}
		c.pending = false
	}
	var q []*tx
	// notify is decided under d.mu: p.reconnect is guarded by it
	// (connDestroyed clears it concurrently).
	notify := len(p.conns) == 0 && p.connecting == 0 && p.accepting == 0 && !p.reconnect
	if notify {
		q = p.txq
		p.txq = nil
	}
	if t := c.lastRx.Load(); t != 0 {
		p.lastAlive = time.Unix(0, t)
	}
	d.mu.Unlock()
	for _, t := range q {
		d.txDone(t, err)
	}
	if notify {
		// Down as of now: the core stamps every message it receives
		// with its own clock, later than our lastRx, and ignores a down
		// report older than the last sign of life.
		d.ni.NotifyPeer(c.nid, false, time.Now())
	}
}

// connDestroyed forgets a torn-down connection and starts the reconnect
// a reject asked for (reconnects wait for the zombie to be gone).
func (d *Driver) connDestroyed(c *conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.connsGone.Broadcast()
	d.stats.ConnsActive.Add(-1)
	p := c.peer
	var q []*tx
	if p.reconnect && len(p.conns) == 0 {
		p.reconnect = false
		if len(p.txq) > 0 {
			d.startConnect(p, time.Now())
			if p.connecting == 0 && !p.retryAt.After(time.Now()) {
				q, p.txq = p.txq, nil
			}
		}
	}
	d.mu.Unlock()
	for _, t := range q {
		d.txDone(t, errConnClosed)
	}
}
