// Package udptest is an in-memory datagram network for deterministic tests
// of protocols built on udp.Conn (the RC transport's retransmission, RNR
// and duplicate handling). Endpoints created by a Network implement
// udp.Conn; the network can drop, duplicate, reorder, delay and corrupt
// datagrams, globally or per directed link, and a Filter hook lets a test
// script decisions about single packets ("drop the 3rd READ request").
//
// The network is deterministic for a given seed: every directed link
// draws its faults from its own PCG stream seeded from the network seed
// and the two addresses, so the fate of a link's k-th datagram does not
// depend on traffic on other links.
//
// It is built for testing/synctest: there are no sockets and no
// background goroutines. Delays and reorder timeouts run from a single
// time.AfterFunc timer, readers block on channels, and Close stops the
// timer. Create the Network inside the synctest bubble that uses it, and
// virtual time then fast-forwards through delays and retransmit timeouts.
package udptest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"softib/internal/stats"
	"softib/udp"
)

// Verdict is a Filter's decision about one datagram.
type Verdict int

const (
	// Pass hands the datagram on to the configured random faults.
	Pass Verdict = iota
	// Drop discards the datagram.
	Drop
	// Deliver delivers the datagram without random faults (but with the
	// link's delay).
	Deliver
	// Duplicate delivers the datagram twice, without random faults.
	Duplicate
)

var verdictNames = [...]string{"Pass", "Drop", "Deliver", "Duplicate"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Filter is consulted for every datagram sent on the network before the
// random faults. pkt is the network's private copy and may be modified
// (for scripted corruption); it must not be retained. A Filter runs on
// the sending goroutine without network locks held, so it may call
// Network methods. It must be safe for concurrent use if several
// goroutines send.
type Filter func(src, dst netip.AddrPort, pkt []byte) Verdict

// Faults configures the random faults of a link. The zero value is a
// perfect link: everything is delivered at once, in order.
type Faults struct {
	// Drop is the probability that a datagram is lost.
	Drop float64
	// Duplicate is the probability that a datagram is delivered twice.
	Duplicate float64
	// Corrupt is the probability that one random byte of a datagram is
	// changed (XORed with a random non-zero value).
	Corrupt float64
	// Reorder is the probability that a datagram is held back and
	// released after ReorderGap later datagrams on the same link, or
	// after ReorderTimeout, whichever comes first.
	Reorder float64
	// ReorderGap is the number of later datagrams a held one waits for
	// (default 1).
	ReorderGap int
	// ReorderTimeout releases a held datagram when no more traffic comes
	// (default 1ms).
	ReorderTimeout time.Duration
	// Delay is the fixed one-way delay of every datagram.
	Delay time.Duration
	// Jitter adds a uniformly random extra delay in [0, Jitter). Jitter
	// reorders datagrams whose delays overlap, as netem does.
	Jitter time.Duration
}

func (f Faults) withDefaults() Faults {
	if f.ReorderGap <= 0 {
		f.ReorderGap = 1
	}
	if f.ReorderTimeout <= 0 {
		f.ReorderTimeout = time.Millisecond
	}
	return f
}

// Stats counts what the network did with datagrams.
type Stats struct {
	Sent       stats.Counter // datagrams passed to WriteBatch
	Delivered  stats.Counter // datagrams queued at a receiving endpoint
	Dropped    stats.Counter // lost to Faults.Drop
	Filtered   stats.Counter // dropped by the Filter
	Duplicated stats.Counter // extra copies made
	Reordered  stats.Counter // datagrams held back
	Corrupted  stats.Counter // datagrams with a byte changed
	Delayed    stats.Counter // datagrams that waited for the timer
	NoRoute    stats.Counter // datagrams to an address with no endpoint
	Overflow   stats.Counter // dropped because the receive queue was full
	Truncated  stats.Counter // dropped because the reader's buffer was too small
}

// DefaultQueueLimit is the default receive queue length of an endpoint.
const DefaultQueueLimit = 4096

// BatchSize is the BatchSize of every Endpoint.
const BatchSize = udp.DefaultBatchSize

// linkKey names a directed link; a zero AddrPort is a wildcard in rules.
type linkKey struct{ src, dst netip.AddrPort }

// Network is a simulated datagram network. Its methods are safe for
// concurrent use.
type Network struct {
	// Stats counts what happened to datagrams.
	Stats Stats

	mu         sync.Mutex
	seed       uint64
	endpoints  map[netip.AddrPort]*Endpoint
	shards     []*Endpoint // ListenShards' endpoints beyond the first (not in endpoints)
	global     Faults
	rules      map[linkKey]Faults // per link; zero addresses are wildcards
	links      map[linkKey]*link  // per-link random state
	filter     Filter
	queueLimit int
	nextPort   uint16
	closed     bool

	sched    schedule
	timer    *time.Timer
	timerAt  time.Time
	seq      uint64
	free     [][]byte // recycled datagram buffers
	timerRun func()
}

// link is the state of one directed link.
type link struct {
	rng  *rand.Rand
	held []held
}

// held is a datagram held back for reordering.
type held struct {
	id    uint64
	left  int
	data  []byte
	delay time.Duration
}

// NewNetwork returns an empty network whose random decisions derive from
// seed.
func NewNetwork(seed uint64) *Network {
	n := &Network{
		seed:       seed,
		endpoints:  make(map[netip.AddrPort]*Endpoint),
		rules:      make(map[linkKey]Faults),
		links:      make(map[linkKey]*link),
		queueLimit: DefaultQueueLimit,
		nextPort:   49152,
	}
	n.timerRun = n.runTimer
	return n
}

// SetFaults sets the faults of every link without a link rule.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	n.global = f.withDefaults()
	n.mu.Unlock()
}

