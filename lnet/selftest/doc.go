// Package selftest is softib's lnet_selftest: the selftest service every
// LNet node runs (lnetd starts one on its instance) and the console that
// drives it (`softib lst`).
//
// # Model
//
// As in Lustre, a console creates a session, joins nodes to it in named
// groups, adds tests to named batches, runs and stops batches, and reads
// the nodes' counters. A test has a client group and a server group; the
// console tells each server about the test, then each client which
// servers it talks to (Dist, --distribute a:b) with how many RPCs in
// flight (--concurrency) and how many in total (--loop; -1 runs until
// stopped). Clients issue the RPCs themselves, node to node; the console
// only steers and samples.
//
// Tests:
//
//   - brw read|write size=1..1M check=none|simple|full: the client sends
//     a BRW request naming a bulk MD; for a write the server GETs the
//     client's buffer, for a read it PUTs into it. With check=simple a
//     16-byte header (magic, seed) starts every 4 KiB page; with
//     check=full every 8-byte word depends on the seed and its position.
//     The seed is the request's bulk match bits, so stale or shifted data
//     fails too. Servers verify writes (status EBADMSG on mismatch),
//     clients verify reads.
//   - ping: a small request and reply.
//
// # Wire protocol (SRPC)
//
// Portals and magics follow Lustre's lnet_selftest (lnet-wire.md §8.8):
// requests go to FrameworkPortal (51, console services) or RequestPortal
// (50, brw and ping) with the service id as match bits; the requester's
// reply buffer and bulk MD wait on RDMAPortal (52) under the match bits
// RpyID and BulkID carried in the request, matching only the server's
// process id. Every message starts with a 24-byte little-endian header
//
//	magic 0xEEB0F00D | version 1 | type | reserved ×2 | session features
//
// then, for requests, rpyid u64, bulkid u64, sid {nid u64, stamp u64};
// for replies, status u32 (errno), pad u32, sid. The type numbers are
// Lustre's (MKSN 0/1, RMSN 2/3, BATCH 4/5, STAT 6/7, TEST 8/9, BRW
// 12/13, PING 14/15); the bodies are softib's own, documented on Msg and
// laid out by Msg.Append: so softib nodes and consoles interoperate with
// each other, not with Lustre's kernel module. Ping bodies carry
// PingMagic. Names are 32 bytes, NUL padded.
//
// Nodes receive requests into two MDs per portal that take messages at a
// running offset (MDMaxSize) and are re-attached when full; the portals
// are lazy, so nothing is dropped in between. Each request is copied out
// and handled on its own goroutine.
//
// # Sessions and where the console state lives
//
// A node belongs to at most one session (SID: console NID + random
// stamp). MKSN from another console fails with EBUSY unless forced
// (new_session --force), which stops the old session's tests. A node
// ends a session the console has not contacted for its timeout (new_session
// --timeout, default 300 s; 0 never): every framework RPC, stat included,
// restarts that clock. Counters reset when a node joins a session.
//
// The console keeps its session in a JSON file (State), so each `softib
// lst` invocation is a separate process, like Lustre's lst whose session
// lives in the console node's kernel: $XDG_RUNTIME_DIR/softib/lst-
// $LST_SESSION.json (else /tmp/softib-$UID/...), or LST_SESSION_FILE, or
// --session. Each invocation starts a short-lived LNet node of its own
// (ConsoleNode: one tcp NI on --if, no acceptor; replies come back over
// its own connections) and talks SRPC to the nodes directly, so lst needs
// no daemon on the console host. When lst runs on a node, its address is
// that node's NID, which a second LNet instance cannot share: lst then
// sends the same requests through the local lnetd (control-socket op
// ProxyOp, served by Service.ProxyCall on the daemon's instance); the
// choice (or --socket) is kept in the session file. `lst quick` does
// the whole cycle in one process and exits 1 on any RPC error, data
// mismatch or unreachable node.
//
// # Counters
//
// STAT returns Counters: the selftest RPC layer (sent, received,
// dropped, expired, errors, bulk bytes), the framework (brw/ping errors,
// active batches, completed test RPCs and bytes) and the node's LNet
// counters. `lst stat` turns two samples into lst's blocks ("[LNet Rates
// of G]" messages/s and "[LNet Bandwidth of G]" MiB/s, average, minimum
// and maximum over the group's nodes) plus softib's "[Selftest RPCs of
// G]" totals; --json prints the same as JSON lines.
//
// The service is LND-agnostic: tests between nodes run over whatever
// nets the group NIDs are on (tcp now, o2ib with o2iblnd). The console
// itself dials nodes over tcp.
package selftest
