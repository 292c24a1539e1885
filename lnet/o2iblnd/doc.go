// Package o2iblnd is the LNet InfiniBand network driver (net type o2ib,
// NIDs like 192.168.77.1@o2ib), byte-compatible with Lustre's ko2iblnd
// (lnet-wire.md §6), running over softib verbs and the RDMA CM (any
// verbs provider; the tests use rxe, Soft-RoCE).
//
// # Use
//
//	dev, _ := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
//	cm := rdmacm.NewManager(rdmacm.Config{})
//	cm.AddDevice(dev)
//	in, _ := lnet.New(lnet.Config{
//		LNDs: []lnd.LND{o2iblnd.New(o2iblnd.Config{CM: cm})},
//		Nets: []lnet.NetConfig{{Net: lnetwire.MakeNet(lnetwire.O2IBLND, 0), Addr: ipv4}},
//	})
//
// Tunables carry ko2iblnd's names and defaults (Config; an NI may carry
// its own Config in lnd.NI.LNDConfig): service 987, timeout 50 s,
// keepalive 100 s, credits 256 and peer_credits 8 (DefaultTunables),
// peer_credits_hiw, concurrent_sends, ntx 512, cksum, retry_count 5,
// rnr_retry_count 6, conns_per_peer 1 (or the NI's tunable), wrq_sge
// (softib's default 16, ko2iblnd's 2; more than the device's max_sge is
// refused), fmr_pool_size 512, fmr_flush_trigger 384 and fmr_cache 1
// (the MR cache below), tos (the active side's CM ID TOS: the traffic
// class of both sides' packets) and ib_mtu (0 or the device's active
// MTU, the only path MTU softib's RDMA CM sets: others are refused).
// map_on_demand, obsolete in Lustre 2.17, is what o2iblnd always does.
//
// # Connection setup (cm.go)
//
// A peer with no connection gets conns_per_peer connection attempts at
// once (kiblnd_launch_tx); new messages go round-robin over the
// established ones (kiblnd_get_conn_locked), so several QPs, and with
// them the device's receive shards, carry one peer's traffic, while a
// transfer's PUT_ACK/PUT_DONE/GET_DONE stay on the connection of its
// request. As in ko2iblnd the passive side accepts however many
// connections the peer opens, opens none of its own while one is up, and
// a dropped connection is not replaced while another is up. A round of
// attempts that were all rejected for a fixable reason is retried once
// the last of them is destroyed; none is retried while one is up.
//
// The active side resolves the peer's IPv4 address and route through the
// RDMA CM, creates the CQ, the RC QP and 2Q+2 receive buffers of 4 KiB
// (Q = peer_credits), and connects to port 987 of RDMA_PS_TCP (service ID
// 0x10603DB) from a privileged source port with the 56-byte CONNREQ as
// private data: the whole rdma_connect allowance. Connection parameters:
// responder resources and initiator depth 0 (o2iblnd never issues RDMA
// READ), flow control, retry 5, RNR retry 6. The passive side vets the
// CONNREQ (vetConnReq: type, service, destination NID, stale dststamp,
// queue depth, max_frags, message size), resolves races (the higher NID
// wins, up to 20 times), closes the connections of a rebooted peer and
// answers with a CONNACK in the REP private data, or a 24-byte kib_rej in
// a consumer-defined REJ. The active side retries after RACE, STALE (with
// the peer's incarnation; connections to the old one close at once),
// UNCOMPAT (with the peer's version), MSG_QUEUE_SIZE and RDMA_FRAGS (with
// the peer's advertised queue depth or max_frags), but only once the
// failed connection is destroyed; after 10 consecutive reconnects it waits
// a second. It also retries after a CM-level STALE_CONN: a restarted peer
// process reuses its address, CA GUID and QPNs, so its first QPN can be
// one an old connection still holds; the CM that notices (REJ of the REQ,
// or a refused REP) disconnects the old connection, whose txs fail with
// error events, and the retry's new QP has a new QPN. A connection to a
// new incarnation of a peer is counted (Stats.PeerReboots) and logged.
// Incarnations are the NI's start time in µs; every received message must
// carry the expected source and destination NIDs and incarnations, or the
// connection closes (stale).
//
// # Flow control (credits.go)
//
// Flow is a pure state machine: send credits (Q), reserved credits for
// the replies to PUT_REQ/GET_REQ, outstanding credits returned
// piggybacked on every message or by a NOOP at the high-water mark
// (kiblnd_need_noop), the no-credit queue, the concurrent_sends cap, V1's
// rules (Q = 8, NOOPs consume credits, the last credit is kept for a
// NOOP), and overflow detection (a protocol error that closes the
// connection). It is tested alone, including a property test of credit
// conservation and receive-buffer safety under random interleavings.
//
// # Data movement (conn.go)
//
// Messages up to 120+3976 bytes go as IMMEDIATE (LNet header + payload).
// Larger PUT/REPLY payloads: PUT_REQ → the sink matches and answers
// PUT_ACK with a descriptor of its buffer (or PUT_NAK) → RDMA WRITEs →
// PUT_DONE. GETs whose reply does not fit a message: GET_REQ with a
// descriptor of the reply buffer → the responder RDMA-WRITEs the data and
// sends GET_DONE (or -ENODATA when nothing matched). RDMA WRITEs are
// unsignaled and posted in one batch with the completion message behind
// them: RC ordering makes the data land first.
//
// Memory registration: every NI registers its tx message buffers once
// (one MR over ntx × 4 KiB) and each connection its receive buffers. LNet
// buffers are registered on first use and cached (Lustre's FMR cache,
// bounded by MRCacheSize, least recently used idle entries evicted, at
// most MRFlushTrigger of them idle; NoMRCache registers per transfer),
// keyed by the fragment's address and length: MDs are usually reused, so
// a steady-state transfer registers nothing. A sink descriptor carries a
// single rkey, so a sink spanning several MD fragments is registered
// through a fast-registration MR over its pages (Lustre's FastReg pool:
// REG_MR posted ahead of the PUT_ACK or GET_REQ that carries the key, the
// MR deregistered when the transfer is done) when the fragments map onto
// pages (inner boundaries on 4 KiB boundaries, as Lustre's page kiovs
// are); otherwise it is staged through a registered 1 MiB bounce buffer
// and copied into place when the transfer completes. Sources need no
// copy: each RDMA WRITE covers one sink fragment and gathers up to
// wrq_sge source fragments (kiblnd_init_rdma), so a 1 MiB source of 256
// pages moves in 16 WRITEs, not 256.
//
// # Timers
//
// Every tx carries a deadline (timeout): one still queued, in flight or
// waiting for the peer's reply past it closes the connection and fails
// its messages with lnd.ErrTimeout. A NOOP is sent after keepalive
// without a send. Connection setup is bounded by max(5 s, timeout/4).
// The driver reports peers alive when a connection comes up and dead
// when the last one goes (NotifyPeer), and answers Query with the time
// the peer was last heard from.
//
// # Concurrency
//
// One goroutine per NI handles RDMA CM events (connd), one per
// connection its completions (a verbs.CQWorker), one per NI runs the
// timers (reaper). Connection state is guarded by the connection's
// mutex, peers by the driver's; the core's Parse, Finalize and
// NotifyPeer are never called with either held.
package o2iblnd
