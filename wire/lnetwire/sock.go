// socklnd wire formats: HELLO V1/V2/V3, ksock_msg framing, checksum and
// zero-copy cookies (lnet-wire.md §7). Pure codecs; the driver lives in
// softib/lnet/socklnd.

package lnetwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// socklnd protocol versions (lnet-wire.md §4.2, §7.2).
const (
	// The magics are SockLNDMagicV1 (V1 HELLO, always little-endian) and
	// ProtoMagic (V2+ HELLO, in the sender's byte order).

	// SockV1Major and SockV1Minor are the only V1 version numbers.
	SockV1Major uint16 = 1
	SockV1Minor uint16 = 0

	SockProtoV1 uint32 = 1 // SockProtoV1 is the V1 protocol (no ksock_msg header).
	SockProtoV2 uint32 = 2 // SockProtoV2 is the V2 protocol (ksock_msg framing).
	SockProtoV3 uint32 = 3 // SockProtoV3 is V2 plus keepalive NOOPs and ZC-ACK ranges.
)

// Sizes of the socklnd wire structures.
const (
	// SockHelloPrefixLen is how many bytes a receiver reads before it
	// knows a HELLO's version: {magic, version} or V1's
	// {magic, major, minor}.
	SockHelloPrefixLen = 8
	// SockHelloV1Len is the fixed part of a V1 HELLO (an lnet_hdr).
	SockHelloV1Len = 72
	// SockHelloV2Len is the fixed part of a V2/V3 ksock_hello_msg_nid4.
	SockHelloV2Len = 56
	// SockHelloMaxIPs caps the deprecated IP list (LNET_INTERFACES_NUM).
	SockHelloMaxIPs = 16
	// SockMsgHdrLen is the size of ksock_msg_hdr.
	SockMsgHdrLen = 24
)

// Zero-copy cookie values (lnet-wire.md §7.5, §7.6).
const (
	// SockKeepalivePing is the ACK cookie of a V3 keepalive NOOP.
	SockKeepalivePing uint64 = 1
	// SockFirstZCCookie is the first per-peer zero-copy request cookie.
	SockFirstZCCookie uint64 = 2
)

// lnet_hdr offsets used by the V1 HELLO (lnet-wire.md §3.2, §3.3).
const (
	lhDestNID    = 0
	lhSrcNID     = 8
	lhDestPID    = 16
	lhSrcPID     = 20
	lhType       = 24
	lhPayloadLen = 28
	lhHelloInc   = 32
	lhHelloType  = 40
	lnetMsgHello = 4
)

// ksock_hello_msg_nid4 offsets (lnet-wire.md §7.2).
const (
	shMagic   = 0
	shVersion = 4
	shSrcNID  = 8
	shDstNID  = 16
	shSrcPID  = 24
	shDstPID  = 28
	shSrcInc  = 32
	shDstInc  = 40
	shCtype   = 48
	shNIPs    = 52
)

// SockConnType is a socklnd connection type (lnet-wire.md §7.7).
type SockConnType int32

// Connection types. SockConnAck is an alias of SockConnBulkIn.
const (
	SockConnNone    SockConnType = -1
	SockConnAny     SockConnType = 0
	SockConnControl SockConnType = 1
	SockConnBulkIn  SockConnType = 2
	SockConnBulkOut SockConnType = 3
	SockConnAck                  = SockConnBulkIn
)

// Invert returns the type the other end of a connection sees: BULK_IN and
// BULK_OUT swap, ANY and CONTROL stay, anything else is NONE.
func (t SockConnType) Invert() SockConnType {
	switch t {
	case SockConnAny, SockConnControl:
		return t
	case SockConnBulkIn:
		return SockConnBulkOut
	case SockConnBulkOut:
		return SockConnBulkIn
	}
	return SockConnNone
}

// Valid reports whether t may be proposed in a HELLO.
func (t SockConnType) Valid() bool { return t >= SockConnAny && t <= SockConnBulkOut }

// String returns the Lustre name of the type.
func (t SockConnType) String() string {
	switch t {
	case SockConnNone:
		return "NONE"
	case SockConnAny:
		return "ANY"
	case SockConnControl:
		return "CONTROL"
	case SockConnBulkIn:
		return "BULK_IN"
	case SockConnBulkOut:
		return "BULK_OUT"
	}
	return fmt.Sprintf("SockConnType(%d)", int32(t))
}

