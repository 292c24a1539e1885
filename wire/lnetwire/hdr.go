package lnetwire

import (
	"encoding/binary"
	"fmt"
)

// MsgType is the LNet message type carried in lnet_hdr (lnet-wire.md §3.1).
type MsgType uint32

// LNet message types.
const (
	MsgACK   MsgType = 0
	MsgPUT   MsgType = 1
	MsgGET   MsgType = 2
	MsgREPLY MsgType = 3
	MsgHELLO MsgType = 4
)

var msgTypeNames = [...]string{"ACK", "PUT", "GET", "REPLY", "HELLO"}

// String returns the Lustre name of the type ("PUT"), or "<N>".
func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("<%d>", uint32(t))
}

// Valid reports whether t is one of the five defined types.
func (t MsgType) Valid() bool { return t <= MsgHELLO }

// HdrSize is the size of the nid4 lnet_hdr on the wire.
const HdrSize = 72

// WireHandle is an lnet_handle_wire: two opaque cookies naming an MD on
// the node that created it. Only the creator interprets it, so it is never
// byte-swapped (lnet-wire.md §3.4).
type WireHandle struct {
	InterfaceCookie uint64
	ObjectCookie    uint64
}

// WireHandleNone is the "no ACK wanted" handle: both cookies all ones.
var WireHandleNone = WireHandle{^uint64(0), ^uint64(0)}

// IsNone reports whether h is WireHandleNone.
func (h WireHandle) IsNone() bool { return h == WireHandleNone }

// Offsets in lnet_hdr (lnet-wire.md §3.2–3.3).
const (
	offDestNID  = 0
	offSrcNID   = 8
	offDestPID  = 16
	offSrcPID   = 20
	offType     = 24
	offPayload  = 28
	offWMD      = 32 // ack_wmd, return_wmd, dst_wmd
	offMatch    = 48 // PUT, GET, ACK
	offHdrData  = 56 // PUT
	offMLength  = 56 // ACK
	offPutPtl   = 64
	offPutOff   = 68
	offGetPtl   = 56
	offGetSrcOf = 60
	offGetSink  = 64
	offHelloInc = 32
	offHelloTyp = 40
)

// Hdr is a view of a 72-byte little-endian lnet_hdr. Accessors do not
// check the type: read the union fields that Type says are present. Check
// len(h) >= HdrSize (or use ParseHeader) before using a Hdr.
type Hdr []byte

var le = binary.LittleEndian

// DestNID returns dest_nid (@0).
func (h Hdr) DestNID() NID { return NID(le.Uint64(h[offDestNID:])) }

// SrcNID returns src_nid (@8).
func (h Hdr) SrcNID() NID { return NID(le.Uint64(h[offSrcNID:])) }

// DestPID returns dest_pid (@16).
func (h Hdr) DestPID() PID { return PID(le.Uint32(h[offDestPID:])) }

// SrcPID returns src_pid (@20).
func (h Hdr) SrcPID() PID { return PID(le.Uint32(h[offSrcPID:])) }

// Type returns the message type (@24).
func (h Hdr) Type() MsgType { return MsgType(le.Uint32(h[offType:])) }

// PayloadLength returns payload_length (@28).
func (h Hdr) PayloadLength() uint32 { return le.Uint32(h[offPayload:]) }

// WMD returns the wire handle of the union (@32): ack_wmd for PUT,
// return_wmd for GET, dst_wmd for ACK and REPLY.
func (h Hdr) WMD() WireHandle {
	return WireHandle{le.Uint64(h[offWMD:]), le.Uint64(h[offWMD+8:])}
}

// MatchBits returns match_bits (@48; PUT, GET, ACK).
func (h Hdr) MatchBits() uint64 { return le.Uint64(h[offMatch:]) }

// SetDestNID writes dest_nid.
func (h Hdr) SetDestNID(n NID) { le.PutUint64(h[offDestNID:], uint64(n)) }

// SetSrcNID writes src_nid.
func (h Hdr) SetSrcNID(n NID) { le.PutUint64(h[offSrcNID:], uint64(n)) }

// SetDestPID writes dest_pid.
func (h Hdr) SetDestPID(p PID) { le.PutUint32(h[offDestPID:], uint32(p)) }

// SetSrcPID writes src_pid.
func (h Hdr) SetSrcPID(p PID) { le.PutUint32(h[offSrcPID:], uint32(p)) }

// SetType writes the message type.
func (h Hdr) SetType(t MsgType) { le.PutUint32(h[offType:], uint32(t)) }

// SetPayloadLength writes payload_length.
func (h Hdr) SetPayloadLength(n uint32) { le.PutUint32(h[offPayload:], n) }

// SetWMD writes the union's wire handle (@32).
func (h Hdr) SetWMD(w WireHandle) {
	le.PutUint64(h[offWMD:], w.InterfaceCookie)
	le.PutUint64(h[offWMD+8:], w.ObjectCookie)
}

// SetMatchBits writes match_bits (@48; PUT, GET, ACK).
func (h Hdr) SetMatchBits(b uint64) { le.PutUint64(h[offMatch:], b) }

