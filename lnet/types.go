package lnet

import (
	"errors"
	"fmt"
	"math/bits"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Limits (lnet-wire.md §1.7).
const (
	// MTU is LNET_MTU, the largest payload of one PUT, GET or REPLY.
	MTU = lnd.MaxPayload
	// MaxIOV is LNET_MAX_IOV, the most fragments in an MD.
	MaxIOV = lnd.MaxIOV
	// MaxPortals is the size of the portal table (MAX_PORTALS).
	MaxPortals = 64
	// ReservedPortal (0) carries ping and discovery.
	ReservedPortal = lnetwire.ReservedPortal
)

// EventType is lnet_event_kind (lnet-wire.md §1.3).
type EventType uint8

// Event types, numbered as in Lustre 2.12.
const (
	EventGet    EventType = 1 // a GET was served from a local MD
	EventPut    EventType = 2 // a PUT landed in a local MD
	EventReply  EventType = 3 // the REPLY to a local GET arrived
	EventAck    EventType = 4 // the ACK for a local PUT arrived
	EventSend   EventType = 5 // a local PUT or GET request left (or failed)
	EventUnlink EventType = 6 // an MD was unlinked explicitly with no operation pending
)

var eventNames = [...]string{"", "GET", "PUT", "REPLY", "ACK", "SEND", "UNLINK"}

// String returns the Lustre name ("PUT").
func (t EventType) String() string {
	if int(t) < len(eventNames) && t != 0 {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// MDOptions are the LNET_MD_* option bits (lnet-wire.md §1.4).
type MDOptions uint32

// MD options.
const (
	// MDOpPut lets incoming PUTs match the MD.
	MDOpPut MDOptions = 1 << 0
	// MDOpGet lets incoming GETs match the MD.
	MDOpGet MDOptions = 1 << 1
	// MDManageRemote makes incoming operations use the initiator's offset
	// instead of the MD's running local offset.
	MDManageRemote MDOptions = 1 << 2
	// MDTruncate accepts operations longer than the room left, truncating
	// them; without it they are dropped.
	MDTruncate MDOptions = 1 << 4
	// MDAckDisable suppresses the ACK for PUTs into this MD.
	MDAckDisable MDOptions = 1 << 5
	// MDIOVec marks MD.IOV use; accepted for compatibility (IOV != nil
	// already says so).
	MDIOVec MDOptions = 1 << 6
	// MDMaxSize makes each operation use at most MaxSize bytes and the MD
	// exhausted once fewer than MaxSize bytes remain.
	MDMaxSize MDOptions = 1 << 7
	// MDKIOV is accepted as a synonym of MDIOVec.
	MDKIOV MDOptions = 1 << 8
)

const mdKnownOptions = MDOpPut | MDOpGet | MDManageRemote | MDTruncate | MDAckDisable | MDIOVec | MDMaxSize | MDKIOV

// ThreshInf is LNET_MD_THRESH_INF: an MD threshold that never runs out.
const ThreshInf = -1

// InsPos is lnet_ins_pos: where a new ME goes in a match list.
type InsPos uint8

// Insert positions.
const (
	InsBefore InsPos = 0 // at the head (or before the given ME)
	InsAfter  InsPos = 1 // at the tail (or after the given ME)
	InsLocal  InsPos = 2 // Lustre's CPT-local list; the same as InsAfter here
)

// Unlink is lnet_unlink: whether an ME or MD goes away by itself.
type Unlink uint8

// Unlink modes.
const (
	// Retain keeps an ME after its MD is unlinked, or an MD after its
	// threshold runs out.
	Retain Unlink = 0
	// AutoUnlink removes the ME with its MD, or the MD once exhausted and
	// idle.
	AutoUnlink Unlink = 1
)

// AckReq is lnet_ack_req: whether a PUT asks for an ACK.
type AckReq uint8

// ACK requests.
const (
	AckReqYes AckReq = 0 // LNET_ACK_REQ
	AckReqNo  AckReq = 1 // LNET_NOACK_REQ
)

// MD describes a memory region (struct lnet_md). Start is a contiguous
// buffer; IOV, when non-nil, is a scatter list of at most MaxIOV
// fragments and Start is ignored. The memory belongs to the caller and
// must stay valid until the MD is unlinked.
type MD struct {
	Start     []byte
	IOV       [][]byte
	Threshold int // operations allowed; ThreshInf for no limit
	MaxSize   int // with MDMaxSize: the most bytes per operation
	Options   MDOptions
	// UserPtr is returned in every event of the MD.
	UserPtr any
	// EQ receives the MD's events (nil: none).
	EQ *EQ
	// Handler, if set, is called for each event of the MD after it is
	// queued on EQ (the Lustre 2.14+ per-MD callback). It runs on the
	// goroutine that completed the operation and must not block.
	Handler func(*Event)
}

// MDHandle names an MD (lnet_handle_md); the zero value is invalid.
type MDHandle struct{ Cookie uint64 }

// IsZero reports whether h is the invalid zero handle.
func (h MDHandle) IsZero() bool { return h.Cookie == 0 }

// Event is struct lnet_event: the record of one operation on an MD.
type Event struct {
	Type EventType
	// Target is the process the operation was aimed at (local for
	// incoming operations, the remote for SEND).
	Target lnetwire.ProcessID
	// Initiator is the process that started the operation (for incoming
	// operations, a Multi-Rail peer's primary NID).
	Initiator lnetwire.ProcessID
	// Source is, for incoming operations, the NID the initiator sent the
	// message from (the header's source NID, Lustre's ev->source: one of
	// the initiator's NIDs, not necessarily its primary); for SEND it
	// is the local NID, as Initiator.
	Source lnetwire.NID
	// Sender is the peer NI the message arrived from (previous hop).
	Sender    lnetwire.NID
	Portal    int
	MatchBits uint64
	// RLength is the requested length, MLength the length that matched
	// (after truncation), Offset where in the MD it landed or came from.
	RLength int
	MLength int
	Offset  int
	// MDHandle and MD identify the MD (MD is a copy, including UserPtr).
	MDHandle MDHandle
	MD       MD
	HdrData  uint64
	// Status is nil on success; otherwise the operation failed.
	Status error
	// Unlinked says this is the MD's last event: it has been unlinked.
	Unlinked bool
	// Sequence is the EQ's sequence number of the event.
	Sequence uint64
}

// Errors returned by the API. They wrap the errno-like meaning of the
// Lustre return codes.
var (
	ErrInvalid     = errors.New("lnet: invalid argument")            // EINVAL
	ErrNoEnt       = errors.New("lnet: no such object")              // ENOENT
	ErrBusy        = errors.New("lnet: busy")                        // EBUSY
	ErrPortalType  = errors.New("lnet: ME does not fit portal type") // EPERM: unique vs wildcard
	ErrNoRoute     = errors.New("lnet: no route to NID")             // EHOSTUNREACH
	ErrTimeout     = errors.New("lnet: timed out")                   // ETIMEDOUT
	ErrEQOverflow  = errors.New("lnet: event queue overflowed")      // EOVERFLOW
	ErrClosed      = errors.New("lnet: instance closed")             // ESHUTDOWN
	ErrTooBig      = errors.New("lnet: message larger than MTU")     // EMSGSIZE
	ErrDropped     = errors.New("lnet: message dropped")             // ENOMSG
	ErrPeerDown    = lnd.ErrPeerDown
	ErrNetExists   = errors.New("lnet: net already configured") // EEXIST
	ErrNoLND       = errors.New("lnet: no LND for net type")    // ENODEV
	ErrBadPingInfo = errors.New("lnet: bad ping reply")         // EPROTO
)

// roundPow2 returns the smallest power of two ≥ n (n ≥ 1).
func roundPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}