// SetLinkFaults sets the faults of datagrams from src to dst. A zero
// (invalid) src or dst matches any address. Rules are looked up as exact
// pair, then any-source-to-dst, then src-to-any, then the global faults.
func (n *Network) SetLinkFaults(src, dst netip.AddrPort, f Faults) {
	n.mu.Lock()
	n.rules[linkKey{src, dst}] = f.withDefaults()
	n.mu.Unlock()
}

// ClearLinkFaults removes the rule set by SetLinkFaults(src, dst, ...).
func (n *Network) ClearLinkFaults(src, dst netip.AddrPort) {
	n.mu.Lock()
	delete(n.rules, linkKey{src, dst})
	n.mu.Unlock()
}

// SetFilter installs f (nil removes it).
func (n *Network) SetFilter(f Filter) {
	n.mu.Lock()
	n.filter = f
	n.mu.Unlock()
}

// SetQueueLimit sets the receive queue length of every endpoint; excess
// datagrams are dropped and counted in Stats.Overflow.
func (n *Network) SetQueueLimit(limit int) {
	n.mu.Lock()
	n.queueLimit = max(1, limit)
	n.mu.Unlock()
}

// Endpoint attaches a new endpoint at addr. A zero port picks a free
// one. It panics if addr is already in use or the network is closed; use
// Listen to get an error instead.
func (n *Network) Endpoint(addr netip.AddrPort) *Endpoint {
	ep, err := n.Listen(addr)
	if err != nil {
		panic(err)
	}
	return ep
}

// Listen attaches a new endpoint at addr, like Endpoint, but returns an
// error when addr is taken or the network is closed.
func (n *Network) Listen(addr netip.AddrPort) (*Endpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listenLocked(addr)
}

// listenLocked is Listen with n.mu held.
func (n *Network) listenLocked(addr netip.AddrPort) (*Endpoint, error) {
	if n.closed {
		return nil, fmt.Errorf("udptest: listen %v: %w", addr, net.ErrClosed)
	}
	if addr.Addr().Is4In6() {
		addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	}
	if addr.Port() == 0 {
		for i := 0; ; i++ {
			if i > 1<<16 {
				return nil, fmt.Errorf("udptest: listen %v: no free port", addr)
			}
			p := n.nextPort
			n.nextPort++
			if n.nextPort == 0 {
				n.nextPort = 49152
			}
			cand := netip.AddrPortFrom(addr.Addr(), p)
			if _, ok := n.endpoints[cand]; !ok {
				addr = cand
				break
			}
		}
	}
	if _, ok := n.endpoints[addr]; ok {
		return nil, fmt.Errorf("udptest: listen %v: address in use", addr)
	}
	ep := &Endpoint{
		net:    n,
		addr:   addr,
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	n.endpoints[addr] = ep
	return ep, nil
}

// Close closes every endpoint, discards datagrams in flight and stops the
// timer, so nothing of the network keeps running.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	eps := make([]*Endpoint, 0, len(n.endpoints))
	for _, ep := range n.endpoints {
		eps = append(eps, ep)
	}
	eps = append(eps, n.shards...)
	if n.timer != nil {
		n.timer.Stop()
	}
	n.sched = n.sched[:0]
	clear(n.links)
	n.mu.Unlock()
	for _, ep := range eps {
		ep.Close()
	}
	return nil
}

