// Package socklnd is the LNet TCP network driver, byte-compatible with
// Lustre's ksocklnd (lnet-wire.md §7): a kernel Lustre node can connect to
// it and it can connect to one.
//
// Flow of a send:
//
//	Driver.Send ─► peer: pick a conn by size (CONTROL < min_bulk ≤ BULK_OUT)
//	            └► no conn: queue on the peer, start a connect job
//	conn writer goroutine: drain queue ─► ksock_msg hdr + lnet_hdr + payload
//	            ─► piggyback ZC-ACKs, checksum ─► one writev (net.Buffers)
//	            ─► Finalize(nil), or hold until the peer's ZC-ACK
//
// Flow of a receive, one reader goroutine per connection:
//
//	ksock_msg hdr ─► ZC-ACKs, NOOP/keepalive ─► lnet_hdr ─► NI.Parse
//	            ─► Driver.Recv (now or delayed) ─► payload read straight
//	            into the MD ─► Finalize ─► queue our ZC-ACK if requested
//
// A router's forwarded payloads between two tcp NIs skip user memory:
// RecvKept splices them from the socket into a pipe, the next hop's
// writer splices them out (keep_linux.go).
//
// Connection setup (handshake.go): the active side connects from a
// privileged port to accept_port, sends the acceptor request and its
// HELLO; the passive side checks port, request and HELLO, resolves races
// (higher NID wins), closes stale connections of a rebooted peer and
// answers with its HELLO.
package socklnd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Errors of the driver, matched with errors.Is. Message failures use the
// lnd sentinels (lnd.ErrPeerDown, lnd.ErrTimeout, ...) so the core can
// judge them.
var (
	// ErrRace is a connection the peer refused because a connection of
	// that type exists or its own attempt wins the race (EALREADY).
	ErrRace = errors.New("socklnd: connection race or duplicate (EALREADY)")
	// ErrRefused is a connection refused during setup (port policy, wrong
	// target, unknown protocol, bad HELLO).
	ErrRefused = errors.New("socklnd: connection refused")
	// ErrMalformed is a message that breaks the framing; the connection
	// is closed.
	ErrMalformed = errors.New("socklnd: malformed message")
	// ErrCsum is a checksum mismatch on a received message.
	ErrCsum = errors.New("socklnd: checksum mismatch")
	// errStale closes connections of a peer whose incarnation changed.
	errStale = errors.New("socklnd: peer rebooted (incarnation changed)")
	// errRetryProto asks the connect job to retry with the version the
	// peer answered.
	errRetryProto = errors.New("socklnd: peer proposed another protocol version")
)

// Stats are the driver's counters. All fields are updated atomically;
// read them with Load.
type Stats struct {
	TxMsgs, RxMsgs   atomic.Uint64 // LNET messages sent / received
	TxBytes, RxBytes atomic.Uint64 // payload bytes
	TxNoops, RxNoops atomic.Uint64 // NOOPs (ZC-ACKs, keepalives)
	KeepalivesSent   atomic.Uint64
	ZCAcksSent       atomic.Uint64 // cookies acknowledged to peers
	ZCAcksRecv       atomic.Uint64 // cookies peers acknowledged
	ZCAcksUnknown    atomic.Uint64 // acknowledged cookies with no pending send
	ConnsActive      atomic.Int64  // connections currently open
	ConnsEstablished atomic.Uint64 // connections that completed setup
	ConnsClosed      atomic.Uint64
	ConnectFailures  atomic.Uint64 // active attempts that failed
	Races            atomic.Uint64 // attempts ending in EALREADY (either side)
	AcceptRefused    atomic.Uint64 // passive attempts refused (port, target, version, HELLO)
	AcceptOverload   atomic.Uint64 // accepted sockets closed at once: too many handshakes pending (in all or from one address)
	AcceptTimeouts   atomic.Uint64 // passive handshakes whose peer went silent
	PeerReboots      atomic.Uint64 // incarnation changes seen
	Malformed        atomic.Uint64 // bad framing or header from a peer
	Oversized        atomic.Uint64 // payload_length above LNET_MTU
	CsumErrors       atomic.Uint64
	ParseRejects     atomic.Uint64 // headers the core refused
	TxTimeouts       atomic.Uint64 // queued sends that found no connection in time
	// Forwarded payloads (keep_linux.go): received into a pipe by
	// splice, sent from one by splice, and the receives that fell back
	// to copying because the pipe ran out of slots mid-payload.
	KeptRx, KeptTx, KeptFallbacks atomic.Uint64
}

