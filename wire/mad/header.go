package mad

import "fmt"

// Field table of the MAD common header (IBTA Vol 1 §13.4.3), offsets
// relative to the start of the MAD.
var (
	hdrBaseVersion   = Field{"BaseVersion", 0, 0, 8}
	hdrMgmtClass     = Field{"MgmtClass", 1, 0, 8}
	hdrClassVersion  = Field{"ClassVersion", 2, 0, 8}
	hdrMethod        = Field{"Method", 3, 0, 8}
	hdrStatus        = Field{"Status", 4, 0, 16}
	hdrClassSpecific = Field{"ClassSpecific", 6, 0, 16}
	hdrTID           = Field{"TransactionID", 8, 0, 64}
	hdrAttrID        = Field{"AttributeID", 16, 0, 16}
	hdrAttrMod       = Field{"AttributeModifier", 20, 0, 32}

	headerLayout = Layout{Name: "MADHeader", Size: HeaderSize, Fields: []Field{
		hdrBaseVersion, hdrMgmtClass, hdrClassVersion, hdrMethod, hdrStatus,
		hdrClassSpecific, hdrTID, hdrAttrID, hdrAttrMod,
	}}
)

// Header is a view of a MAD common header; it must be at least
// [HeaderSize] bytes (check with [ParseHeader]).
type Header []byte

// BaseVersion returns the MAD base version (1 for IB).
func (h Header) BaseVersion() uint8 { return uint8(hdrBaseVersion.Get(h)) }

// MgmtClass returns the management class.
func (h Header) MgmtClass() MgmtClass { return MgmtClass(hdrMgmtClass.Get(h)) }

// ClassVersion returns the class version.
func (h Header) ClassVersion() uint8 { return uint8(hdrClassVersion.Get(h)) }

// Method returns the method.
func (h Header) Method() Method { return Method(hdrMethod.Get(h)) }

// Status returns the status field.
func (h Header) Status() uint16 { return uint16(hdrStatus.Get(h)) }

// ClassSpecific returns the class-specific field.
func (h Header) ClassSpecific() uint16 { return uint16(hdrClassSpecific.Get(h)) }

// TID returns the transaction ID.
func (h Header) TID() uint64 { return hdrTID.Get(h) }

// AttrID returns the attribute ID.
func (h Header) AttrID() AttrID { return AttrID(hdrAttrID.Get(h)) }

// AttrMod returns the attribute modifier.
func (h Header) AttrMod() uint32 { return uint32(hdrAttrMod.Get(h)) }

// SetMethod sets the method.
func (h Header) SetMethod(m Method) { hdrMethod.Set(h, uint64(m)) }

// SetStatus sets the status field.
func (h Header) SetStatus(s uint16) { hdrStatus.Set(h, uint64(s)) }

// SetTID sets the transaction ID.
func (h Header) SetTID(tid uint64) { hdrTID.Set(h, tid) }

// Fields decodes the header into a struct.
func (h Header) Fields() HeaderFields {
	return HeaderFields{
		BaseVersion:   h.BaseVersion(),
		MgmtClass:     h.MgmtClass(),
		ClassVersion:  h.ClassVersion(),
		Method:        h.Method(),
		Status:        h.Status(),
		ClassSpecific: h.ClassSpecific(),
		TID:           h.TID(),
		AttrID:        h.AttrID(),
		AttrMod:       h.AttrMod(),
	}
}

// ParseHeader checks that b holds a full MAD and returns its header view.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < MADSize {
		return nil, fmt.Errorf("mad: %d bytes, want %d: %w", len(b), MADSize, ErrTooShort)
	}
	h := Header(b[:HeaderSize:HeaderSize])
	if h.BaseVersion() != BaseVersion {
		return nil, fmt.Errorf("mad: base version %d: %w", h.BaseVersion(), ErrBadVersion)
	}
	return h, nil
}

// HeaderFields is the decoded MAD common header.
type HeaderFields struct {
	BaseVersion   uint8
	MgmtClass     MgmtClass
	ClassVersion  uint8
	Method        Method
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        AttrID
	AttrMod       uint32
}

// CMHeader returns the header the Linux CM puts on every CM message:
// base version 1, class CM version 2, method Send.
func CMHeader(tid uint64, attr AttrID) HeaderFields {
	return HeaderFields{
		BaseVersion:  BaseVersion,
		MgmtClass:    ClassCM,
		ClassVersion: CMClassVersion,
		Method:       MethodSend,
		TID:          tid,
		AttrID:       attr,
	}
}

// Len returns [HeaderSize].
func (f *HeaderFields) Len() int { return HeaderSize }

// Append appends the encoded header to b.
func (f *HeaderFields) Append(b []byte) []byte {
	b, h := grow(b, HeaderSize)
	hdrBaseVersion.Set(h, uint64(f.BaseVersion))
	hdrMgmtClass.Set(h, uint64(f.MgmtClass))
	hdrClassVersion.Set(h, uint64(f.ClassVersion))
	hdrMethod.Set(h, uint64(f.Method))
	hdrStatus.Set(h, uint64(f.Status))
	hdrClassSpecific.Set(h, uint64(f.ClassSpecific))
	hdrTID.Set(h, f.TID)
	hdrAttrID.Set(h, uint64(f.AttrID))
	hdrAttrMod.Set(h, uint64(f.AttrMod))
	return b
}

// grow extends b by n zero bytes and returns the new slice and the
// appended region.
func grow(b []byte, n int) ([]byte, []byte) {
	l := len(b)
	if cap(b)-l >= n {
		b = b[:l+n]
		clear(b[l:])
	} else {
		b = append(b, make([]byte, n)...)
	}
	return b, b[l:]
}
