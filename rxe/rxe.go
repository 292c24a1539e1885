// Package rxe is softib's Soft-RoCE provider: a RoCEv2 transport over UDP
// that is byte-compatible with the Linux rdma_rxe driver, behind the verbs
// API.
//
// Architecture (mirroring rxe's split by role, roce-wire.md §8/§9):
//
//	device.go     device object, GID/P_Key tables, QPN table, receive
//	              checks: roce.Parse → header checks (§9) → QP inbound ring
//	shard.go      receive shards: RxShards sockets on the device address
//	              (SO_REUSEPORT), each with its goroutine and token, and
//	              the cross-shard ordering invariant
//	requester.go  send WQEs → request packets (segmentation, window, fences,
//	              credits, max_rd_atomic)
//	responder.go  request packets → memory/receive WQEs, ACK/NAK, READ and
//	              atomic responses, duplicate replay from the resource ring
//	completer.go  ACK/NAK/response packets → send completions, retransmit
//	              and RNR timers, go-back-N
//	qp.go …       the QP: object, QP table, modify/state, post, the
//	              processing round and run loop, scheduling, tx batching
//	              (file map in engine.go)
//	locking.go    every mutex, the lock order, the scheduling invariants
//	busypoll.go   the receive token per shard: CQ pollers (busy-poll
//	              mode, or spinning) read the shards through udp.Reader
//	              (recvmmsg on Linux, the udptest queue in tests), reached
//	              from CQ.Poll through the device hook pollEmpty
//	linkmtu.go    the port's active MTU from the link of the device address
//	mr.go, cq.go  PD/MR/AH and CQ/SRQ
//	icrc.go       ICRC, pseudo-GRH and UDP source port helpers
//
// Concurrency: each QP's engine state (requester, responder, completer,
// queues) is guarded by the QP's mutex and is run, like rxe's task model,
// either inline by the goroutine that made work (PostSend, the device
// receive goroutine for small batches, or a CQ poller holding the
// receive token, when the mutex is free) or by the
// QP's own run-loop goroutine, woken through a capacity-1 kick channel.
// The receive goroutine processes a batch inline when it is small or for
// one QP only. Timers are deadlines owned by the QP; the loop keeps one
// lazily re-armed time.Timer no later than the nearest one, and a firing
// timer only kicks the loop. Packets go out in per-QP batches through
// udp.Conn.WriteBatch (so consecutive same-size packets can leave as one
// GSO send), sent after the QP mutex is released, in two ordered lanes
// (requests; ACKs and responses) that may share one WriteBatch. A receive
// round that woke a completion-channel reader yields to it before sending
// its ACKs, so a ping-pong reply carries the ACK in the same sendmmsg; a
// lone reply and a lone ACK no longer than it leave reply first, as one
// GSO send that a GRO socket receives as one datagram. A CQ's completion
// handler (verbs.CQAttr.Handler) is called by the goroutine whose round
// queued the completion, right after the round releases the QP mutex
// and before its ACKs go, so an event-driven application's reply takes
// them along the same way, without any goroutine hand-off.
// Packet buffers come from a pool: the data path does not allocate. A
// receive slot lends its packet to the QP and takes it back after the
// batch's rounds (packet.loan), so a received packet makes no pool
// round trip when its round runs inline.
//
// Reading each receive shard's socket is a token (busypoll.go). A CQ
// Poll that finds its CQ empty — every time in busy-poll mode (DeviceConfig.BusyPoll), else
// once the application has been spinning on Poll (Config.PollRxAfter
// empty polls in a row) — takes the token if it is free, reads one
// batch with a non-blocking recvmmsg and runs the QPs inline, so the
// completion appears in the polling goroutine itself: no wakeup, no
// scheduler hand-off. The round keeps its ACKs queued for the poller's
// next post on the QP (its reply rides in the same sendmmsg), its next
// empty Poll, or at the latest a 100 µs QP deadline. The receive
// goroutine parks in the netpoller and takes the token when the socket
// is readable, so a device that nobody polls, and an application that
// sleeps on its completion channel, work as before. Nothing spins
// inside rxe: the application spins by calling Poll, and should sleep
// on the completion channel after a few tens of µs: on a shared machine
// an endless spinner waits out the time slices of whatever the OS runs
// instead of its peer. An application that waits by watching memory (an
// RDMA WRITE's last byte, as perftest's write_lat does) should still
// Poll a CQ now and then: Go runs a goroutine that yields with
// runtime.Gosched again before it checks the netpoller, so while every
// P spins the receive goroutine does not run, and the poll is what
// reads the socket. The token path reads any udp.PollConn through its
// udp.Reader: a Linux *udp.Socket, with or without GRO (the reader
// splits GRO super-datagrams as ReadBatch does), and the udptest
// endpoints, so the deterministic suite runs this path too; other Conns
// keep the receive goroutine on ReadBatch (in busy-poll mode spinning
// in it, as udp.Config.BusyPoll does). With several shards the poller
// reads its CQ's last useful shard first, then the others.
//
// Where softib differs from Linux rxe, and why:
//   - Each QP sends from the UDP source port rxe would use (SourcePort;
//     sport.go) through a send-only socket bound to (device IP, port)
//     with SO_REUSEADDR, one per port in use, opened when the QP builds
//     its first packet (connection setup does not wait for it; about
//     30 µs of system calls). A QP whose socket cannot
//     be opened (a foreign socket holds the port, no file descriptors
//     left or the device's sockets at half of RLIMIT_NOFILE, a Conn that
//     is not a Linux *udp.Socket) sends from the device port, counted in
//     SportFallback; DeviceConfig.FixedSourcePort sends everything from
//     it. Source ports are ignored on receive.
//   - Every ICRC is verified and a bad one dropped (ICRCErr), as rxe
//     does; but a UDP socket does not show the IPv4 ID that kernel rxe
//     varies and the ICRC covers, so for IPv4 the ID is solved for from
//     the ICRC (roce.Encap.VerifyICRCAnyID, counted in ICRCIPv4ID when
//     not 0): a corrupted IPv4 packet passes with probability 2^-16
//     instead of 2^-32. There is no switch to skip verification (rxe
//     has none).
//   - SEND/WRITE FIRST and MIDDLE packets must carry exactly the path MTU
//     (IBA; rxe 6.1 does not check): others are dropped and counted
//     (BadLength), so truncation or corruption that slips past the ICRC
//     ends in a retransmission instead of misplaced data.
//   - ACKs carry real end-to-end credits only with
//     Config.AdvertiseCredits; requesters always honour credits.
//   - Sockets opened here receive with UDP GRO unless
//     DeviceConfig.NoRxCoalescing is set: same-size packets that a
//     peer sent as one GSO burst arrive as one super-datagram, which
//     the receive goroutine, or a CQ poller holding the receive token,
//     splits back into packets.
//
// Tests that open devices on real sockets should use addresses in 127/8
// unique to the test binary, so that packages tested in parallel do not
// collide on port 4791.
package rxe

