package selftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"softib/wire/lnetwire"
)

// Wire constants (lnet-wire.md §8.8).
const (
	// Magic starts every SRPC message (SRPC_MSG_MAGIC).
	Magic = 0xEEB0F00D
	// PingMagic is carried in ping test requests and replies.
	PingMagic = 0xBABEFACE
	// Version is the message version this package speaks.
	Version = 1

	// RequestPortal takes test requests (brw, ping).
	RequestPortal = 50
	// FrameworkPortal takes console requests (session, test, batch, stat).
	FrameworkPortal = 51
	// RDMAPortal holds the requester's reply buffers and bulk MDs,
	// matched by the RpyID and BulkID of the request.
	RDMAPortal = 52

	// NameSize is the fixed size of a name on the wire (LST_NAME_SIZE);
	// names are at most NameSize-1 bytes.
	NameSize = 32
	// HdrSize is the size of the common message header.
	HdrSize = 24
	// MaxFrameworkMsg bounds a framework request (the TEST request with
	// its server list is the largest).
	MaxFrameworkMsg = 64 << 10
	// MaxTestMsg bounds a test-service request.
	MaxTestMsg = 256
	// MaxServers is the most servers one TEST request can name.
	MaxServers = (MaxFrameworkMsg - HdrSize - reqPrefix - testFixed) / serverSize
)

// ServiceID is an SRPC service id: the match bits a request is sent with.
type ServiceID uint64

// Service ids (framework services below 10 on FrameworkPortal, test
// services on RequestPortal).
const (
	ServiceDebug     ServiceID = 0
	ServiceMakeSess  ServiceID = 1
	ServiceRemoveSes ServiceID = 2
	ServiceBatch     ServiceID = 3
	ServiceTest      ServiceID = 4
	ServiceQueryStat ServiceID = 5
	ServiceBRW       ServiceID = 11
	ServicePing      ServiceID = 12
)

// Portal returns the portal requests for s are sent to.
func (s ServiceID) Portal() int {
	if s >= ServiceBRW {
		return RequestPortal
	}
	return FrameworkPortal
}

// MsgType is srpc_msg_type: even numbers are requests, the next odd one
// the reply.
type MsgType uint32

// Message types, numbered as in Lustre's SRPC.
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
	MsgBRWReq       MsgType = 12
	MsgBRWRep       MsgType = 13
	MsgPingReq      MsgType = 14
	MsgPingRep      MsgType = 15
)

var msgNames = map[MsgType]string{
	MsgMakeSessReq: "MKSN_REQST", MsgMakeSessRep: "MKSN_REPLY", MsgRemoveSesReq: "RMSN_REQST",
	MsgRemoveSesRep: "RMSN_REPLY", MsgBatchReq: "BATCH_REQST", MsgBatchRep: "BATCH_REPLY",
	MsgStatReq: "STAT_REQST", MsgStatRep: "STAT_REPLY", MsgTestReq: "TEST_REQST", MsgTestRep: "TEST_REPLY",
	MsgBRWReq: "BRW_REQST", MsgBRWRep: "BRW_REPLY", MsgPingReq: "PING_REQST", MsgPingRep: "PING_REPLY",
}

// String returns Lustre's name of the type.
func (t MsgType) String() string {
	if s, ok := msgNames[t]; ok {
		return s
	}
	return fmt.Sprintf("MsgType(%d)", uint32(t))
}

// IsReply reports whether t is a reply type.
func (t MsgType) IsReply() bool { return t&1 == 1 }

// ReplyType returns the reply type of request type t.
func (t MsgType) ReplyType() MsgType { return t | 1 }

// Service returns the service a request type is sent to.
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
	case MsgBRWReq:
		return ServiceBRW
	case MsgPingReq:
		return ServicePing
	}
	return ServiceDebug
}

// Batch operations (BATCH request Opc).
const (
	BatchRun   = 1
	BatchStop  = 2
	BatchQuery = 3
)

// BRW operations and check modes (BRW request and TEST bodies).
const (
	BRWRead  = 1
	BRWWrite = 2

	CheckNone   = 0
	CheckSimple = 1
	CheckFull   = 2
)

// Decoder errors, matched with errors.Is.
var (
	ErrShort      = errors.New("selftest: message too short")
	ErrBadMagic   = errors.New("selftest: bad magic")
	ErrBadVersion = errors.New("selftest: bad version")
	ErrBadType    = errors.New("selftest: unknown message type")
	ErrBadField   = errors.New("selftest: bad field")
)

