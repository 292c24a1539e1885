package socklnd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Connection setup (lnet-wire.md §4.1, §7.1, §7.2, §7.8).
//
//	active                                   passive (acceptLoop)
//	dial from port 1023..512 ─────────────► accept=secure: port ≤ 1023?
//	acceptor request {0xACCE7100,1,nid} ──► magic/version/target NI check
//	HELLO Vn (ctype T) ───────────────────► unknown n: answer our V3, close
//	                                         stale incarnation: close old conns
//	                                         race (we are higher, dialling T̄)
//	                                         or duplicate: answer ctype NONE
//	◄──────────────────────────── HELLO Vn (ctype T̄ = inverted T)
//	version ≠ n: retry with it; NONE: EALREADY

// acceptLoop accepts connections until Shutdown closes the listener.
func (d *Driver) acceptLoop() {
	defer d.wg.Done()
	for {
		nc, err := d.ln.Accept()
		if err != nil {
			select {
			case <-d.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Warn("accept failed", "err", err)
			select {
			case <-d.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		nc = d.capt.wrap(nc, false)
		if !d.reserveAccept(nc) {
			d.stats.AcceptOverload.Add(1)
			nc.Close()
			continue
		}
		d.wg.Add(1)
		go d.passive(nc)
	}
}

// remoteAddr is the IP address of an accepted socket's peer.
func remoteAddr(nc net.Conn) netip.Addr {
	if ra, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		a, _ := netip.AddrFromSlice(ra.IP)
		return a.Unmap()
	}
	return netip.Addr{}
}

// reserveAccept reserves a pending-handshake slot for an accepted socket, within
// MaxPendingAccepts in all and MaxPendingPerAddr per remote address.
func (d *Driver) reserveAccept(nc net.Conn) bool {
	a := remoteAddr(nc)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending >= d.cfg.MaxPendingAccepts || d.pendingBy[a] >= d.cfg.MaxPendingPerAddr {
		return false
	}
	d.pending++
	d.pendingBy[a]++
	return true
}

// releaseAccept returns the slot reserveAccept reserved.
func (d *Driver) releaseAccept(nc net.Conn) {
	a := remoteAddr(nc)
	d.mu.Lock()
	d.pending--
	if d.pendingBy[a]--; d.pendingBy[a] <= 0 {
		delete(d.pendingBy, a)
	}
	d.mu.Unlock()
}

// passive runs the passive handshake of one accepted socket. It holds the
// slot reserveAccept gave it, not an nconnds slot: a peer that stalls its
// handshake delays nobody else.
func (d *Driver) passive(nc net.Conn) {
	defer d.wg.Done()
	defer d.releaseAccept(nc)
	if !d.trackHandshake(nc) {
		return
	}
	err := d.passiveHandshake(nc)
	d.untrackHandshake(nc)
	if err != nil {
		nc.Close()
		if errors.Is(err, ErrRace) {
			d.stats.Races.Add(1)
			d.log.Debug("incoming connection: race or duplicate", "from", nc.RemoteAddr(), "err", err)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			d.stats.AcceptTimeouts.Add(1)
		}
		d.stats.AcceptRefused.Add(1)
		if n, ok := d.refusedLog.allow(time.Now()); ok {
			d.log.Info("incoming connection refused", "from", nc.RemoteAddr(), "err", err, "suppressed", n)
		}
	}
}

// rateLimit lets one log line through per interval and counts the ones it
// held back, so a connection flood cannot flood the log too.
type rateLimit struct {
	mu         sync.Mutex
	next       time.Time
	suppressed int
}

const refusedLogInterval = time.Second

// allow reports whether a line may be logged now, and how many were
// suppressed since the last one.
func (r *rateLimit) allow(now time.Time) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.next) {
		r.suppressed++
		return 0, false
	}
	n := r.suppressed
	r.suppressed = 0
	r.next = now.Add(refusedLogInterval)
	return n, true
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

func (d *Driver) passiveHandshake(nc net.Conn) error {
	if ra, ok := nc.RemoteAddr().(*net.TCPAddr); ok && d.cfg.Accept == AcceptSecure && ra.Port > maxReservedPort {
		return refused("source port %d is not privileged (accept=secure)", ra.Port)
	}
	nc.SetDeadline(time.Now().Add(d.cfg.AcceptTimeout))
	c := newConn(d, nc)

	// Acceptor request.
	var rb [lnetwire.AcceptorRequestV2Size]byte
	if _, err := io.ReadFull(c.br, rb[:lnetwire.AcceptorMagicSize]); err != nil {
		return fmt.Errorf("%w: reading acceptor request: %w", ErrRefused, err)
	}
	magic, swapped, _ := lnetwire.ClassifyMagic(rb[:4])
	switch magic {
	case lnetwire.AcceptorMagic:
	case lnetwire.ProtoMagic, lnetwire.SockLNDMagicV1:
		// A peer that skipped the acceptor: tell it what we expect.
		nc.Write(lnetwire.AppendAcceptorMagic(rb[:0]))
		return refused("HELLO without acceptor request")
	default:
		return refused("bad acceptor magic %#x", magic)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if swapped {
		bo = binary.BigEndian
	}
	n := 0
	switch v := bo.Uint32(rb[4:]); v {
	case lnetwire.AcceptorVersion1:
		n = lnetwire.AcceptorRequestV1Size
	case lnetwire.AcceptorVersion2:
		n = lnetwire.AcceptorRequestV2Size
	default:
		nc.Write(lnetwire.AppendAcceptorMagic(rb[:0]))
		return refused("acceptor version %d", v)
	}
	if _, err := io.ReadFull(c.br, rb[lnetwire.AcceptorMagicSize:n]); err != nil {
		return fmt.Errorf("%w: reading acceptor request: %w", ErrRefused, err)
	}
	req, err := lnetwire.ParseAcceptorRequest(rb[:n])
	if err != nil {
		return refused("acceptor request: %v", err)
	}
	if req.Target != d.nid {
		return refused("target %s is not this NI", req.Target)
	}
	nc.SetDeadline(time.Now().Add(d.cfg.SockTimeout))

	// HELLO.
	h, err := c.readHello()
	if err != nil {
		if errors.Is(err, lnetwire.ErrSockVersion) {
			// Tell the peer the protocol we speak (it retries with it).
			r := lnetwire.SockHello{Version: lnetwire.SockProtoV3, SrcNID: uint64(d.nid), SrcPID: uint32(d.pid),
				SrcIncarnation: d.incarnation, ConnType: lnetwire.SockConnNone}
			var hb [lnetwire.SockHelloV2Len]byte
			nc.Write(r.Append(hb[:0]))
		}
		return refused("HELLO: %v", err)
	}
	peerNID := lnetwire.NID(h.SrcNID)
	if peerNID.Net() != d.nid.Net() || peerNID.Addr() == 0 {
		return refused("HELLO from %s, not on %s", peerNID, d.nid.Net())
	}
	if !h.ConnType.Valid() {
		return refused("HELLO with connection type %v", h.ConnType)
	}
	typ := h.ConnType.Invert()
	reply := lnetwire.SockHello{
		Version: h.Version, SrcNID: uint64(d.nid), DstNID: h.SrcNID, SrcPID: uint32(d.pid), DstPID: h.SrcPID,
		SrcIncarnation: d.incarnation, DstIncarnation: h.SrcIncarnation, ConnType: typ,
	}
	var hb [lnetwire.SockHelloV1Len]byte
	if err := d.admit(c, &h, typ, false); err != nil {
		if errors.Is(err, ErrRace) {
			// "We are connected / our attempt wins": the peer reads NONE
			// as EALREADY.
			reply.ConnType = lnetwire.SockConnNone
			nc.Write(reply.Append(hb[:0]))
		}
		return err
	}
	if _, err := nc.Write(reply.Append(hb[:0])); err != nil {
		c.close(err)
		return nil
	}
	d.established(c)
	return nil
}

// readHello reads one HELLO through the connection's reader.
func (c *conn) readHello() (lnetwire.SockHello, error) {
	var b [lnetwire.SockHelloV1Len + 4*lnetwire.SockHelloMaxIPs]byte
	if _, err := io.ReadFull(c.br, b[:lnetwire.SockHelloPrefixLen]); err != nil {
		return lnetwire.SockHello{}, err
	}
	p, err := lnetwire.ParseSockHelloPrefix(b[:lnetwire.SockHelloPrefixLen])
	if err != nil {
		if m, _, _ := lnetwire.ClassifyMagic(b[:4]); m == lnetwire.AcceptorMagic {
			return lnetwire.SockHello{}, refused("peer's acceptor refused the request")
		}
		return lnetwire.SockHello{}, err
	}
	fixed := p.FixedLen()
	if _, err := io.ReadFull(c.br, b[lnetwire.SockHelloPrefixLen:fixed]); err != nil {
		return lnetwire.SockHello{}, err
	}
	nips, err := p.NIPs(b[:fixed])
	if err != nil {
		return lnetwire.SockHello{}, err
	}
	if _, err := io.ReadFull(c.br, b[fixed:fixed+4*nips]); err != nil {
		return lnetwire.SockHello{}, err
	}
	h, _, err := lnetwire.ParseSockHello(b[:fixed+4*nips])
	if err != nil {
		return h, err
	}
	c.swapped = p.Swapped
	return h, nil
}

// admit decides whether c (HELLO h, local type typ) joins its peer:
// it closes the connections of a rebooted peer, refuses a lost race or a
// duplicate with ErrRace, else registers c and hands it the queued sends
// that fit.
func (d *Driver) admit(c *conn, h *lnetwire.SockHello, typ lnetwire.SockConnType, active bool) error {
	nid := lnetwire.NID(h.SrcNID)
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return lnd.ErrShutdown
		}
		p := d.findPeer(nid)
		var stale []*conn
		if p.incarnation != 0 && p.incarnation != h.SrcIncarnation {
			d.stats.PeerReboots.Add(1)
			d.log.Info("peer rebooted", "peer", nid, "old", p.incarnation, "new", h.SrcIncarnation)
			stale = append(stale, p.conns...)
		} else {
			for _, x := range p.conns {
				if x.version != h.Version {
					stale = append(stale, x)
				}
			}
		}
		p.incarnation = h.SrcIncarnation
		if len(stale) > 0 {
			d.mu.Unlock()
			for _, x := range stale {
				x.close(errStale)
			}
			continue
		}
		if !active && d.nid > nid && p.dialing == typ {
			d.mu.Unlock()
			return fmt.Errorf("%w: we are connecting %v too and our NID is higher", ErrRace, typ)
		}
		if p.countType(typ) >= d.maxConns(typ) {
			d.mu.Unlock()
			return fmt.Errorf("%w: duplicate %v connection", ErrRace, typ)
		}
		c.p = p
		c.typ = typ
		c.version = h.Version
		c.peerInc = h.SrcIncarnation
		c.active = active
		c.registered = true
		c.touch()
		p.conns = append(p.conns, c)
		p.pid = lnetwire.PID(h.SrcPID)
		p.version = h.Version
		p.failed = false
		d.stats.ConnsEstablished.Add(1)
		d.stats.ConnsActive.Add(1)
		keep := p.txq[:0]
		for _, t := range p.txq {
			if x := d.pickConn(p, t.nob, false); x == nil || !x.enqueue(t) {
				keep = append(keep, t)
			}
		}
		clear(p.txq[len(keep):])
		p.txq = keep
		d.mu.Unlock()
		return nil
	}
}