// Errors returned by the socklnd decoders. They are matched with
// errors.Is; *SockVersionError also matches ErrSockVersion.
var (
	ErrSockShort   = errors.New("lnetwire: socklnd message too short")
	ErrSockMagic   = errors.New("lnetwire: bad socklnd magic")
	ErrSockVersion = errors.New("lnetwire: unknown socklnd protocol version")
	ErrSockHello   = errors.New("lnetwire: malformed socklnd HELLO")
	ErrSockMsgType = errors.New("lnetwire: unknown ksock_msg type")
)

// SockVersionError reports a HELLO with a valid magic but a version this
// side does not speak; a passive side answers with its own HELLO.
type SockVersionError struct {
	Magic   uint32 // the magic as decoded in the sender's byte order
	Version uint32 // the version (V2+) or major<<16|minor (V1)
}

func (e *SockVersionError) Error() string {
	return fmt.Sprintf("lnetwire: unknown socklnd version %#x (magic %#x)", e.Version, e.Magic)
}

// Is makes errors.Is(err, ErrSockVersion) true.
func (e *SockVersionError) Is(target error) bool { return target == ErrSockVersion }

// SockHelloPrefix is what the first SockHelloPrefixLen bytes of a HELLO
// reveal.
type SockHelloPrefix struct {
	Version uint32 // SockProtoV1, V2 or V3
	Swapped bool   // the sender's byte order is big-endian (V2+ only)
}

// FixedLen is the length of the HELLO's fixed part, prefix included.
func (p SockHelloPrefix) FixedLen() int {
	if p.Version == SockProtoV1 {
		return SockHelloV1Len
	}
	return SockHelloV2Len
}

// NIPs returns the IP-list length announced by a complete fixed part, or
// an error if it is over SockHelloMaxIPs or (V1) not a multiple of 4.
func (p SockHelloPrefix) NIPs(fixed []byte) (int, error) {
	if len(fixed) < p.FixedLen() {
		return 0, ErrSockShort
	}
	var n uint32
	if p.Version == SockProtoV1 {
		pl := binary.LittleEndian.Uint32(fixed[lhPayloadLen:])
		if pl%4 != 0 {
			return 0, ErrSockHello
		}
		n = pl / 4
	} else {
		n = p.order().Uint32(fixed[shNIPs:])
	}
	if n > SockHelloMaxIPs {
		return 0, ErrSockHello
	}
	return int(n), nil
}

