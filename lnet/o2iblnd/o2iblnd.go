package o2iblnd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"softib/lnet/lnd"
	"softib/rdmacm"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// Errors of the driver, matched with errors.Is. Message failures also
// match the lnd sentinels (lnd.ErrPeerDown, lnd.ErrTimeout, ...).
var (
	// ErrRejected is a connection the peer refused; *RejectError carries
	// the kib_rej reason.
	ErrRejected = errors.New("o2iblnd: connection rejected")
	// ErrStale is a message or connection of an old incarnation (ESTALE).
	ErrStale = errors.New("o2iblnd: stale incarnation")
	// ErrNoConfig is a Startup without an RDMA CM.
	ErrNoConfig = errors.New("o2iblnd: Config.CM is required")
)

// RejectError is a connection attempt the peer rejected with a kib_rej.
type RejectError struct {
	Rej lnetwire.KibRej
}

// Error names the reason.
func (e *RejectError) Error() string {
	return fmt.Sprintf("o2iblnd: connection rejected: %v", e.Rej.Why)
}

// Is matches ErrRejected and lnd.ErrPeerDown.
func (e *RejectError) Is(target error) bool {
	return target == ErrRejected || target == lnd.ErrPeerDown
}

// Statuses handed to the core, prebuilt so failure paths do not allocate.
var (
	errConnClosed = fmt.Errorf("%w: o2iblnd connection closed", lnd.ErrPeerDown)
	errTxTimeout  = fmt.Errorf("%w: o2iblnd tx/RDMA timed out", lnd.ErrTimeout)
	errProto      = fmt.Errorf("%w: o2iblnd", lnd.ErrProto)
	errStaleConn  = fmt.Errorf("%w: %w", lnd.ErrPeerDown, ErrStale)
	errNoData     = fmt.Errorf("%w: peer had no data (ENODATA)", lnd.ErrPeerDown)
)

// errno values carried in completion statuses (Linux numbering).
const (
	eNODATA   = 61
	eMSGSIZE  = 90
	eIO       = 5
	eNOMEM    = 12
	eCANCELED = 125
)

// Stats are the driver's counters, updated atomically.
type Stats struct {
	TxMsgs, RxMsgs       atomic.Uint64 // kib_msgs posted / received
	TxImmediate          atomic.Uint64
	TxRDMA               atomic.Uint64 // PUT/GET moved by RDMA
	RDMABytes            atomic.Uint64
	TxNoops, RxNoops     atomic.Uint64
	Keepalives           atomic.Uint64
	ConnsActive          atomic.Int64
	ConnsEstablished     atomic.Uint64
	ConnsClosed          atomic.Uint64
	ConnectFailures      atomic.Uint64
	RejectsSent          [16]atomic.Uint64 // by kib_rej reason
	RejectsRecv          [16]atomic.Uint64
	Races                atomic.Uint64
	Reconnects           atomic.Uint64
	Stale                atomic.Uint64 // stale connections: kib_rej STALE, CM STALE_CONN, old incarnations
	PeerReboots          atomic.Uint64 // connections established to a new incarnation of a peer
	Malformed            atomic.Uint64 // bad kib_msgs (closed the connection)
	CreditOverflow       atomic.Uint64
	TxTimeouts           atomic.Uint64
	NoTx                 atomic.Uint64 // sends refused: tx pool empty
	PutNaks              atomic.Uint64
	ParseRejects         atomic.Uint64
	Bounced              atomic.Uint64 // sinks staged through a bounce buffer
	FastRegs             atomic.Uint64 // multi-fragment sinks registered through a fast-reg MR
	EarlyRx              atomic.Uint64 // messages before ESTABLISHED
	PeakConnTxs          atomic.Int64  // most txs one connection held at once (queued, sending or waiting)
	UnmatchedCompletions atomic.Uint64
}

// LND is the o2iblnd driver type. Register one value per lnet.Instance;
// every o2ib NI of that instance gets its own *Driver.
type LND struct {
	// Config applies to NIs whose lnd.NI.LNDConfig is nil; an NI may
	// carry its own Config or *Config.
	Config Config

	mu      sync.Mutex
	drivers map[lnetwire.NID]*Driver
}