// established finishes setup of an admitted connection: socket options,
// goroutines, the core's peer-alive notice.
func (d *Driver) established(c *conn) {
	c.nc.SetDeadline(time.Time{})
	d.setSockOpts(c.nc)
	c.start()
	d.log.Debug("connection up", "conn", c)
	d.ni.NotifyPeer(c.p.nid, true, time.Now())
}

func (d *Driver) setSockOpts(nc net.Conn) {
	tc, ok := tcpConn(nc)
	if !ok {
		return
	}
	tc.SetNoDelay(!d.cfg.Nagle)
	if d.cfg.KeepaliveIdle > 0 {
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: d.cfg.KeepaliveIdle,
			Interval: d.cfg.KeepaliveIntvl, Count: d.cfg.KeepaliveCount})
	} else {
		tc.SetKeepAlive(false)
	}
	if d.cfg.TxBufferSize > 0 {
		tc.SetWriteBuffer(d.cfg.TxBufferSize)
	}
	if d.cfg.RxBufferSize > 0 {
		tc.SetReadBuffer(d.cfg.RxBufferSize)
	}
}

// connectJob connects every missing connection type to p, then either
// resets the backoff or schedules the next attempt and fails the sends
// no connection can take.
func (d *Driver) connectJob(p *peer) {
	defer d.wg.Done()
	var failErr error
	raced := false
types:
	for _, typ := range d.wantedTypes() {
		// At most maxConns attempts per type, so a peer that accepts and
		// drops at once cannot make this loop spin.
		for range d.maxConns(typ) {
			d.mu.Lock()
			need := !d.closed && p.countType(typ) < d.maxConns(typ)
			d.mu.Unlock()
			if !need {
				break
			}
			err := d.connectOne(p, typ)
			if errors.Is(err, errRetryProto) {
				err = d.connectOne(p, typ)
			}
			if errors.Is(err, ErrRace) {
				raced = true
				break
			}
			if err != nil {
				failErr = err
				break types
			}
		}
	}
	now := time.Now()
	var fail []*tx
	d.mu.Lock()
	p.connecting = false
	switch {
	case failErr != nil:
		p.failed = true
		p.retryAt = now.Add(p.backoff)
		p.backoff = min(2*p.backoff, d.cfg.MaxReconnect)
		d.stats.ConnectFailures.Add(1)
	case raced:
		// The peer is connecting to us; retry later if it does not.
		p.failed = false
		p.retryAt = now.Add(d.cfg.MinReconnect)
	default:
		p.failed = false
		p.backoff = d.cfg.MinReconnect
		p.retryAt = time.Time{}
	}
	keep := p.txq[:0]
	for _, t := range p.txq {
		if c := d.pickConn(p, t.nob, true); c != nil && c.enqueue(t) {
			continue
		}
		if failErr != nil {
			fail = append(fail, t)
		} else {
			keep = append(keep, t)
		}
	}
	clear(p.txq[len(keep):])
	p.txq = keep
	noConns := len(p.conns) == 0
	d.mu.Unlock()
	if failErr != nil {
		d.log.Info("connect failed", "peer", p.nid, "err", failErr)
		if noConns {
			d.ni.NotifyPeer(p.nid, false, now)
		}
		d.failTxs(fail, fmt.Errorf("%w: %s: %v", lnd.ErrPeerDown, p.nid, failErr))
	}
}