func (p SockHelloPrefix) order() binary.ByteOrder {
	if p.Swapped {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// ParseSockHelloPrefix classifies the first SockHelloPrefixLen bytes of a
// HELLO. A valid magic with an unknown version yields *SockVersionError
// together with the prefix (Version set to what was read).
func ParseSockHelloPrefix(b []byte) (SockHelloPrefix, error) {
	if len(b) < SockHelloPrefixLen {
		return SockHelloPrefix{}, ErrSockShort
	}
	le := binary.LittleEndian.Uint32(b)
	switch {
	case le == SockLNDMagicV1:
		major := binary.LittleEndian.Uint16(b[4:])
		minor := binary.LittleEndian.Uint16(b[6:])
		if major != SockV1Major || minor != SockV1Minor {
			v := uint32(major)<<16 | uint32(minor)
			return SockHelloPrefix{Version: v}, &SockVersionError{Magic: le, Version: v}
		}
		return SockHelloPrefix{Version: SockProtoV1}, nil
	case le == ProtoMagic, bits.ReverseBytes32(le) == ProtoMagic:
		p := SockHelloPrefix{Swapped: le != ProtoMagic}
		p.Version = p.order().Uint32(b[shVersion:])
		if p.Version != SockProtoV2 && p.Version != SockProtoV3 {
			return p, &SockVersionError{Magic: ProtoMagic, Version: p.Version}
		}
		return p, nil
	}
	return SockHelloPrefix{}, ErrSockMagic
}

// SockHello is a socklnd HELLO (lnet-wire.md §7.2). V1 carries no
// destination NID, PID or incarnation; those fields encode as nothing and
// decode as zero.
type SockHello struct {
	Version        uint32 // SockProtoV1, V2 or V3
	SrcNID         uint64
	DstNID         uint64
	SrcPID         uint32
	DstPID         uint32
	SrcIncarnation uint64
	DstIncarnation uint64
	ConnType       SockConnType
	IPs            []uint32 // deprecated; always empty from softib
}

// Len is the encoded length of h.
func (h *SockHello) Len() int {
	if h.Version == SockProtoV1 {
		return SockHelloV1Len + 4*len(h.IPs)
	}
	return SockHelloV2Len + 4*len(h.IPs)
}

// Append appends h, little-endian, to b. V1 produces an lnet_hdr of type
// HELLO whose dest_nid slot holds {magic, major, minor}.
func (h *SockHello) Append(b []byte) []byte {
	le := binary.LittleEndian
	if h.Version == SockProtoV1 {
		var f [SockHelloV1Len]byte
		le.PutUint32(f[lhDestNID:], SockLNDMagicV1)
		le.PutUint16(f[lhDestNID+4:], SockV1Major)
		le.PutUint16(f[lhDestNID+6:], SockV1Minor)
		le.PutUint64(f[lhSrcNID:], h.SrcNID)
		le.PutUint32(f[lhSrcPID:], h.SrcPID)
		le.PutUint32(f[lhType:], lnetMsgHello)
		le.PutUint32(f[lhPayloadLen:], uint32(4*len(h.IPs)))
		le.PutUint64(f[lhHelloInc:], h.SrcIncarnation)
		le.PutUint32(f[lhHelloType:], uint32(h.ConnType))
		b = append(b, f[:]...)
	} else {
		var f [SockHelloV2Len]byte
		le.PutUint32(f[shMagic:], ProtoMagic)
		le.PutUint32(f[shVersion:], h.Version)
		le.PutUint64(f[shSrcNID:], h.SrcNID)
		le.PutUint64(f[shDstNID:], h.DstNID)
		le.PutUint32(f[shSrcPID:], h.SrcPID)
		le.PutUint32(f[shDstPID:], h.DstPID)
		le.PutUint64(f[shSrcInc:], h.SrcIncarnation)
		le.PutUint64(f[shDstInc:], h.DstIncarnation)
		le.PutUint32(f[shCtype:], uint32(h.ConnType))
		le.PutUint32(f[shNIPs:], uint32(len(h.IPs)))
		b = append(b, f[:]...)
	}
	for _, ip := range h.IPs {
		b = le.AppendUint32(b, ip)
	}
	return b
}

// ParseSockHello decodes one complete HELLO from the start of b and
// returns it with the number of bytes it occupies. Swapped (big-endian)
// V2+ HELLOs are converted to host values. A V1 HELLO must be an lnet_hdr
// of type HELLO.
func ParseSockHello(b []byte) (SockHello, int, error) {
	p, err := ParseSockHelloPrefix(b)
	if err != nil {
		return SockHello{}, 0, err
	}
	if len(b) < p.FixedLen() {
		return SockHello{}, 0, ErrSockShort
	}
	nips, err := p.NIPs(b)
	if err != nil {
		return SockHello{}, 0, err
	}
	n := p.FixedLen() + 4*nips
	if len(b) < n {
		return SockHello{}, 0, ErrSockShort
	}
	h := SockHello{Version: p.Version}
	o := p.order()
	if p.Version == SockProtoV1 {
		le := binary.LittleEndian
		if le.Uint32(b[lhType:]) != lnetMsgHello {
			return SockHello{}, 0, ErrSockHello
		}
		h.SrcNID = le.Uint64(b[lhSrcNID:])
		h.SrcPID = le.Uint32(b[lhSrcPID:])
		h.SrcIncarnation = le.Uint64(b[lhHelloInc:])
		h.ConnType = SockConnType(le.Uint32(b[lhHelloType:]))
	} else {
		h.SrcNID = o.Uint64(b[shSrcNID:])
		h.DstNID = o.Uint64(b[shDstNID:])
		h.SrcPID = o.Uint32(b[shSrcPID:])
		h.DstPID = o.Uint32(b[shDstPID:])
		h.SrcIncarnation = o.Uint64(b[shSrcInc:])
		h.DstIncarnation = o.Uint64(b[shDstInc:])
		h.ConnType = SockConnType(o.Uint32(b[shCtype:]))
	}
	if nips > 0 {
		h.IPs = make([]uint32, nips)
		for i := range h.IPs {
			h.IPs[i] = o.Uint32(b[p.FixedLen()+4*i:])
		}
	}
	return h, n, nil
}

// SockMsgType is the ksock_msg type word (lnet-wire.md §7.3).
type SockMsgType uint32

// ksock_msg types.
const (
	SockMsgNOOP SockMsgType = 0xC0 // SockMsgNOOP is a header-only message (ZC-ACK, keepalive).
	SockMsgLNet SockMsgType = 0xC1 // SockMsgLNet is followed by an lnet_hdr and its payload.
)

// String names the type.
func (t SockMsgType) String() string {
	switch t {
	case SockMsgNOOP:
		return "NOOP"
	case SockMsgLNet:
		return "LNET"
	}
	return fmt.Sprintf("SockMsgType(%#x)", uint32(t))
}

// ksock_msg_hdr offsets.
const (
	smType    = 0
	smCsum    = 4
	smCookie0 = 8
	smCookie1 = 16
)

// SockMsgHdr is a view of a little-endian 24-byte ksock_msg_hdr
// {u32 type, u32 csum, u64 zc_cookies[2]} (lnet-wire.md §7.3). It must be
// at least SockMsgHdrLen bytes; ParseSockMsgHdr checks that. Headers from
// a byte-swapped peer are converted with SwapSockMsgHdr first.
type SockMsgHdr []byte

// Type returns the message type.
func (h SockMsgHdr) Type() SockMsgType {
	return SockMsgType(binary.LittleEndian.Uint32(h[smType:]))
}

// Csum returns the checksum word (0 = none).
func (h SockMsgHdr) Csum() uint32 { return binary.LittleEndian.Uint32(h[smCsum:]) }

// ZCReq returns zc_cookies[0]: on an LNET message, the zero-copy request
// cookie the sink must acknowledge (0 = none); on a V3 NOOP, the upper
// end of an acknowledgement.
func (h SockMsgHdr) ZCReq() uint64 { return binary.LittleEndian.Uint64(h[smCookie0:]) }

// ZCAck returns zc_cookies[1], the acknowledged cookie (0 = none).
func (h SockMsgHdr) ZCAck() uint64 { return binary.LittleEndian.Uint64(h[smCookie1:]) }

// SetType sets the message type.
func (h SockMsgHdr) SetType(t SockMsgType) {
	binary.LittleEndian.PutUint32(h[smType:], uint32(t))
}

// SetCsum sets the checksum word.
func (h SockMsgHdr) SetCsum(c uint32) { binary.LittleEndian.PutUint32(h[smCsum:], c) }

// SetZCReq sets zc_cookies[0].
func (h SockMsgHdr) SetZCReq(c uint64) { binary.LittleEndian.PutUint64(h[smCookie0:], c) }

// SetZCAck sets zc_cookies[1].
func (h SockMsgHdr) SetZCAck(c uint64) { binary.LittleEndian.PutUint64(h[smCookie1:], c) }

// Encode writes all fields of m into h.
func (h SockMsgHdr) Encode(m *SockMsg) {
	h.SetType(m.Type)
	h.SetCsum(m.Csum)
	h.SetZCReq(m.ZCReq)
	h.SetZCAck(m.ZCAck)
}

// SwapSockMsgHdr byte-reverses each field of a big-endian peer's header
// in place so the SockMsgHdr accessors read host values.
func SwapSockMsgHdr(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[smType:], bits.ReverseBytes32(le.Uint32(b[smType:])))
	le.PutUint32(b[smCsum:], bits.ReverseBytes32(le.Uint32(b[smCsum:])))
	le.PutUint64(b[smCookie0:], bits.ReverseBytes64(le.Uint64(b[smCookie0:])))
	le.PutUint64(b[smCookie1:], bits.ReverseBytes64(le.Uint64(b[smCookie1:])))
}

// ParseSockMsgHdr checks that b starts with a ksock_msg_hdr of a known
// type and returns a view of it.
func ParseSockMsgHdr(b []byte) (SockMsgHdr, error) {
	if len(b) < SockMsgHdrLen {
		return nil, ErrSockShort
	}
	h := SockMsgHdr(b[:SockMsgHdrLen])
	if t := h.Type(); t != SockMsgNOOP && t != SockMsgLNet {
		return nil, ErrSockMsgType
	}
	return h, nil
}

// SockMsg is a decoded ksock_msg_hdr, used for control messages (NOOPs);
// data messages write the header in place through SockMsgHdr.
type SockMsg struct {
	Type  SockMsgType
	Csum  uint32
	ZCReq uint64 // zc_cookies[0]
	ZCAck uint64 // zc_cookies[1]
}

// Len is SockMsgHdrLen.
func (m *SockMsg) Len() int { return SockMsgHdrLen }

// Append appends the little-endian header to b.
func (m *SockMsg) Append(b []byte) []byte {
	var f [SockMsgHdrLen]byte
	SockMsgHdr(f[:]).Encode(m)
	return append(b, f[:]...)
}

// Decode fills m from a view.
func (m *SockMsg) Decode(h SockMsgHdr) {
	*m = SockMsg{Type: h.Type(), Csum: h.Csum(), ZCReq: h.ZCReq(), ZCAck: h.ZCAck()}
}

// SockCsum accumulates socklnd's checksum (lnet-wire.md §7.4): crc32_le
// seeded with ~0 and never inverted, over the ksock_msg_hdr with csum = 0,
// the lnet_hdr and the payload. The zero value is the initial state.
//
// It stores the running CRC in Go's inverted convention, so that
// crc32.Update can continue it and Sum is a single inversion.
type SockCsum uint32

// Update feeds p into the checksum.
func (c SockCsum) Update(p []byte) SockCsum {
	return SockCsum(crc32.Update(uint32(c), crc32.IEEETable, p))
}

// UpdateHdr feeds a ksock_msg_hdr with its csum word taken as zero.
func (c SockCsum) UpdateHdr(h SockMsgHdr) SockCsum {
	c = c.Update(h[:smCsum])
	c = c.Update(zeroCsum[:])
	return c.Update(h[smCsum+4 : SockMsgHdrLen])
}

// zeroCsum stands in for the csum word while hashing; read-only. A local
// array would escape into crc32.Update and allocate per message.
var zeroCsum [4]byte

// Sum returns the value carried in the csum word.
func (c SockCsum) Sum() uint32 { return ^uint32(c) }

// SockZCAcks lists the cookies a NOOP or LNET header acknowledges
// (lnet-wire.md §7.5). On an LNET message only ZCAck counts (a single
// cookie). On a NOOP: ZCReq == 0 acknowledges ZCAck alone; ZCReq > ZCAck
// acknowledges the two cookies; ZCReq < ZCAck acknowledges the range
// [ZCReq, ZCAck] (V3).
type SockZCAcks struct {
	Lo, Hi uint64 // inclusive range when Range, else the two cookies (Lo may equal Hi)
	Range  bool
}

// Contains reports whether cookie c is acknowledged.
func (a SockZCAcks) Contains(c uint64) bool {
	if a.Range {
		return c >= a.Lo && c <= a.Hi
	}
	return c == a.Lo || c == a.Hi
}

// Count is how many cookies are acknowledged.
func (a SockZCAcks) Count() uint64 {
	if a.Range {
		return a.Hi - a.Lo + 1
	}
	if a.Lo == a.Hi {
		return 1
	}
	return 2
}

// ZCAcks decodes the acknowledgement a header carries; ok is false when
// it carries none (ZCAck == 0).
func (h SockMsgHdr) ZCAcks() (a SockZCAcks, ok bool) {
	c2 := h.ZCAck()
	if c2 == 0 {
		return SockZCAcks{}, false
	}
	c1 := uint64(0)
	if h.Type() == SockMsgNOOP {
		c1 = h.ZCReq()
	}
	switch {
	case c1 == 0 || c1 == c2:
		return SockZCAcks{Lo: c2, Hi: c2}, true
	case c1 > c2:
		return SockZCAcks{Lo: c2, Hi: c1}, true
	}
	return SockZCAcks{Lo: c1, Hi: c2, Range: true}, true
}

// IsKeepalive reports whether a NOOP is a V3 keepalive ping.
func (h SockMsgHdr) IsKeepalive() bool {
	return h.Type() == SockMsgNOOP && h.ZCAck() == SockKeepalivePing && h.ZCReq() == 0
}