import (
	"time"

	"softib/udp"
	"softib/verbs"
)

// Device limits, as Linux rxe advertises them (roce-wire.md §10).
const (
	MaxQPWR        = 0x4000
	MaxSGE         = 32
	MaxInline      = 400
	MaxCQE         = 1<<15 - 1
	MaxRdAtom      = 128
	MaxMsgSize     = 0x800000
	MaxQP          = 0x10000
	MaxSRQWR       = 0x4000
	MaxSRQSGE      = 27
	MaxMR          = 0x40000
	MaxPD          = 0x10000
	MaxCQ          = 0x4000
	MaxAH          = 0x8000
	PKeyTableLen   = 64
	GIDTableLen    = 1024
	LocalAckDelay  = 15
	RoCEv2Port     = 4791
	GSIQKey        = 0x80010000
	DefaultPKey    = 0xFFFF
	firstUserQPN   = 0x11
	hdrOverhead    = 80   // RXE_MAX_HDR_LENGTH
	defaultNetMTU  = 1500 // for Conns that cannot tell their link's (linkmtu.go)
	vendorID       = 0xFFFFFF
	portCapCMSup   = 1 << 16
	maxUnackedPSNs = 128 // RXE_MAX_UNACKED_PSNS
	maxPktPerAck   = 64  // RXE_MAX_PKT_PER_ACK
)