// LND is the socklnd driver type. Register one value per lnet.Instance
// (lnet.Config.LNDs); every tcp NI of that instance gets its own *Driver.
type LND struct {
	// Config applies to NIs whose lnd.NI.LNDConfig is nil; an NI may
	// carry its own Config or *Config instead.
	Config Config

	mu      sync.Mutex
	drivers map[lnetwire.NID]*Driver
	pipes   pipePool // forwarded payloads kept in the kernel (keep_linux.go)
}

// The interfaces socklnd implements.
var (
	_ lnd.LND              = (*LND)(nil)
	_ lnd.TunableDefaulter = (*LND)(nil)
	_ lnd.Driver           = (*Driver)(nil)
	_ lnd.PeerQuerier      = (*Driver)(nil)
	_ lnd.PeerDownNotifier = (*Driver)(nil)
)

// New returns an LND using cfg for NIs without their own configuration.
func New(cfg Config) *LND { return &LND{Config: cfg} }

// Type returns lnetwire.SOCKLND.
func (l *LND) Type() lnetwire.LNDType { return lnetwire.SOCKLND }

// DefaultTunables returns ksocklnd's credits (256) and peer credits (8).
func (l *LND) DefaultTunables() lnd.Tunables {
	t := lnd.DefaultTunables
	t.Credits, t.PeerCredits = DefaultCredits, DefaultPeerCredits
	return t
}

// Driver returns the started driver of the NI with the given NID, or nil.
func (l *LND) Driver(nid lnetwire.NID) *Driver {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drivers[nid]
}

