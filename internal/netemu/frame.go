package netemu

import (
	"encoding/binary"
	"net/netip"
)

// Frame layout as the router's packet sockets read and write it (they
// are SOCK_RAW with PACKET_VNET_HDR):
//
//	| virtio_net_hdr (10) | Ethernet (14) | IPv4 or IPv6 header | L4 ... |
//
// The virtio header tells whether the sender's kernel left the L4
// checksum for "hardware" (veth) to fill in, and whether the frame is a
// GSO super-packet that "hardware" would have cut into MTU-sized
// segments. The router does both jobs in userspace, so that what leaves
// it are ordinary frames with complete checksums, each impaired on its
// own as on a real wire.
const (
	vnetLen = 10 // sizeof(struct virtio_net_hdr)
	ethLen  = 14

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd

	ipv4MinLen = 20
	ipv6Len    = 40

	protoTCP = 6
	protoUDP = 17

	// virtio_net_hdr flags and gso_type values (virtio spec §5.1.6).
	vnetNeedsCsum = 1
	gsoNone       = 0
	gsoTCPv4      = 1
	gsoUDP        = 3 // UFO: IP fragmentation, not produced by veth
	gsoTCPv6      = 4
	gsoUDPL4      = 5
	gsoECN        = 0x80

	// TCP flag bits (RFC 9293 §3.1).
	tcpFIN = 0x01
	tcpPSH = 0x08
	tcpCWR = 0x80
)

// vnetHdr is struct virtio_net_hdr. Packet sockets use host byte order.
type vnetHdr struct {
	flags, gsoType                      uint8
	hdrLen, gsoSize, csumStart, csumOff uint16
}

func parseVnet(b []byte) vnetHdr {
	return vnetHdr{
		flags:     b[0],
		gsoType:   b[1],
		hdrLen:    binary.NativeEndian.Uint16(b[2:]),
		gsoSize:   binary.NativeEndian.Uint16(b[4:]),
		csumStart: binary.NativeEndian.Uint16(b[6:]),
		csumOff:   binary.NativeEndian.Uint16(b[8:]),
	}
}

// ipPacket describes the IP packet in an Ethernet frame (offsets are
// from the start of the Ethernet header).
type ipPacket struct {
	v6       bool
	l4       int   // start of the IP payload (transport header)
	end      int   // end of the IP packet (Ethernet padding excluded)
	proto    uint8 // transport protocol (IPv6: the first next header)
	nonFirst bool  // an IPv4 fragment other than the first
	dst      netip.Addr
}

// parseIP checks the IP header of Ethernet frame f and describes it.
// It returns false for anything that is not a well-formed IPv4 or IPv6
// packet; such frames are counted as malformed and dropped.
func parseIP(f []byte) (ipPacket, bool) {
	if len(f) < ethLen+ipv4MinLen {
		return ipPacket{}, false
	}
	ip := f[ethLen:]
	switch binary.BigEndian.Uint16(f[12:]) {
	case etherTypeIPv4:
		ihl := int(ip[0]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if ip[0]>>4 != 4 || ihl < ipv4MinLen || tot < ihl || tot > len(ip) {
			return ipPacket{}, false
		}
		return ipPacket{
			l4:       ethLen + ihl,
			end:      ethLen + tot,
			proto:    ip[9],
			nonFirst: binary.BigEndian.Uint16(ip[6:])&0x1fff != 0,
			dst:      netip.AddrFrom4([4]byte(ip[16:20])),
		}, true
	case etherTypeIPv6:
		if len(ip) < ipv6Len || ip[0]>>4 != 6 {
			return ipPacket{}, false
		}
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if pl == 0 || ipv6Len+pl > len(ip) { // 0: jumbogram, not on a 1500..64K MTU link
			return ipPacket{}, false
		}
		return ipPacket{
			v6:    true,
			l4:    ethLen + ipv6Len,
			end:   ethLen + ipv6Len + pl,
			proto: ip[6],
			dst:   netip.AddrFrom16([16]byte(ip[24:40])),
		}, true
	}
	return ipPacket{}, false
}

// ports returns the transport ports of p, if p carries TCP or UDP with
// a visible header (IPv6 extension headers are not walked).
func (p *ipPacket) ports(f []byte) (src, dst uint16, ok bool) {
	if p.nonFirst || (p.proto != protoTCP && p.proto != protoUDP) || p.l4+4 > p.end {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(f[p.l4:]), binary.BigEndian.Uint16(f[p.l4+2:]), true
}

// decTTL decrements the IPv4 TTL or IPv6 hop limit as a router does and
// fixes the IPv4 header checksum. It returns false if the packet must
// not be forwarded (TTL or hop limit was 0 or 1).
func decTTL(f []byte, p *ipPacket) bool {
	ip := f[ethLen:]
	if p.v6 {
		if ip[7] <= 1 {
			return false
		}
		ip[7]--
		return true
	}
	if ip[8] <= 1 {
		return false
	}
	ip[8]--
	setIPv4Csum(ip[:p.l4-ethLen])
	return true
}

// setIPv4Csum recomputes the checksum of IPv4 header h (RFC 791).
func setIPv4Csum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^fold(sum(h, 0)))
}