// SID identifies a session (lst_sid): the console's NID and a stamp
// chosen when the session was created.
type SID struct {
	NID   lnetwire.NID
	Stamp uint64
}

// IsZero reports whether sid names no session.
func (s SID) IsZero() bool { return s == SID{} }

// String prints "stamp@console-nid".
func (s SID) String() string { return fmt.Sprintf("%x@%v", s.Stamp, s.NID) }

// TestBody is the body of a TEST request: one test of a batch, as seen
// by one node (a client gets its servers; a server gets none).
type TestBody struct {
	Index       uint32    // test number within the batch, from 1
	Service     ServiceID // ServiceBRW or ServicePing
	Client      bool      // this node runs the test against Servers
	Concurrency uint32    // outstanding RPCs per client
	Loop        int32     // RPCs per client; -1 until stopped
	BRWOp       uint32    // BRWRead or BRWWrite
	Size        uint32    // bytes per brw RPC
	Check       uint32    // CheckNone, CheckSimple, CheckFull
	Servers     []lnetwire.ProcessID
}

// Counters are a node's statistics (STAT reply): the selftest RPC layer
// (srpc_counters), the test framework (sfw_counters) and the node's LNet
// counters (lnet_counters_common).
type Counters struct {
	RPCsSent      uint64 `json:"rpcs_sent"`      // test and framework requests sent
	RPCsRcvd      uint64 `json:"rpcs_rcvd"`      // requests received
	RPCsDropped   uint64 `json:"rpcs_dropped"`   // requests dropped (undecodable, no buffer)
	RPCsExpired   uint64 `json:"rpcs_expired"`   // requests whose reply did not come in time
	Errors        uint64 `json:"errors"`         // RPCs that failed, either side
	BulkGet       uint64 `json:"bulk_get"`       // bytes fetched with GET (brw write, server)
	BulkPut       uint64 `json:"bulk_put"`       // bytes sent with PUT (brw read, server)
	BRWErrors     uint64 `json:"brw_errors"`     // brw RPCs that failed or whose data mismatched
	PingErrors    uint64 `json:"ping_errors"`    // ping RPCs that failed
	ActiveBatches uint64 `json:"active_batches"` // batches running on the node
	TestRPCs      uint64 `json:"test_rpcs"`      // test RPCs completed successfully (client)
	TestBytes     uint64 `json:"test_bytes"`     // brw payload bytes moved by them (client)

	LNetMsgsAlloc  uint64 `json:"lnet_msgs_alloc"`
	LNetErrors     uint64 `json:"lnet_errors"`
	LNetSendCount  uint64 `json:"lnet_send_count"`
	LNetRecvCount  uint64 `json:"lnet_recv_count"`
	LNetDropCount  uint64 `json:"lnet_drop_count"`
	LNetSendLength uint64 `json:"lnet_send_length"`
	LNetRecvLength uint64 `json:"lnet_recv_length"`
	LNetDropLength uint64 `json:"lnet_drop_length"`
}

// fields lists the counters in wire order.
func (c *Counters) fields() [countersN]*uint64 {
	return [countersN]*uint64{&c.RPCsSent, &c.RPCsRcvd, &c.RPCsDropped, &c.RPCsExpired, &c.Errors,
		&c.BulkGet, &c.BulkPut, &c.BRWErrors, &c.PingErrors, &c.ActiveBatches, &c.TestRPCs, &c.TestBytes,
		&c.LNetMsgsAlloc, &c.LNetErrors, &c.LNetSendCount, &c.LNetRecvCount, &c.LNetDropCount,
		&c.LNetSendLength, &c.LNetRecvLength, &c.LNetDropLength}
}

const countersN = 20

// Msg is one SRPC message. Type selects which fields are on the wire;
// the others are ignored by Append and zero after Parse.
type Msg struct {
	Type  MsgType
	Feats uint32 // session features (msg_ses_feats)

	// Request prefix: where the requester's reply buffer and bulk MD are
	// (match bits on RDMAPortal; BulkID 0 when there is no bulk), and the
	// session the request belongs to.
	RpyID  uint64
	BulkID uint64
	// Reply prefix: Status is a positive errno (0: success).
	Status uint32
	// SID is in both prefixes.
	SID SID

	Name    string // MKSN request/reply: session name
	Timeout uint32 // MKSN request/reply: session timeout in seconds (0: never)
	Force   bool   // MKSN request: leave another session first

	BID     uint64 // BATCH and TEST requests: batch id
	Opc     uint32 // BATCH request: BatchRun, BatchStop, BatchQuery
	TestIdx uint32 // BATCH request: test (0: all)
	Active  uint32 // BATCH reply: test instances still running

	Test     TestBody // TEST request
	Counters Counters // STAT reply

	BRWOp    uint32 // BRW request
	BulkLen  uint32 // BRW request: bulk bytes
	Check    uint32 // BRW request
	PingSeq  uint32 // PING request/reply
	PingTime uint64 // PING request: sender's clock, ns
}

