package rxe

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"

	"softib/udp"
	"softib/verbs"
)

// Receive shards.
//
// A device receives through one or more sockets bound to its address
// and port (udp.ListenShards: SO_REUSEPORT), each with its own goroutine,
// receive token, batch buffers and ICRC template cache: an rxShard. The
// kernel picks a datagram's socket by a hash of its 4-tuple, and every
// peer QP sends from its own source port (sport.go), so the QPs' packets
// spread over the shards and are received and processed in parallel,
// while each flow stays on one shard.
//
// Invariant (what the engine relies on, and all it relies on): a QP's
// inbound ring (QP.enqueue) takes packets from any number of shards (it
// is guarded by QP.inMu) and a QP is processed by one goroutine at a
// time (QP.mu: runInline's TryLock, else the QP's loop is kicked). So
// packets that arrive through one shard are processed in their arrival
// order, and packets of one QP that arrive through two shards (a peer
// that changed its source port, e.g. falling back to the device port
// when its per-QP socket could not be opened, or the udptest
// ShardSpray policy) are processed correctly, in some interleaving of
// the two arrival orders: to the QP that is network reordering, which
// the PSN checks handle (OutOfSeqReq and a NAK, duplicates re-ACKed) as
// for any other reordering. Nothing per shard is shared between shards
// except the device's counters (atomic) and the deferred-response list
// (Device.defMu).
//
// Shard 0's socket is also the device's send socket (Device.conn), the
// base of the per-QP source-port sockets and of the multicast joins.

// rxShard is one receive socket of a device and its receive state.
type rxShard struct {
	d    *Device
	idx  int
	conn udp.Conn

	// Poll-driven receive (busypoll.go); sr is nil for Conns without
	// a udp.Reader (they run rxLoop on ReadBatch). tok is the receive
	// token: its holder is the only reader of sr and owns rb and encap.
	sr  pollSock
	tok sync.Mutex
	rb  *rxBatch
	st  rxPollState // the receive goroutine's, across wait callbacks

	// encap caches the ICRC template of the last source (token holder,
	// or the ReadBatch loop, only).
	encap encapCache

	done chan struct{} // closed when the receive goroutine returns
}

// rxShardCount returns the number of receive shards Open should make:
// Config.RxShards, or by default GOMAXPROCS for sockets Open opens (1
// when the platform has no SO_REUSEPORT shards, or for a given Conn:
// then the shards are 1 + len(ShardConns)). A count that cannot be
// honoured is an error.
func (c *Config) rxShardCount() (int, error) {
	given := c.Conn != nil
	switch {
	case c.RxShards < 0 || c.RxShards > udp.MaxShards:
		return 0, fmt.Errorf("rxe: open: RxShards %d not in [1, %d]: %w", c.RxShards, udp.MaxShards, verbs.ErrInvalidArgument)
	case given && c.RxShards != 0 && c.RxShards != 1+len(c.ShardConns):
		return 0, fmt.Errorf("rxe: open: RxShards %d with a given Conn and %d ShardConns (the shards are the Conns): %w", c.RxShards, len(c.ShardConns), verbs.ErrInvalidArgument)
	case !given && len(c.ShardConns) > 0:
		return 0, fmt.Errorf("rxe: open: ShardConns without Conn: %w", verbs.ErrInvalidArgument)
	case given:
		return 1 + len(c.ShardConns), nil
	case c.RxShards > 0:
		return c.RxShards, nil
	case !shardsSupported:
		return 1, nil
	}
	return min(runtime.GOMAXPROCS(0), udp.MaxShards), nil
}

// openShards returns the device's receive Conns: the given ones, or
// sockets Open binds to the device address.
func openShards(c *Config, uc *udp.Config) ([]udp.Conn, error) {
	n, err := c.rxShardCount()
	if err != nil {
		return nil, err
	}
	if c.Conn != nil {
		return append([]udp.Conn{c.Conn}, c.ShardConns...), nil
	}
	socks, err := udp.ListenShards(netip.AddrPortFrom(c.Addr.Unmap(), c.Port), n, uc)
	if err != nil {
		return nil, err
	}
	conns := make([]udp.Conn, len(socks))
	for i, s := range socks {
		conns[i] = s
	}
	return conns, nil
}

func (d *Device) newShard(i int, c udp.Conn) *rxShard {
	s := &rxShard{d: d, idx: i, conn: c, done: make(chan struct{})}
	if s.sr = newPollSock(c, max(c.BatchSize(), 1)); s.sr != nil {
		s.rb = d.newRxBatch(c)
	}
	return s
}

// rxLoop is the shard's receive goroutine: rxLoopPoll on a Conn with a
// udp.Reader, else ReadBatch, the queue and the QP rounds, until the
// Conn fails or closes.
func (s *rxShard) rxLoop() {
	defer close(s.done)
	if s.sr != nil {
		s.rxLoopPoll()
		return
	}
	d := s.d
	b := d.newRxBatch(s.conn)
	for {
		n, err := s.conn.ReadBatch(b.msgs)
		if err != nil {
			d.linkDown()
			d.freeRxBatch(b)
			return
		}
		s.queueBatch(b, n)
		d.runBatch(b, n, byDevice)
	}
}

// queueBatch runs the receive checks on the first n datagrams of b and
// queues them on their QPs, recording the QPs in b.touched. The caller
// is the shard's only reader (its receive goroutine, or the holder of
// its receive token), which keeps the shard's packets of every QP in
// arrival order.
func (s *rxShard) queueBatch(b *rxBatch, n int) {
	d := s.d
	b.touched = b.touched[:0]
	if d.capture != nil {
		d.capture.rcvd(d.laddr, b.msgs[:n])
	}
	for i := 0; i < n; i++ {
		if b.msgs[i].N < 0 {
			d.stats.RxTruncated.Inc()
			continue
		}
		p := b.pkts[i]
		p.n, p.addr = b.msgs[i].N, b.msgs[i].Addr
		p.cls = ipClass{tos: b.msgs[i].TOS} // ECN field (congestion.go)
		// Lent before recv queues it: the QP may be done with it
		// before recv returns (another goroutine's round).
		p.loan.Store(loanOut)
		q := d.recv(p, &s.encap)
		if q == nil {
			p.loan.Store(loanNone) // dropped: never queued
			continue
		}
		// The QP has the packet until it gives it back (releaseRx);
		// runBatch's reclaim takes it back or refills the slot.
		if len(b.touched) == 0 || b.touched[len(b.touched)-1] != q {
			b.touched = append(b.touched, q)
		}
	}
}