// Implementation constants.
const (
	// pktBufSize bounds one RoCE datagram: a 4096-byte payload plus the
	// largest header stack, pad and ICRC, with slack.
	pktBufSize = 4096 + 128
	// inqMax caps a QP's inbound packet ring; more is dropped and counted
	// (RxQueueFull), as quic-go caps unprocessed packets.
	inqMax = 8192
	// inlineRxBatch: the receive goroutine handles a packet on its own
	// (when the QP is idle) if ReadBatch returned at most this many
	// datagrams or all of them are for one QP; bigger batches for
	// several QPs would go to the QP loops. By default every batch is
	// processed inline: the receive shards spread QPs over the cores,
	// and a hand-off to a QP loop costs a goroutine wakeup and its wait
	// in the run queue per QP and batch (o2iblnd with conns_per_peer 4:
	// most of the runnable time in a runtime trace was there).
	inlineRxBatch = udp.MaxBatchSize
	// pollRxAfter is Config.PollRxAfter's default.
	pollRxAfter = 4
	// procBudget bounds the packets one processing round generates before
	// it yields (and re-kicks itself).
	procBudget = 256
	// respDeferMax bounds how long a busy poller's round may keep its
	// responses queued for the application's next post (holdPoller, sched.go);
	// normally the next post or empty Poll sends them much sooner.
	respDeferMax = int64(100 * time.Microsecond)
	// eventQueueLen is the async event channel capacity.
	eventQueueLen = 256
)

// Config configures a device for Open. The zero value of each field means
// the default.
type Config struct {
	verbs.DeviceConfig
	// Conn is the datagram endpoint to use (e.g. a udptest endpoint); nil
	// means udp.Listen on Addr:Port with UDP. The device closes it on
	// Close.
	Conn udp.Conn
	// ShardConns are further receive shards for a given Conn: endpoints
	// bound to the same address as Conn (udp.ListenShards, or a udptest
	// ListenShards group), each read by its own goroutine (shard.go).
	// The device closes them on Close. DeviceConfig.RxShards is the
	// number of sockets Open binds when Conn is nil (shard.go); with a
	// given Conn it must be 0 or 1 + len(ShardConns).
	ShardConns []udp.Conn
	// UDP configures the socket Open creates when Conn is nil. BusyPoll is
	// forced on when DeviceConfig.BusyPoll is set; GRO is forced off when
	// DeviceConfig.NoRxCoalescing is set.
	UDP *udp.Config
	// AdvertiseCredits makes RC responders without an SRQ advertise their
	// posted receive count as AETH end-to-end credits (IBA §9.7.7.2).
	// Off, every ACK carries "unlimited" (0x1F) as rxe sends. Requesters
	// always honour the credits a peer advertises.
	AdvertiseCredits bool
	// InlineRx is the largest receive batch for several QPs that the
	// receive goroutine processes itself instead of handing packets to
	// the QP loops (default: every batch; negative means never). A
	// batch for a single QP is always processed inline unless InlineRx
	// is negative.
	InlineRx int
	// PollRxAfter is the number of empty Polls of one CQ in a row (an
	// application spinning on Poll) after which Poll receives from the
	// device socket itself, as it does at once in busy-poll mode
	// (default 4; negative means only in busy-poll mode). A Poll, arm,
	// Poll, sleep waiter never gets there. See busypoll.go.
	PollRxAfter int
	// ECN turns on RoCEv2 congestion signalling: ECT(0) on every packet
	// sent, CNPs for CE-marked packets received, and a DCQCN rate limiter
	// on each QP that receives CNPs (congestion.go). Off by default, as
	// Linux rxe has none of it.
	ECN ECNConfig
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Name == "" {
		d.Name = "rxe0"
	}
	if d.Port == 0 {
		d.Port = RoCEv2Port
	}
	if d.InlineRx == 0 {
		d.InlineRx = inlineRxBatch
	}
	if d.PollRxAfter == 0 {
		d.PollRxAfter = pollRxAfter
	}
	return d
}

type provider struct{}

func (provider) Open(cfg verbs.DeviceConfig) (verbs.Device, error) {
	return Open(Config{DeviceConfig: cfg})
}

func init() { verbs.Register("rxe", provider{}) }

// ackTimeout is the local ACK timeout 4.096 µs × 2^t (0 = none).
func ackTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<min(t, 31)) * time.Nanosecond
}
