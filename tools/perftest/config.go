// Package perftest implements the perftest tools (ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw and the _lat variants) on softib verbs: the
// flags, QP attributes, out-of-band TCP protocol (tool-protocols.md §3, as
// spoken by perftest 6.06) and report format, so that either end may be a
// real perftest on Linux rxe.
//
// Flow of a run (N QPs; see flow in run.go for the per-test differences):
//
//	TCP connect → versions → cycle buffer/cache line → MTU
//	→ N key messages → QPs to RTR (and RTS) → N key messages → sync
//	→ test → results exchange (BW tests) → closing handshake + "done"
package perftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"softib/verbs"
)

// Verb is the operation a test measures.
type Verb uint8

// Verbs, numbered as perftest's VerbType.
const (
	VerbSend Verb = iota
	VerbWrite
	VerbRead
	VerbAtomic
)

// Test is one of the eight perftest programs.
type Test uint8

// Tests.
const (
	WriteBW Test = iota
	ReadBW
	SendBW
	AtomicBW
	WriteLat
	ReadLat
	SendLat
	AtomicLat
)

var testNames = [...]string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat", "atomic_lat"}

// Tests lists every test in order.
func Tests() []Test {
	return []Test{WriteBW, ReadBW, SendBW, AtomicBW, WriteLat, ReadLat, SendLat, AtomicLat}
}

// String returns the test name, e.g. "write_bw".
func (t Test) String() string {
	if int(t) < len(testNames) {
		return testNames[t]
	}
	return fmt.Sprintf("Test(%d)", uint8(t))
}

// ParseTest maps "write_bw" or "ib_write_bw" to a Test.
func ParseTest(s string) (Test, bool) {
	s = strings.TrimPrefix(s, "ib_")
	for i, n := range testNames {
		if n == s {
			return Test(i), true
		}
	}
	return 0, false
}

// IsLat reports whether t is a latency test.
func (t Test) IsLat() bool { return t >= WriteLat }

// Verb returns the operation t measures.
func (t Test) Verb() Verb {
	switch t {
	case WriteBW, WriteLat:
		return VerbWrite
	case ReadBW, ReadLat:
		return VerbRead
	case AtomicBW, AtomicLat:
		return VerbAtomic
	}
	return VerbSend
}

// Title is the name perftest prints in its banner.
func (v Verb) Title() string {
	return [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}[v]
}

// AtomicOp selects the atomic operation (-A).
type AtomicOp uint8

// Atomic operations; the zero value is perftest's default.
const (
	FetchAndAdd AtomicOp = iota
	CmpAndSwap
)

// String returns perftest's name of the operation.
func (a AtomicOp) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// perftest defaults (perftest_parameters.h).
const (
	DefaultTCPPort    = 18515
	DefaultSizeBW     = 65536
	DefaultSizeLat    = 2
	DefaultSizeAtomic = 8
	DefaultIters      = 1000
	DefaultItersWB    = 5000
	DefaultTxBW       = 128
	DefaultTxLat      = 1
	DefaultRxSend     = 512
	DefaultCQMod      = 100
	DefaultQPTimeout  = 14
	DefaultCycle      = 4096 // cycle_buffer (page size)
	DefaultCacheLine  = 64
	MinRNRTimer       = 12
	// UCMaxRx caps the receive depth of UC/UD runs (UC_MAX_RX).
	UCMaxRx = 16000
	// QKey is the Q_Key of UD runs (DEFF_QKEY).
	QKey = 0x11111111
	// GRHLen is the room a UD receive leaves for the GRH (UD_ADDITION).
	GRHLen = 40
	// MaxSize is the largest message of -a (2^23).
	MaxSize = 1 << 23
	// HopLimit of perftest's address vectors.
	HopLimit = 0xff
)

// CMHook is the RDMA CM mode of perftest (-R), provided by the RDMA CM
// layer: Control opens the control channel on dev (an RDMA CM connection
// to cfg.Host, or a listener when cfg.Host is empty) and Connect connects
// the run's test QPs through RDMA CM, as create_rdma_cm_connection does
// (right after the MTU exchange, before any key round), moving them to
// RTR/RTS. The rest of the run (key handshakes, reports) then goes over
// the returned Ctrl; a Ctrl that is also a KeyXchger carries the key
// messages in its own format.
type CMHook interface {
	Control(ctx context.Context, dev verbs.Device, cfg *Config) (Ctrl, error)
	Connect(ctx context.Context, cfg *Config, ctrl Ctrl, res *Resources) error
}