// sum adds b to a ones'-complement accumulator (RFC 1071), reading
// 32-bit words where it can; fold gives the 16-bit result.
func sum(b []byte, acc uint64) uint64 {
	for len(b) >= 8 {
		acc += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

func fold(acc uint64) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// pseudoSum is the sum of the TCP/UDP pseudo-header (RFC 768, RFC 8200
// §8.1) of an L4 segment of length n in Ethernet frame f.
func pseudoSum(f []byte, v6 bool, proto uint8, n int) uint64 {
	ip := f[ethLen:]
	if v6 {
		return sum(ip[8:40], uint64(proto)+uint64(n))
	}
	return sum(ip[12:20], uint64(proto)+uint64(n))
}

// setL4Csum computes the TCP or UDP checksum of the segment
// f[l4:end] from scratch.
func setL4Csum(f []byte, v6 bool, proto uint8, l4, end int) {
	off := l4 + 16
	if proto == protoUDP {
		off = l4 + 6
	}
	f[off], f[off+1] = 0, 0
	c := ^fold(sum(f[l4:end], pseudoSum(f, v6, proto, end-l4)))
	if c == 0 && proto == protoUDP {
		c = 0xffff // 0 means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(f[off:], c)
}

// completeCsum finishes a checksum the sender left partial
// (VIRTIO_NET_HDR_F_NEEDS_CSUM): the field at start+off holds the
// pseudo-header sum, the rest is summed here. Only TCP and UDP
// checksums are ones' complement; anything else (SCTP's CRC32c) is left
// alone.
func completeCsum(f []byte, p *ipPacket, h vnetHdr) bool {
	start, field := int(h.csumStart), int(h.csumStart)+int(h.csumOff)
	switch {
	case start != p.l4 || p.nonFirst:
		return false
	case p.proto == protoTCP && h.csumOff == 16, p.proto == protoUDP && h.csumOff == 6:
	default:
		return false
	}
	if field+2 > p.end {
		return false
	}
	c := ^fold(sum(f[start:p.end], 0))
	if c == 0 && p.proto == protoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[field:], c)
	return true
}

// gsoPlan describes how a GSO super-packet splits into segments.
type gsoPlan struct {
	hdr  int // bytes of Ethernet + IP + L4 headers copied into every segment
	mss  int // payload bytes per segment (the last may be shorter)
	segs int
}

// planGSO checks GSO super-packet f against its virtio header and
// returns how it splits. Only what veth passes along is supported: TCP
// (TSO) and UDP_L4 (UDP GSO) over IPv4 and IPv6 without extension
// headers.
func planGSO(f []byte, p *ipPacket, h vnetHdr) (gsoPlan, bool) {
	typ := h.gsoType &^ gsoECN
	switch {
	case p.nonFirst:
		return gsoPlan{}, false
	case (typ == gsoTCPv4 || typ == gsoTCPv6) && p.proto == protoTCP && p.v6 == (typ == gsoTCPv6):
	case typ == gsoUDPL4 && p.proto == protoUDP:
	default:
		return gsoPlan{}, false
	}
	hdr := p.l4 + 8
	if p.proto == protoTCP {
		if p.l4+20 > p.end {
			return gsoPlan{}, false
		}
		hdr = p.l4 + int(f[p.l4+12]>>4)*4
		if hdr < p.l4+20 {
			return gsoPlan{}, false
		}
	}
	mss := int(h.gsoSize)
	if mss == 0 || hdr >= p.end {
		return gsoPlan{}, false
	}
	return gsoPlan{hdr: hdr, mss: mss, segs: (p.end - hdr + mss - 1) / mss}, true
}

// segment writes segment i of GSO super-packet f into dst and returns
// its length: the headers are copied and fixed as the kernel's software
// GSO would (IPv4 ID +i, lengths, TCP sequence number, FIN/PSH only on
// the last segment, CWR only on the first, fresh checksums). dst must
// hold plan.hdr+plan.mss bytes.
func segment(dst, f []byte, p *ipPacket, plan gsoPlan, i int) int {
	start := plan.hdr + i*plan.mss
	end := min(start+plan.mss, p.end)
	copy(dst, f[:plan.hdr])
	n := plan.hdr + copy(dst[plan.hdr:], f[start:end])
	ip := dst[ethLen:]
	if p.v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(n-ethLen-ipv6Len))
	} else {
		binary.BigEndian.PutUint16(ip[2:], uint16(n-ethLen))
		binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(i))
		setIPv4Csum(ip[:p.l4-ethLen])
	}
	l4 := dst[p.l4:]
	if p.proto == protoTCP {
		seq := binary.BigEndian.Uint32(l4[4:])
		binary.BigEndian.PutUint32(l4[4:], seq+uint32(i*plan.mss))
		if i < plan.segs-1 {
			l4[13] &^= tcpFIN | tcpPSH
		}
		if i > 0 {
			l4[13] &^= tcpCWR
		}
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(n-p.l4))
	}
	setL4Csum(dst, p.v6, p.proto, p.l4, n)
	return n
}

// gateway returns the second-to-last address of p (.254 in a /24).
func gateway(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	gw := last.Prev()
	if !p.Contains(gw) || gw == p.Masked().Addr() {
		return netip.Addr{}
	}
	return gw
}
