package socklnd

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"softib/internal/pcap"
)

// Packet capture of socklnd connections (Config.Capture): the byte
// streams a connection writes and reads, framed as the IPv4/TCP packets
// a tcpdump on the interface would show, so that Wireshark's LNet
// dissector (tcp port 988, or -d tcp.port==N,lnet) decodes them.
//
// The framing is synthesised: a SYN, SYN-ACK, ACK opening at the first
// use of the socket, then one PSH/ACK segment per Write call and per
// Read (at most segMax bytes each), with sequence numbers that follow
// the stream, and a FIN when socklnd closes the socket. What the kernel
// really put on the wire (MSS-sized segments, pure ACKs, retransmits) is
// not recorded: the capture shows what socklnd exchanged, in order.
//
// A captured connection is not a *net.TCPConn: splice(2) of kept
// payloads (keep_linux.go) needs the raw socket, so captured
// connections copy instead. Payload bytes that bypass user space would
// be missing from the capture otherwise.
//
// Each connection is captured once per process: when both of its ends
// are in this process (nodes sharing a capture file), the first end to
// set up records it.
//
// The file header is the first Write of Config.Capture and each record
// exactly one Write after it, as verbs.DeviceConfig.Capture, so socklnd
// and RoCE devices can share one file (tools/devsel drops the later
// headers).

// segMax is the most stream bytes one synthesised segment carries: an
// IPv4 packet's total length is 16 bits.
const segMax = 65535 - ipv4HdrLen - tcpHdrLen

const (
	ipv4HdrLen = 20
	tcpHdrLen  = 20

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpPSH = 0x08
	tcpACK = 0x10
)

// capture is one Driver's capture state.
type capture struct {
	w io.Writer

	mu  sync.Mutex // guards rec, ipID
	rec []byte
	// ipID numbers the synthesised IPv4 packets.
	ipID uint16

	// Errs counts records the writer failed to take and streams that
	// could not be framed (not IPv4).
	errs atomic.Uint64
}

// newCapture writes the pcap file header to w; nil w: no capture.
func newCapture(w io.Writer) (*capture, error) {
	if w == nil {
		return nil, nil
	}
	if _, err := w.Write(pcap.AppendFileHeader(nil, pcap.LinkTypeRaw)); err != nil {
		return nil, err
	}
	return &capture{w: w, rec: make([]byte, 0, 16+ipv4HdrLen+tcpHdrLen+segMax)}, nil
}

// wrap returns nc capturing into c (nc itself when c is nil). active
// tells who opened the connection, for the synthesised opening.
func (c *capture) wrap(nc net.Conn, active bool) net.Conn {
	if c == nil || nc == nil {
		return nc
	}
	la, lok := tcpAddrPort(nc.LocalAddr())
	ra, rok := tcpAddrPort(nc.RemoteAddr())
	if !lok || !rok {
		c.errs.Add(1)
		return nc
	}
	if !claimStream(la, ra) {
		// The other end is in this process and captured already
		// (the demo's nodes): once is enough, and the two ends' views
		// (write and read boundaries) would overlap as retransmissions.
		return nc
	}
	cc := &capConn{Conn: nc, c: c, local: la, remote: ra, txSeq: isn(la, ra), rxSeq: isn(ra, la)}
	// The opening: SYN from whoever dialled, SYN-ACK, ACK.
	now := time.Now()
	if active {
		c.segment(now, la, ra, cc.txSeq, 0, tcpSYN, nil)
		c.segment(now, ra, la, cc.rxSeq, cc.txSeq+1, tcpSYN|tcpACK, nil)
		c.segment(now, la, ra, cc.txSeq+1, cc.rxSeq+1, tcpACK, nil)
	} else {
		c.segment(now, ra, la, cc.rxSeq, 0, tcpSYN, nil)
		c.segment(now, la, ra, cc.txSeq, cc.rxSeq+1, tcpSYN|tcpACK, nil)
		c.segment(now, ra, la, cc.rxSeq+1, cc.txSeq+1, tcpACK, nil)
	}
	cc.txSeq++
	cc.rxSeq++
	return cc
}

// streams are the connections captured in this process, by their
// endpoints in a fixed order; a connection's two ends claim one entry.
var streams struct {
	mu sync.Mutex
	m  map[[2]netip.AddrPort]struct{}
}

func streamKey(a, b netip.AddrPort) [2]netip.AddrPort {
	if b.Compare(a) < 0 {
		a, b = b, a
	}
	return [2]netip.AddrPort{a, b}
}

// claimStream registers the connection between a and b for capture;
// false if it is captured already.
func claimStream(a, b netip.AddrPort) bool {
	k := streamKey(a, b)
	streams.mu.Lock()
	defer streams.mu.Unlock()
	if _, ok := streams.m[k]; ok {
		return false
	}
	if streams.m == nil {
		streams.m = make(map[[2]netip.AddrPort]struct{})
	}
	streams.m[k] = struct{}{}
	return true
}

func releaseStream(a, b netip.AddrPort) {
	streams.mu.Lock()
	delete(streams.m, streamKey(a, b))
	streams.mu.Unlock()
}

// isn is a connection's initial sequence number in one direction: any
// value does; a hash of the endpoints keeps two captures alike.
func isn(from, to netip.AddrPort) uint32 {
	a, b := from.Addr().As4(), to.Addr().As4()
	return binary.BigEndian.Uint32(a[:])*31 ^ binary.BigEndian.Uint32(b[:])*17 ^ uint32(from.Port())<<16 ^ uint32(to.Port())
}

func tcpAddrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	return ap, ap.Addr().Is4()
}

// segment writes one IPv4/TCP packet carrying data (at most segMax).
func (c *capture) segment(now time.Time, src, dst netip.AddrPort, seq, ack uint32, flags byte, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ipID++
	var hb [ipv4HdrLen + tcpHdrLen + 4]byte
	h := hb[:ipv4HdrLen+tcpHdrLen]
	if flags&tcpSYN != 0 {
		// NOP, window scale 14: the advertised window (65535 << 14)
		// never fills, so Wireshark flags no "window full" on a bulk
		// stream the capture shows without the peer's pure ACKs.
		h = hb[:]
		copy(h[ipv4HdrLen+tcpHdrLen:], []byte{1, 3, 3, 14})
	}
	ip := h[:ipv4HdrLen]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(h)+len(data)))
	binary.BigEndian.PutUint16(ip[4:], c.ipID)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, 6                       // TTL, TCP
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip)))
	tcp := h[ipv4HdrLen:]
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12] = byte(len(tcp)/4) << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], 0xffff) // window
	// Checksum over the pseudo-header, the TCP header and the data.
	var ph [12]byte
	copy(ph[0:], s4[:])
	copy(ph[4:], d4[:])
	ph[9] = 6
	binary.BigEndian.PutUint16(ph[10:], uint16(len(tcp)+len(data)))
	binary.BigEndian.PutUint16(tcp[16:], ^fold(sum(sum(sum(0, ph[:]), tcp), data)))

	// One record, one Write.
	c.rec = c.rec[:0]
	var rh [16]byte
	us := now.UnixMicro()
	binary.LittleEndian.PutUint32(rh[0:], uint32(us/1e6))
	binary.LittleEndian.PutUint32(rh[4:], uint32(us%1e6))
	binary.LittleEndian.PutUint32(rh[8:], uint32(len(h)+len(data)))
	binary.LittleEndian.PutUint32(rh[12:], uint32(len(h)+len(data)))
	c.rec = append(append(append(c.rec, rh[:]...), h[:]...), data...)
	if _, err := c.w.Write(c.rec); err != nil {
		c.errs.Add(1)
	}
}

// sum adds b as big-endian 16-bit words to s (the Internet checksum's
// one's-complement sum, folded later). An odd b must come last.
func sum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// capConn is a connection whose traffic is captured. Reads happen on one
// goroutine at a time (the handshake, then the reader) and so do writes;
// txSeq and rxSeq are guarded by mu because each direction's segments
// carry the other direction's sequence number as their ACK.
type capConn struct {
	net.Conn
	c             *capture
	local, remote netip.AddrPort

	mu     sync.Mutex
	txSeq  uint32 // next sequence number of our bytes
	rxSeq  uint32 // next sequence number of the peer's bytes
	closed bool
}

// stream records n bytes of b flowing out (tx) or in.
func (cc *capConn) stream(b []byte, tx bool) {
	now := time.Now()
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for len(b) > 0 {
		n := min(len(b), segMax)
		if tx {
			cc.c.segment(now, cc.local, cc.remote, cc.txSeq, cc.rxSeq, tcpPSH|tcpACK, b[:n])
			cc.txSeq += uint32(n)
		} else {
			cc.c.segment(now, cc.remote, cc.local, cc.rxSeq, cc.txSeq, tcpPSH|tcpACK, b[:n])
			cc.rxSeq += uint32(n)
		}
		b = b[n:]
	}
}

// Read records the bytes read.
func (cc *capConn) Read(b []byte) (int, error) {
	n, err := cc.Conn.Read(b)
	if n > 0 {
		cc.stream(b[:n], false)
	}
	return n, err
}

// Write records the bytes, then writes them. Recording first matters:
// once they are on the socket the peer may act on them (a ZC-ACK, an
// in-process router's completion) and the buffer be released and reused
// while a record made afterwards still copied it. A write that fails
// leaves its bytes in the capture as sent (net.Conn writes all or
// returns an error, and the connection then closes).
func (cc *capConn) Write(b []byte) (int, error) {
	cc.stream(b, true)
	return cc.Conn.Write(b)
}

// Close records our FIN once.
func (cc *capConn) Close() error {
	cc.mu.Lock()
	if !cc.closed {
		cc.closed = true
		cc.c.segment(time.Now(), cc.local, cc.remote, cc.txSeq, cc.rxSeq, tcpFIN|tcpACK, nil)
		cc.txSeq++
		releaseStream(cc.local, cc.remote)
	}
	cc.mu.Unlock()
	return cc.Conn.Close()
}

// tcpConn returns the kernel TCP socket under nc (through a capture).
func tcpConn(nc net.Conn) (*net.TCPConn, bool) {
	if cc, ok := nc.(*capConn); ok {
		nc = cc.Conn
	}
	tc, ok := nc.(*net.TCPConn)
	return tc, ok
}

// CaptureErrors returns how many capture records were lost (the writer
// failed, or a socket was not IPv4).
func (d *Driver) CaptureErrors() uint64 {
	if d.capt == nil {
		return 0
	}
	return d.capt.errs.Load()
}
