package selftest

import "math/bits"

func swap32(v uint32) uint32 { return bits.ReverseBytes32(v) }
func swap64(v uint64) uint64 { return bits.ReverseBytes64(v) }

// FwCounters are sfw_counters: the test framework's counters of the
// node's session.
type FwCounters struct {
	RunningMS      uint32 `json:"running_ms"`      // milliseconds since the session started
	ActiveBatches  uint32 `json:"active_batches"`  // batches with tests running
	ZombieSessions uint32 `json:"zombie_sessions"` // ended sessions with tests still stopping
	BRWErrors      uint32 `json:"brw_errors"`      // brw RPCs that failed or whose data mismatched (client)
	PingErrors     uint32 `json:"ping_errors"`     // ping RPCs that failed (client)
}

// RPCCounters are srpc_counters: the node's selftest RPC layer, since
// the service started.
type RPCCounters struct {
	Errors      uint32 `json:"errors"`       // LNet events that failed
	RPCsSent    uint32 `json:"rpcs_sent"`    // requests sent
	RPCsRcvd    uint32 `json:"rpcs_rcvd"`    // requests received
	RPCsDropped uint32 `json:"rpcs_dropped"` // requests dropped or failed on the server side
	RPCsExpired uint32 `json:"rpcs_expired"` // requests whose reply did not come in time
	BulkGet     uint64 `json:"bulk_get"`     // bytes the node fetched with GET (brw write, server)
	BulkPut     uint64 `json:"bulk_put"`     // bytes the node sent with PUT (brw read, server)
}

// LNetCounters are lnet_counters_common: the node's LNet counters.
type LNetCounters struct {
	MsgsAlloc   uint32 `json:"msgs_alloc"`
	MsgsMax     uint32 `json:"msgs_max"`
	Errors      uint32 `json:"errors"`
	SendCount   uint32 `json:"send_count"`
	RecvCount   uint32 `json:"recv_count"`
	RouteCount  uint32 `json:"route_count"`
	DropCount   uint32 `json:"drop_count"`
	SendLength  uint64 `json:"send_length"`
	RecvLength  uint64 `json:"recv_length"`
	RouteLength uint64 `json:"route_length"`
	DropLength  uint64 `json:"drop_length"`
}

// Counters are a node's statistics as a STAT reply carries them.
type Counters struct {
	FW   FwCounters   `json:"sfw"`
	RPC  RPCCounters  `json:"srpc"`
	LNet LNetCounters `json:"lnet"`
}

// u32s lists the 32-bit counters in wire order (counterU32Off).
func (c *Counters) u32s() [17]*uint32 {
	f, r, l := &c.FW, &c.RPC, &c.LNet
	return [17]*uint32{&f.RunningMS, &f.ActiveBatches, &f.ZombieSessions, &f.BRWErrors, &f.PingErrors,
		&r.Errors, &r.RPCsSent, &r.RPCsRcvd, &r.RPCsDropped, &r.RPCsExpired,
		&l.MsgsAlloc, &l.MsgsMax, &l.Errors, &l.SendCount, &l.RecvCount, &l.RouteCount, &l.DropCount}
}

// u64s lists the 64-bit counters in wire order (counterU64Off).
func (c *Counters) u64s() [6]*uint64 {
	return [6]*uint64{&c.RPC.BulkGet, &c.RPC.BulkPut, &c.LNet.SendLength, &c.LNet.RecvLength,
		&c.LNet.RouteLength, &c.LNet.DropLength}
}

// TestErrors are the failed test RPCs the framework counted (brw and ping).
func (c *Counters) TestErrors() uint64 { return uint64(c.FW.BRWErrors) + uint64(c.FW.PingErrors) }
