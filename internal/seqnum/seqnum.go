// Package seqnum implements 24-bit serial-number arithmetic for InfiniBand
// packet sequence numbers (PSN) and message sequence numbers (MSN).
//
// Both counters live modulo 2^24 (IBTA Vol 1 §9.7.1). Two values are
// ordered by the sign of their difference shifted into the top 24 bits of an
// int32, exactly as Linux rxe's psn_compare does: a is before b when
// int32((a-b)<<8) < 0. This makes every comparison correct across the
// wraparound from 0xFFFFFF to 0 as long as the two values are less than 2^23
// apart. Never compare PSNs with a bare <.
package seqnum

import "strconv"

// Mask selects the 24 significant bits of a PSN or MSN.
const Mask = 0x00FFFFFF

// Modulus is the size of the 24-bit sequence space.
const Modulus = 1 << 24

// PSN is a 24-bit packet sequence number (IBTA Vol 1 §9.2 BTH). Values
// returned by this package are always masked to 24 bits.
type PSN uint32

// NewPSN returns v truncated to 24 bits.
func NewPSN(v uint32) PSN { return PSN(v & Mask) }

// Add returns p+n modulo 2^24; n may be negative.
func (p PSN) Add(n int) PSN { return PSN((uint32(p) + uint32(n)) & Mask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return PSN((uint32(p) + 1) & Mask) }

// Prev returns p-1 modulo 2^24.
func (p PSN) Prev() PSN { return PSN((uint32(p) - 1) & Mask) }

// Diff returns the signed distance p-b, in [-2^23, 2^23).
func (p PSN) Diff(b PSN) int32 { return diff(uint32(p), uint32(b)) }

// Less reports whether p is before b in serial order.
func (p PSN) Less(b PSN) bool { return int32((uint32(p)-uint32(b))<<8) < 0 }

// LessEq reports whether p is before or equal to b in serial order.
func (p PSN) LessEq(b PSN) bool { return int32((uint32(p)-uint32(b))<<8) <= 0 }

// InWindow reports whether p lies in the n values starting at first, i.e.
// first <= p < first+n in serial order. n above 2^24 is treated as the full
// space.
func (p PSN) InWindow(first PSN, n uint32) bool {
	return (uint32(p)-uint32(first))&Mask < n
}

// String formats p in decimal.
func (p PSN) String() string { return strconv.FormatUint(uint64(p), 10) }

// MSN is a 24-bit message sequence number, carried in the AETH (IBTA Vol 1
// §9.7.5.1.1). It counts messages completed at the responder.
type MSN uint32

// NewMSN returns v truncated to 24 bits.
func NewMSN(v uint32) MSN { return MSN(v & Mask) }

// Add returns m+n modulo 2^24; n may be negative.
func (m MSN) Add(n int) MSN { return MSN((uint32(m) + uint32(n)) & Mask) }

// Next returns m+1 modulo 2^24.
func (m MSN) Next() MSN { return MSN((uint32(m) + 1) & Mask) }

// Diff returns the signed distance m-b, in [-2^23, 2^23).
func (m MSN) Diff(b MSN) int32 { return diff(uint32(m), uint32(b)) }

// Less reports whether m is before b in serial order.
func (m MSN) Less(b MSN) bool { return int32((uint32(m)-uint32(b))<<8) < 0 }

// LessEq reports whether m is before or equal to b in serial order.
func (m MSN) LessEq(b MSN) bool { return int32((uint32(m)-uint32(b))<<8) <= 0 }

// String formats m in decimal.
func (m MSN) String() string { return strconv.FormatUint(uint64(m), 10) }

// diff sign-extends the 24-bit difference a-b.
func diff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }
