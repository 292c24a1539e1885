package roce

import (
	"encoding/binary"
	"net/netip"
)

// IPFields are the fields of the IP header in front of a RoCEv2 UDP
// datagram that PutIPHeader writes.
type IPFields struct {
	Src, Dst  netip.Addr // IPv4 (or IPv4-mapped) gives an IPv4 header
	TOS       uint8      // IPv4 TOS / IPv6 traffic class (DSCP and ECN)
	TTL       uint8      // IPv4 TTL / IPv6 hop limit
	IPv4ID    uint16     // IPv4 Identification
	NoDF      bool       // IPv4: leave Don't Fragment clear
	FlowLabel uint32     // IPv6 flow label (low 20 bits)
	// Payload is what follows the IP header: the UDP header and the
	// RoCEv2 packet, in bytes.
	Payload int
}

// PutIPHeader writes the IP header f describes at the start of b and
// returns its length: an IPv4 header without options (IPv4HeaderLen
// bytes, protocol UDP, header checksum set) when Src is IPv4 or
// IPv4-mapped, else an IPv6 header without extension headers
// (IPv6HeaderLen bytes, next header UDP). It is the one writer of the
// IP headers softib synthesises: pcap frames (AppendFrame) and the GRH
// area rxe puts in front of UD receives.
func PutIPHeader(b []byte, f *IPFields) int {
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	if src.Is4() {
		ip := b[:IPv4HeaderLen]
		ip[0] = 0x45
		ip[1] = f.TOS
		binary.BigEndian.PutUint16(ip[2:], uint16(IPv4HeaderLen+f.Payload))
		binary.BigEndian.PutUint16(ip[4:], f.IPv4ID)
		ip[6], ip[7] = 0, 0
		if !f.NoDF {
			ip[6] = 0x40
		}
		ip[8] = f.TTL
		ip[9] = 17
		ip[10], ip[11] = 0, 0
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], IPv4Checksum(ip))
		return IPv4HeaderLen
	}
	ip := b[:IPv6HeaderLen]
	binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(f.TOS)<<20|f.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(ip[4:], uint16(f.Payload))
	ip[6] = 17
	ip[7] = f.TTL
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return IPv6HeaderLen
}

// IPv4Checksum returns the RFC 791 header checksum of the IPv4 header h:
// the value to store when h's checksum field is zero, and 0 when h
// carries a correct one.
func IPv4Checksum(h []byte) uint16 { return ^fold(sum16(0, h)) }