// Body sizes (after the header).
const (
	reqPrefix  = 32 // rpyid, bulkid, sid
	repPrefix  = 24 // status, pad, sid
	mksnReq    = reqPrefix + 8 + NameSize
	mksnRep    = repPrefix + 8 + NameSize
	batchReq   = reqPrefix + 8 + 16
	batchRep   = repPrefix + 8
	statRep    = repPrefix + 8*countersN
	testFixed  = 8 + 40
	serverSize = 16
	brwReq     = reqPrefix + 16
	pingReq    = reqPrefix + 16
	pingRep    = repPrefix + 8
)

var le = binary.LittleEndian

// Len returns the encoded size of m.
func (m *Msg) Len() int {
	n := HdrSize
	switch m.Type {
	case MsgMakeSessReq:
		n += mksnReq
	case MsgMakeSessRep:
		n += mksnRep
	case MsgBatchReq:
		n += batchReq
	case MsgBatchRep:
		n += batchRep
	case MsgStatRep:
		n += statRep
	case MsgTestReq:
		n += reqPrefix + testFixed + serverSize*len(m.Test.Servers)
	case MsgBRWReq:
		n += brwReq
	case MsgPingReq:
		n += pingReq
	case MsgPingRep:
		n += pingRep
	default:
		if m.Type.IsReply() {
			n += repPrefix
		} else {
			n += reqPrefix
		}
	}
	return n
}

func appendName(b []byte, s string) []byte {
	var n [NameSize]byte
	copy(n[:NameSize-1], s)
	return append(b, n[:]...)
}