// Startup brings up one tcp NI: it completes the NID's address from the
// interfaces if needed, starts the acceptor and the reaper.
func (l *LND) Startup(ni *lnd.NI) (lnd.Driver, error) {
	cfg := l.Config
	switch c := ni.LNDConfig.(type) {
	case nil:
	case Config:
		cfg = c
	case *Config:
		cfg = *c
	default:
		return nil, fmt.Errorf("socklnd: LNDConfig is %T, want socklnd.Config", ni.LNDConfig)
	}
	cfg = cfg.withDefaults()
	if cfg.ConnsPerPeer <= 0 {
		cfg.ConnsPerPeer = max(ni.Tunables.ConnsPerPeer, 1)
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
		cfg:         cfg,
		nid:         ni.NID,
		pid:         ni.PID,
		incarnation: uint64(time.Now().UnixNano()),
		log:         ni.Log.With("lnd", "socklnd", "ni", ni.NID.String()),
		connSem:     make(chan struct{}, cfg.Nconnds),
		txPool:      make(chan *tx, 1024),
		peers:       make(map[lnetwire.NID]*peer),
		handshakes:  make(map[net.Conn]struct{}),
		pendingBy:   make(map[netip.Addr]int),
		done:        make(chan struct{}),
		kickReaper:  make(chan struct{}, 1),
	}
	var err error
	if d.capt, err = newCapture(cfg.Capture); err != nil {
		return nil, fmt.Errorf("socklnd: capture: %w", err)
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if cfg.Accept != AcceptNone {
		addr := cfg.ListenAddr
		if addr == "" {
			addr = netip.AddrPortFrom(nidAddr(d.nid), uint16(cfg.AcceptPort)).String()
		}
		var ln net.Listener
		err := d.socketContext(func() (err error) {
			ln, err = net.Listen("tcp4", addr)
			return err
		})
		if err != nil {
			d.cancel()
			return nil, fmt.Errorf("socklnd: acceptor: %w", err)
		}
		d.ln = ln
		d.wg.Add(1)
		go d.acceptLoop()
	}
	d.wg.Add(1)
	go d.reaper()
	l.mu.Lock()
	if l.drivers == nil {
		l.drivers = make(map[lnetwire.NID]*Driver)
	}
	l.drivers[d.nid] = d
	l.mu.Unlock()
	d.lnd = l
	d.log.Debug("socklnd up", "accept", cfg.Accept, "incarnation", d.incarnation)
	return d, nil
}

// interfaceIPv4 returns the first IPv4 address of the named interfaces
// (names or literal addresses).
func interfaceIPv4(ifaces []string) (uint32, error) {
	for _, name := range ifaces {
		if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
			return ip4(a), nil
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
	return 0, fmt.Errorf("socklnd: no IPv4 address on interfaces %v; give the NID an address", ifaces)
}

func ip4(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// nidAddr is the IPv4 address of a tcp NID.
func nidAddr(n lnetwire.NID) netip.Addr {
	a := n.Addr()
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

// Driver is one started tcp NI.
//
// Locking: mu guards peers, closed and every peer's fields; conn.mu
// guards a connection's queues. Lock order: Driver.mu, then conn.mu.
// Finalize, Parse and NotifyPeer are never called with either held.
type Driver struct {
	ni          *lnd.NI
	lnd         *LND
	cfg         Config
	nid         lnetwire.NID
	pid         lnetwire.PID
	incarnation uint64
	log         *slog.Logger
	ln          net.Listener
	connSem     chan struct{} // bounds concurrent outgoing connects (nconnds)
	txPool      chan *tx      // free tx descriptors
	stats       Stats
	kickReaper  chan struct{}
	refusedLog  rateLimit // refusal log lines
	capt        *capture  // Config.Capture; nil: none

	mu         sync.Mutex
	peers      map[lnetwire.NID]*peer
	closed     bool
	handshakes map[net.Conn]struct{} // sockets in setup, closed by Shutdown
	pending    int                   // accepted sockets in their handshake
	pendingBy  map[netip.Addr]int    // the same per remote address

	wg     sync.WaitGroup // acceptor, reaper, handshakes, readers, writers
	done   chan struct{}  // closed by Shutdown
	ctx    context.Context
	cancel context.CancelFunc // cancels dials at Shutdown
}

// trackHandshake registers a socket in setup so Shutdown can close it;
// false (and the socket closed) if the driver is shutting down.
func (d *Driver) trackHandshake(nc net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		nc.Close()
		return false
	}
	d.handshakes[nc] = struct{}{}
	return true
}

func (d *Driver) untrackHandshake(nc net.Conn) {
	d.mu.Lock()
	delete(d.handshakes, nc)
	d.mu.Unlock()
}

// socketContext runs f where sockets must be created (Config.SocketContext).
func (d *Driver) socketContext(f func() error) error {
	if d.cfg.SocketContext != nil {
		return d.cfg.SocketContext(f)
	}
	return f()
}

// Stats returns the driver's live counters.
func (d *Driver) Stats() *Stats { return &d.stats }

// NID returns the NI's NID.
func (d *Driver) NID() lnetwire.NID { return d.nid }

// Incarnation returns the value this NI sends in its HELLOs.
func (d *Driver) Incarnation() uint64 { return d.incarnation }

// ListenAddr returns the acceptor's address, or nil without one.
func (d *Driver) ListenAddr() net.Addr {
	if d.ln == nil {
		return nil
	}
	return d.ln.Addr()
}

// peer is what the driver knows of one peer NI. Fields are guarded by
// Driver.mu.
type peer struct {
	nid         lnetwire.NID
	pid         lnetwire.PID
	incarnation uint64 // last seen; 0 = never connected
	version     uint32 // HELLO version to propose
	conns       []*conn
	connecting  bool                  // a connect job runs
	dialing     lnetwire.SockConnType // type being dialled now (race check); NONE when idle
	txq         []*tx                 // sends waiting for a connection
	retryAt     time.Time             // earliest next connect attempt
	failed      bool                  // the last connect job failed (not a race)
	backoff     time.Duration         // next reconnect interval
	zcNext      uint64                // next zero-copy cookie
	zc          map[uint64]*tx        // sends waiting for their ZC-ACK
	lastPing    time.Time             // last keepalive sent
	lastRx      time.Time             // last message from a closed conn
	rr          int                   // rotates pickConn's starting point
}

// wantedTypes lists the connection types the active side maintains.
func (d *Driver) wantedTypes() []lnetwire.SockConnType {
	if d.cfg.SingleConn {
		return []lnetwire.SockConnType{lnetwire.SockConnAny}
	}
	return []lnetwire.SockConnType{lnetwire.SockConnControl, lnetwire.SockConnBulkIn, lnetwire.SockConnBulkOut}
}

// maxConns is how many connections of type t a peer may have.
func (d *Driver) maxConns(t lnetwire.SockConnType) int {
	if t == lnetwire.SockConnBulkIn || t == lnetwire.SockConnBulkOut {
		return d.cfg.ConnsPerPeer
	}
	return 1
}

// findPeer returns the peer for nid, creating it. Called with d.mu held.
func (d *Driver) findPeer(nid lnetwire.NID) *peer {
	p := d.peers[nid]
	if p == nil {
		p = &peer{
			nid:     nid,
			version: d.cfg.Version,
			backoff: d.cfg.MinReconnect,
			zcNext:  lnetwire.SockFirstZCCookie,
			zc:      make(map[uint64]*tx),
			dialing: lnetwire.SockConnNone,
		}
		d.peers[nid] = p
	}
	return p
}

// countType counts p's open connections of type t. Called with d.mu held.
func (p *peer) countType(t lnetwire.SockConnType) int {
	n := 0
	for _, c := range p.conns {
		if c.typ == t {
			n++
		}
	}
	return n
}

// pickConn chooses the connection for a message of nob bytes: CONTROL
// below min_bulk, BULK_OUT from it, ANY on untyped connections; among
// several candidates the least loaded. Called with d.mu held.
func (d *Driver) pickConn(p *peer, nob int, fallback bool) *conn {
	want := lnetwire.SockConnBulkOut
	if nob < d.cfg.MinBulk {
		want = lnetwire.SockConnControl
	}
	var best *conn
	// Start at a rotating offset so ties (idle connections) alternate.
	n := len(p.conns)
	p.rr++
	for i := range n {
		c := p.conns[(i+p.rr)%n]
		if c.typ != want && c.typ != lnetwire.SockConnAny {
			continue
		}
		if best == nil || c.queued.Load() < best.queued.Load() {
			best = c
		}
	}
	if best == nil && fallback && len(p.conns) > 0 {
		// Any connection can carry any message: receivers do not care.
		best = p.conns[0]
	}
	return best
}

// Send implements lnd.Driver: it queues msg on a connection to
// msg.Target.NID, connecting first if needed.
func (d *Driver) Send(msg *lnd.Msg) error {
	if msg.Payload.Len > lnd.MaxPayload || msg.Payload.Len < 0 {
		return lnd.ErrTooBig
	}
	nid := msg.Target.NID
	if nid.Net() != d.nid.Net() || nid.Addr() == 0 {
		return fmt.Errorf("%w: %s is not on %s", lnd.ErrPeerDown, nid, d.nid.Net())
	}
	t := d.getTx()
	t.msg = msg
	t.nob = lnetwire.SockMsgHdrLen + lnetwire.HdrSize + msg.Payload.Len
	msg.Hdr.Encode(t.buf[lnetwire.SockMsgHdrLen:])

	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.putTx(t)
		return lnd.ErrShutdown
	}
	p := d.findPeer(nid)
	if c := d.pickConn(p, t.nob, !p.connecting); c != nil && c.enqueue(t) {
		d.mu.Unlock()
		return nil
	}
	now := time.Now()
	if !p.connecting && p.failed && now.Before(p.retryAt) && len(p.txq) == 0 {
		// In reconnect backoff with nothing pending: fail fast as
		// ksocklnd does (EHOSTUNREACH).
		d.mu.Unlock()
		d.putTx(t)
		return fmt.Errorf("%w: %s (reconnecting)", lnd.ErrPeerDown, nid)
	}
	t.deadline = now.Add(d.cfg.SockTimeout)
	p.txq = append(p.txq, t)
	d.startConnect(p, now)
	d.mu.Unlock()
	return nil
}

// startConnect launches a connect job for p unless one runs or the
// backoff has not expired. Called with d.mu held.
func (d *Driver) startConnect(p *peer, now time.Time) {
	if p.connecting || d.closed || now.Before(p.retryAt) {
		return
	}
	p.connecting = true
	d.wg.Add(1)
	go d.connectJob(p)
}

// Recv implements lnd.Driver: it hands the payload destination to the
// connection's reader, which reads the payload off the socket.
func (d *Driver) Recv(private any, msg *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error {
	return d.recv(private, msg, dst, rlen, false)
}

// recv hands a Recv or RecvKept to the reader.
func (d *Driver) recv(private any, msg *lnd.Msg, dst lnd.IOV, rlen int, keep bool) error {
	c, ok := private.(*conn)
	if !ok {
		return fmt.Errorf("socklnd: Recv with foreign context %T", private)
	}
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	if c.rxDone {
		if msg == nil {
			return nil
		}
		return lnd.ErrPeerDown
	}
	c.rxCh <- rxReq{msg: msg, dst: dst, rlen: rlen, keep: keep}
	return nil
}

// Query implements lnd.PeerQuerier: when nid was last heard from.
func (d *Driver) Query(nid lnetwire.NID) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.peers[nid]
	if p == nil {
		return time.Time{}
	}
	last := p.lastRx
	for _, c := range p.conns {
		if t := c.lastRxTime(); t.After(last) {
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
		c.close(lnd.ErrPeerDown)
	}
	d.failTxs(q, lnd.ErrPeerDown)
}

// ClosePeer closes every connection to nid (lctl del_peer-like; tests use
// it to simulate a network failure).
func (d *Driver) ClosePeer(nid lnetwire.NID) { d.NotifyPeerDown(nid) }

// Conns returns the number of open connections to nid by local type.
func (d *Driver) Conns(nid lnetwire.NID) map[lnetwire.SockConnType]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[lnetwire.SockConnType]int)
	if p := d.peers[nid]; p != nil {
		for _, c := range p.conns {
			m[c.typ]++
		}
	}
	return m
}

// Shutdown implements lnd.Driver: it stops the acceptor and the reaper,
// closes every connection and fails every message it still owns with
// lnd.ErrShutdown, then waits for its goroutines.
func (d *Driver) Shutdown() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	close(d.done)
	d.cancel()
	var conns []*conn
	var q []*tx
	for nc := range d.handshakes {
		nc.Close() // unblocks handshakes waiting on a silent peer
	}
	for _, p := range d.peers {
		conns = append(conns, p.conns...)
		q = append(q, p.txq...)
		p.txq = nil
	}
	d.mu.Unlock()
	if d.ln != nil {
		d.ln.Close()
	}
	for _, c := range conns {
		c.close(lnd.ErrShutdown)
	}
	d.failTxs(q, lnd.ErrShutdown)
	d.wg.Wait()
	// Connections registered by handshakes that finished meanwhile.
	d.mu.Lock()
	conns = conns[:0]
	for _, p := range d.peers {
		conns = append(conns, p.conns...)
	}
	d.mu.Unlock()
	for _, c := range conns {
		c.close(lnd.ErrShutdown)
	}
	d.wg.Wait()
	if d.lnd != nil {
		d.lnd.mu.Lock()
		if d.lnd.drivers[d.nid] == d {
			delete(d.lnd.drivers, d.nid)
		}
		if len(d.lnd.drivers) == 0 {
			d.lnd.closeIdlePipesLocked()
		}
		d.lnd.mu.Unlock()
	}
}

