package selftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"softib/wire/lnetwire"
)

// Wire constants of Lustre's lnet_selftest (lnet/selftest/rpc.h,
// lnet/include/uapi/linux/lnet/lnetst.h).
const (
	// Magic starts every message (SRPC_MSG_MAGIC). A peer of the other
	// byte order writes it swapped; Parse converts such a message.
	Magic = 0xEEB0F00D
	// Version is the message version (SRPC_MSG_VERSION).
	Version = 1
	// PingMagic is carried in ping test requests and replies
	// (LST_PING_TEST_MAGIC).
	PingMagic = 0xBABEFACE

	// RequestPortal takes test requests (brw, ping).
	RequestPortal = 50
	// FrameworkPortal takes console requests (session, test, batch, stat).
	FrameworkPortal = 51
	// RDMAPortal holds the requester's reply buffers and bulk MDs,
	// matched by the rpyid and bulkid of the request.
	RDMAPortal = 52

	// MsgSize is sizeof(struct srpc_msg): every request and reply is
	// exactly this long (a header and a union padded to its largest
	// member, the STAT reply). The kernel drops requests of any other
	// length and receives replies into buffers of this size.
	MsgSize = 160
	// HdrSize is the size of the message header.
	HdrSize = 24
	// NameSize is the fixed size of a name on the wire (LST_NAME_SIZE);
	// names are at most NameSize-1 bytes.
	NameSize = 32

	// FeatBulkLen is LST_FEAT_BULK_LEN: brw sizes are bytes (test_bulk_req_v1)
	// instead of pages. FeatsMask is every feature this package knows
	// (LST_FEATS_MASK), the session features a console asks for.
	FeatBulkLen = 1
	FeatsMask   = FeatBulkLen

	// ProcessIDSize is sizeof(struct lnet_process_id_packed): nid u64,
	// pid u32, packed. The destination list of a TEST request is an
	// array of them, IDsPerPage to a 4 KiB page (SFW_ID_PER_PAGE).
	ProcessIDSize = 12
	IDsPerPage    = pageSize / ProcessIDSize
	// MaxConcurrency is LST_MAX_CONCUR.
	MaxConcurrency = 1024
	// MaxDests bounds a TEST request's destination count (SFW_MAX_NDESTS).
	MaxDests = 256 * IDsPerPage
)

// ServiceID is an SRPC service id: the match bits a request is sent with.
type ServiceID uint32

// Service ids (enum srpc_service_type): framework services up to 10 on
// FrameworkPortal, test services on RequestPortal.
const (
	ServiceDebug     ServiceID = 0
	ServiceMakeSess  ServiceID = 1
	ServiceRemoveSes ServiceID = 2
	ServiceBatch     ServiceID = 3
	ServiceTest      ServiceID = 4
	ServiceQueryStat ServiceID = 5
	ServiceJoin      ServiceID = 6
	serviceFwMax     ServiceID = 10
	ServiceBRW       ServiceID = 11
	ServicePing      ServiceID = 12
	serviceMax       ServiceID = 13
)

// Portal returns the portal requests for s are sent to.
func (s ServiceID) Portal() int {
	if s > serviceFwMax {
		return RequestPortal
	}
	return FrameworkPortal
}

// Request returns the request type of service s.
func (s ServiceID) Request() MsgType {
	switch s {
	case ServiceMakeSess:
		return MsgMakeSessReq
	case ServiceRemoveSes:
		return MsgRemoveSesReq
	case ServiceBatch:
		return MsgBatchReq
	case ServiceQueryStat:
		return MsgStatReq
	case ServiceTest:
		return MsgTestReq
	case ServiceDebug:
		return MsgDebugReq
	case ServiceJoin:
		return MsgJoinReq
	case ServiceBRW:
		return MsgBRWReq
	case ServicePing:
		return MsgPingReq
	}
	return msgInvalid
}

// MsgType is srpc_msg_type: even numbers are requests, the next odd one
// the reply.
type MsgType uint32