// connectOne opens one connection of type typ to p.
func (d *Driver) connectOne(p *peer, typ lnetwire.SockConnType) error {
	select {
	case d.connSem <- struct{}{}:
	case <-d.done:
		return lnd.ErrShutdown
	}
	defer func() { <-d.connSem }()
	d.mu.Lock()
	p.dialing = typ
	version, inc, pid := p.version, p.incarnation, p.pid
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		p.dialing = lnetwire.SockConnNone
		d.mu.Unlock()
	}()
	if pid == 0 {
		pid = lnetwire.PIDLustre
	}

	nc, err := d.dial(d.peerAddr(p.nid))
	if err != nil {
		return err
	}
	nc = d.capt.wrap(nc, true)
	if !d.trackHandshake(nc) {
		return lnd.ErrShutdown
	}
	defer d.untrackHandshake(nc)
	c := newConn(d, nc)
	nc.SetDeadline(time.Now().Add(d.cfg.SockTimeout))
	var ob [lnetwire.AcceptorRequestV1Size + lnetwire.SockHelloV1Len]byte
	req := lnetwire.AcceptorRequest{Version: lnetwire.AcceptorVersion1, Target: p.nid}
	b := req.Append(ob[:0])
	hello := lnetwire.SockHello{Version: version, SrcNID: uint64(d.nid), DstNID: uint64(p.nid),
		SrcPID: uint32(d.pid), DstPID: uint32(pid), SrcIncarnation: d.incarnation, DstIncarnation: inc, ConnType: typ}
	b = hello.Append(b)
	if _, err := nc.Write(b); err != nil {
		nc.Close()
		return err
	}
	h, err := c.readHello()
	if err != nil {
		nc.Close()
		if lp := nc.LocalAddr().(*net.TCPAddr).Port; lp > maxReservedPort && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)) {
			// The acceptor closes without a word on an unprivileged
			// source port; all this side sees is the reset.
			return fmt.Errorf("HELLO from %s: %w (closed at once: the peer probably accepts only privileged source ports, "+
				"accept=secure as Lustre's default, and this node dialled from port %d: run it as root or with CAP_NET_BIND_SERVICE, "+
				"or set accept: all on the peer)", p.nid, err, lp)
		}
		return fmt.Errorf("HELLO from %s: %w", p.nid, err)
	}
	if h.Version != version {
		nc.Close()
		d.mu.Lock()
		p.version = h.Version
		d.mu.Unlock()
		return fmt.Errorf("%w: %d instead of %d", errRetryProto, h.Version, version)
	}
	if lnetwire.NID(h.SrcNID) != p.nid {
		nc.Close()
		return refused("connected to %s but it claims to be %s", p.nid, lnetwire.NID(h.SrcNID))
	}
	if h.ConnType == lnetwire.SockConnNone {
		nc.Close()
		d.stats.Races.Add(1)
		return fmt.Errorf("%w: peer answered NONE for %v", ErrRace, typ)
	}
	if h.ConnType != typ.Invert() {
		nc.Close()
		return refused("asked for %v, peer answered %v", typ, h.ConnType)
	}
	if err := d.admit(c, &h, typ, true); err != nil {
		nc.Close()
		if errors.Is(err, ErrRace) {
			d.stats.Races.Add(1)
		}
		return err
	}
	d.established(c)
	return nil
}

