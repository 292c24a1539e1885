package selftest

import "softib/wire/lnetwire"

// Typed views of the message bodies (the members of srpc_msg's union).
// Each is the body slice of a Msg; offsets are within the body, as
// listed in bodyFields. Request sids and reply status/sid are on Msg.

// MksnReq is srpc_mksn_reqst: rpyid, sid, force u32 at 24, name at 28.
// It has no bulk id and no timeout: the node picks its own.
type MksnReq []byte

// MksnReq returns the MKSN request view of m.
func (m Msg) MksnReq() MksnReq { return MksnReq(m.Body()) }

// Force returns mksn_force: take the node from another session.
func (b MksnReq) Force() bool { return le.Uint32(b[24:]) != 0 }

// SetForce sets mksn_force.
func (b MksnReq) SetForce(v bool) { le.PutUint32(b[24:], boolU32(v)) }

// Name returns mksn_name, the session name.
func (b MksnReq) Name() string { return getName(b[28:]) }

// SetName sets mksn_name.
func (b MksnReq) SetName(s string) { putName(b[28:], s) }

// MksnRep is srpc_mksn_reply: status, sid, timeout u32 at 20, name at 24
// (the other session's name when the status is EBUSY).
type MksnRep []byte

// MksnRep returns the MKSN reply view of m.
func (m Msg) MksnRep() MksnRep { return MksnRep(m.Body()) }

// Timeout returns mksn_timeout: the node's session timeout, seconds.
func (b MksnRep) Timeout() uint32 { return le.Uint32(b[20:]) }

// SetTimeout sets mksn_timeout.
func (b MksnRep) SetTimeout(v uint32) { le.PutUint32(b[20:], v) }

// Name returns mksn_name.
func (b MksnRep) Name() string { return getName(b[24:]) }

// SetName sets mksn_name.
func (b MksnRep) SetName(s string) { putName(b[24:], s) }

// DebugRep is srpc_debug_reply: status, sid, timeout u32 at 20, nbatch
// u32 at 24, name at 28. (srpc_debug_reqst: rpyid, sid, flags u32 at 24.)
type DebugRep []byte

// DebugRep returns the DEBUG reply view of m.
func (m Msg) DebugRep() DebugRep { return DebugRep(m.Body()) }

// Timeout returns dbg_timeout.
func (b DebugRep) Timeout() uint32 { return le.Uint32(b[20:]) }

// SetTimeout sets dbg_timeout.
func (b DebugRep) SetTimeout(v uint32) { le.PutUint32(b[20:], v) }

// NBatch returns dbg_nbatch.
func (b DebugRep) NBatch() uint32 { return le.Uint32(b[24:]) }

// SetNBatch sets dbg_nbatch.
func (b DebugRep) SetNBatch(v uint32) { le.PutUint32(b[24:], v) }

// Name returns dbg_name.
func (b DebugRep) Name() string { return getName(b[28:]) }

// SetName sets dbg_name.
func (b DebugRep) SetName(s string) { putName(b[28:], s) }

// BatchReq is srpc_batch_reqst: rpyid, sid, bid u64 at 24, opc u32 at
// 32, testidx u32 at 36, arg u32 at 40 (stop: force; run: timeout).
type BatchReq []byte

// BatchReq returns the BATCH request view of m.
func (m Msg) BatchReq() BatchReq { return BatchReq(m.Body()) }

// BID returns bar_bid.
func (b BatchReq) BID() uint64 { return le.Uint64(b[24:]) }

// SetBID sets bar_bid.
func (b BatchReq) SetBID(v uint64) { le.PutUint64(b[24:], v) }

// Opc returns bar_opc (BatchRun, BatchStop, BatchQuery).
func (b BatchReq) Opc() uint32 { return le.Uint32(b[32:]) }

// SetOpc sets bar_opc.
func (b BatchReq) SetOpc(v uint32) { le.PutUint32(b[32:], v) }

// TestIdx returns bar_testidx (query: 0 the batch, else test n from 1).
func (b BatchReq) TestIdx() uint32 { return le.Uint32(b[36:]) }

// SetTestIdx sets bar_testidx.
func (b BatchReq) SetTestIdx(v uint32) { le.PutUint32(b[36:], v) }

// Arg returns bar_arg.
func (b BatchReq) Arg() uint32 { return le.Uint32(b[40:]) }

// SetArg sets bar_arg.
func (b BatchReq) SetArg(v uint32) { le.PutUint32(b[40:], v) }

// BatchRep is srpc_batch_reply: status, sid, active u32 at 20, time u32 at 24.
type BatchRep []byte

// BatchRep returns the BATCH reply view of m.
func (m Msg) BatchRep() BatchRep { return BatchRep(m.Body()) }

// Active returns bar_active: active test instances (or units of one test).
func (b BatchRep) Active() uint32 { return le.Uint32(b[20:]) }

// SetActive sets bar_active.
func (b BatchRep) SetActive(v uint32) { le.PutUint32(b[20:], v) }

