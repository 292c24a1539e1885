package udptest

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"softib/udp"
)

// packet is a datagram queued at an endpoint.
type packet struct {
	src  netip.AddrPort
	data []byte
}

// Endpoint is one address on a Network. It implements udp.Conn.
type Endpoint struct {
	net  *Network
	addr netip.AddrPort

	rmu sync.Mutex // serializes ReadBatch

	mu     sync.Mutex // guards queue, head, closed
	queue  []packet   // pending datagrams, queue[head:]
	head   int
	closed bool

	notify chan struct{} // capacity 1: "queue became non-empty"
	done   chan struct{} // closed by Close
	once   sync.Once

	group *shardGroup // the receive shards sharing addr (ListenShards); nil: alone
}

var _ udp.PollConn = (*Endpoint)(nil)

// enqueue appends p unless the queue holds limit datagrams or the
// endpoint is closed. Called with the network lock held.
func (ep *Endpoint) enqueue(p packet, limit int) bool {
	ep.mu.Lock()
	if ep.closed || len(ep.queue)-ep.head >= limit {
		ep.mu.Unlock()
		return false
	}
	if ep.head > 0 && len(ep.queue) == cap(ep.queue) {
		// Slide the live part down instead of growing.
		k := copy(ep.queue, ep.queue[ep.head:])
		clear(ep.queue[k:])
		ep.queue = ep.queue[:k]
		ep.head = 0
	}
	ep.queue = append(ep.queue, p)
	ep.mu.Unlock()
	select {
	case ep.notify <- struct{}{}:
	default:
	}
	return true
}

// ReadBatch implements udp.Conn: it blocks until at least one datagram
// is queued, then copies up to len(msgs) of them out. Datagrams longer
// than cap(Buf) are dropped and counted in Network.Stats.Truncated.
func (ep *Endpoint) ReadBatch(msgs []udp.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	ep.rmu.Lock()
	defer ep.rmu.Unlock()
	for {
		n, done := ep.take(msgs)
		if done {
			return 0, fmt.Errorf("udptest: read %v: %w", ep.addr, net.ErrClosed)
		}
		if n > 0 {
			return n, nil
		}
		select {
		case <-ep.notify:
		case <-ep.done:
		}
	}
}

// take moves queued datagrams into msgs.
func (ep *Endpoint) take(msgs []udp.Message) (n int, closed bool) {
	var spent [udp.DefaultBatchSize][]byte
	ns := 0
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return 0, true
	}
	for ep.head < len(ep.queue) && n < len(msgs) && ns < len(spent) {
		p := ep.queue[ep.head]
		ep.queue[ep.head] = packet{}
		ep.head++
		spent[ns] = p.data
		ns++
		m := &msgs[n]
		if len(p.data) > cap(m.Buf) {
			ep.net.Stats.Truncated.Inc()
			continue
		}
		m.N = copy(m.Buf[:cap(m.Buf)], p.data)
		m.Addr = p.src
		n++
	}
	if ep.head == len(ep.queue) {
		ep.queue = ep.queue[:0]
		ep.head = 0
	} else {
		// More left: keep the notification armed for the next call.
		select {
		case ep.notify <- struct{}{}:
		default:
		}
	}
	ep.mu.Unlock()
	if ns > 0 {
		ep.net.mu.Lock()
		for _, b := range spent[:ns] {
			ep.net.putBuf(b)
		}
		ep.net.mu.Unlock()
	}
	return n, false
}

// WriteBatch implements udp.Conn. Datagrams are copied, so the caller may
// reuse its buffers at once. Datagrams to addresses without an endpoint
// vanish (counted in Stats.NoRoute), as with UDP.
func (ep *Endpoint) WriteBatch(msgs []udp.Message) (int, error) {
	for i := range msgs {
		m := &msgs[i]
		if m.N < 0 || m.N > cap(m.Buf) {
			return i, udp.ErrMessageSize
		}
		if ep.isClosed() {
			return i, fmt.Errorf("udptest: write %v: %w", ep.addr, net.ErrClosed)
		}
		if err := ep.net.send(ep.addr, m); err != nil {
			return i, err
		}
	}
	return len(msgs), nil
}

func (ep *Endpoint) isClosed() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.closed
}

// LocalAddr implements udp.Conn.
func (ep *Endpoint) LocalAddr() netip.AddrPort { return ep.addr }

// BatchSize implements udp.Conn.
func (ep *Endpoint) BatchSize() int { return BatchSize }

// Pending returns the number of datagrams queued for reading.
func (ep *Endpoint) Pending() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.queue) - ep.head
}

// Close detaches the endpoint from the network, discards its queue and
// unblocks ReadBatch with an error wrapping net.ErrClosed.
func (ep *Endpoint) Close() error {
	ep.once.Do(func() {
		n := ep.net
		n.mu.Lock()
		if n.endpoints[ep.addr] == ep {
			delete(n.endpoints, ep.addr)
		}
		ep.mu.Lock()
		ep.closed = true
		for _, p := range ep.queue[ep.head:] {
			n.putBuf(p.data)
		}
		ep.queue, ep.head = nil, 0
		ep.mu.Unlock()
		n.mu.Unlock()
		close(ep.done)
	})
	return nil
}

// NewReader implements udp.PollConn: a non-blocking reader of ep's
// queue, so that a consumer of udp.Reader (rxe's receive token) runs the
// same code on the simulated network as on a Linux socket. batch is
// ignored beyond its check: reads copy up to len(msgs) datagrams.
func (ep *Endpoint) NewReader(batch int) udp.Reader {
	if batch < 1 {
		return nil
	}
	return &reader{ep: ep}
}

// reader is an Endpoint's udp.Reader. A datagram is copied out whole or
// dropped (longer than its Message's buffer: Stats.Truncated), so there
// is never anything pending between reads.
type reader struct{ ep *Endpoint }

func (r *reader) TryRead(msgs []udp.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	n, closed := r.ep.take(msgs)
	if closed {
		return 0, fmt.Errorf("udptest: read %v: %w", r.ep.addr, net.ErrClosed)
	}
	return n, nil
}

func (r *reader) ReadNow(msgs []udp.Message) (int, error) { return r.TryRead(msgs) }

func (r *reader) ReadNowOne(msgs []udp.Message) (int, error) {
	return r.TryRead(msgs[:min(1, len(msgs))])
}

func (r *reader) Pending() bool { return false }

// Wait calls ready, and while it returns false parks until the queue
// becomes non-empty (the notify channel is the simulated netpoller's
// edge; a stale edge only costs ready one empty read).
func (r *reader) Wait(ready func() bool) error {
	ep := r.ep
	for {
		if ep.isClosed() {
			return fmt.Errorf("udptest: read %v: %w", ep.addr, net.ErrClosed)
		}
		if ready() {
			return nil
		}
		select {
		case <-ep.notify:
		case <-ep.done:
		}
	}
}