// Message types, numbered as in Lustre.
const (
	MsgMakeSessReq  MsgType = 0
	MsgMakeSessRep  MsgType = 1
	MsgRemoveSesReq MsgType = 2
	MsgRemoveSesRep MsgType = 3
	MsgBatchReq     MsgType = 4
	MsgBatchRep     MsgType = 5
	MsgStatReq      MsgType = 6
	MsgStatRep      MsgType = 7
	MsgTestReq      MsgType = 8
	MsgTestRep      MsgType = 9
	MsgDebugReq     MsgType = 10
	MsgDebugRep     MsgType = 11
	MsgBRWReq       MsgType = 12
	MsgBRWRep       MsgType = 13
	MsgPingReq      MsgType = 14
	MsgPingRep      MsgType = 15
	MsgJoinReq      MsgType = 16
	MsgJoinRep      MsgType = 17
	msgInvalid      MsgType = 18
)

var msgNames = [msgInvalid]string{
	"MKSN_REQST", "MKSN_REPLY", "RMSN_REQST", "RMSN_REPLY", "BATCH_REQST", "BATCH_REPLY",
	"STAT_REQST", "STAT_REPLY", "TEST_REQST", "TEST_REPLY", "DEBUG_REQST", "DEBUG_REPLY",
	"BRW_REQST", "BRW_REPLY", "PING_REQST", "PING_REPLY", "JOIN_REQST", "JOIN_REPLY",
}

// String returns Lustre's name of the type.
func (t MsgType) String() string {
	if t < msgInvalid {
		return msgNames[t]
	}
	return fmt.Sprintf("MsgType(%d)", uint32(t))
}

// IsReply reports whether t is a reply type.
func (t MsgType) IsReply() bool { return t&1 == 1 }

// ReplyType returns the reply type of request type t.
func (t MsgType) ReplyType() MsgType { return t | 1 }

// Service returns the service a request (or reply) type belongs to.
func (t MsgType) Service() ServiceID {
	switch t &^ 1 {
	case MsgMakeSessReq:
		return ServiceMakeSess
	case MsgRemoveSesReq:
		return ServiceRemoveSes
	case MsgBatchReq:
		return ServiceBatch
	case MsgStatReq:
		return ServiceQueryStat
	case MsgTestReq:
		return ServiceTest
	case MsgJoinReq:
		return ServiceJoin
	case MsgBRWReq:
		return ServiceBRW
	case MsgPingReq:
		return ServicePing
	}
	return ServiceDebug
}

// Batch operations (bar_opc, SRPC_BATCH_OPC_*).
const (
	BatchRun   = 1
	BatchStop  = 2
	BatchQuery = 3
)

// BRW operations and data checks (enum lst_brw_type, lst_brw_flags).
const (
	BRWRead  = 1
	BRWWrite = 2

	CheckNone   = 1
	CheckSimple = 2
	CheckFull   = 3
)

// Decoder errors, matched with errors.Is.
var (
	ErrShort      = errors.New("selftest: message is not 160 bytes")
	ErrBadMagic   = errors.New("selftest: bad magic")
	ErrBadVersion = errors.New("selftest: bad version")
	ErrBadType    = errors.New("selftest: unknown message type")
)

// SID identifies a session (lst_sid): the console's NID and a stamp
// chosen when the session was created (Lustre's console: milliseconds).
type SID struct {
	NID   lnetwire.NID
	Stamp uint64
}

// IsZero reports whether sid names no session.
func (s SID) IsZero() bool { return s == SID{} }

// String prints "stamp@console-nid".
func (s SID) String() string { return fmt.Sprintf("%x@%v", s.Stamp, s.NID) }

// noSID is what a node reports when it has no session (LST_INVALID_SID).
var noSID = SID{NID: lnetwire.NIDAny, Stamp: ^uint64(0)}

var le = binary.LittleEndian

