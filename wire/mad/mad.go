package mad

import "fmt"

// AppendMAD appends a full 256-byte MAD: the header h (whose AttrID is
// replaced by m's) followed by the body m.
func AppendMAD(b []byte, h HeaderFields, m Message) []byte {
	h.AttrID = m.AttrID()
	b = h.Append(b)
	return m.Append(b)
}

// AppendCM appends a CM MAD as the Linux CM sends it: base version 1,
// class CM version 2, method Send, the given TID, attribute of m.
func AppendCM(b []byte, tid uint64, m Message) []byte {
	return AppendMAD(b, CMHeader(tid, m.AttrID()), m)
}

// ParseCM checks that b is a CM-class MAD of a supported class version
// and returns its header and body views.
func ParseCM(b []byte) (Header, []byte, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, nil, err
	}
	if h.MgmtClass() != ClassCM {
		return nil, nil, fmt.Errorf("mad: class %v: %w", h.MgmtClass(), ErrNotCM)
	}
	if h.ClassVersion() != CMClassVersion {
		return nil, nil, fmt.Errorf("mad: CM class version %d: %w", h.ClassVersion(), ErrBadVersion)
	}
	return h, b[HeaderSize:MADSize:MADSize], nil
}

// Scratch holds one decoded value of every CM message so that a receive
// loop can decode MADs without allocating. The [Message] returned by
// Decode points into the Scratch and is overwritten by the next call.
type Scratch struct {
	REQ           REQ
	MRA           MRA
	REJ           REJ
	REP           REP
	RTU           RTU
	DREQ          DREQ
	DREP          DREP
	LAP           LAP
	APR           APR
	SIDRREQ       SIDRREQ
	SIDRREP       SIDRREP
	ClassPortInfo ClassPortInfo
}

// For returns the scratch message for an attribute, or nil.
func (s *Scratch) For(a AttrID) Message {
	switch a {
	case AttrREQ:
		return &s.REQ
	case AttrMRA:
		return &s.MRA
	case AttrREJ:
		return &s.REJ
	case AttrREP:
		return &s.REP
	case AttrRTU:
		return &s.RTU
	case AttrDREQ:
		return &s.DREQ
	case AttrDREP:
		return &s.DREP
	case AttrLAP:
		return &s.LAP
	case AttrAPR:
		return &s.APR
	case AttrSIDRREQ:
		return &s.SIDRREQ
	case AttrSIDRREP:
		return &s.SIDRREP
	case AttrClassPortInfo:
		return &s.ClassPortInfo
	}
	return nil
}

// Decode parses a CM MAD into the scratch message of its attribute.
func (s *Scratch) Decode(b []byte) (Header, Message, error) {
	h, d, err := ParseCM(b)
	if err != nil {
		return nil, nil, err
	}
	m := s.For(h.AttrID())
	if m == nil {
		return h, nil, fmt.Errorf("mad: CM attribute %#04x: %w", uint16(h.AttrID()), ErrUnknownAttr)
	}
	if err := m.Decode(d); err != nil {
		return h, nil, err
	}
	return h, m, nil
}

// NewMessage returns a new zero message for an attribute, or nil.
func NewMessage(a AttrID) Message {
	switch a {
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrLAP:
		return new(LAP)
	case AttrAPR:
		return new(APR)
	case AttrSIDRREQ:
		return new(SIDRREQ)
	case AttrSIDRREP:
		return new(SIDRREP)
	case AttrClassPortInfo:
		return new(ClassPortInfo)
	}
	return nil
}

// ClassPortInfo is the ClassPortInfo attribute (IBTA Vol 1 §13.4.8.1).
// The Linux CM does not answer it (its agent registers only the Send
// method), so a Get for it draws the MAD layer's "unsupported method /
// attribute" GetResp; the codec exists for that reply and for tests.
// Its Len is still [CMDataSize]: the 72 attribute bytes plus zero padding
// to the end of the MAD.
type ClassPortInfo struct {
	BaseVersion     uint8
	ClassVersion    uint8
	CapabilityMask  uint16
	CapabilityMask2 uint32 // 27 bits
	RespTimeValue   Timeout
	RedirectGID     GID
	RedirectTC      uint8
	RedirectSL      uint8
	RedirectFL      uint32
	RedirectLID     uint16
	RedirectPKey    uint16
	RedirectQP      uint32
	RedirectQKey    uint32
	TrapGID         GID
	TrapTC          uint8
	TrapSL          uint8
	TrapFL          uint32
	TrapLID         uint16
	TrapPKey        uint16
	TrapHL          uint8
	TrapQP          uint32
	TrapQKey        uint32
}

