package rxe

import (
	"errors"
	"net/netip"
	"sync"

	"softib/udp"
	"softib/verbs"
	"softib/wire/roce"
)

// UDP source ports (roce-wire.md §1.1). Linux rxe sends every packet of a
// QP from a per-QP source port in 0xC000..0xFFFF: before the QP knows its
// peer, 0xC000 + hash_32(QPN, 14); once a connected QP has its remote QPN
// (Linux 6.x), the port derived from the flow label of the pair. Fabrics
// hash the port for ECMP, and captures of softib and kernel rxe compare
// byte for byte. A device on a Linux *udp.Socket sends each QP's packets
// through a send-only socket bound to (device IP, port): one per port in
// use, shared by the QPs on it and refcounted. The receive side ignores
// source ports, as rxe does.

// flowSourcePort returns the UDP source port of a 20-bit flow label
// (rdma_flow_label_to_udp_sport): 0xC000 | (low 14 bits XOR top 6).
func flowSourcePort(fl uint32) uint16 {
	fl &= 0xFFFFF
	return uint16(roce.SrcPortBase | (fl&0x3FFF ^ fl>>14))
}

// qpSourcePort returns the source port a QP in an RTR or later state
// sends from: the flow-label form for RC/UC (the address vector's flow
// label if it has one, as rdma_get_udp_sport takes it), the hash form
// for UD and GSI.
func qpSourcePort(typ verbs.QPType, lqpn, rqpn, flowLabel uint32) uint16 {
	if typ != verbs.QPTypeRC && typ != verbs.QPTypeUC {
		return SourcePort(lqpn, 0)
	}
	if flowLabel&0xFFFFF != 0 {
		return flowSourcePort(flowLabel)
	}
	return SourcePort(lqpn, rqpn)
}

// errNoSender: the device's Conn cannot open send-only sockets (not a
// Linux *udp.Socket, e.g. a simulated network).
var errNoSender = errors.New("rxe: Conn has no per-port senders")

// sportSock is a send-only socket bound to (device IP, port), shared by
// the device's QPs that send from port.
type sportSock struct {
	conn udp.Conn
	port uint16
	refs int // guarded by sportTable.mu
}

// sportTable is a device's source-port sockets.
type sportTable struct {
	// open opens the sender for a port; nil with
	// DeviceConfig.FixedSourcePort (every QP uses the device socket).
	open  func(port uint16) (udp.Conn, error)
	limit int // most sockets open at once (sportSocketLimit)
	mu    sync.Mutex
	socks map[uint16]*sportSock
}

// init sets the table up for a device on conn whose IP address is addr.
func (t *sportTable) init(conn udp.Conn, addr netip.Addr, fixed bool) {
	if fixed {
		return
	}
	t.limit = sportSocketLimit()
	s, ok := conn.(*udp.Socket)
	if !ok {
		t.open = func(uint16) (udp.Conn, error) { return nil, errNoSender }
		return
	}
	ip := s.LocalAddr().Addr()
	if ip.IsUnspecified() {
		// A wildcard socket: bind the senders to the device address,
		// which the ICRCs are computed for.
		ip = addr
	}
	t.open = func(port uint16) (udp.Conn, error) { return s.Sender(netip.AddrPortFrom(ip, port)) }
}

// acquireSport returns the sender for port, opening it on first use, or
// nil (counted in SportFallback) when it cannot be opened: a foreign
// socket holds the port, the process is out of file descriptors (or the
// device at its limit), or the Conn has no senders.
func (d *Device) acquireSport(port uint16) *sportSock {
	t := &d.sports
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.socks[port]; s != nil {
		s.refs++
		return s
	}
	if d.closed.Load() {
		return nil
	}
	if len(t.socks) >= t.limit {
		d.stats.SportFallback.Inc()
		return nil
	}
	c, err := t.open(port)
	if err != nil {
		d.stats.SportFallback.Inc()
		return nil
	}
	if t.socks == nil {
		t.socks = map[uint16]*sportSock{}
	}
	s := &sportSock{conn: c, port: port, refs: 1}
	t.socks[port] = s
	return s
}

// releaseSport drops a reference to s and closes it with the last one.
func (d *Device) releaseSport(s *sportSock) {
	if s == nil {
		return
	}
	t := &d.sports
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.refs--; s.refs > 0 {
		return
	}
	if t.socks[s.port] == s {
		delete(t.socks, s.port)
	}
	s.conn.Close()
}

// closeSports closes every sender (device Close, after the QPs).
func (d *Device) closeSports() {
	t := &d.sports
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, s := range t.socks {
		s.conn.Close()
		delete(t.socks, p)
	}
}

// qpSport is a QP's source port. It changes only with QP.mu and both
// txLane mutexes held, so the lanes may read it with their own mutex
// alone, and no send is under way on a sender being released.
type qpSport struct {
	sock    *sportSock     // nil: the device socket
	port    uint16         // the port chosen (0: none yet); sock may be nil if it failed
	pending bool           // the sender for port is to be opened before the next packet
	src     netip.AddrPort // ICRC source address while sock is set
}

// txConn returns the Conn the QP's packets leave from (a txLane mutex
// held).
func (q *QP) txConn() udp.Conn {
	if s := q.sport.sock; s != nil {
		return s.conn
	}
	return q.dev.conn
}

// srcAddr returns the UDP source address of the QP's packets, for the
// ICRC (QP.mu held).
func (q *QP) srcAddr() netip.AddrPort {
	if q.sport.sock != nil {
		return q.sport.src
	}
	return q.dev.laddr
}

// updateSport picks the QP's source port after a Modify (mu held): from
// RTR on, the port qpSourcePort gives (the remote QPN and address vector
// are set by then); in RESET and INIT, none. ERR keeps its port.
func (q *QP) updateSport() {
	if q.dev.sports.open == nil {
		return
	}
	var port uint16
	switch q.state {
	case verbs.QPStateErr:
		return
	case verbs.QPStateReset, verbs.QPStateInit:
	default:
		port = qpSourcePort(q.typ, q.qpn, q.attr.DestQPN, q.attr.AH.GRH.FlowLabel)
	}
	if port == q.sport.port {
		return
	}
	// The sender is opened when the QP first builds a packet (openSport):
	// connection setup does not wait for a socket, and a QP that never
	// sends holds none.
	old := q.swapSport(nil, port, port != 0)
	q.dev.releaseSport(old)
}

// openSport opens the sender a Modify chose, before the first packet
// from the port is built (mu held): its ICRC covers the source port.
// A port that cannot be opened is not tried again until the next one
// (the QP sends from the device port, counted in SportFallback).
func (q *QP) openSport() {
	// No sender to release: updateSport released it when it set pending.
	port := q.sport.port
	q.swapSport(q.dev.acquireSport(port), port, false)
}

// swapSport installs s (nil: the device socket) for port, with pending
// set if the sender is still to be opened, and returns the previous
// sender (mu held).
func (q *QP) swapSport(s *sportSock, port uint16, pending bool) *sportSock {
	q.reqTx.mu.Lock()
	q.respTx.mu.Lock()
	old := q.sport.sock
	q.sport = qpSport{sock: s, port: port, pending: pending, src: netip.AddrPortFrom(q.dev.laddr.Addr(), port)}
	q.respTx.mu.Unlock()
	q.reqTx.mu.Unlock()
	return old
}

// dropSport releases the QP's sender when it is destroyed (mu not held).
func (q *QP) dropSport() {
	q.mu.Lock()
	old := q.swapSport(nil, 0, false)
	q.mu.Unlock()
	q.dev.releaseSport(old)
}
