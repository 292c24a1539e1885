package roce

// RoCEv2 Congestion Notification Packet (IBTA RoCEv2 annex A17.9.3): the
// notification point, a receiver that saw a CE-marked packet, sends it
// back to the packet's sender QP. It is a BTH with opcode CNP (0x81),
// BECN set, the sender's QP in DestQP and PSN 0, then 16 reserved bytes
// and the ICRC: 32 bytes of UDP payload. Linux rxe neither sends nor
// accepts it (its opcode table has no 0x81 entry: it drops the packet);
// mlx5 and Wireshark's dissector know it by this layout.

// CNPPayloadSize is the reserved area after a CNP's BTH.
const CNPPayloadSize = 16

// CNPLen is a CNP's length from the BTH through the ICRC.
const CNPLen = BTHSize + CNPPayloadSize + ICRCSize

// CNPView is a parsed CNP: a view into the buffer given to ParseCNP.
type CNPView struct{ b []byte }

// ParseCNP validates b, a RoCEv2 UDP payload, as a CNP: Parse's checks,
// opcode CNP (else ErrUnknownOpcode), and the 16-byte reserved area
// exactly (shorter is ErrTruncated, longer ErrUnexpectedPayload). It
// does not check the ICRC. It never allocates.
func ParseCNP(b []byte) (CNPView, error) {
	p, err := Parse(b)
	if err != nil {
		return CNPView{}, err
	}
	if p.Opcode() != CNP {
		return CNPView{}, ErrUnknownOpcode
	}
	switch {
	case p.PayloadLen()+p.PadCnt() < CNPPayloadSize:
		return CNPView{}, ErrTruncated
	case p.PayloadLen()+p.PadCnt() > CNPPayloadSize:
		return CNPView{}, ErrUnexpectedPayload
	}
	return CNPView{b: b}, nil
}

// BTH returns the CNP's base transport header.
func (c CNPView) BTH() BTH { return BTH(c.b[:BTHSize]) }

// DestQP returns the QP the CNP is for: the sender of the CE-marked
// packet, whose rate it lowers.
func (c CNPView) DestQP() uint32 { return c.BTH().DestQP() }

// BECN reports the BECN bit (set in CNPs that mlx5 sends).
func (c CNPView) BECN() bool { return c.BTH().BECN() }

// PKey returns the CNP's P_Key.
func (c CNPView) PKey() uint16 { return c.BTH().PKey() }

// BuildCNP writes a CNP for destQP with pkey into dst (BECN set, PSN 0,
// reserved area zero, ICRC field zero: the sender fills it in, e.g. with
// Encap.SetICRC) and returns CNPLen, or ErrShortBuffer.
func BuildCNP(dst []byte, destQP uint32, pkey uint16) (int, error) {
	if len(dst) < CNPLen {
		return 0, ErrShortBuffer
	}
	BTH(dst[:BTHSize]).Encode(&BTHFields{Opcode: CNP, BECN: true, PKey: pkey, DestQP: destQP})
	clear(dst[BTHSize:CNPLen])
	return CNPLen, nil
}