// New returns an LND using cfg for NIs without their own configuration.
func New(cfg Config) *LND { return &LND{Config: cfg} }

// Type returns lnetwire.O2IBLND.
func (l *LND) Type() lnetwire.LNDType { return lnetwire.O2IBLND }

// DefaultTunables returns ko2iblnd's credits (256), peer credits (8) and
// peer timeout (180 s).
func (l *LND) DefaultTunables() lnd.Tunables {
	t := lnd.DefaultTunables
	t.Credits, t.PeerCredits, t.PeerTimeout = DefaultCredits, DefaultPeerCredits, DefaultPeerTimeout
	return t
}

// Driver returns the started driver of the NI with the given NID, or nil.
func (l *LND) Driver(nid lnetwire.NID) *Driver {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drivers[nid]
}

// Driver is one started o2ib NI.
//
// Locking: Driver.mu guards peers and every peer's fields; conn.mu a
// connection's flow, queues and rx state. Lock order: Driver.mu, then
// conn.mu. Parse, Finalize and NotifyPeer are never called with either
// held.
type Driver struct {
	ni          *lnd.NI
	lnd         *LND
	cfg         Config
	nid         lnetwire.NID
	addr        netip.Addr
	incarnation uint64
	log         *slog.Logger

	cm     *rdmacm.Manager
	ch     *rdmacm.EventChannel
	lis    *rdmacm.ID
	dev    verbs.Device
	pd     verbs.PD
	txs    *txPool
	mrs    *mrCache
	bounce *bouncePool
	// wrqSGE is Config.WrqSGE capped by the device's max_sge.
	wrqSGE int
	// noFastReg is set once the provider turned fast registration down
	// (ErrNotSupported): sinks go straight to the bounce pool.
	noFastReg atomic.Bool
	stats     Stats

	mu     sync.Mutex
	peers  map[lnetwire.NID]*peer
	conns  map[*conn]struct{} // every conn not yet destroyed
	closed bool
	// connsGone is signalled (on mu) when a connection is destroyed.
	connsGone sync.Cond

	wg     sync.WaitGroup
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
}

// peer is what the driver knows of one peer NI (kib_peer). Fields are
// guarded by Driver.mu.
type peer struct {
	nid         lnetwire.NID
	version     uint16 // to propose
	queueDepth  int    // to propose
	maxFrags    int    // to propose
	incarnation uint64 // last seen; 0 = unknown
	lastStamp   uint64 // incarnation of the last established connection
	conns       []*conn
	connecting  int
	accepting   int
	txq         []*tx // waiting for a connection
	next        int   // round-robin cursor over conns (kiblnd_get_conn_locked)
	races       int
	reconnects  int // consecutive, reset when a connection is up
	retryAt     time.Time
	reconnect   bool // reconnect once the failed conn is destroyed
	lastAlive   time.Time
}