func (d *Driver) peerAddr(nid lnetwire.NID) string {
	if d.cfg.PeerAddr != nil {
		return d.cfg.PeerAddr(nid).String()
	}
	return netip.AddrPortFrom(nidAddr(nid), uint16(d.cfg.AcceptPort)).String()
}

// dial connects to addr from the NI's address, from a privileged port
// when the SourcePort mode asks for one.
func (d *Driver) dial(addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.SockTimeout)
	defer cancel()
	local := net.IP(nidAddr(d.nid).AsSlice())
	dialOnce := func(dl *net.Dialer) (nc net.Conn, err error) {
		serr := d.socketContext(func() error {
			nc, err = dl.DialContext(ctx, "tcp4", addr)
			return nil
		})
		if serr != nil {
			return nil, serr
		}
		return nc, err
	}
	if d.cfg.SourcePort != SourcePortAny {
		for port := maxReservedPort; port >= minReservedPort; port-- {
			dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: local, Port: port}, Control: reuseAddr}
			nc, err := dialOnce(&dl)
			if err == nil {
				return nc, nil
			}
			switch {
			case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, syscall.EADDRNOTAVAIL):
				continue
			case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
				if d.cfg.SourcePort == SourcePortPrivileged {
					return nil, fmt.Errorf("socklnd: binding a privileged port: %w", err)
				}
			default:
				return nil, err
			}
			break
		}
		if d.cfg.SourcePort == SourcePortPrivileged {
			return nil, errors.New("socklnd: no free privileged port")
		}
	}
	nc, err := dialOnce(&net.Dialer{LocalAddr: &net.TCPAddr{IP: local}})
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		// The NID's address is not local (NAT): let the kernel choose.
		nc, err = dialOnce(&net.Dialer{})
	}
	return nc, err
}

// reuseAddr sets SO_REUSEADDR so privileged ports in TIME_WAIT can be
// reused, as the kernel acceptor's connect does.
func reuseAddr(network, address string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
