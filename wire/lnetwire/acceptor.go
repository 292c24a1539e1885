package lnetwire

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Protocol magics (lnet-wire.md §4.2).
const (
	AcceptorMagic   uint32 = 0xACCE7100 // LNET_PROTO_ACCEPTOR_MAGIC
	O2IBLNDMagic    uint32 = 0x0BE91B91 // IBLND_MSG_MAGIC
	SockLNDMagicV1  uint32 = 0xEEBC0DED // LNET_PROTO_TCP_MAGIC (socklnd V1)
	ProtoMagic      uint32 = 0x45726963 // LNET_PROTO_MAGIC (socklnd V2+)
	GNILNDMagic     uint32 = 0xB00FBABE
	KFILNDMagic     uint32 = 0xDEADBEEF
	EFALNDMagic     uint32 = 0x2BE092BE
	SelftestMagic   uint32 = 0xEEB0F00D // lnet_selftest SRPC
	SelftestPingMag uint32 = 0xBABEFACE // lnet_selftest ping
)

// Acceptor protocol versions and request sizes (lnet-wire.md §4.1).
const (
	AcceptorVersion1 uint32 = 1 // 64-bit target NID
	AcceptorVersion2 uint32 = 2 // 20-byte lnet_nid target
	// AcceptorVersion is the version softib sends by default.
	AcceptorVersion = AcceptorVersion1

	AcceptorRequestV1Size = 16
	AcceptorRequestV2Size = 28
	// AcceptorMagicSize is the size of the {magic, version} prefix, also
	// the whole reply to a request with an unknown version.
	AcceptorMagicSize = 8
)

// LargeNIDSize is the size of struct lnet_nid.
const LargeNIDSize = 20

// LargeNID is struct lnet_nid (Lustre 2.15+, lnet-wire.md §2.4). The net
// number and address are big-endian in every byte order.
type LargeNID struct {
	Size uint8    // address bytes minus 4 (0 for IPv4)
	Type uint8    // LND type; 0xFF is ANY
	Num  uint16   // net number
	Addr [16]byte // address (IPv4 in Addr[0:4], network order)
}

// LargeFromNID converts a nid4 into a LargeNID with a 4-byte address.
func LargeFromNID(n NID) LargeNID {
	var l LargeNID
	l.Type = uint8(n.Net().Type())
	l.Num = n.Net().Num()
	binary.BigEndian.PutUint32(l.Addr[:], n.Addr())
	return l
}

// NID4 converts back to a nid4; ok is false for addresses longer than 4
// bytes.
func (l LargeNID) NID4() (n NID, ok bool) {
	if l.Size != 0 {
		return 0, false
	}
	return MakeNID(MakeNet(LNDType(l.Type), l.Num), binary.BigEndian.Uint32(l.Addr[:])), true
}

// Append appends the 20-byte wire form.
func (l LargeNID) Append(b []byte) []byte {
	b = append(b, l.Size, l.Type)
	b = binary.BigEndian.AppendUint16(b, l.Num)
	return append(b, l.Addr[:]...)
}

// ParseLargeNID decodes a 20-byte lnet_nid.
func ParseLargeNID(b []byte) (LargeNID, error) {
	var l LargeNID
	if len(b) < LargeNIDSize {
		return l, shortError("lnet_nid", LargeNIDSize, len(b))
	}
	l.Size, l.Type = b[0], b[1]
	l.Num = binary.BigEndian.Uint16(b[2:])
	copy(l.Addr[:], b[4:20])
	return l, nil
}

// AcceptorRequest is lnet_acceptor_connreq: the first bytes an active
// socklnd side sends after TCP connect.
type AcceptorRequest struct {
	Version uint32
	// Target is the NID the connection is for (version 1).
	Target NID
	// TargetLarge is the target of a version 2 request.
	TargetLarge LargeNID
}

// Len returns 16 for version 1 and 28 for version 2.
func (r *AcceptorRequest) Len() int {
	if r.Version == AcceptorVersion2 {
		return AcceptorRequestV2Size
	}
	return AcceptorRequestV1Size
}

// Append appends the request in little-endian order. A version other than
// 2 is written as version 1.
func (r *AcceptorRequest) Append(b []byte) []byte {
	b = le.AppendUint32(b, AcceptorMagic)
	if r.Version == AcceptorVersion2 {
		b = le.AppendUint32(b, AcceptorVersion2)
		return r.TargetLarge.Append(b)
	}
	b = le.AppendUint32(b, AcceptorVersion1)
	return le.AppendUint64(b, uint64(r.Target))
}

// AppendAcceptorMagic appends the {magic, version} pair an acceptor sends
// back before closing when it does not speak the requested version or got
// LNET_PROTO_MAGIC instead of a request.
func AppendAcceptorMagic(b []byte) []byte {
	b = le.AppendUint32(b, AcceptorMagic)
	return le.AppendUint32(b, AcceptorVersion)
}

// ClassifyMagic reads the first word of b in both byte orders and reports
// it in native form and whether it arrived swapped. Unknown words come back
// as read little-endian with swapped false.
func ClassifyMagic(b []byte) (magic uint32, swapped bool, err error) {
	if len(b) < 4 {
		return 0, false, shortError("magic", 4, len(b))
	}
	m := le.Uint32(b)
	switch bits.ReverseBytes32(m) {
	case AcceptorMagic, ProtoMagic, SockLNDMagicV1, O2IBLNDMagic, PingMagic:
		return bits.ReverseBytes32(m), true, nil
	}
	return m, false, nil
}

// ParseAcceptorRequest decodes a request sent in either byte order. A
// known magic with an unknown version yields the version and an error
// matching ErrBadVersion: the acceptor then answers AppendAcceptorMagic and
// closes. Any other magic (including ProtoMagic from a peer that skipped
// the acceptor) yields ErrBadMagic.
func ParseAcceptorRequest(b []byte) (AcceptorRequest, error) {
	var r AcceptorRequest
	if len(b) < AcceptorMagicSize {
		return r, shortError("acceptor request", AcceptorMagicSize, len(b))
	}
	magic, swapped, _ := ClassifyMagic(b)
	if magic != AcceptorMagic {
		return r, fmt.Errorf("%w: acceptor magic %#08x", ErrBadMagic, magic)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if swapped {
		bo = binary.BigEndian
	}
	r.Version = bo.Uint32(b[4:])
	switch r.Version {
	case AcceptorVersion1:
		if len(b) < AcceptorRequestV1Size {
			return r, shortError("acceptor request v1", AcceptorRequestV1Size, len(b))
		}
		r.Target = NID(bo.Uint64(b[8:]))
	case AcceptorVersion2:
		if len(b) < AcceptorRequestV2Size {
			return r, shortError("acceptor request v2", AcceptorRequestV2Size, len(b))
		}
		r.TargetLarge, _ = ParseLargeNID(b[8:])
		if n, ok := r.TargetLarge.NID4(); ok {
			r.Target = n
		}
	default:
		return r, fmt.Errorf("%w: acceptor version %d", ErrBadVersion, r.Version)
	}
	return r, nil
}