// Msg is a view of one srpc_msg, MsgSize bytes in this package's (little
// endian) byte order:
//
//	0  msg_magic u32 | 4 msg_version u32 | 8 msg_type u32
//	12 msg_reserved0 u32 | 16 msg_reserved1 u32 | 20 msg_ses_feats u32
//	24 msg_body (the union; see the view types)
//
// Every request starts its body with the reply buffer's match bits
// (rpyid u64); TEST and BRW requests follow them with the bulk buffer's
// (bulkid u64). Every reply starts with status u32 (an errno); the
// framework replies follow it with the node's sid.
type Msg []byte

// NewMsg returns a zeroed message of type t with features feats.
func NewMsg(t MsgType, feats uint32) Msg {
	m := make(Msg, MsgSize)
	m.Init(t, feats)
	return m
}

// Init zeroes m and writes the header.
func (m Msg) Init(t MsgType, feats uint32) {
	clear(m[:MsgSize])
	le.PutUint32(m[0:], Magic)
	le.PutUint32(m[4:], Version)
	le.PutUint32(m[8:], uint32(t))
	le.PutUint32(m[20:], feats)
}

// Magic returns msg_magic.
func (m Msg) Magic() uint32 { return le.Uint32(m[0:]) }

// Version returns msg_version.
func (m Msg) Version() uint32 { return le.Uint32(m[4:]) }

// Type returns msg_type.
func (m Msg) Type() MsgType { return MsgType(le.Uint32(m[8:])) }

// Feats returns msg_ses_feats, the session features.
func (m Msg) Feats() uint32 { return le.Uint32(m[20:]) }

// SetFeats sets msg_ses_feats.
func (m Msg) SetFeats(f uint32) { le.PutUint32(m[20:], f) }

// Body returns the message body (the union).
func (m Msg) Body() []byte { return m[HdrSize:MsgSize] }

// RpyID returns a request's reply match bits (its first body field).
func (m Msg) RpyID() uint64 { return le.Uint64(m[HdrSize:]) }

// SetRpyID sets a request's reply match bits.
func (m Msg) SetRpyID(v uint64) { le.PutUint64(m[HdrSize:], v) }

// Status returns a reply's status (its first body field: 0 or an errno).
func (m Msg) Status() uint32 { return le.Uint32(m[HdrSize:]) }

// SetStatus sets a reply's status.
func (m Msg) SetStatus(v uint32) { le.PutUint32(m[HdrSize:], v) }

// ReplySID returns the sid of a framework reply (srpc_generic_reply).
func (m Msg) ReplySID() SID { return getSID(m[HdrSize+4:]) }

// SetReplySID sets the sid of a framework reply.
func (m Msg) SetReplySID(s SID) { putSID(m[HdrSize+4:], s) }

// ReqSID returns the sid a framework request carries (at 8 in the body,
// after rpyid; at 16 in TEST, after bulkid). Test requests carry none.
func (m Msg) ReqSID() SID {
	switch m.Type() {
	case MsgMakeSessReq, MsgRemoveSesReq, MsgBatchReq, MsgStatReq, MsgDebugReq, MsgJoinReq:
		return getSID(m[HdrSize+8:])
	case MsgTestReq:
		return getSID(m[HdrSize+16:])
	}
	return SID{}
}

// SetReqSID sets the sid of a framework request.
func (m Msg) SetReqSID(s SID) {
	switch m.Type() {
	case MsgMakeSessReq, MsgRemoveSesReq, MsgBatchReq, MsgStatReq, MsgDebugReq, MsgJoinReq:
		putSID(m[HdrSize+8:], s)
	case MsgTestReq:
		putSID(m[HdrSize+16:], s)
	}
}

func getSID(b []byte) SID { return SID{NID: lnetwire.NID(le.Uint64(b)), Stamp: le.Uint64(b[8:])} }

func putSID(b []byte, s SID) {
	le.PutUint64(b, uint64(s.NID))
	le.PutUint64(b[8:], s.Stamp)
}