// StatRep is srpc_stat_reply: status, sid, then sfw_counters at 20,
// srpc_counters at 40 and lnet_counters_common at 76 (see Counters).
// (srpc_stat_reqst: rpyid, sid, type u32 at 24, always 0.)
type StatRep []byte

// StatRep returns the STAT reply view of m.
func (m Msg) StatRep() StatRep { return StatRep(m.Body()) }

// Counters decodes the three counter blocks.
func (b StatRep) Counters() Counters {
	var c Counters
	for i, p := range c.u32s() {
		*p = le.Uint32(b[counterU32Off[i]:])
	}
	for i, p := range c.u64s() {
		*p = le.Uint64(b[counterU64Off[i]:])
	}
	return c
}

// SetCounters encodes the three counter blocks.
func (b StatRep) SetCounters(c *Counters) {
	for i, p := range c.u32s() {
		le.PutUint32(b[counterU32Off[i]:], *p)
	}
	for i, p := range c.u64s() {
		le.PutUint64(b[counterU64Off[i]:], *p)
	}
}

var (
	counterU32Off = [...]int{20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 76, 80, 84, 88, 92, 96, 100}
	counterU64Off = [...]int{60, 68, 104, 112, 120, 128}
)

// TestReq is srpc_test_reqst: rpyid, bulkid, sid at 16, bid u64 at 32,
// service u32 at 40, loop u32 at 44, concur u32 at 48, is_client u8 at
// 52, stop_onerr u8 at 53, ndest u32 at 54, and the test parameters at
// 58: test_ping_req {size, flags u32}, test_bulk_req (v0: opc, npg,
// flags u32) or, with FeatBulkLen, test_bulk_req_v1 {opc u16, flags u16,
// len u32, offset u32}. A client's destinations travel as bulk: the
// node GETs ndest lnet_process_id_packed from the console's MD bulkid.
type TestReq []byte

// TestReq returns the TEST request view of m.
func (m Msg) TestReq() TestReq { return TestReq(m.Body()) }

// BulkID returns tsr_bulkid.
func (b TestReq) BulkID() uint64 { return le.Uint64(b[8:]) }

// SetBulkID sets tsr_bulkid.
func (b TestReq) SetBulkID(v uint64) { le.PutUint64(b[8:], v) }

// BID returns tsr_bid.
func (b TestReq) BID() uint64 { return le.Uint64(b[32:]) }

// SetBID sets tsr_bid.
func (b TestReq) SetBID(v uint64) { le.PutUint64(b[32:], v) }

// Service returns tsr_service (ServiceBRW or ServicePing).
func (b TestReq) Service() ServiceID { return ServiceID(le.Uint32(b[40:])) }

// SetService sets tsr_service.
func (b TestReq) SetService(v ServiceID) { le.PutUint32(b[40:], uint32(v)) }

// Loop returns tsr_loop: RPCs per test unit (-1: until stopped); for a
// server, the buffers it should expect.
func (b TestReq) Loop() int32 { return int32(le.Uint32(b[44:])) }

// SetLoop sets tsr_loop.
func (b TestReq) SetLoop(v int32) { le.PutUint32(b[44:], uint32(v)) }

// Concur returns tsr_concur: RPCs in flight per destination.
func (b TestReq) Concur() uint32 { return le.Uint32(b[48:]) }

// SetConcur sets tsr_concur.
func (b TestReq) SetConcur(v uint32) { le.PutUint32(b[48:], v) }

// IsClient returns tsr_is_client.
func (b TestReq) IsClient() bool { return b[52] != 0 }

// SetIsClient sets tsr_is_client.
func (b TestReq) SetIsClient(v bool) { b[52] = byte(boolU32(v)) }

// StopOnErr returns tsr_stop_onerr: a unit stops at its first error.
func (b TestReq) StopOnErr() bool { return b[53] != 0 }

// SetStopOnErr sets tsr_stop_onerr.
func (b TestReq) SetStopOnErr(v bool) { b[53] = byte(boolU32(v)) }

// NDest returns tsr_ndest.
func (b TestReq) NDest() uint32 { return le.Uint32(b[54:]) }

// SetNDest sets tsr_ndest.
func (b TestReq) SetNDest(v uint32) { le.PutUint32(b[54:], v) }

// Ping returns test_ping_req {png_size, png_flags}.
func (b TestReq) Ping() (size, flags uint32) { return le.Uint32(b[58:]), le.Uint32(b[62:]) }

// SetPing sets test_ping_req.
func (b TestReq) SetPing(size, flags uint32) { le.PutUint32(b[58:], size); le.PutUint32(b[62:], flags) }

// BulkV0 returns test_bulk_req {blk_opc, blk_npg, blk_flags}.
func (b TestReq) BulkV0() (opc, npg, flags uint32) {
	return le.Uint32(b[58:]), le.Uint32(b[62:]), le.Uint32(b[66:])
}

// SetBulkV0 sets test_bulk_req.
func (b TestReq) SetBulkV0(opc, npg, flags uint32) {
	le.PutUint32(b[58:], opc)
	le.PutUint32(b[62:], npg)
	le.PutUint32(b[66:], flags)
}

