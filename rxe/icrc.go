package rxe

import (
	"encoding/binary"
	"net/netip"

	"softib/wire/roce"
)

// encapCache holds the ICRC template (roce.Encap) for the last peer
// address used, so that a stream of packets to (or from) one peer computes
// no template per packet.
type encapCache struct {
	local, peer netip.AddrPort
	e           roce.Encap
	ok          bool
}

// get returns the encapsulation for packets from src to dst.
func (c *encapCache) get(src, dst netip.AddrPort) *roce.Encap {
	if !c.ok || c.local != src || c.peer != dst {
		e, err := roce.NewEncap(roce.EncapConfig{Src: src, Dst: dst})
		c.e, c.ok, c.local, c.peer = e, err == nil, src, dst
	}
	return &c.e
}

// grhArea writes the 40-byte area rxe puts in front of every UD/GSI
// receive (roce-wire.md §12): for IPv4, 20 zero bytes and the IPv4 header
// as it was on the wire (ID 0, DF, TTL 64 since a UDP socket hides the
// real values); for IPv6, the IPv6 header. udpPayload is the UDP payload
// length (BTH through ICRC).
func grhArea(b []byte, src, dst netip.Addr, udpPayload int) {
	_ = b[39]
	clear(b[:40])
	src, dst = src.Unmap(), dst.Unmap()
	if src.Is4() {
		h := b[20:40]
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+8+udpPayload))
		h[6] = 0x40 // DF
		h[8] = 64
		h[9] = 17
		s4, d4 := src.As4(), dst.As4()
		copy(h[12:], s4[:])
		copy(h[16:], d4[:])
		binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
		return
	}
	h := b[:40]
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(8+udpPayload))
	h[6] = 17
	h[7] = 64
	s16, d16 := src.As16(), dst.As16()
	copy(h[8:], s16[:])
	copy(h[24:], d16[:])
}

// ipv4Checksum returns the header checksum of h (whose checksum field is
// zero).
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// SourcePort returns the UDP source port Linux rxe uses for a QP
// (roce-wire.md §1.1): 0xC000 + hash_32(lqpn, 14) when the remote QPN is
// not known (rqpn 0: UD, GSI, any QP before RTR), else the flow-label
// form rdma_get_udp_sport gives for flow label 0 (RC/UC from RTR on, Linux
// 6.x). A device sends each QP's packets from this port (or from the one
// of the flow label its address vector carries).
func SourcePort(lqpn, rqpn uint32) uint16 {
	if rqpn == 0 {
		return roce.SrcPortForQPN(lqpn)
	}
	return roce.SrcPortForFlow(lqpn, rqpn)
}