// Header is the decoded form of an lnet_hdr. The union fields that the
// type does not carry are ignored by Append/Encode and zero after
// ParseHeader.
type Header struct {
	DestNID       NID
	SrcNID        NID
	DestPID       PID
	SrcPID        PID
	Type          MsgType
	PayloadLength uint32

	// WMD is ack_wmd (PUT), return_wmd (GET) or dst_wmd (ACK, REPLY).
	WMD WireHandle
	// MatchBits is present in PUT, GET and ACK.
	MatchBits uint64
	// HdrData is the PUT's 64-bit out-of-band datum.
	HdrData uint64
	// Portal is ptl_index (PUT, GET).
	Portal uint32
	// Offset is the PUT's remote offset or the GET's src_offset.
	Offset uint32
	// SinkLength is the GET's requested length.
	SinkLength uint32
	// MLength is the ACK's matched length.
	MLength uint32
	// Incarnation and HelloType are the HELLO body (socklnd V1).
	Incarnation uint64
	HelloType   uint32
}

// Len returns HdrSize.
func (*Header) Len() int { return HdrSize }

// Append appends the 72-byte wire form of h to b.
func (h *Header) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, HdrSize)...)
	h.Encode(b[n:])
	return b
}

// Encode writes h into b[:HdrSize] in place (zeroing padding) and panics
// if b is shorter; data paths use it to fill reserved headroom.
func (h *Header) Encode(b []byte) {
	b = b[:HdrSize]
	clear(b)
	le.PutUint64(b[offDestNID:], uint64(h.DestNID))
	le.PutUint64(b[offSrcNID:], uint64(h.SrcNID))
	le.PutUint32(b[offDestPID:], uint32(h.DestPID))
	le.PutUint32(b[offSrcPID:], uint32(h.SrcPID))
	le.PutUint32(b[offType:], uint32(h.Type))
	le.PutUint32(b[offPayload:], h.PayloadLength)
	putWMD := func() {
		le.PutUint64(b[offWMD:], h.WMD.InterfaceCookie)
		le.PutUint64(b[offWMD+8:], h.WMD.ObjectCookie)
	}
	switch h.Type {
	case MsgACK:
		putWMD()
		le.PutUint64(b[offMatch:], h.MatchBits)
		le.PutUint32(b[offMLength:], h.MLength)
	case MsgPUT:
		putWMD()
		le.PutUint64(b[offMatch:], h.MatchBits)
		le.PutUint64(b[offHdrData:], h.HdrData)
		le.PutUint32(b[offPutPtl:], h.Portal)
		le.PutUint32(b[offPutOff:], h.Offset)
	case MsgGET:
		putWMD()
		le.PutUint64(b[offMatch:], h.MatchBits)
		le.PutUint32(b[offGetPtl:], h.Portal)
		le.PutUint32(b[offGetSrcOf:], h.Offset)
		le.PutUint32(b[offGetSink:], h.SinkLength)
	case MsgREPLY:
		putWMD()
	case MsgHELLO:
		le.PutUint64(b[offHelloInc:], h.Incarnation)
		le.PutUint32(b[offHelloTyp:], h.HelloType)
	}
}

// ParseHeader decodes the first HdrSize bytes of b. It fails with ErrShort
// or ErrBadType; it does not judge NIDs or lengths, which is the core's job.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	return h, h.Decode(b)
}

// Decode is ParseHeader into an existing Header (no allocation).
func (h *Header) Decode(b []byte) error {
	if len(b) < HdrSize {
		return shortError("lnet_hdr", HdrSize, len(b))
	}
	v := Hdr(b)
	t := v.Type()
	if !t.Valid() {
		return fmt.Errorf("%w: %d", ErrBadType, uint32(t))
	}
	*h = Header{
		DestNID:       v.DestNID(),
		SrcNID:        v.SrcNID(),
		DestPID:       v.DestPID(),
		SrcPID:        v.SrcPID(),
		Type:          t,
		PayloadLength: v.PayloadLength(),
	}
	switch t {
	case MsgACK:
		h.WMD = v.WMD()
		h.MatchBits = v.MatchBits()
		h.MLength = le.Uint32(b[offMLength:])
	case MsgPUT:
		h.WMD = v.WMD()
		h.MatchBits = v.MatchBits()
		h.HdrData = le.Uint64(b[offHdrData:])
		h.Portal = le.Uint32(b[offPutPtl:])
		h.Offset = le.Uint32(b[offPutOff:])
	case MsgGET:
		h.WMD = v.WMD()
		h.MatchBits = v.MatchBits()
		h.Portal = le.Uint32(b[offGetPtl:])
		h.Offset = le.Uint32(b[offGetSrcOf:])
		h.SinkLength = le.Uint32(b[offGetSink:])
	case MsgREPLY:
		h.WMD = v.WMD()
	case MsgHELLO:
		h.Incarnation = le.Uint64(b[offHelloInc:])
		h.HelloType = le.Uint32(b[offHelloTyp:])
	}
	return nil
}

// String returns a one-line summary for logs.
func (h *Header) String() string {
	return fmt.Sprintf("%s %s-%s -> %s-%s len %d", h.Type, h.SrcPID, h.SrcNID, h.DestPID, h.DestNID, h.PayloadLength)
}