// BulkV1 returns test_bulk_req_v1 {blk_opc u16, blk_flags u16, blk_len,
// blk_offset}.
func (b TestReq) BulkV1() (opc, flags uint16, length, offset uint32) {
	return le.Uint16(b[58:]), le.Uint16(b[60:]), le.Uint32(b[62:]), le.Uint32(b[66:])
}

// SetBulkV1 sets test_bulk_req_v1.
func (b TestReq) SetBulkV1(opc, flags uint16, length, offset uint32) {
	le.PutUint16(b[58:], opc)
	le.PutUint16(b[60:], flags)
	le.PutUint32(b[62:], length)
	le.PutUint32(b[66:], offset)
}

// PingReq is srpc_ping_reqst: rpyid, magic u32 at 8, seq u32 at 12,
// time_sec u64 at 16, time_nsec u64 at 24.
type PingReq []byte

// PingReq returns the PING request view of m.
func (m Msg) PingReq() PingReq { return PingReq(m.Body()) }

// Magic returns pnr_magic (PingMagic).
func (b PingReq) Magic() uint32 { return le.Uint32(b[8:]) }

// Seq returns pnr_seq.
func (b PingReq) Seq() uint32 { return le.Uint32(b[12:]) }

// Time returns pnr_time_sec and pnr_time_nsec.
func (b PingReq) Time() (sec, nsec uint64) { return le.Uint64(b[16:]), le.Uint64(b[24:]) }

// Set writes magic, seq and the send time.
func (b PingReq) Set(magic, seq uint32, sec, nsec uint64) {
	le.PutUint32(b[8:], magic)
	le.PutUint32(b[12:], seq)
	le.PutUint64(b[16:], sec)
	le.PutUint64(b[24:], nsec)
}

// PingRep is srpc_ping_reply: status, magic u32 at 4, seq u32 at 8.
type PingRep []byte

// PingRep returns the PING reply view of m.
func (m Msg) PingRep() PingRep { return PingRep(m.Body()) }

// Magic returns pnr_magic.
func (b PingRep) Magic() uint32 { return le.Uint32(b[4:]) }

// Seq returns pnr_seq.
func (b PingRep) Seq() uint32 { return le.Uint32(b[8:]) }

// Set writes magic and seq.
func (b PingRep) Set(magic, seq uint32) { le.PutUint32(b[4:], magic); le.PutUint32(b[8:], seq) }

// BRWReq is srpc_brw_reqst: rpyid, bulkid u64 at 8, rw u32 at 16, len
// u32 at 20, flags u32 at 24 (the check). The reply is status alone.
type BRWReq []byte

// BRWReq returns the BRW request view of m.
func (m Msg) BRWReq() BRWReq { return BRWReq(m.Body()) }

// BulkID returns brw_bulkid.
func (b BRWReq) BulkID() uint64 { return le.Uint64(b[8:]) }

// SetBulkID sets brw_bulkid.
func (b BRWReq) SetBulkID(v uint64) { le.PutUint64(b[8:], v) }

// RW returns brw_rw (BRWRead, BRWWrite).
func (b BRWReq) RW() uint32 { return le.Uint32(b[16:]) }

// Len returns brw_len, the bulk bytes.
func (b BRWReq) Len() uint32 { return le.Uint32(b[20:]) }

// Flags returns brw_flags (CheckNone, CheckSimple, CheckFull).
func (b BRWReq) Flags() uint32 { return le.Uint32(b[24:]) }

// Set writes rw, len and flags.
func (b BRWReq) Set(rw, length, flags uint32) {
	le.PutUint32(b[16:], rw)
	le.PutUint32(b[20:], length)
	le.PutUint32(b[24:], flags)
}

// PutDest writes destination i of a TEST request's bulk list: IDsPerPage
// lnet_process_id_packed per 4 KiB page, from the start of each page.
func PutDest(bulk []byte, i int, id lnetwire.ProcessID) {
	off := i/IDsPerPage*pageSize + i%IDsPerPage*ProcessIDSize
	le.PutUint64(bulk[off:], uint64(id.NID))
	le.PutUint32(bulk[off+8:], uint32(id.PID))
}

// Dest reads destination i of a bulk list; swapped says the console's
// byte order is the other one.
func Dest(bulk []byte, i int, swapped bool) (lnetwire.ProcessID, bool) {
	off := i/IDsPerPage*pageSize + i%IDsPerPage*ProcessIDSize
	if off+ProcessIDSize > len(bulk) {
		return lnetwire.ProcessID{}, false
	}
	nid, pid := le.Uint64(bulk[off:]), le.Uint32(bulk[off+8:])
	if swapped {
		nid, pid = swap64(nid), swap32(pid)
	}
	return lnetwire.ProcessID{NID: lnetwire.NID(nid), PID: lnetwire.PID(pid)}, true
}

// DestListLen is the bulk size of n destinations (the length the kernel
// console's MD has with FeatBulkLen: n packed ids, page layout aside).
func DestListLen(n int) int {
	if n == 0 {
		return 0
	}
	return (n-1)/IDsPerPage*pageSize + ((n-1)%IDsPerPage+1)*ProcessIDSize
}

func boolU32(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}
