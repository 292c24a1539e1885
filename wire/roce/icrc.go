package roce

import (
	"encoding/binary"
	"hash/crc32"
)

// ICRC computation (IBTA RoCEv2 Annex A17.3.3; Linux rxe_icrc.c).
//
// The ICRC is CRC-32/IEEE (reflected, as hash/crc32 computes it) over
//
//	FF×8 ‖ IP header ‖ UDP header ‖ BTH ‖ extension headers ‖ payload ‖ pad
//
// with the variant fields set to all ones: the 8 bytes stand for the masked
// LRH of native IB; in IPv4 the TOS, TTL and header checksum; in IPv6 the
// traffic class, flow label and hop limit; the UDP checksum; and BTH byte 4
// (FECN, BECN, reserved). The IPv4 ID, flags/fragment offset and total
// length are NOT masked. The 4-byte result is stored little-endian (rxe
// writes a native u32 on x86).
//
// Prepending FF×8 to a standard CRC-32 is the same as starting the raw CRC
// register at 0xDEBB20E3 as rxe does; seeding hash/crc32 with 0xDEBB20E3
// would be wrong because the library inverts the running value.

const (
	lrhMaskLen = 8
	// Offsets in the masked prefix buffers.
	v4IP     = lrhMaskLen
	v4UDP    = v4IP + IPv4HeaderLen
	v4BTH    = v4UDP + UDPHeaderLen
	v4Prefix = v4BTH + BTHSize // 48
	v6IP     = lrhMaskLen
	v6UDP    = v6IP + IPv6HeaderLen
	v6BTH    = v6UDP + UDPHeaderLen
	v6Prefix = v6BTH + BTHSize // 68
)

// ICRCv4 returns the ICRC of a RoCEv2 packet carried over IPv4, given the
// IPv4 header as it appears on the wire (the first 20 bytes are used; rxe
// does not support options) and the UDP datagram (UDP header, BTH ...
// payload, pad, 4-byte ICRC trailer; the trailer itself is not covered). It
// returns 0 if ipHdr is shorter than 20 bytes or udp shorter than
// UDP header + BTH + ICRC. It allocates nothing.
func ICRCv4(ipHdr, udp []byte) uint32 {
	if len(ipHdr) < IPv4HeaderLen || len(udp) < UDPHeaderLen+MinPacketLen {
		return 0
	}
	var buf [v4Prefix]byte
	fillLRHMask(buf[:])
	copy(buf[v4IP:v4UDP], ipHdr)
	maskIPv4(buf[v4IP:v4UDP])
	copy(buf[v4UDP:v4Prefix], udp)
	maskUDPBTH(buf[v4UDP:])
	return finishICRC(buf[:], udp[UDPHeaderLen:])
}

// ICRCv6 is ICRCv4 for IPv6: ipHdr is the 40-byte fixed IPv6 header (the
// UDP header must follow it directly; extension headers are not supported).
func ICRCv6(ipHdr, udp []byte) uint32 {
	if len(ipHdr) < IPv6HeaderLen || len(udp) < UDPHeaderLen+MinPacketLen {
		return 0
	}
	var buf [v6Prefix]byte
	fillLRHMask(buf[:])
	copy(buf[v6IP:v6UDP], ipHdr)
	maskIPv6(buf[v6IP:v6UDP])
	copy(buf[v6UDP:v6Prefix], udp)
	maskUDPBTH(buf[v6UDP:])
	return finishICRC(buf[:], udp[UDPHeaderLen:])
}

func fillLRHMask(b []byte) {
	binary.LittleEndian.PutUint64(b, ^uint64(0))
}

// maskIPv4 sets TOS, TTL and header checksum to all ones.
func maskIPv4(ip []byte) {
	ip[1] = 0xFF
	ip[8] = 0xFF
	ip[10], ip[11] = 0xFF, 0xFF
}

// maskIPv6 sets traffic class, flow label and hop limit to all ones,
// keeping the version nibble.
func maskIPv6(ip []byte) {
	ip[0] |= 0x0F
	ip[1], ip[2], ip[3] = 0xFF, 0xFF, 0xFF
	ip[7] = 0xFF
}

// maskUDPBTH masks the UDP checksum and BTH byte 4 of a UDP header followed
// by a BTH.
func maskUDPBTH(b []byte) {
	b[6], b[7] = 0xFF, 0xFF
	b[UDPHeaderLen+bthResv8a] = 0xFF
}

