// Package selftest is softib's lnet_selftest, speaking the protocol of
// Lustre's kernel module (lnet/selftest in Lustre 2.17): the node every
// LNet instance can run (lnetd starts one on its instance), and the
// console that drives nodes (`softib lst`, tools/lst). A softib console
// drives kernel nodes and softib nodes, mixed groups included; the
// kernel's `lst` console drives softib nodes.
//
// The package takes its LNet instance from its caller and imports no
// LND: tests run over whatever nets the group NIDs are on.
//
// # Model
//
// As in Lustre, a console creates a session, joins nodes to it in named
// groups (MKSN), adds tests to named batches (TEST), runs, stops and
// queries batches (BATCH), reads the nodes' counters (STAT), asks them
// which session they are in (DEBUG) and removes them (RMSN). A test has
// a client group and a server group: the console tells each server
// about the test, then each client its destinations (--distribute a:b:
// clients in chunks of a, chunk k gets b servers from server k·b). A
// client runs --concurrency units per destination, each sending --loop
// RPCs (-1: until stopped) one after another; the units stop at their
// first error (the console sets stop_onerr, as Lustre's does). Clients
// issue the RPCs themselves, node to node; the console only steers and
// samples.
//
// Tests (brw_test.c, ping_test.c):
//
//   - brw read|write size=8..1M [off=N] check=none|simple|full: the
//     client sends a BRW request naming its bulk MD; for a write the
//     server GETs the client's buffer, for a read it PUTs into it, then
//     replies. Data is the 8-byte BRWMagic written into each page chunk
//     (chunks cut at the buffer's page offset): at the chunk's first and
//     last word with check=simple, in every word with check=full; the
//     sink first fills its buffer with BRWPoison. Servers verify writes
//     (status EBADMSG), clients verify reads.
//   - ping: PingMagic and a sequence number, echoed.
//
// # Wire protocol
//
// Every message is one struct srpc_msg, MsgSize (160) bytes: a 24-byte
// header (magic, version 1, type, two reserved words, session features)
// and a union of the request and reply bodies padded to the largest,
// the STAT reply. The kernel drops requests of any other length and
// receives replies into 160-byte buffers, so every message is sent at
// full size. Msg is a view of one; MksnReq, TestReq, StatRep … view the
// bodies (offsets on each type, checked against golden bytes printed
// from the C structs). Parse is the one decoder: it checks size, magic
// and type, and converts a message from a peer of the other byte order
// in place, field by field, as Lustre's unpack functions do.
//
// Requests go to FrameworkPortal (51: session, test, batch, stat,
// debug) or RequestPortal (50: brw, ping) with the service id as match
// bits, from and to process id 12345 (LNET_PID_LUSTRE). The requester's
// reply buffer and any bulk MD wait on RDMAPortal (52) under the match
// bits rpyid and bulkid carried in the request, matching only the
// server. A server that moves bulk does so before it replies; a failed
// bulk drops the RPC (no reply). A client's TEST request carries no
// destinations: they travel as bulk (lnet_process_id_packed, 12 bytes,
// 341 to a 4 KiB page) that the client node GETs from the console.
// Session features: LST_FEAT_BULK_LEN (brw sizes in bytes, test_bulk_req_v1)
// is the one known; a node refuses unknown ones with EPROTO, and
// framework requests whose features differ from its session's.
//
// # Sessions
//
// A node belongs to at most one session (SID: console NID + stamp). MKSN
// from another console fails with EBUSY unless forced, which aborts the
// old session's tests. MKSNs of the node's own console are counted, and
// only as many RMSNs end the session. The node ends a session no
// framework RPC touched for its timeout (Config.SessionTimeout, 100 s by
// default like the kernel's session_timeout, reported in MKSN and DEBUG
// replies; Lustre's console pings every node with DEBUG at half of it).
// The RPC counters are the node's since it started; the framework
// counters (brw and ping errors, running_ms) are the session's.
//
// # Console state
//
// Console keeps its session in State (the CLI keeps it in a JSON file
// between invocations, like Lustre's lst whose session lives in the
// console node's kernel). Console calls nodes through a Caller: its own
// LNet instance (NewConsole), or a node's lnetd (ProxyCaller, control
// op ProxyOp served by Service.ProxyCall) when the console's address is
// that node's NID. Console RPCs sent for a proxy are not counted in the
// node's own counters.
//
// # Counters
//
// STAT returns Counters as Lustre lays them out: sfw_counters,
// srpc_counters and lnet_counters_common. ComputeGroup turns two samples
// into lst stat's "[LNet Rates of G]" (messages/s) and "[LNet Bandwidth
// of G]" (MiB/s) blocks, average, minimum and maximum over the group's
// nodes, each over its own running_ms interval; RunTotals sums a run:
// the clients' requests sent, the servers' brw bytes, the errors.
package selftest