// Config is one perftest run. Zero values mean perftest's defaults.
type Config struct {
	Test Test
	// Host is the server; "" makes this end the server.
	Host string
	// TCPPort is the control port (18515).
	TCPPort int
	// Listener, if set, serves instead of listening on TCPPort.
	// BindAddr, if valid, is the address the exchange socket binds:
	// the server listens on it alone and the client connects from it.
	BindAddr netip.Addr
	Listener net.Listener
	// Size is the message size (BW 65536, latency 2, atomic 8).
	Size int
	// Iters is the iteration count (write_bw 5000, others 1000).
	Iters int
	// Duration runs for this long instead of Iters (-D).
	Duration time.Duration
	// QPs is the number of QPs (-q, 1).
	QPs int
	// MTU is the path MTU in bytes (-m; 0 = the port's active MTU).
	MTU int
	// AllSizes runs sizes 2..2^23 (-a).
	AllSizes bool
	// TxDepth is the send queue depth (-t; BW 128, latency 1).
	TxDepth int
	// RxDepth is the receive queue depth of send tests (-r, 512).
	RxDepth int
	// CQMod is the completion moderation (-Q, 100).
	CQMod int
	// OutReads is the number of outstanding reads/atomics (-o; 0 = the
	// device maximum).
	OutReads int
	// Atomic selects the atomic operation (-A, FETCH_AND_ADD).
	Atomic AtomicOp
	// ReportGbits reports Gb/sec instead of MB/sec.
	ReportGbits bool
	// Events sleeps on completion events (-e).
	Events bool
	// Inline is -I: the largest message sent inline (0 = perftest's
	// default: 220/236 bytes for write/send latency tests, none for the
	// rest; -1 = never).
	Inline int
	// SL is -S: the service level of the address vectors (0-15).
	SL uint8
	// NoPeak is -N: report no peak bandwidth (perftest prints 0.00).
	NoPeak bool
	// UC is -c UC: unreliable connected QPs (write and send tests, TCP
	// exchange) instead of RC.
	UC bool
	// UD is -c UD: unreliable datagram QPs (send_bw and send_lat, TCP
	// exchange), messages at most one MTU, Q_Key 0x11111111.
	UD bool
	// Duplex is -b: both sides send at once (BW tests); each side
	// reports the sum of both directions.
	Duplex bool
	// PostList is -l: each post call carries this many WRs (BW tests;
	// 0 or 1: softib's default batching).
	PostList int
	// ReportBoth is --report-both: with -b, also print the local and
	// the remote direction separately (rows with Direction set).
	ReportBoth bool
	// LatUnsorted (-U) prints every latency sample in the order
	// measured; LatHistogram (-H) prints their histogram.
	LatUnsorted, LatHistogram bool
	// RunInfinitely is --run_infinitely: a BW requester reports a row
	// every Duration (default 5 s) until interrupted.
	RunInfinitely bool
	// TOS is -T: the IP type of service of the test's packets, set on
	// the RDMA CM IDs (-R only, as perftest). 0: the default.
	TOS uint8
	// TClass is --tclass: the traffic class of the address vectors of
	// the TCP-exchange mode (the IP TOS byte on RoCE). 0: the default.
	TClass uint8
	// RDMACM selects -R; it needs CM.
	RDMACM bool
	// CM is the RDMA CM connector (nil: -R is refused).
	CM CMHook
	// Port is the IB port (1); GIDIndex the GID index (-x; perftest
	// picks the IPv4-mapped one on RoCE, so does softib when -1).
	Port     uint8
	GIDIndex int
	// PeerUDPPort is the peer device's UDP port (0 = 4791).
	PeerUDPPort uint16
	// Out receives the perftest-style text output (nil = discard).
	Out io.Writer
	// OnResult, if set, is called with each result row as it is made.
	OnResult func(Row)

	// defaultSize records that Size was left to perftest's default (UD
	// clamps that to the MTU, never a user's value).
	defaultSize bool
	// udMTU is the path MTU of a UD run, its largest message.
	udMTU int
}