// getName reads a NUL-padded name; at most NameSize-1 bytes count.
func getName(b []byte) string {
	b = b[:NameSize-1]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func putName(b []byte, s string) {
	clear(b[:NameSize])
	copy(b[:NameSize-1], s)
}

// Parse checks that b is one message and returns its view. A message
// from a peer of the other byte order (its magic reads swapped) is
// converted in place, as Lustre's unpack functions do, and swapped is
// true: the caller needs it to convert data that travels as bulk (the
// TEST destination list). ErrBadVersion comes with the message (a node
// answers it with EPROTO); the other errors with none.
func Parse(b []byte) (m Msg, swapped bool, err error) {
	if len(b) != MsgSize {
		return nil, false, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	m = Msg(b)
	switch m.Magic() {
	case Magic:
	case bits.ReverseBytes32(Magic):
		swapped = true
	default:
		return nil, false, fmt.Errorf("%w: %#x", ErrBadMagic, m.Magic())
	}
	t := m.Type()
	if swapped {
		t = MsgType(bits.ReverseBytes32(uint32(t)))
	}
	if t >= msgInvalid {
		return nil, false, fmt.Errorf("%w: %d", ErrBadType, uint32(t))
	}
	if swapped {
		m.swab(false)
	}
	if m.Version() != Version {
		return m, swapped, fmt.Errorf("%w: %d", ErrBadVersion, m.Version())
	}
	return m, swapped, nil
}

// Swab converts m (in this package's byte order) to the other byte
// order, field by field, as a peer of that order would have written it.
// Parse undoes it.
func (m Msg) Swab() { m.swab(true) }

// field is one multi-byte field of a body: its offset and width.
type field struct{ off, n uint8 }

// Body layouts (offsets within the body), one per message type, listing
// the fields Lustre's unpack functions swap. Names, u8 fields and padding
// are not swapped.
var (
	sidFields    = func(at uint8) []field { return []field{{at, 8}, {at + 8, 8}} }
	bodyFields   [msgInvalid][]field
	testUFieldV0 = []field{{58, 4}, {62, 4}, {66, 4}} // test_bulk_req: opc, npg, flags
	testUFieldV1 = []field{{58, 2}, {60, 2}, {62, 4}, {66, 4}}
	testUPing    = []field{{58, 4}, {62, 4}} // test_ping_req: size, flags
)

func init() {
	cat := func(fs ...[]field) []field {
		var out []field
		for _, f := range fs {
			out = append(out, f...)
		}
		return out
	}
	f := func(off, n uint8) []field { return []field{{off, n}} }
	// srpc_mksn_reqst: rpyid 0, sid 8, force 24, name 28..60.
	bodyFields[MsgMakeSessReq] = cat(f(0, 8), sidFields(8), f(24, 4))
	// srpc_mksn_reply: status 0, sid 4, timeout 20, name 24..56.
	bodyFields[MsgMakeSessRep] = cat(f(0, 4), sidFields(4), f(20, 4))
	// srpc_rmsn_reqst: rpyid 0, sid 8. reply: status 0, sid 4.
	bodyFields[MsgRemoveSesReq] = cat(f(0, 8), sidFields(8))
	bodyFields[MsgRemoveSesRep] = cat(f(0, 4), sidFields(4))
	// srpc_debug_reqst: rpyid 0, sid 8, flags 24.
	bodyFields[MsgDebugReq] = cat(f(0, 8), sidFields(8), f(24, 4))
	// srpc_debug_reply: status 0, sid 4, timeout 20, nbatch 24, name 28..60.
	bodyFields[MsgDebugRep] = cat(f(0, 4), sidFields(4), f(20, 4), f(24, 4))
	// srpc_batch_reqst: rpyid 0, sid 8, bid 24, opc 32, testidx 36, arg 40.
	bodyFields[MsgBatchReq] = cat(f(0, 8), sidFields(8), f(24, 8), f(32, 4), f(36, 4), f(40, 4))
	// srpc_batch_reply: status 0, sid 4, active 20, time 24.
	bodyFields[MsgBatchRep] = cat(f(0, 4), sidFields(4), f(20, 4), f(24, 4))
	// srpc_stat_reqst: rpyid 0, sid 8, type 24.
	bodyFields[MsgStatReq] = cat(f(0, 8), sidFields(8), f(24, 4))
	// srpc_stat_reply: status 0, sid 4, sfw_counters 20 (5×u32),
	// srpc_counters 40 (5×u32, 2×u64), lnet_counters_common 76 (7×u32, 4×u64).
	st := cat(f(0, 4), sidFields(4))
	for off := uint8(20); off < 60; off += 4 {
		st = append(st, field{off, 4})
	}
	st = append(st, field{60, 8}, field{68, 8})
	for off := uint8(76); off < 104; off += 4 {
		st = append(st, field{off, 4})
	}
	for off := uint8(104); off < 136; off += 8 {
		st = append(st, field{off, 8})
	}
	bodyFields[MsgStatRep] = st
	// srpc_test_reqst: rpyid 0, bulkid 8, sid 16, bid 32, service 40,
	// loop 44, concur 48, is_client u8 52, stop_onerr u8 53, ndest 54,
	// tsr_u 58 (by service and features, see swabTestU).
	bodyFields[MsgTestReq] = cat(f(0, 8), f(8, 8), sidFields(16), f(32, 8), f(40, 4), f(44, 4), f(48, 4), f(54, 4))
	bodyFields[MsgTestRep] = cat(f(0, 4), sidFields(4))
	// srpc_join_reqst: rpyid 0, sid 8, group 24..56.
	bodyFields[MsgJoinReq] = cat(f(0, 8), sidFields(8))
	// srpc_join_reply: status 0, sid 4, timeout 20, session 24..56.
	bodyFields[MsgJoinRep] = cat(f(0, 4), sidFields(4), f(20, 4))
	// srpc_brw_reqst: rpyid 0, bulkid 8, rw 16, len 20, flags 24. reply: status.
	bodyFields[MsgBRWReq] = cat(f(0, 8), f(8, 8), f(16, 4), f(20, 4), f(24, 4))
	bodyFields[MsgBRWRep] = f(0, 4)
	// srpc_ping_reqst: rpyid 0, magic 8, seq 12, time_sec 16, time_nsec 24.
	bodyFields[MsgPingReq] = cat(f(0, 8), f(8, 4), f(12, 4), f(16, 8), f(24, 8))
	// srpc_ping_reply: status 0, magic 4, seq 8.
	bodyFields[MsgPingRep] = cat(f(0, 4), f(4, 4), f(8, 4))
}

func swabField(b []byte, n uint8) {
	switch n {
	case 2:
		b[0], b[1] = b[1], b[0]
	case 4:
		le.PutUint32(b, bits.ReverseBytes32(le.Uint32(b)))
	case 8:
		le.PutUint64(b, bits.ReverseBytes64(le.Uint64(b)))
	}
}

// swab swaps every field of m. toForeign says which order m is in now:
// false, foreign (read the type and features swapped); true, native.
func (m Msg) swab(toForeign bool) {
	t, feats := m.Type(), m.Feats()
	for _, off := range []int{0, 4, 8, 12, 16, 20} {
		swabField(m[off:], 4)
	}
	if !toForeign {
		t, feats = m.Type(), m.Feats()
	}
	body := m.Body()
	if t >= msgInvalid {
		return
	}
	for _, f := range bodyFields[t] {
		swabField(body[f.off:], f.n)
	}
	if t == MsgTestReq {
		// tsr_service was swapped above; read it in native order.
		svc := ServiceID(le.Uint32(body[40:]))
		if toForeign {
			svc = ServiceID(bits.ReverseBytes32(uint32(svc)))
		}
		var fs []field
		switch {
		case svc == ServicePing:
			fs = testUPing
		case svc == ServiceBRW && feats&FeatBulkLen != 0:
			fs = testUFieldV1
		case svc == ServiceBRW:
			fs = testUFieldV0
		}
		for _, f := range fs {
			swabField(body[f.off:], f.n)
		}
	}
}
