package roce

import (
	"encoding/binary"
	"net/netip"
)

// AppendFrame appends to dst a complete IP packet carrying pkt (a RoCEv2
// UDP payload whose ICRC is already set): an IPv4 (with header checksum)
// or IPv6 header as e describes, a UDP header with a correct checksum, then
// pkt. It is meant for pcaps and raw-socket tests (kernel rxe sends UDP
// checksum 0, but tshark flags a zero checksum on IPv6).
func (e *Encap) AppendFrame(dst, pkt []byte) []byte {
	c := &e.cfg
	udpLen := UDPHeaderLen + len(pkt)
	start := len(dst)
	var hdr [IPv6HeaderLen]byte
	ipLen := PutIPHeader(hdr[:], &IPFields{Src: c.Src.Addr(), Dst: c.Dst.Addr(), TOS: c.TOS, TTL: c.TTL,
		IPv4ID: c.IPv4ID, NoDF: c.NoDF, FlowLabel: c.FlowLabel, Payload: udpLen})
	dst = append(dst, hdr[:ipLen]...)
	var udp [UDPHeaderLen]byte
	binary.BigEndian.PutUint16(udp[0:], c.Src.Port())
	binary.BigEndian.PutUint16(udp[2:], c.Dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	dst = append(dst, udp[:]...)
	dst = append(dst, pkt...)
	ip := dst[start : start+ipLen]
	u := dst[start+ipLen:]
	binary.BigEndian.PutUint16(u[6:], udpChecksum(ip, u, e.v6))
	return dst
}

// udpChecksum computes the UDP checksum (RFC 768, RFC 8200 §8.1) of the
// datagram u (checksum field zero) inside IP header ip.
func udpChecksum(ip, u []byte, v6 bool) uint16 {
	var s uint32
	if v6 {
		s = sum16(s, ip[8:40])
	} else {
		s = sum16(s, ip[12:20])
	}
	s += 17 + uint32(len(u))
	s = sum16(s, u)
	c := ^fold(s)
	if c == 0 {
		c = 0xFFFF // 0 means "no checksum"
	}
	return c
}

// sum16 adds b to the ones'-complement sum s as big-endian 16-bit words.
func sum16(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// Frame is an IP packet carrying a RoCEv2 packet, as returned by
// ParseFrame. All slices point into the parsed buffer.
type Frame struct {
	IPv6   bool
	IP     []byte // IP header (20 bytes for IPv4 without options, 40 for IPv6)
	UDP    []byte // UDP header and payload
	Src    netip.AddrPort
	Dst    netip.AddrPort
	Packet Packet
}

// ParseFrame parses an IPv4 or IPv6 packet with a UDP datagram carrying
// RoCEv2 (any port) and its RoCE payload. Frames that are not plain IP +
// UDP (IPv4 options, IPv6 extension headers, other protocols, IPv4-mapped
// addresses in an IPv6 header) give
// ErrNotRoCE; length inconsistencies give ErrTruncated; otherwise errors
// come from Parse. Trailing bytes after the IP length (Ethernet padding) are
// ignored. The ICRC is not checked; use VerifyICRC.
func ParseFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) < 1 {
		return f, ErrTruncated
	}
	var udp []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderLen {
			return f, ErrTruncated
		}
		ihl := int(b[0]&0x0F) * 4
		tot := int(binary.BigEndian.Uint16(b[2:]))
		if ihl != IPv4HeaderLen || b[9] != 17 || tot < ihl || tot > len(b) {
			return f, ErrNotRoCE
		}
		f.IP = b[:ihl]
		udp = b[ihl:tot]
		f.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[12:16])), 0)
		f.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[16:20])), 0)
	case 6:
		if len(b) < IPv6HeaderLen {
			return f, ErrTruncated
		}
		pl := int(binary.BigEndian.Uint16(b[4:]))
		if b[6] != 17 || IPv6HeaderLen+pl > len(b) {
			return f, ErrNotRoCE
		}
		f.IPv6 = true
		f.IP = b[:IPv6HeaderLen]
		udp = b[IPv6HeaderLen : IPv6HeaderLen+pl]
		f.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), 0)
		f.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[24:40])), 0)
		if f.Src.Addr().Is4In6() || f.Dst.Addr().Is4In6() {
			// Not a wire address (RFC 4291 §2.5.5.2), and an Encap
			// treats it as IPv4: such a frame has no re-encoding.
			return Frame{}, ErrNotRoCE
		}
	default:
		return f, ErrNotRoCE
	}
	if len(udp) < UDPHeaderLen {
		return f, ErrTruncated
	}
	ul := int(binary.BigEndian.Uint16(udp[4:]))
	if ul < UDPHeaderLen || ul > len(udp) {
		return f, ErrTruncated
	}
	f.UDP = udp[:ul]
	f.Src = netip.AddrPortFrom(f.Src.Addr(), binary.BigEndian.Uint16(udp[0:]))
	f.Dst = netip.AddrPortFrom(f.Dst.Addr(), binary.BigEndian.Uint16(udp[2:]))
	p, err := Parse(f.UDP[UDPHeaderLen:])
	if err != nil {
		return f, err
	}
	f.Packet = p
	return f, nil
}

// ICRC computes the ICRC of the frame from its real IP and UDP headers.
func (f *Frame) ICRC() uint32 {
	if f.IPv6 {
		return ICRCv6(f.IP, f.UDP)
	}
	return ICRCv4(f.IP, f.UDP)
}

// VerifyICRC checks the frame's ICRC trailer; it returns nil or ErrBadICRC.
func (f *Frame) VerifyICRC() error {
	if f.Packet.b == nil || f.ICRC() != f.Packet.ICRC() {
		return ErrBadICRC
	}
	return nil
}