func (c *Config) setDefaults() {
	if c.TCPPort == 0 {
		c.TCPPort = DefaultTCPPort
	}
	c.defaultSize = c.Size == 0
	if c.Size == 0 {
		switch {
		case c.Test.Verb() == VerbAtomic:
			c.Size = DefaultSizeAtomic
		case c.Test.IsLat():
			c.Size = DefaultSizeLat
		default:
			c.Size = DefaultSizeBW
		}
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
		if c.Test == WriteBW {
			c.Iters = DefaultItersWB
		}
	}
	if c.QPs == 0 {
		c.QPs = 1
	}
	if c.TxDepth == 0 {
		c.TxDepth = DefaultTxBW
		if c.Test.IsLat() {
			c.TxDepth = DefaultTxLat
		}
	}
	if c.RxDepth == 0 {
		c.RxDepth = DefaultRxSend
		if (c.UD || c.UC) && c.Duration == 0 {
			// perftest posts every receive of an unreliable run up
			// front (up to UC_MAX_RX): a datagram finding no receive
			// is lost.
			c.RxDepth = min(c.Iters, UCMaxRx)
		}
	}
	if c.CQMod == 0 {
		c.CQMod = DefaultCQMod
		if c.PostList > 1 {
			// As perftest: "CQ moderation will be the size of the
			// post list".
			c.CQMod = c.PostList
		}
	}
	if c.Test.IsLat() {
		c.CQMod = 1
	}
	c.CQMod = min(c.CQMod, c.TxDepth)
	if c.Port == 0 {
		c.Port = 1
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

func (c *Config) validate() error {
	if c.RDMACM && c.CM == nil {
		return fmt.Errorf("-R: RDMA CM mode not yet available in softib; run without -R (TCP exchange)")
	}
	if c.Size <= 0 || c.Size > MaxSize {
		return fmt.Errorf("message size %d out of range (1..%d)", c.Size, MaxSize)
	}
	if c.Test.Verb() == VerbAtomic && c.Size != 8 {
		return fmt.Errorf("atomic tests use 8-byte messages (-s 8)")
	}
	if c.Test.Verb() == VerbAtomic && c.AllSizes {
		return fmt.Errorf("-a is not supported by atomic tests")
	}
	if c.Test.IsLat() && c.Iters < 5 && c.Duration == 0 {
		return fmt.Errorf("latency tests need at least 5 iterations")
	}
	if c.QPs < 1 || c.TxDepth < 1 || c.RxDepth < 1 || c.Iters < 1 || c.CQMod < 1 {
		return fmt.Errorf("QPs, depths, iterations and CQ moderation must be positive")
	}
	if c.UD && c.Test.Verb() != VerbSend {
		return fmt.Errorf("-c UD: UD connection only possible in SEND verb (send_bw, send_lat)")
	}
	if c.Duplex && c.Test.IsLat() {
		return fmt.Errorf("-b: bidirectional runs are bw tests only")
	}
	if c.PostList > 1 {
		if c.Test.IsLat() {
			return fmt.Errorf("-l %d: Post list is supported in BW tests only", c.PostList)
		}
		if c.Duration == 0 && c.Iters%c.PostList != 0 {
			return fmt.Errorf("-l %d: Number of iterations must be a multiple of post list size (-n %d)", c.PostList, c.Iters)
		}
		if c.PostList%c.CQMod != 0 {
			return fmt.Errorf("-l %d: Post list size must be a multiple of CQ moderation (-Q %d)", c.PostList, c.CQMod)
		}
		if c.PostList > c.TxDepth {
			return fmt.Errorf("-l %d: the post list must fit the send queue (-t %d)", c.PostList, c.TxDepth)
		}
	}
	if c.MTU != 0 {
		if m := verbs.MTUFromBytes(c.MTU); m.Bytes() != c.MTU {
			return fmt.Errorf("bad MTU %d: use 256, 512, 1024, 2048 or 4096", c.MTU)
		}
	}
	return nil
}

// sizes returns the message sizes of the run.
func (c *Config) sizes() []int {
	if !c.AllSizes {
		return []int{c.Size}
	}
	var s []int
	for i := 1; i < 24 && 1<<i <= c.maxSize(); i++ {
		s = append(s, 1<<i)
	}
	return s
}

// maxSize is the largest message of the run (buffer sizing): -a goes up
// to 2^23, or to the MTU with UD.
func (c *Config) maxSize() int {
	switch {
	case c.AllSizes && c.udMTU > 0:
		return c.udMTU
	case c.AllSizes:
		return MaxSize
	}
	return c.Size
}
