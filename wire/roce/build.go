package roce

import "encoding/binary"

// Headers holds the values of every header a packet may carry. Build writes
// the BTH and exactly the extension headers the opcode (h.BTH.Opcode) has;
// the other fields are ignored. The provider keeps one Headers per requester
// or responder and refills it per packet, so building allocates nothing.
type Headers struct {
	BTH           BTHFields // PadCnt is ignored by Build: it is derived from the payload length
	EEContext     uint32    // RDETH (RD only)
	DETH          DETHFields
	RETH          RETHFields
	AtomicETH     AtomicETHFields
	AETH          AETHFields
	AtomicAckData uint64 // AtomicAckETH original remote data
	ImmDt         uint32 // immediate data, big-endian on the wire
	IETHRKey      uint32 // IETH R_Key to invalidate
}

// PadLen returns the pad needed after a payload of n bytes: (-n) & 3.
func PadLen(n int) int { return -n & 3 }

// PacketLen returns the length of a packet of opcode op with payloadLen
// payload bytes: headers + payload + pad + ICRC. It returns 0 for an unknown
// opcode.
func PacketLen(op Opcode, payloadLen int) int {
	hl := int(opTable[op].Length)
	if hl == 0 {
		return 0
	}
	return hl + payloadLen + PadLen(payloadLen) + ICRCSize
}

// WriteHeaders writes the BTH (with PadCnt derived from payloadLen) and the
// extension headers of h.BTH.Opcode at the start of dst and returns the
// header length, which is where the payload goes. It does not touch the
// payload, pad or ICRC.
func WriteHeaders(dst []byte, h *Headers, payloadLen int) (int, error) {
	info := &opTable[h.BTH.Opcode]
	hl := int(info.Length)
	if hl == 0 {
		return 0, ErrUnknownOpcode
	}
	if payloadLen != 0 && info.Mask&MaskPayload == 0 {
		return 0, ErrUnexpectedPayload
	}
	if len(dst) < hl {
		return 0, ErrShortBuffer
	}
	b := BTH(dst[:BTHSize])
	b.Encode(&h.BTH)
	b.SetPadCnt(PadLen(payloadLen))
	m := info.Mask
	if m&^(MaskPayload|semanticMask) == 0 {
		return hl, nil // BTH only: SEND/WRITE MIDDLE and friends
	}
	o := &info.Offsets
	if m&MaskRDETH != 0 {
		RDETH(dst[o[HdrRDETH]:]).Encode(h.EEContext)
	}
	if m&MaskDETH != 0 {
		DETH(dst[o[HdrDETH]:]).Encode(&h.DETH)
	}
	if m&MaskRETH != 0 {
		RETH(dst[o[HdrRETH]:]).Encode(&h.RETH)
	}
	if m&MaskAtomicETH != 0 {
		AtomicETH(dst[o[HdrAtomicETH]:]).Encode(&h.AtomicETH)
	}
	if m&MaskAETH != 0 {
		AETH(dst[o[HdrAETH]:]).Encode(&h.AETH)
	}
	if m&MaskAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(dst[o[HdrAtomicAckETH]:], h.AtomicAckData)
	}
	if m&MaskImmDt != 0 {
		binary.BigEndian.PutUint32(dst[o[HdrImmDt]:], h.ImmDt)
	}
	if m&MaskIETH != 0 {
		binary.BigEndian.PutUint32(dst[o[HdrIETH]:], h.IETHRKey)
	}
	return hl, nil
}

// semanticMask is every non-header bit of Mask.
const semanticMask = MaskReq | MaskAck | MaskSend | MaskWrite | MaskRead |
	MaskAtomic | MaskRWR | MaskComp | MaskStart | MaskMiddle | MaskEnd

// BuildInPlace completes a packet whose payloadLen payload bytes the caller
// has already placed at dst[h.BTH.Opcode.HeaderLen():]: it writes the
// headers in front, zeroes the pad and the ICRC slot, and returns the packet
// length. This is the zero-copy path: gather the payload straight from
// memory regions into the send buffer, then call BuildInPlace, then
// Encap.SetICRC(dst[:n]).
func BuildInPlace(dst []byte, h *Headers, payloadLen int) (int, error) {
	hl, err := WriteHeaders(dst, h, payloadLen)
	if err != nil {
		return 0, err
	}
	end := hl + payloadLen
	n := end + PadLen(payloadLen) + ICRCSize
	if payloadLen < 0 || len(dst) < n {
		return 0, ErrShortBuffer
	}
	clear(dst[end:n])
	return n, nil
}

// Build writes a complete packet into dst: headers, a copy of payload, zero
// pad and a zero ICRC slot. It returns the packet length (PacketLen). Set
// the ICRC afterwards with Encap.SetICRC(dst[:n]).
//
// dst is the UDP payload; when the caller also needs room for IP/UDP
// headers in front (raw sockets, pcaps), pass a slice that starts after that
// headroom. Build allocates nothing.
func Build(dst []byte, h *Headers, payload []byte) (int, error) {
	hl := int(opTable[h.BTH.Opcode].Length)
	if hl == 0 {
		return 0, ErrUnknownOpcode
	}
	if len(dst) < hl+len(payload)+PadLen(len(payload))+ICRCSize {
		return 0, ErrShortBuffer
	}
	copy(dst[hl:], payload)
	return BuildInPlace(dst, h, len(payload))
}
