package roce

import (
	"encoding/binary"
	"math/bits"
	"sync"
)

// Verifying an IPv4 ICRC without the IPv4 Identification.
//
// The ICRC covers the IPv4 ID, which a UDP socket does not show and which
// Linux rxe varies per packet (roce-wire.md §1.2). The ICRC is a CRC-32,
// which is affine over GF(2): flipping input bits XORs the result with a
// value that depends only on which bits flipped and where, not on the rest
// of the input. So with ICRC(id) the ICRC of the packet under IP ID id,
//
//	ICRC(id) = ICRC(0) ⊕ L_n(id)
//
// where L_n is linear and depends only on n, the number of CRC-input bytes
// after the ID field. In polynomial terms (reflected CRC-32, register bit
// 31 = x^0 as in zlib's crc32_combine), with M(x) the 16-bit ID as a
// message polynomial of degree < 16,
//
//	L_n(id) = M(x) · x^32 · x^(8n)  mod P
//
// and x is invertible mod P (P has a constant term), so a received ICRC r
// is consistent with some ID exactly when
//
//	M = (r ⊕ ICRC(0)) · x^-(32+8n)  mod P
//
// has degree < 16; the ID is then read off M. That costs one ICRC (needed
// anyway) and one 32×32-bit carry-less multiply mod P by a constant per
// packet length, taken from a table built once.
//
// The price: a receiver that accepts any ID accepts 2^16 of the 2^32
// possible ICRC values for a packet, so a random corruption passes with
// probability 2^-16 instead of 2^-32. What passes is exactly the
// corruptions whose CRC difference equals that of some ID change (which a
// receiver without the IP header cannot tell from one). The CRC's burst
// guarantee (every error burst of 32 bits or less is caught) no longer
// holds for bursts far from the ID field: a single flipped byte at
// distance s passes when e(x)·x^-s mod P has degree < 16, which happens at
// a few positions per packet length (for 333-byte payloads, 15 of the
// 81855 single-byte errors). The IPv6 ICRC covers no hidden field and
// keeps the full 2^-32.

const (
	// crcPoly is the reflected CRC-32/IEEE polynomial (without x^32).
	crcPoly = 0xEDB88320
	// crcXInv is x^-1 mod P in the reflected representation: (P − 1)/x,
	// i.e. x^31 (bit 0) plus P's coefficients x^1..x^31 shifted down one
	// degree (one bit up).
	crcXInv = crcPoly<<1&0xFFFFFFFF | 1
	// idTrail is the number of CRC-input bytes after the IPv4 ID beyond
	// the packet's own length: FF×8 ‖ IPv4 (ID at 4..5) ‖ UDP ‖ pkt minus
	// its 4-byte trailer puts 8+20+8+len−4 bytes in, 8+6 of them up to
	// the end of the ID.
	idTrail = lrhMaskLen + IPv4HeaderLen + UDPHeaderLen - ICRCSize - (lrhMaskLen + 6)
	// idTableLen bounds the packet lengths whose multiplier is tabled
	// (9 KiB jumbo frames and below); longer packets compute theirs.
	idTableLen = 9216
)

// mulModP returns a·b mod P in the reflected representation (zlib's
// multmodp).
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// mulModPFast is mulModP by a carry-less multiply and a table reduction.
// The 63-bit carry-less product of the reflected operands, shifted up one,
// holds x^0..x^31 reflected in its high word and x^32..x^63 in its low
// word; the low word times x^32 mod P is what the CRC tables give for
// four zero bytes after a register holding it.
func mulModPFast(a, b uint32) uint32 {
	var t [16]uint64
	bb := uint64(b)
	for k := 1; k < 16; k++ {
		if k&1 == 0 {
			t[k] = t[k>>1] << 1
		} else {
			t[k] = t[k-1] ^ bb
		}
	}
	var p uint64
	for i := 0; i < 32; i += 4 {
		p ^= t[a>>i&0xF] << i
	}
	p <<= 1
	lo := uint32(p)
	ct := &crcTables
	return uint32(p>>32) ^ ct[3][lo&0xFF] ^ ct[2][lo>>8&0xFF] ^ ct[1][lo>>16&0xFF] ^ ct[0][lo>>24]
}

// powModP returns a^k mod P.
func powModP(a uint32, k int) uint32 {
	r := uint32(1) << 31 // x^0
	for ; k > 0; k >>= 1 {
		if k&1 != 0 {
			r = mulModP(r, a)
		}
		a = mulModP(a, a)
	}
	return r
}

// idInvTable[l] is x^-(32+8(l+idTrail)) mod P for packet length l.
var idInvTable = sync.OnceValue(func() *[idTableLen]uint32 {
	var t [idTableLen]uint32
	x8 := powModP(crcXInv, 8)
	t[0] = powModP(crcXInv, 32+8*idTrail)
	for l := 1; l < idTableLen; l++ {
		t[l] = mulModP(t[l-1], x8)
	}
	return &t
})

// idInv returns the multiplier that maps an ICRC difference of a packet
// of length l back to its ID polynomial.
func idInv(l int) uint32 {
	if l < idTableLen {
		return idInvTable()[l]
	}
	return powModP(crcXInv, 32+8*(l+idTrail))
}

// ipv4IDFromDiff returns the IPv4 ID change that XORs the ICRC of a
// packet of length l with diff, and whether there is one.
func ipv4IDFromDiff(diff uint32, l int) (uint16, bool) {
	m := mulModPFast(diff, idInv(l))
	if m&0xFFFF != 0 {
		return 0, false
	}
	// x^0..x^7 (bits 31..24) are the last ID byte's bits 7..0, x^8..x^15
	// the first's: m>>16 is the ID in little-endian byte order.
	return bits.ReverseBytes16(uint16(m >> 16)), true
}

// ipv4IDDiff returns L_l(id), the change of the ICRC of a packet of
// length l when its IPv4 ID changes by id (XOR).
func ipv4IDDiff(id uint16, l int) uint32 {
	m := uint32(bits.ReverseBytes16(id)) << 16
	return mulModP(m, powModP(1<<30, 32+8*(l+idTrail))) // 1<<30 is x
}

// VerifyICRCAnyID checks pkt's ICRC allowing any IPv4 Identification in
// place of the one e assumes, as a receiver on a UDP socket must when the
// sender is Linux rxe (see the comment above). It returns the ID the ICRC
// matches (e's own for IPv6, whose ICRC covers no hidden field, and for an
// IPv4 packet sent with the assumed ID), or ErrTruncated or ErrBadICRC. A
// random corruption of an IPv4 packet passes with probability 2^-16.
// It allocates nothing.
func (e *Encap) VerifyICRCAnyID(pkt []byte) (uint16, error) {
	if len(pkt) < MinPacketLen {
		return 0, ErrTruncated
	}
	diff := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCSize:]) ^ e.ICRC(pkt)
	if diff == 0 {
		return e.cfg.IPv4ID, nil
	}
	if e.v6 {
		return 0, ErrBadICRC
	}
	d, ok := ipv4IDFromDiff(diff, len(pkt))
	if !ok {
		return 0, ErrBadICRC
	}
	return e.cfg.IPv4ID ^ d, nil
}
