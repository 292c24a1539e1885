package rxe

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"

	"softib/wire/roce"
)

// icrc computes the RoCEv2 Invariant CRC (roce-wire.md §5) of pkt, the
// UDP payload from the BTH up to (not including) the 4-byte ICRC, as it
// travels from src to dst. The IP header is the one the kernel emits for
// softib's unconnected DF socket (IPv4: ID 0, DF) with the variant fields
// masked. The result goes on the wire little-endian.
func icrc(src, dst netip.AddrPort, pkt []byte) uint32 {
	var ph [8 + 40 + 8 + roce.BTHSize]byte
	for i := range 8 {
		ph[i] = 0xFF
	}
	udpLen := 8 + len(pkt) + roce.ICRCSize
	n := 8
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if sa.Is4() {
		h := ph[n : n+20]
		h[0] = 0x45
		h[1] = 0xFF // TOS masked
		binary.BigEndian.PutUint16(h[2:], uint16(20+udpLen))
		// ID 0, flags DF.
		h[6] = 0x40
		h[8] = 0xFF // TTL masked
		h[9] = 17
		h[10], h[11] = 0xFF, 0xFF // checksum masked
		s4, d4 := sa.As4(), da.As4()
		copy(h[12:], s4[:])
		copy(h[16:], d4[:])
		n += 20
	} else {
		h := ph[n : n+40]
		// Version 6, traffic class and flow label masked.
		h[0], h[1], h[2], h[3] = 0x6F, 0xFF, 0xFF, 0xFF
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = 17
		h[7] = 0xFF // hop limit masked
		s16, d16 := sa.As16(), da.As16()
		copy(h[8:], s16[:])
		copy(h[24:], d16[:])
		n += 40
	}
	u := ph[n : n+8]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xFF, 0xFF
	n += 8
	copy(ph[n:], pkt[:roce.BTHSize])
	ph[n+4] = 0xFF // FECN/BECN/resv8a
	n += roce.BTHSize
	// The pseudo-header goes through a plain table loop: handing the
	// stack array to crc32.Update would make it escape (one allocation
	// per packet).
	crc := ^uint32(0)
	for _, b := range ph[:n] {
		crc = crc32.IEEETable[byte(crc)^b] ^ crc>>8
	}
	return crc32.Update(^crc, crc32.IEEETable, pkt[roce.BTHSize:])
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

// hash32 is the kernel's hash_32 (include/linux/hash.h).
func hash32(v uint32, bits uint) uint32 { return (v * 0x61C88647) >> (32 - bits) }

// SourcePort returns the UDP source port Linux rxe uses for a QP
// (roce-wire.md §1.1): the flow-label form once the remote QPN is known
// (rdma_get_udp_sport on Linux 6.x), else 0xC000 + hash_32(qpn, 14).
//
// softib sends every packet from its socket's bound port (a udp.Conn has a
// single local port), so this is informational: it tells what a kernel
// rxe peer would use and documents the difference.
func SourcePort(lqpn, rqpn uint32) uint16 {
	if rqpn == 0 {
		return uint16(0xC000 + hash32(lqpn, 14)&0x3FFF)
	}
	fl := uint64(lqpn) * uint64(rqpn)
	fl ^= fl >> 20
	fl ^= fl >> 40
	fl &= 0xFFFFF
	return uint16(0xC000 | ((fl & 0x3FFF) ^ (fl >> 14)))
}