// faultsFor returns the effective faults of the link src→dst.
// Called with n.mu held.
func (n *Network) faultsFor(src, dst netip.AddrPort) Faults {
	if len(n.rules) > 0 {
		for _, k := range [...]linkKey{{src, dst}, {netip.AddrPort{}, dst}, {src, netip.AddrPort{}}} {
			if f, ok := n.rules[k]; ok {
				return f
			}
		}
	}
	return n.global
}

// linkFor returns the state of link src→dst, creating it with a random
// stream derived from the seed and the addresses. Called with n.mu held.
func (n *Network) linkFor(src, dst netip.AddrPort) *link {
	k := linkKey{src, dst}
	if l, ok := n.links[k]; ok {
		return l
	}
	l := &link{rng: rand.New(rand.NewPCG(n.seed, addrHash(src)*31+addrHash(dst)))}
	n.links[k] = l
	return l
}

// addrHash is a stable (seed-independent) hash of an address, so link
// streams are reproducible across runs.
func addrHash(a netip.AddrPort) uint64 {
	h := uint64(14695981039346656037)
	b := a.Addr().As16()
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	h = (h ^ uint64(a.Port()>>8)) * 1099511628211
	h = (h ^ uint64(a.Port()&0xff)) * 1099511628211
	return h
}

// getBuf returns a buffer of length size from the free list.
// Called with n.mu held.
func (n *Network) getBuf(size int) []byte {
	for i := len(n.free) - 1; i >= 0 && i >= len(n.free)-4; i-- {
		if b := n.free[i]; cap(b) >= size {
			n.free[i] = n.free[len(n.free)-1]
			n.free[len(n.free)-1] = nil
			n.free = n.free[:len(n.free)-1]
			return b[:size]
		}
	}
	return make([]byte, size, max(size, 2048))
}

// putBuf recycles a datagram buffer. Called with n.mu held.
func (n *Network) putBuf(b []byte) {
	if len(n.free) < 1024 {
		n.free = append(n.free, b)
	}
}

// send runs one datagram through the filter and the faults.
func (n *Network) send(src netip.AddrPort, m *udp.Message) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fmt.Errorf("udptest: send: %w", net.ErrClosed)
	}
	dst := m.Addr
	if dst.Addr().Is4In6() {
		dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	}
	data := n.getBuf(m.N)
	copy(data, m.Buf[:m.N])
	filter := n.filter
	n.mu.Unlock()
	n.Stats.Sent.Inc()

	v := Pass
	if filter != nil {
		v = filter(src, dst, data)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return fmt.Errorf("udptest: send: %w", net.ErrClosed)
	}
	f := n.faultsFor(src, dst)
	l := n.linkFor(src, dst)
	now := time.Now()
	switch v {
	case Drop:
		n.Stats.Filtered.Inc()
		n.putBuf(data)
		n.advanceHeld(l, src, dst, now)
		return nil
	case Deliver, Duplicate:
		if v == Duplicate {
			n.Stats.Duplicated.Inc()
			dup := n.getBuf(len(data))
			copy(dup, data)
			n.schedule(src, dst, dup, n.delay(l, f), now)
		}
		n.schedule(src, dst, data, n.delay(l, f), now)
		n.advanceHeld(l, src, dst, now)
		return nil
	}
	// Every probability draws from the stream even when zero-effect, so
	// turning one fault on does not shift the others' decisions.
	rDrop, rDup, rCorrupt, rReorder := l.rng.Float64(), l.rng.Float64(), l.rng.Float64(), l.rng.Float64()
	if rDrop < f.Drop {
		n.Stats.Dropped.Inc()
		n.putBuf(data)
		n.advanceHeld(l, src, dst, now)
		return nil
	}
	if rCorrupt < f.Corrupt && len(data) > 0 {
		n.Stats.Corrupted.Inc()
		data[l.rng.IntN(len(data))] ^= byte(1 + l.rng.IntN(255))
	}
	if rDup < f.Duplicate {
		n.Stats.Duplicated.Inc()
		dup := n.getBuf(len(data))
		copy(dup, data)
		n.schedule(src, dst, dup, n.delay(l, f), now)
	}
	if rReorder < f.Reorder {
		// Hold it; later datagrams on the link (or the timeout) free it.
		n.Stats.Reordered.Inc()
		n.advanceHeld(l, src, dst, now)
		n.seq++
		l.held = append(l.held, held{id: n.seq, left: f.ReorderGap, data: data, delay: n.delay(l, f)})
		n.push(event{at: now.Add(f.ReorderTimeout), seq: n.seq, src: src, dst: dst, held: true})
		return nil
	}
	n.schedule(src, dst, data, n.delay(l, f), now)
	n.advanceHeld(l, src, dst, now)
	return nil
}