// Startup brings up one o2ib NI: it completes the NID's address, creates
// the tx pool and the listener on service 987 of the NI's device.
func (l *LND) Startup(ni *lnd.NI) (lnd.Driver, error) {
	cfg := l.Config
	switch c := ni.LNDConfig.(type) {
	case nil:
	case Config:
		cfg = c
	case *Config:
		cfg = *c
	default:
		return nil, fmt.Errorf("o2iblnd: LNDConfig is %T, want o2iblnd.Config", ni.LNDConfig)
	}
	if cfg.ConnsPerPeer == 0 {
		cfg.ConnsPerPeer = ni.Tunables.ConnsPerPeer
	}
	explicitSGE := cfg.WrqSGE > 0 // a default beyond the device's max_sge is capped, a set one refused
	cfg = cfg.withDefaults(ni.Tunables.PeerCredits)
	if cfg.CM == nil {
		return nil, ErrNoConfig
	}
	if cfg.ConnsPerPeer < 1 || cfg.ConnsPerPeer > MaxConnsPerPeer {
		return nil, fmt.Errorf("o2iblnd: conns_per_peer %d out of range 1..%d", cfg.ConnsPerPeer, MaxConnsPerPeer)
	}
	if ni.NID.Addr() == 0 {
		ip, err := interfaceIPv4(ni.Interfaces)
		if err != nil {
			return nil, err
		}
		ni.NID = lnetwire.MakeNID(ni.NID.Net(), ip)
	}
	d := &Driver{
		ni:          ni,
		lnd:         l,
		cfg:         cfg,
		nid:         ni.NID,
		addr:        nidAddr(ni.NID),
		incarnation: uint64(time.Now().UnixMicro()),
		log:         ni.Log.With("lnd", "o2iblnd", "ni", ni.NID.String()),
		cm:          cfg.CM,
		ch:          rdmacm.NewEventChannel(),
		peers:       make(map[lnetwire.NID]*peer),
		conns:       make(map[*conn]struct{}),
		done:        make(chan struct{}),
	}
	d.connsGone.L = &d.mu
	d.ctx, d.cancel = context.WithCancel(context.Background())
	lis, err := d.cm.CreateID(d.ch, nil, rdmacm.PSTCP)
	if err != nil {
		return nil, fmt.Errorf("o2iblnd: listener: %w", err)
	}
	fail := func(err error) (lnd.Driver, error) {
		lis.Destroy()
		d.ch.Close()
		if d.txs != nil {
			d.txs.mr.Dereg()
		}
		d.cancel()
		return nil, err
	}
	if err := lis.BindAddr(netip.AddrPortFrom(d.addr, uint16(cfg.Service))); err != nil {
		return fail(fmt.Errorf("o2iblnd: bind %v:%d: %w", d.addr, cfg.Service, err))
	}
	d.lis, d.dev, d.pd = lis, lis.Device(), lis.PD()
	if d.dev == nil || d.pd == nil {
		return fail(fmt.Errorf("o2iblnd: no RDMA device for %v: %w", d.addr, rdmacm.ErrNoDevice))
	}
	if err := d.checkDevice(explicitSGE); err != nil {
		return fail(err)
	}
	d.wrqSGE = max(1, min(cfg.WrqSGE, d.dev.Query().MaxSGE))
	if d.txs, err = newTxPool(d.pd, cfg.NTx); err != nil {
		return fail(err)
	}
	d.mrs = newMRCache(d.pd, cfg.MRCacheSize, cfg.MRCacheBytes)
	d.mrs.flushTrigger, d.mrs.noCache = cfg.MRFlushTrigger, cfg.NoMRCache
	d.bounce = &bouncePool{pd: d.pd, maxIdle: 8}
	if err := lis.Listen(0); err != nil {
		return fail(fmt.Errorf("o2iblnd: listen: %w", err))
	}
	d.wg.Add(2)
	go d.connd()
	go d.reaper()
	l.mu.Lock()
	if l.drivers == nil {
		l.drivers = make(map[lnetwire.NID]*Driver)
	}
	l.drivers[d.nid] = d
	l.mu.Unlock()
	d.log.Debug("o2iblnd up", "incarnation", d.incarnation, "service", cfg.Service, "device", d.dev.Name())
	return d, nil
}

// checkDevice refuses tunables the NI's device cannot honour: an explicit
// wrq_sge above its max_sge and an ib_mtu other than its port's active
// MTU (the path MTU softib's RDMA CM gives every connection).
func (d *Driver) checkDevice(explicitSGE bool) error {
	if m := d.dev.Query().MaxSGE; explicitSGE && d.cfg.WrqSGE > m {
		return fmt.Errorf("o2iblnd: wrq_sge %d: device %s takes at most %d SGEs per work request", d.cfg.WrqSGE, d.dev.Name(), m)
	}
	if d.cfg.IBMTU == 0 {
		return nil
	}
	if !validIBMTU(d.cfg.IBMTU) {
		return fmt.Errorf("o2iblnd: ib_mtu %d: expected 256/512/1024/2048/4096", d.cfg.IBMTU)
	}
	pa, err := d.dev.QueryPort(1)
	if err != nil {
		return fmt.Errorf("o2iblnd: ib_mtu %d: port of %s: %w", d.cfg.IBMTU, d.dev.Name(), err)
	}
	if act := pa.ActiveMTU.Bytes(); d.cfg.IBMTU != act {
		return fmt.Errorf("o2iblnd: ib_mtu %d: connections on %s use its active MTU %d as their path MTU (softib's RDMA CM sets no other); use 0 or %d",
			d.cfg.IBMTU, d.dev.Name(), act, act)
	}
	return nil
}

