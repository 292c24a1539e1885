package mad

import "fmt"

// RejectReason is the REJ Reason field (IBTA Vol 1 §12.6.7.2 Table 109;
// linux ib_cm.h enum ib_cm_rej_reason; ib-cm.md §5).
type RejectReason uint16

// Reject reasons.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortRedirect              RejectReason = 24
	RejPortCMRedirect            RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

var rejectNames = map[RejectReason]string{
	RejNoQP:                      "no QP",
	RejNoEEC:                     "no EEC",
	RejNoResources:               "no resources",
	RejTimeout:                   "timeout",
	RejUnsupported:               "unsupported request",
	RejInvalidCommID:             "invalid comm ID",
	RejInvalidCommInstance:       "invalid comm instance",
	RejInvalidServiceID:          "invalid service ID",
	RejInvalidTransportType:      "invalid transport type",
	RejStaleConn:                 "stale connection",
	RejRDCNotExist:               "RDC does not exist",
	RejInvalidGID:                "invalid GID",
	RejInvalidLID:                "invalid LID",
	RejInvalidSL:                 "invalid SL",
	RejInvalidTrafficClass:       "invalid traffic class",
	RejInvalidHopLimit:           "invalid hop limit",
	RejInvalidPacketRate:         "invalid packet rate",
	RejInvalidAltGID:             "invalid alternate GID",
	RejInvalidAltLID:             "invalid alternate LID",
	RejInvalidAltSL:              "invalid alternate SL",
	RejInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejInvalidAltHopLimit:        "invalid alternate hop limit",
	RejInvalidAltPacketRate:      "invalid alternate packet rate",
	RejPortRedirect:              "port redirect",
	RejPortCMRedirect:            "port CM redirect",
	RejInvalidMTU:                "invalid path MTU",
	RejInsufficientRespResources: "insufficient responder resources",
	RejConsumerDefined:           "consumer defined",
	RejInvalidRNRRetry:           "invalid RNR retry",
	RejDuplicateLocalCommID:      "duplicate local comm ID",
	RejInvalidClassVersion:       "invalid class version",
	RejInvalidFlowLabel:          "invalid flow label",
	RejInvalidAltFlowLabel:       "invalid alternate flow label",
	RejVendorOptionNotSupported:  "vendor option not supported",
}

// String describes the reason.
func (r RejectReason) String() string {
	if s, ok := rejectNames[r]; ok {
		return s
	}
	return fmt.Sprintf("RejectReason(%d)", uint16(r))
}

// RejectReasons lists every defined reason in ascending order.
func RejectReasons() []RejectReason {
	var out []RejectReason
	for r := RejNoQP; r <= RejVendorOptionNotSupported; r++ {
		if _, ok := rejectNames[r]; ok {
			out = append(out, r)
		}
	}
	return out
}

// MsgType names the message a REJ rejects or an MRA acknowledges
// (MessageRejected / MessageMRAed).
type MsgType uint8

// Message types for MessageRejected and MessageMRAed.
const (
	MsgREQ   MsgType = 0
	MsgREP   MsgType = 1
	MsgOther MsgType = 2 // LAP for MRA, anything else for REJ
)

// String names the message type.
func (m MsgType) String() string {
	switch m {
	case MsgREQ:
		return "REQ"
	case MsgREP:
		return "REP"
	case MsgOther:
		return "other"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(m))
}

// APStatus is the APR AP status (IBTA Vol 1 §12.6.12; ib_cm.h).
type APStatus uint8

// AP status values.
const (
	APRSuccess           APStatus = 0
	APRInvalidCommID     APStatus = 1
	APRUnsupported       APStatus = 2
	APRReject            APStatus = 3
	APRRedirect          APStatus = 4
	APRIsCurrent         APStatus = 5
	APRInvalidQPNEECN    APStatus = 6
	APRInvalidLID        APStatus = 7
	APRInvalidGID        APStatus = 8
	APRInvalidFlowLabel  APStatus = 9
	APRInvalidTClass     APStatus = 10
	APRInvalidHopLimit   APStatus = 11
	APRInvalidPacketRate APStatus = 12
	APRInvalidSL         APStatus = 13
)

var apNames = [...]string{"success", "invalid comm ID", "unsupported", "reject",
	"redirect", "is current", "invalid QPN/EECN", "invalid LID", "invalid GID",
	"invalid flow label", "invalid traffic class", "invalid hop limit",
	"invalid packet rate", "invalid SL"}

// String describes the status.
func (s APStatus) String() string {
	if int(s) < len(apNames) {
		return apNames[s]
	}
	return fmt.Sprintf("APStatus(%d)", uint8(s))
}

// SIDRStatus is the SIDR_REP status (IBTA Vol 1 §12.11.2; ib_cm.h).
type SIDRStatus uint8

// SIDR_REP status values.
const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

var sidrNames = [...]string{"success", "unsupported service ID", "reject",
	"no QP", "redirect", "unsupported version"}

// String describes the status.
func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return sidrNames[s]
	}
	return fmt.Sprintf("SIDRStatus(%d)", uint8(s))
}

// TransportType is the REQ Transport Service Type.
type TransportType uint8

// Transport service types.
const (
	TransportRC  TransportType = 0
	TransportUC  TransportType = 1
	TransportRD  TransportType = 2
	TransportXRC TransportType = 3 // with ExtendedTransportType 1
)

// String names the transport type.
func (t TransportType) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportXRC:
		return "XRC"
	}
	return fmt.Sprintf("TransportType(%d)", uint8(t))
}

// MTU is the IBTA path MTU encoding (1 = 256 ... 5 = 4096).
type MTU uint8

// Path MTU values.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid encoding.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFor returns the largest IB MTU not above n bytes (MTU256 for less).
func MTUFor(n int) MTU {
	m := MTU4096
	for m > MTU256 && m.Bytes() > n {
		m--
	}
	return m
}

// String prints the MTU in bytes.
func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return fmt.Sprint(b)
	}
	return fmt.Sprintf("MTU(%d)", uint8(m))
}