// failTxs finalizes LNET sends with err and recycles every descriptor.
// Called without locks.
func (d *Driver) failTxs(q []*tx, err error) {
	for _, t := range q {
		if t == nil {
			continue
		}
		if t.msg != nil {
			d.ni.Finalize(t.msg, err)
		}
		d.putTx(t)
	}
}

// reaper runs the driver's timers: queued sends past their deadline,
// reconnects after backoff, keepalive NOOPs to silent peers.
func (d *Driver) reaper() {
	defer d.wg.Done()
	tick := min(d.cfg.SockTimeout, d.cfg.MinReconnect) / 4
	if d.cfg.Keepalive > 0 {
		tick = min(tick, d.cfg.Keepalive/4)
	}
	tick = max(min(tick, time.Second), 5*time.Millisecond)
	tm := time.NewTicker(tick)
	defer tm.Stop()
	var expired []*tx
	for {
		select {
		case <-d.done:
			return
		case <-tm.C:
		case <-d.kickReaper:
		}
		now := time.Now()
		expired = expired[:0]
		d.mu.Lock()
		for _, p := range d.peers {
			if len(p.txq) > 0 {
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
			if d.cfg.Keepalive > 0 && len(p.conns) > 0 && now.Sub(p.lastPing) >= d.cfg.Keepalive {
				d.keepaliveLocked(p, now)
			}
		}
		d.mu.Unlock()
		d.stats.TxTimeouts.Add(uint64(len(expired)))
		d.failTxs(expired, lnd.ErrTimeout)
		clear(expired)
	}
}

// keepaliveLocked sends a V3 keepalive NOOP to p if nothing was heard
// from it for cfg.Keepalive, on its ACK (BULK_IN) connection when there is
// one. Called with d.mu held.
func (d *Driver) keepaliveLocked(p *peer, now time.Time) {
	var last time.Time
	var pick *conn
	for _, c := range p.conns {
		if t := c.lastRxTime(); t.After(last) {
			last = t
		}
		if c.version >= lnetwire.SockProtoV3 && (pick == nil || c.typ == lnetwire.SockConnAck) {
			pick = c
		}
	}
	if pick == nil || now.Sub(last) < d.cfg.Keepalive {
		return
	}
	p.lastPing = now
	pick.queueKeepalive()
}