// validIBMTU reports whether n is one of the IB MTUs (ib_mtu's values).
func validIBMTU(n int) bool {
	switch n {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

// interfaceIPv4 returns the first IPv4 address of the named interfaces
// (names or literal addresses).
func interfaceIPv4(ifaces []string) (uint32, error) {
	for _, name := range ifaces {
		if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
			b := a.As4()
			return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), nil
		}
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if pn, ok := a.(*net.IPNet); ok {
				if v4 := pn.IP.To4(); v4 != nil {
					return uint32(v4[0])<<24 | uint32(v4[1])<<16 | uint32(v4[2])<<8 | uint32(v4[3]), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("o2iblnd: no IPv4 address on interfaces %v; give the NID an address", ifaces)
}

// nidAddr is the IPv4 address of an o2ib NID.
func nidAddr(n lnetwire.NID) netip.Addr {
	a := n.Addr()
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

// Stats returns the driver's live counters.
func (d *Driver) Stats() *Stats { return &d.stats }

// NID returns the NI's NID.
func (d *Driver) NID() lnetwire.NID { return d.nid }

// Incarnation returns the NI's incarnation (µs at startup).
func (d *Driver) Incarnation() uint64 { return d.incarnation }

// Config returns the effective configuration.
func (d *Driver) Config() Config { return d.cfg }

// MRCache returns the number of cached LNet buffer registrations and the
// bytes they keep registered.
func (d *Driver) MRCache() (n, bytes int) { return d.mrs.stats() }

// IdleTxs returns the free tx descriptors.
func (d *Driver) IdleTxs() int { return d.txs.idle() }

// findPeer returns the peer for nid, creating it. Called with d.mu held.
func (d *Driver) findPeer(nid lnetwire.NID) *peer {
	p := d.peers[nid]
	if p == nil {
		p = &peer{nid: nid, version: d.cfg.Version, queueDepth: d.cfg.PeerCredits, maxFrags: d.cfg.MaxFrags}
		d.peers[nid] = p
	}
	return p
}

// activeConn returns p's newest established connection. Called with
// d.mu held.
func (p *peer) activeConn() *conn {
	for i := len(p.conns) - 1; i >= 0; i-- {
		if c := p.conns[i]; c.state.Load() == int32(connEstablished) {
			return c
		}
	}
	return nil
}

// upExcept reports whether p has an established connection other than
// those in skip. Called with d.mu held.
func (p *peer) upExcept(skip []*conn) bool {
	for _, c := range p.conns {
		if c.state.Load() == int32(connEstablished) && !slices.Contains(skip, c) {
			return true
		}
	}
	return false
}

// pickConn returns the established connection a new message goes on:
// with several (conns_per_peer), the next one after the last used, as
// kiblnd_get_conn_locked advances ibp_next_conn, so that consecutive
// messages spread over the peer's QPs (and the device's receive shards).
// nil when none is up. Called with d.mu held.
func (p *peer) pickConn() *conn {
	n := len(p.conns)
	for k := range n {
		i := (p.next + k) % n
		if c := p.conns[i]; c.state.Load() == int32(connEstablished) {
			p.next = i + 1
			return c
		}
	}
	return nil
}

// Send implements lnd.Driver (kiblnd_send): small messages go as
// IMMEDIATE, larger PUT/REPLY payloads as PUT_REQ, GETs whose reply does
// not fit a message as GET_REQ with a sink descriptor.
func (d *Driver) Send(msg *lnd.Msg) error {
	if msg.Payload.Len > lnd.MaxPayload || msg.Payload.Len < 0 {
		return lnd.ErrTooBig
	}
	target := msg.Target.NID
	if target.Net() != d.nid.Net() || target.Addr() == 0 {
		return fmt.Errorf("%w: %s is not on %s", lnd.ErrPeerDown, target, d.nid.Net())
	}
	t := d.txs.get()
	if t == nil {
		d.stats.NoTx.Add(1)
		return fmt.Errorf("%w: no tx descriptor", lnd.ErrNoMem)
	}
	t.lntmsg[0] = msg
	var err error
	switch {
	case msg.Type == lnetwire.MsgGET && msg.Sink.Len > lnetwire.KibMaxImmediatePayload && target == msg.Hdr.DestNID:
		err = d.initGetReq(t, msg)
	case lnetwire.KibImmediateHdrLen+msg.Payload.Len <= lnetwire.KibMsgSize:
		t.typ = lnetwire.KibIMMEDIATE
		msg.Hdr.Encode(t.buf[lnetwire.KibImmediateHdrLen-lnetwire.HdrSize:])
		msg.Payload.CopyTo(t.buf[lnetwire.KibImmediateHdrLen : lnetwire.KibImmediateHdrLen+msg.Payload.Len])
		t.nob = lnetwire.KibImmediateHdrLen + msg.Payload.Len
		d.stats.TxImmediate.Add(1)
	default:
		t.typ = lnetwire.KibPUTREQ
		msg.Hdr.Encode(t.buf[lnetwire.KibHdrLen:])
		lnetwire.PutReqCookie(t.buf, t.cookie)
		t.nob = lnetwire.KibPutReqLen
		t.waiting = true
		d.stats.TxRDMA.Add(1)
	}
	if err != nil {
		d.unmap(t, false)
		d.txs.put(t)
		return err
	}
	d.launch(t, target)
	return nil
}

// initGetReq builds a GET_REQ whose descriptor names the GET's sink, and
// the REPLY message the driver finalizes when GET_DONE arrives.
func (d *Driver) initGetReq(t *tx, msg *lnd.Msg) error {
	reply, err := d.ni.CreateReplyMsg(msg)
	if err != nil {
		return err
	}
	t.lntmsg[1] = reply
	key, err := d.mapSink(t, msg.Sink)
	if err != nil {
		d.ni.Finalize(reply, err)
		t.lntmsg[1] = nil
		return fmt.Errorf("%w: %w", lnd.ErrNoMem, err)
	}
	if t.bounce != nil {
		d.stats.Bounced.Add(1)
	}
	t.typ = lnetwire.KibGETREQ
	msg.Hdr.Encode(t.buf[lnetwire.KibHdrLen:])
	lnetwire.PutReqCookie(t.buf, t.cookie)
	t.nob = lnetwire.KibGetReqBaseLen - lnetwire.KibRDMADescBaseLen +
		lnetwire.PutRDMADesc(t.buf[lnetwire.KibGetReqBaseLen-lnetwire.KibRDMADescBaseLen:], key, t.frags)
	t.waiting = true
	d.stats.TxRDMA.Add(1)
	return nil
}

// launch hands t to an established connection to nid, or queues it on
// the peer and starts connecting (kiblnd_launch_tx).
func (d *Driver) launch(t *tx, nid lnetwire.NID) {
	now := time.Now()
	t.deadline = now.Add(d.cfg.Timeout)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.txDone(t, lnd.ErrShutdown)
		return
	}
	p := d.findPeer(nid)
	if c := p.pickConn(); c != nil {
		d.mu.Unlock()
		c.queueTx(t)
		return
	}
	p.txq = append(p.txq, t)
	d.startConnect(p, now)
	d.mu.Unlock()
}

// Recv implements lnd.Driver (kiblnd_recv): it copies an IMMEDIATE's
// payload, answers a PUT_REQ with a PUT_ACK naming the sink (or a
// PUT_NAK), or RDMA-writes a GET's reply data and sends GET_DONE.
func (d *Driver) Recv(private any, msg *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error {
	r, ok := private.(*rx)
	if !ok {
		return fmt.Errorf("o2iblnd: Recv with foreign context %T", private)
	}
	return r.conn.recv(r, msg, dst, rlen)
}

// Query implements lnd.PeerQuerier: when nid was last heard from.
func (d *Driver) Query(nid lnetwire.NID) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.peers[nid]
	if p == nil {
		return time.Time{}
	}
	last := p.lastAlive
	for _, c := range p.conns {
		if t := time.Unix(0, c.lastRx.Load()); c.lastRx.Load() != 0 && t.After(last) {
			last = t
		}
	}
	return last
}

// NotifyPeerDown implements lnd.PeerDownNotifier: it closes every
// connection to nid and fails what waits for one.
func (d *Driver) NotifyPeerDown(nid lnetwire.NID) {
	d.mu.Lock()
	p := d.peers[nid]
	if p == nil {
		d.mu.Unlock()
		return
	}
	conns := append([]*conn(nil), p.conns...)
	q := p.txq
	p.txq = nil
	d.mu.Unlock()
	for _, c := range conns {
		c.close(errConnClosed)
	}
	for _, t := range q {
		d.txDone(t, errConnClosed)
	}
}

// ClosePeer closes every connection to nid (lctl del_peer-like; tests
// use it to simulate a failure).
func (d *Driver) ClosePeer(nid lnetwire.NID) { d.NotifyPeerDown(nid) }

// Conns returns the number of established connections to nid.
func (d *Driver) Conns(nid lnetwire.NID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	if p := d.peers[nid]; p != nil {
		for _, c := range p.conns {
			if c.state.Load() == int32(connEstablished) {
				n++
			}
		}
	}
	return n
}

// ConnSends returns, for each established connection to nid, the
// messages posted on it: how conns_per_peer spread the traffic.
func (d *Driver) ConnSends(nid lnetwire.NID) []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []uint64
	if p := d.peers[nid]; p != nil {
		for _, c := range p.conns {
			if c.getState() == connEstablished {
				c.mu.Lock()
				out = append(out, c.nsent)
				c.mu.Unlock()
			}
		}
	}
	return out
}

// Shutdown implements lnd.Driver: it stops accepting, closes every
// connection, fails every message it still owns with lnd.ErrShutdown and
// waits for its goroutines.
func (d *Driver) Shutdown() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	close(d.done)
	d.cancel()
	var q []*tx
	for _, p := range d.peers {
		q = append(q, p.txq...)
		p.txq = nil
	}
	conns := make([]*conn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	d.lis.Destroy()
	for _, t := range q {
		d.txDone(t, lnd.ErrShutdown)
	}
	for _, c := range conns {
		c.close(lnd.ErrShutdown)
	}
	// Connections finish tearing down on their own goroutines; none can
	// be added once closed is set.
	d.mu.Lock()
	for len(d.conns) > 0 {
		d.connsGone.Wait()
	}
	d.mu.Unlock()
	d.ch.Close()
	d.wg.Wait()
	d.mrs.close()
	d.bounce.close()
	d.txs.mr.Dereg()
	d.lnd.mu.Lock()
	if d.lnd.drivers[d.nid] == d {
		delete(d.lnd.drivers, d.nid)
	}
	d.lnd.mu.Unlock()
}

// txDone finalizes t's LNet messages with status and recycles it
// (kiblnd_tx_done). Called without locks.
func (d *Driver) txDone(t *tx, status error) {
	if status == nil {
		status = t.status
	}
	d.unmap(t, status == nil)
	msgs := t.lntmsg
	d.txs.put(t)
	for _, m := range msgs {
		if m != nil {
			d.ni.Finalize(m, status)
		}
	}
}

// reaper runs the timers: txs past their deadline (queued on a peer, or
// on a connection, which it then closes), delayed reconnects, and the
// keepalive NOOPs the flows ask for.
func (d *Driver) reaper() {
	defer d.wg.Done()
	tick := min(d.cfg.Timeout/8, time.Second)
	if d.cfg.Keepalive > 0 {
		tick = min(tick, d.cfg.Keepalive/4)
	}
	tick = max(tick, 5*time.Millisecond)
	tm := time.NewTicker(tick)
	defer tm.Stop()
	var expired []*tx
	var conns []*conn
	for {
		select {
		case <-d.done:
			return
		case <-tm.C:
		}
		now := time.Now()
		expired, conns = expired[:0], conns[:0]
		d.mu.Lock()
		for _, p := range d.peers {
			keep := p.txq[:0]
			for _, t := range p.txq {
				if now.After(t.deadline) {
					expired = append(expired, t)
				} else {
					keep = append(keep, t)
				}
			}
			clear(p.txq[len(keep):])
			p.txq = keep
			if len(p.txq) > 0 {
				d.startConnect(p, now)
			}
		}
		for c := range d.conns {
			conns = append(conns, c)
		}
		d.mu.Unlock()
		d.stats.TxTimeouts.Add(uint64(len(expired)))
		for _, t := range expired {
			d.txDone(t, errTxTimeout)
		}
		for _, c := range conns {
			c.check(now)
		}
		clear(expired)
		clear(conns)
	}
}