// parseName reads a NUL-padded name; the last byte is always the
// terminator, so at most NameSize-1 bytes count.
func parseName(b []byte) string {
	b = b[:NameSize-1]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func boolU32(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

// Append appends the encoding of m to b.
func (m *Msg) Append(b []byte) []byte {
	b = le.AppendUint32(b, Magic)
	b = le.AppendUint32(b, Version)
	b = le.AppendUint32(b, uint32(m.Type))
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, m.Feats)
	if m.Type.IsReply() {
		b = le.AppendUint32(b, m.Status)
		b = le.AppendUint32(b, 0)
	} else {
		b = le.AppendUint64(b, m.RpyID)
		b = le.AppendUint64(b, m.BulkID)
	}
	b = le.AppendUint64(b, uint64(m.SID.NID))
	b = le.AppendUint64(b, m.SID.Stamp)
	switch m.Type {
	case MsgMakeSessReq:
		b = le.AppendUint32(b, m.Timeout)
		b = le.AppendUint32(b, boolU32(m.Force))
		b = appendName(b, m.Name)
	case MsgMakeSessRep:
		b = le.AppendUint32(b, m.Timeout)
		b = le.AppendUint32(b, 0)
		b = appendName(b, m.Name)
	case MsgBatchReq:
		b = le.AppendUint64(b, m.BID)
		b = le.AppendUint32(b, m.Opc)
		b = le.AppendUint32(b, m.TestIdx)
		b = le.AppendUint64(b, 0)
	case MsgBatchRep:
		b = le.AppendUint32(b, m.Active)
		b = le.AppendUint32(b, 0)
	case MsgStatRep:
		for _, p := range m.Counters.fields() {
			b = le.AppendUint64(b, *p)
		}
	case MsgTestReq:
		t := &m.Test
		b = le.AppendUint64(b, m.BID)
		b = le.AppendUint32(b, t.Index)
		b = le.AppendUint32(b, uint32(t.Service))
		b = le.AppendUint32(b, boolU32(t.Client))
		b = le.AppendUint32(b, t.Concurrency)
		b = le.AppendUint32(b, uint32(t.Loop))
		b = le.AppendUint32(b, t.BRWOp)
		b = le.AppendUint32(b, t.Size)
		b = le.AppendUint32(b, t.Check)
		b = le.AppendUint32(b, uint32(len(t.Servers)))
		b = le.AppendUint32(b, 0)
		for _, s := range t.Servers {
			b = le.AppendUint64(b, uint64(s.NID))
			b = le.AppendUint32(b, uint32(s.PID))
			b = le.AppendUint32(b, 0)
		}
	case MsgBRWReq:
		b = le.AppendUint32(b, m.BRWOp)
		b = le.AppendUint32(b, m.BulkLen)
		b = le.AppendUint32(b, m.Check)
		b = le.AppendUint32(b, 0)
	case MsgPingReq:
		b = le.AppendUint32(b, PingMagic)
		b = le.AppendUint32(b, m.PingSeq)
		b = le.AppendUint64(b, m.PingTime)
	case MsgPingRep:
		b = le.AppendUint32(b, PingMagic)
		b = le.AppendUint32(b, m.PingSeq)
	}
	return b
}

// ParseMsg decodes one message. Trailing bytes are ignored, as a
// request buffer may be larger than the message.
func ParseMsg(b []byte, m *Msg) error {
	*m = Msg{}
	if len(b) < HdrSize {
		return fmt.Errorf("%w: %d bytes, header needs %d", ErrShort, len(b), HdrSize)
	}
	if magic := le.Uint32(b); magic != Magic {
		return fmt.Errorf("%w: %#x", ErrBadMagic, magic)
	}
	if v := le.Uint32(b[4:]); v != Version {
		return fmt.Errorf("%w: %d", ErrBadVersion, v)
	}
	m.Type = MsgType(le.Uint32(b[8:]))
	if _, ok := msgNames[m.Type]; !ok {
		return fmt.Errorf("%w: %d", ErrBadType, uint32(m.Type))
	}
	m.Feats = le.Uint32(b[20:])
	if len(b) < m.Len() {
		return fmt.Errorf("%w: %v needs %d bytes, have %d", ErrShort, m.Type, m.Len(), len(b))
	}
	p := b[HdrSize:]
	if m.Type.IsReply() {
		m.Status = le.Uint32(p)
	} else {
		m.RpyID = le.Uint64(p)
		m.BulkID = le.Uint64(p[8:])
	}
	sid := p[16:]
	if m.Type.IsReply() {
		sid = p[8:]
	}
	m.SID = SID{NID: lnetwire.NID(le.Uint64(sid)), Stamp: le.Uint64(sid[8:])}
	p = sid[16:]
	switch m.Type {
	case MsgMakeSessReq:
		m.Timeout = le.Uint32(p)
		m.Force = le.Uint32(p[4:]) != 0
		m.Name = parseName(p[8 : 8+NameSize])
	case MsgMakeSessRep:
		m.Timeout = le.Uint32(p)
		m.Name = parseName(p[8 : 8+NameSize])
	case MsgBatchReq:
		m.BID = le.Uint64(p)
		m.Opc = le.Uint32(p[8:])
		m.TestIdx = le.Uint32(p[12:])
	case MsgBatchRep:
		m.Active = le.Uint32(p)
	case MsgStatRep:
		for i, f := range m.Counters.fields() {
			*f = le.Uint64(p[8*i:])
		}
	case MsgTestReq:
		t := &m.Test
		m.BID = le.Uint64(p)
		t.Index = le.Uint32(p[8:])
		t.Service = ServiceID(le.Uint32(p[12:]))
		t.Client = le.Uint32(p[16:]) != 0
		t.Concurrency = le.Uint32(p[20:])
		t.Loop = int32(le.Uint32(p[24:]))
		t.BRWOp = le.Uint32(p[28:])
		t.Size = le.Uint32(p[32:])
		t.Check = le.Uint32(p[36:])
		n := int(le.Uint32(p[40:]))
		p = p[testFixed:]
		if n > MaxServers || len(p) < n*serverSize {
			return fmt.Errorf("%w: TEST request with %d servers in %d bytes", ErrShort, n, len(p))
		}
		if n > 0 {
			t.Servers = make([]lnetwire.ProcessID, n)
		}
		for i := range t.Servers {
			t.Servers[i] = lnetwire.ProcessID{NID: lnetwire.NID(le.Uint64(p[16*i:])), PID: lnetwire.PID(le.Uint32(p[16*i+8:]))}
		}
	case MsgBRWReq:
		m.BRWOp = le.Uint32(p)
		m.BulkLen = le.Uint32(p[4:])
		m.Check = le.Uint32(p[8:])
	case MsgPingReq, MsgPingRep:
		if mg := le.Uint32(p); mg != PingMagic {
			return fmt.Errorf("%w: ping magic %#x", ErrBadMagic, mg)
		}
		m.PingSeq = le.Uint32(p[4:])
		if m.Type == MsgPingReq {
			m.PingTime = le.Uint64(p[8:])
		}
	}
	return nil
}
