package roce

import (
	"encoding/binary"

	"softib/internal/seqnum"
)

// ParseError is the reason Parse (or Build, or an ICRC check) rejected a
// packet. The values are comparable sentinels, so errors.Is works, and small
// integers, so a receiver can count drops per reason in an array indexed by
// the error (see NumParseErrors).
type ParseError uint8

// Parse errors.
const (
	ErrTruncated         ParseError = iota + 1 // shorter than BTH + ext headers + pad + ICRC
	ErrBadVersion                              // BTH TVer is not 0
	ErrUnknownOpcode                           // opcode not in the table
	ErrBadPad                                  // payload + pad is not a multiple of 4
	ErrUnexpectedPayload                       // payload or pad on an opcode that carries none
	ErrBadICRC                                 // ICRC mismatch (from VerifyICRC helpers)
	ErrShortBuffer                             // Build: destination buffer too small
	ErrBadAddress                              // Encap: address family mismatch or invalid address
	ErrNotRoCE                                 // ParseFrame: not IPv4/IPv6 + UDP, or IP options/extension headers
	NumParseErrors                             // number of ParseError values, for counter arrays
)

var parseErrText = [NumParseErrors]string{
	ErrTruncated:         "roce: packet truncated",
	ErrBadVersion:        "roce: bad BTH transport version",
	ErrUnknownOpcode:     "roce: unknown opcode",
	ErrBadPad:            "roce: bad pad count",
	ErrUnexpectedPayload: "roce: payload on an opcode without payload",
	ErrBadICRC:           "roce: bad ICRC",
	ErrShortBuffer:       "roce: buffer too small",
	ErrBadAddress:        "roce: bad or mismatched IP address",
	ErrNotRoCE:           "roce: not a plain IP/UDP frame",
}

// Error implements error.
func (e ParseError) Error() string {
	if e < NumParseErrors && parseErrText[e] != "" {
		return parseErrText[e]
	}
	return "roce: parse error"
}

// Packet is a parsed RoCEv2 packet: BTH, extension headers, payload, pad and
// ICRC trailer, all views into the buffer given to Parse (nothing is
// copied). It is small and meant to be passed by value. Header accessors
// return nil when the opcode does not carry that header; check with Has.
type Packet struct {
	b      []byte
	info   *OpInfo
	payLen int
}

// Parse validates b, a RoCEv2 UDP payload (BTH through ICRC), against the
// opcode table and returns a Packet of views into it. It checks, in order:
// minimum length, TVer == 0, opcode known, length >= headers + pad + ICRC,
// no payload or pad on opcodes without payload, payload + pad a multiple of
// 4. It does not check the ICRC (that needs the IP header; see Encap and
// ICRCv4/ICRCv6). Parse never allocates; errors are ParseError values.
func Parse(b []byte) (Packet, error) {
	if len(b) < MinPacketLen {
		return Packet{}, ErrTruncated
	}
	if b[bthFlags]&0x0F != 0 {
		return Packet{}, ErrBadVersion
	}
	info := &opTable[b[bthOpcode]]
	hl := int(info.Length)
	if hl == 0 {
		return Packet{}, ErrUnknownOpcode
	}
	pad := int(b[bthFlags]>>padCntShift) & 3
	payLen := len(b) - hl - pad - ICRCSize
	if payLen < 0 {
		return Packet{}, ErrTruncated
	}
	if info.Mask&MaskPayload == 0 {
		if payLen != 0 || pad != 0 {
			return Packet{}, ErrUnexpectedPayload
		}
	} else if (payLen+pad)&3 != 0 {
		return Packet{}, ErrBadPad
	}
	return Packet{b: b, info: info, payLen: payLen}, nil
}

// Bytes returns the whole packet (BTH through ICRC).
func (p Packet) Bytes() []byte { return p.b }

// Len returns the packet length including the ICRC.
func (p Packet) Len() int { return len(p.b) }

// Info returns the opcode table entry.
func (p Packet) Info() *OpInfo { return p.info }

// Opcode returns the BTH opcode.
func (p Packet) Opcode() Opcode { return Opcode(p.b[bthOpcode]) }

// Mask returns the opcode's mask bits.
func (p Packet) Mask() Mask { return p.info.Mask }

// Has reports whether the opcode has all bits of m (e.g. MaskRETH, or
// MaskReq|MaskSend).
func (p Packet) Has(m Mask) bool { return p.info.Mask&m == m }