// finishICRC runs the CRC over the masked prefix and then over pkt from the
// end of the BTH up to (not including) the ICRC trailer.
//
// The prefix lives on the caller's stack; hash/crc32 dispatches through a
// function variable, which would force it to the heap, so the prefix goes
// through a local slicing-by-8 loop. The bulk (headers after the BTH and
// the payload) goes through hash/crc32, which uses PCLMULQDQ/PMULL where
// available.
func finishICRC(prefix, pkt []byte) uint32 {
	crc := crcSlicing8(0, prefix)
	return crc32.Update(crc, crc32.IEEETable, pkt[BTHSize:len(pkt)-ICRCSize])
}

// crcTables are the slicing-by-8 tables of the reflected IEEE polynomial:
// crcTables[0] is the byte-at-a-time table, crcTables[k][b] is the CRC
// contribution of byte b followed by k zero bytes.
var crcTables = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for b := 0; b < 256; b++ {
		c := t[0][b]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xFF] ^ c>>8
			t[k][b] = c
		}
	}
	return t
}()

// crcSlicing8 is crc32.Update(crc, crc32.IEEETable, p) without escaping p.
func crcSlicing8(crc uint32, p []byte) uint32 {
	t := &crcTables
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][crc&0xFF] ^ t[6][crc>>8&0xFF] ^ t[5][crc>>16&0xFF] ^ t[4][crc>>24] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// Length-field contributions for Encap.ICRC. A 16-bit big-endian length
// field whose low byte is followed by d bytes of the header CRC input
// (up to the BTH) adds, when it changes from 0 to v, the CRC of v's two
// bytes followed by d zero bytes with a zero register (CRC-32 without
// its initial and final inversion is linear; see icrc_ipid.go).
const (
	lenUDP  = iota // UDP length: 2 bytes follow it (the masked checksum)
	lenIPv4        // IPv4 total length: 24 bytes follow (IP bytes 4..19, UDP)
	lenIPv6        // IPv6 payload length: 42 bytes follow (IP bytes 6..39, UDP)
)

// lenTail is the number of header bytes after each field's low byte.
var lenTail = [3]int{
	lenUDP:  UDPHeaderLen - 6,
	lenIPv4: IPv4HeaderLen - 4 + UDPHeaderLen,
	lenIPv6: IPv6HeaderLen - 6 + UDPHeaderLen,
}

// lenTables[f][0][b] is the contribution of the high byte b of field f,
// lenTables[f][1][b] that of its low byte.
var lenTables = func() (t [3][2][256]uint32) {
	for f, d := range lenTail {
		for b := range 256 {
			t[f][0][b] = crcShiftZeros(crcTables[0][b], d+1)
			t[f][1][b] = crcShiftZeros(crcTables[0][b], d)
		}
	}
	return t
}()

// crcShiftZeros feeds n zero bytes through a raw (uninverted) CRC
// register.
func crcShiftZeros(crc uint32, n int) uint32 {
	for range n {
		crc = crcTables[0][crc&0xFF] ^ crc>>8
	}
	return crc
}

// lenContrib returns what length field f holding v adds to the CRC of the
// headers computed with the field zero.
func lenContrib(v uint16, f int) uint32 {
	t := &lenTables[f]
	return t[0][v>>8] ^ t[1][v&0xFF]
}

// crcBTH continues crc (crc32.Update's convention) over pkt's 12-byte
// BTH with byte 4 (FECN, BECN, reserved) read as 0xFF, straight from pkt:
// one slicing-by-8 step and one slicing-by-4 step, no masked copy.
func crcBTH(crc uint32, pkt []byte) uint32 {
	_ = pkt[BTHSize-1]
	t := &crcTables
	w := binary.LittleEndian.Uint64(pkt) | 0xFF<<(8*bthResv8a)
	crc = ^crc ^ uint32(w)
	crc = t[7][crc&0xFF] ^ t[6][crc>>8&0xFF] ^ t[5][crc>>16&0xFF] ^ t[4][crc>>24] ^
		t[3][byte(w>>32)] ^ t[2][byte(w>>40)] ^ t[1][byte(w>>48)] ^ t[0][byte(w>>56)]
	crc ^= binary.LittleEndian.Uint32(pkt[8:])
	crc = t[3][crc&0xFF] ^ t[2][crc>>8&0xFF] ^ t[1][crc>>16&0xFF] ^ t[0][crc>>24]
	return ^crc
}

// putICRC stores icrc little-endian in the last 4 bytes of pkt.
func putICRC(pkt []byte, icrc uint32) {
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCSize:], icrc)
}
