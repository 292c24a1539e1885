package mad

import (
	"errors"
	"fmt"
)

// Sizes (IBTA Vol 1 §13.4.2, §12.6).
const (
	// MADSize is the size of every MAD carried on QP0/QP1.
	MADSize = 256
	// HeaderSize is the size of the MAD common header.
	HeaderSize = 24
	// CMDataSize is the size of the CM message area after the header.
	CMDataSize = MADSize - HeaderSize
	// GRHSize is the size of the receive-buffer header area that UD and
	// GSI receives carry before the MAD (roce-wire.md §12).
	GRHSize = 40
)

// GSI addressing constants (IBTA Vol 1 §13.5.1).
const (
	// GSIQPN is the QP number of the General Services Interface.
	GSIQPN = 1
	// GSIQKey is the well-known Q_Key of QP1.
	GSIQKey uint32 = 0x80010000
	// DefaultPKey is the full-membership default partition key.
	DefaultPKey uint16 = 0xFFFF
)

// Header field values.
const (
	// BaseVersion is the only MAD base version IB defines.
	BaseVersion = 1
	// CMClassVersion is the class version of the Communication Management
	// class that Linux speaks.
	CMClassVersion = 2
)

// MgmtClass is the MAD management class (IBTA Vol 1 §13.4.4).
type MgmtClass uint8

// Management classes.
const (
	ClassSubnLID      MgmtClass = 0x01
	ClassSubnAdm      MgmtClass = 0x03
	ClassPerf         MgmtClass = 0x04
	ClassBM           MgmtClass = 0x05
	ClassDevMgt       MgmtClass = 0x06
	ClassCM           MgmtClass = 0x07
	ClassSNMP         MgmtClass = 0x08
	ClassSubnDirected MgmtClass = 0x81
)

// String names the class.
func (c MgmtClass) String() string {
	switch c {
	case ClassSubnLID:
		return "SubnLID"
	case ClassSubnAdm:
		return "SubnAdm"
	case ClassPerf:
		return "Perf"
	case ClassBM:
		return "BM"
	case ClassDevMgt:
		return "DevMgt"
	case ClassCM:
		return "CM"
	case ClassSNMP:
		return "SNMP"
	case ClassSubnDirected:
		return "SubnDirected"
	}
	return fmt.Sprintf("MgmtClass(%#02x)", uint8(c))
}

// Method is the MAD method (IBTA Vol 1 §13.4.5). The high bit marks a
// response.
type Method uint8

// Methods.
const (
	MethodGet         Method = 0x01
	MethodSet         Method = 0x02
	MethodSend        Method = 0x03
	MethodTrap        Method = 0x05
	MethodReport      Method = 0x06
	MethodTrapRepress Method = 0x07
	MethodGetResp     Method = 0x81
	MethodReportResp  Method = 0x86

	// MethodResponse is the response bit.
	MethodResponse Method = 0x80
)

// IsResponse reports whether m carries the response bit.
func (m Method) IsResponse() bool { return m&MethodResponse != 0 }

// String names the method.
func (m Method) String() string {
	switch m {
	case MethodGet:
		return "Get"
	case MethodSet:
		return "Set"
	case MethodSend:
		return "Send"
	case MethodTrap:
		return "Trap"
	case MethodReport:
		return "Report"
	case MethodTrapRepress:
		return "TrapRepress"
	case MethodGetResp:
		return "GetResp"
	case MethodReportResp:
		return "ReportResp"
	}
	return fmt.Sprintf("Method(%#02x)", uint8(m))
}

// MAD status codes (IBTA Vol 1 §13.4.7, common bits).
const (
	StatusBusy                  uint16 = 0x0001
	StatusRedirect              uint16 = 0x0002
	StatusBadVersion            uint16 = 0x0004
	StatusUnsupportedMethod     uint16 = 0x0008
	StatusUnsupportedMethodAttr uint16 = 0x000C
	StatusInvalidField          uint16 = 0x001C
)

// AttrID is a MAD attribute ID. For the CM class it selects the message.
type AttrID uint16

// CM attribute IDs (IBTA Vol 1 §12.6, Table 103; linux ib_cm.h).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

// String names the attribute as the IBTA does.
func (a AttrID) String() string {
	if l := layoutOf(a); l != nil {
		return l.Name
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// Private-data sizes of each CM message (IBTA Vol 1 §12.6; ib-cm.md §3).
const (
	REQPrivateDataSize     = 92
	MRAPrivateDataSize     = 222
	REJPrivateDataSize     = 148
	REJARISize             = 72
	REPPrivateDataSize     = 196
	RTUPrivateDataSize     = 224
	DREQPrivateDataSize    = 220
	DREPPrivateDataSize    = 224
	SIDRREQPrivateDataSize = 216
	SIDRREPPrivateDataSize = 136
	SIDRREPInfoSize        = 72
	LAPPrivateDataSize     = 168
	APRPrivateDataSize     = 148
	APRInfoSize            = 72
)

// Errors returned by the decoders and the generic layout accessors.
var (
	// ErrTooShort means the buffer is shorter than the structure.
	ErrTooShort = errors.New("mad: buffer too short")
	// ErrBadVersion means an unsupported base or class version.
	ErrBadVersion = errors.New("mad: unsupported version")
	// ErrNotCM means the MAD is not of the CM class.
	ErrNotCM = errors.New("mad: not a CM MAD")
	// ErrUnknownAttr means an attribute ID without a known layout.
	ErrUnknownAttr = errors.New("mad: unknown attribute")
	// ErrNoField means a layout lookup by an unknown field name.
	ErrNoField = errors.New("mad: no such field")
	// ErrFieldType means an integer access to a byte field or the reverse.
	ErrFieldType = errors.New("mad: wrong field type")
	// ErrTooLong means private data or additional info exceeds its area.
	ErrTooLong = errors.New("mad: data too long")
	// ErrBadAddress means a cma_hdr with an unknown IP version, or an
	// IPv4-mapped address under ip_version 6.
	ErrBadAddress = errors.New("mad: bad cma_hdr address")
)