// AttrID returns [AttrClassPortInfo].
func (m *ClassPortInfo) AttrID() AttrID { return AttrClassPortInfo }

// Len returns [CMDataSize].
func (m *ClassPortInfo) Len() int { return CMDataSize }

// Validate always succeeds: ClassPortInfo has no variable parts.
func (m *ClassPortInfo) Validate() error { return nil }

// Append appends the attribute padded to [CMDataSize].
func (m *ClassPortInfo) Append(b []byte) []byte {
	b, d := grow(b, CMDataSize)
	cpiBaseVersion.Set(d, uint64(m.BaseVersion))
	cpiClassVersion.Set(d, uint64(m.ClassVersion))
	cpiCapabilityMask.Set(d, uint64(m.CapabilityMask))
	cpiCapabilityMask2.Set(d, uint64(m.CapabilityMask2))
	cpiRespTimeValue.Set(d, uint64(m.RespTimeValue))
	cpiRedirectGID.putBytes(d, m.RedirectGID[:])
	cpiRedirectTC.Set(d, uint64(m.RedirectTC))
	cpiRedirectSL.Set(d, uint64(m.RedirectSL))
	cpiRedirectFL.Set(d, uint64(m.RedirectFL))
	cpiRedirectLID.Set(d, uint64(m.RedirectLID))
	cpiRedirectPKey.Set(d, uint64(m.RedirectPKey))
	cpiRedirectQP.Set(d, uint64(m.RedirectQP))
	cpiRedirectQKey.Set(d, uint64(m.RedirectQKey))
	cpiTrapGID.putBytes(d, m.TrapGID[:])
	cpiTrapTC.Set(d, uint64(m.TrapTC))
	cpiTrapSL.Set(d, uint64(m.TrapSL))
	cpiTrapFL.Set(d, uint64(m.TrapFL))
	cpiTrapLID.Set(d, uint64(m.TrapLID))
	cpiTrapPKey.Set(d, uint64(m.TrapPKey))
	cpiTrapHL.Set(d, uint64(m.TrapHL))
	cpiTrapQP.Set(d, uint64(m.TrapQP))
	cpiTrapQKey.Set(d, uint64(m.TrapQKey))
	return b
}

// Decode fills m from attribute data of at least 72 bytes.
func (m *ClassPortInfo) Decode(d []byte) error {
	if len(d) < ClassPortInfoSize {
		return fmt.Errorf("mad: ClassPortInfo %d bytes: %w", len(d), ErrTooShort)
	}
	m.BaseVersion = uint8(cpiBaseVersion.Get(d))
	m.ClassVersion = uint8(cpiClassVersion.Get(d))
	m.CapabilityMask = uint16(cpiCapabilityMask.Get(d))
	m.CapabilityMask2 = uint32(cpiCapabilityMask2.Get(d))
	m.RespTimeValue = Timeout(cpiRespTimeValue.Get(d))
	copy(m.RedirectGID[:], cpiRedirectGID.Bytes(d))
	m.RedirectTC = uint8(cpiRedirectTC.Get(d))
	m.RedirectSL = uint8(cpiRedirectSL.Get(d))
	m.RedirectFL = uint32(cpiRedirectFL.Get(d))
	m.RedirectLID = uint16(cpiRedirectLID.Get(d))
	m.RedirectPKey = uint16(cpiRedirectPKey.Get(d))
	m.RedirectQP = uint32(cpiRedirectQP.Get(d))
	m.RedirectQKey = uint32(cpiRedirectQKey.Get(d))
	copy(m.TrapGID[:], cpiTrapGID.Bytes(d))
	m.TrapTC = uint8(cpiTrapTC.Get(d))
	m.TrapSL = uint8(cpiTrapSL.Get(d))
	m.TrapFL = uint32(cpiTrapFL.Get(d))
	m.TrapLID = uint16(cpiTrapLID.Get(d))
	m.TrapPKey = uint16(cpiTrapPKey.Get(d))
	m.TrapHL = uint8(cpiTrapHL.Get(d))
	m.TrapQP = uint32(cpiTrapQP.Get(d))
	m.TrapQKey = uint32(cpiTrapQKey.Get(d))
	return nil
}