// BTH returns the base transport header.
func (p Packet) BTH() BTH { return BTH(p.b[:BTHSize]) }

// PSN returns the BTH PSN.
func (p Packet) PSN() seqnum.PSN { return BTH(p.b).PSN() }

// DestQP returns the BTH destination QP.
func (p Packet) DestQP() uint32 { return BTH(p.b).DestQP() }

// AckReq returns the BTH AckReq bit.
func (p Packet) AckReq() bool { return BTH(p.b).AckReq() }

// HeaderLen returns BTH plus extension headers, the payload offset.
func (p Packet) HeaderLen() int { return int(p.info.Length) }

// Header returns the BTH and extension headers.
func (p Packet) Header() []byte { return p.b[:p.info.Length] }

func (p Packet) ext(k HeaderKind) []byte {
	if p.info.Mask&hdrOrder[k].mask == 0 {
		return nil
	}
	o := int(p.info.Offsets[k])
	return p.b[o : o+int(hdrOrder[k].size) : o+int(hdrOrder[k].size)]
}

// RDETH returns the RDETH, or nil.
func (p Packet) RDETH() RDETH { return RDETH(p.ext(HdrRDETH)) }

// DETH returns the DETH, or nil.
func (p Packet) DETH() DETH { return DETH(p.ext(HdrDETH)) }

// RETH returns the RETH, or nil.
func (p Packet) RETH() RETH { return RETH(p.ext(HdrRETH)) }

// AtomicETH returns the AtomicETH, or nil.
func (p Packet) AtomicETH() AtomicETH { return AtomicETH(p.ext(HdrAtomicETH)) }

// AETH returns the AETH, or nil.
func (p Packet) AETH() AETH { return AETH(p.ext(HdrAETH)) }

// AtomicAckETH returns the AtomicAckETH, or nil.
func (p Packet) AtomicAckETH() AtomicAckETH { return AtomicAckETH(p.ext(HdrAtomicAckETH)) }

// ImmDt returns the immediate data header, or nil.
func (p Packet) ImmDt() ImmDt { return ImmDt(p.ext(HdrImmDt)) }

// IETH returns the IETH, or nil.
func (p Packet) IETH() IETH { return IETH(p.ext(HdrIETH)) }

// Payload returns the payload (without pad). Its capacity ends at the pad.
func (p Packet) Payload() []byte {
	o := int(p.info.Length)
	return p.b[o : o+p.payLen : o+p.payLen]
}

// PayloadLen returns the payload length in bytes (without pad).
func (p Packet) PayloadLen() int { return p.payLen }

// PadCnt returns the number of pad bytes.
func (p Packet) PadCnt() int { return int(p.b[bthFlags]>>padCntShift) & 3 }

// Pad returns the pad bytes.
func (p Packet) Pad() []byte {
	o := int(p.info.Length) + p.payLen
	return p.b[o : len(p.b)-ICRCSize]
}

// ICRCBytes returns the 4-byte ICRC trailer.
func (p Packet) ICRCBytes() []byte { return p.b[len(p.b)-ICRCSize:] }

// ICRC returns the ICRC trailer as rxe stores it (little-endian on the
// wire). It is the value ICRCv4/ICRCv6/Encap.ICRC compute.
func (p Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.b[len(p.b)-ICRCSize:]) }

// Headers fills h with the decoded BTH and every extension header present;
// the fields of absent headers are zeroed. Build(dst, h, p.Payload())
// reproduces the packet up to reserved bits, pad contents and the ICRC.
func (p Packet) Headers(h *Headers) {
	*h = Headers{BTH: BTH(p.b).Fields()}
	m := p.info.Mask
	if m&MaskRDETH != 0 {
		h.EEContext = p.RDETH().EEContext()
	}
	if m&MaskDETH != 0 {
		h.DETH = p.DETH().Fields()
	}
	if m&MaskRETH != 0 {
		h.RETH = p.RETH().Fields()
	}
	if m&MaskAtomicETH != 0 {
		h.AtomicETH = p.AtomicETH().Fields()
	}
	if m&MaskAETH != 0 {
		h.AETH = p.AETH().Fields()
	}
	if m&MaskAtomicAckETH != 0 {
		h.AtomicAckData = p.AtomicAckETH().OrigData()
	}
	if m&MaskImmDt != 0 {
		h.ImmDt = p.ImmDt().Value()
	}
	if m&MaskIETH != 0 {
		h.IETHRKey = p.IETH().RKey()
	}
}