// delay draws the delay of one datagram. Called with n.mu held.
func (n *Network) delay(l *link, f Faults) time.Duration {
	d := f.Delay
	if f.Jitter > 0 {
		d += time.Duration(l.rng.Int64N(int64(f.Jitter)))
	}
	return d
}

// advanceHeld counts one datagram past the held ones of l and releases
// those whose gap is used up. Called with n.mu held.
func (n *Network) advanceHeld(l *link, src, dst netip.AddrPort, now time.Time) {
	k := 0
	for _, h := range l.held {
		h.left--
		if h.left <= 0 {
			n.schedule(src, dst, h.data, h.delay, now)
			continue
		}
		l.held[k] = h
		k++
	}
	clear(l.held[k:])
	l.held = l.held[:k]
}

// releaseHeld frees the held datagram id of link src→dst on its timeout,
// if it is still held. Called with n.mu held.
func (n *Network) releaseHeld(src, dst netip.AddrPort, id uint64, now time.Time) {
	l, ok := n.links[linkKey{src, dst}]
	if !ok {
		return
	}
	for i, h := range l.held {
		if h.id == id {
			l.held = append(l.held[:i], l.held[i+1:]...)
			n.schedule(src, dst, h.data, h.delay, now)
			return
		}
	}
}

// schedule delivers data now or queues it for the timer.
// Called with n.mu held.
func (n *Network) schedule(src, dst netip.AddrPort, data []byte, d time.Duration, now time.Time) {
	if d <= 0 {
		n.deliver(src, dst, data)
		return
	}
	n.Stats.Delayed.Inc()
	n.seq++
	n.push(event{at: now.Add(d), seq: n.seq, src: src, dst: dst, data: data})
}

// push adds an event to the schedule and re-arms the timer if the event
// is the earliest. Called with n.mu held.
func (n *Network) push(e event) {
	n.sched.push(e)
	if n.timer == nil {
		n.timer = time.AfterFunc(time.Until(e.at), n.timerRun)
		n.timerAt = e.at
		return
	}
	if first := n.sched[0].at; !first.Equal(n.timerAt) || len(n.sched) == 1 {
		n.timer.Reset(time.Until(first))
		n.timerAt = first
	}
}

// runTimer delivers every due event and re-arms the timer.
func (n *Network) runTimer() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	now := time.Now()
	for len(n.sched) > 0 && !n.sched[0].at.After(now) {
		e := n.sched.pop()
		if e.held {
			n.releaseHeld(e.src, e.dst, e.seq, now)
		} else {
			n.deliver(e.src, e.dst, e.data)
		}
	}
	if len(n.sched) > 0 {
		n.timerAt = n.sched[0].at
		n.timer.Reset(time.Until(n.timerAt))
	} else {
		n.timerAt = time.Time{}
	}
}

// deliver queues data at the endpoint dst (for a shard group, the shard
// its policy picks). Called with n.mu held.
func (n *Network) deliver(src, dst netip.AddrPort, data []byte) {
	ep, ok := n.endpoints[dst]
	if !ok {
		n.Stats.NoRoute.Inc()
		n.putBuf(data)
		return
	}
	if g := ep.group; g != nil {
		ep = g.pick(src)
	}
	if !ep.enqueue(packet{src: src, data: data}, n.queueLimit) {
		n.Stats.Overflow.Inc()
		n.putBuf(data)
		return
	}
	n.Stats.Delivered.Inc()
}

// event is a timed delivery or a reorder timeout.
type event struct {
	at   time.Time
	seq  uint64 // FIFO order among equal times; held id for timeouts
	src  netip.AddrPort
	dst  netip.AddrPort
	data []byte
	held bool
}

func (a *event) before(b *event) bool {
	if a.at.Equal(b.at) {
		return a.seq < b.seq
	}
	return a.at.Before(b.at)
}

// schedule is a binary min-heap of events (container/heap would box
// every event in an interface).
type schedule []event

func (s *schedule) push(e event) {
	*s = append(*s, e)
	h := *s
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (s *schedule) pop() event {
	h := *s
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{}
	h = h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l].before(&h[m]) {
			m = l
		}
		if r < len(h) && h[r].before(&h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*s = h
	return e
}
