package netemu

import (
	"container/heap"
	"math/rand/v2"
	"sync"
	"time"
)

// A lane is one direction of the router's data path:
//
//	ingress socket ─read─▶ forwarder.handle (parse, route, split GSO,
//	  finish checksums, TTL) ─▶ lane.input (loss, dup, corrupt, delay,
//	  rate, reorder) ─┬─ due now and nothing queued ─▶ transmit
//	                  └─ queue (heap by due time) / held ─▶ lane.run ─▶ transmit
//
// The ingress goroutine calls input; the lane's scheduler goroutine
// (run) sends queued packets when they fall due. Both transmit under mu
// into the out list, which push hands to the egress socket in one
// batch (sendmmsg), so packets leave in the order the model decided.
// The ingress goroutine pushes once per batch of frames it read.

// packet is a frame on its way through a lane. buf holds a zeroed
// virtio header followed by the Ethernet frame, ready for the egress
// socket.
type packet struct {
	buf      []byte
	n        int       // bytes of buf in use
	due      time.Time // when it may be sent
	deadline time.Time // held packets: latest release
	seq      uint64    // arrival order within the lane
	gap      int       // held packets: later packets still to overtake it
	index    int       // position in the queue heap
}

// packetPool recycles packets with buffers of one capacity.
type packetPool struct {
	size int
	p    sync.Pool
}

func newPacketPool(size int) *packetPool { return &packetPool{size: size} }

func (pp *packetPool) get() *packet {
	if p, ok := pp.p.Get().(*packet); ok {
		return p
	}
	return &packet{buf: make([]byte, pp.size)}
}

func (pp *packetPool) put(p *packet) {
	p.n, p.gap = 0, 0
	pp.p.Put(p)
}

// queue is a min-heap of packets by (due, seq), for container/heap.
type queue []*packet

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].due.Equal(q[j].due) {
		return q[i].seq < q[j].seq
	}
	return q[i].due.Before(q[j].due)
}
func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *queue) Push(x any) {
	p := x.(*packet)
	p.index = len(*q)
	*q = append(*q, p)
}
func (q *queue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return p
}

// sender transmits one frame (virtio header included) on the egress
// link. It is only called under the lane's mutex.
type sender interface {
	send(b []byte) error
}

// batchSender is a sender that can also send many frames at once; it
// returns how many of them failed.
type batchSender interface {
	sender
	sendBatch(ps []*packet) (failed int)
}

// lane is one direction's impairment model and queue.
type lane struct {
	c    counters
	pool *packetPool
	kick chan struct{} // capacity 1: wakes run after queue changes

	mu       sync.Mutex // guards all fields below
	imp      Impairment // with defaults applied
	rng      *rand.Rand
	tx       sender
	out      []*packet // transmitted, waiting for push
	seq      uint64    // seq of the next packet to arrive
	sentHigh uint64    // 1 + highest seq sent so far
	linkFree time.Time // Rate: when the emulated link is next idle
	q        queue
	held     []*packet // packets held for reordering, in arrival order
}

func newLane(tx sender, pool *packetPool, seed uint64, dir Dir) *lane {
	return &lane{
		pool: pool,
		kick: make(chan struct{}, 1),
		imp:  Impairment{}.withDefaults(),
		rng:  rand.New(rand.NewPCG(seed, uint64(dir))),
		tx:   tx,
	}
}

func (l *lane) set(im Impairment) {
	l.mu.Lock()
	l.imp = im.withDefaults()
	if l.imp.Rate == 0 {
		l.linkFree = time.Time{}
	}
	l.mu.Unlock()
	l.wake()
}

func (l *lane) get() Impairment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.imp
}

func (l *lane) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// input runs the impairment model on p, whose IP payload (where
// corruption may strike) is p.buf[payload:end] and whose flow decides
// whether the impairment's filter selects it. input takes ownership of
// p.
func (l *lane) input(p *packet, fl flow, payload, end int) {
	l.c.Received.Inc()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.imp.Match.matches(fl) {
		l.schedule(p, now, false, false)
		return
	}
	im, rng := &l.imp, l.rng
	if im.Loss > 0 && rng.Float64() < im.Loss {
		l.c.Dropped.Inc()
		l.pool.put(p)
		return
	}
	if im.Duplicate > 0 && rng.Float64() < im.Duplicate {
		d := l.pool.get()
		d.n = copy(d.buf, p.buf[:p.n])
		l.c.Duplicated.Inc()
		l.schedule(d, now, true, true)
	}
	if im.Corrupt > 0 && rng.Float64() < im.Corrupt && end > payload {
		p.buf[payload+rng.IntN(end-payload)] ^= byte(1 + rng.IntN(255))
		l.c.Corrupted.Inc()
	}
	l.schedule(p, now, true, false)
}

// schedule gives p its due time and either sends it at once or queues
// it. impair applies delay, rate and reordering; dup marks a duplicate,
// which is not held for reordering (netem does not reorder its copies
// either).
func (l *lane) schedule(p *packet, now time.Time, impair, dup bool) {
	im, rng := &l.imp, l.rng
	if len(l.q)+len(l.held) >= im.Limit {
		l.c.Overflow.Inc()
		l.pool.put(p)
		return
	}
	p.seq = l.seq
	l.seq++
	p.due = now
	hold := false
	if impair {
		d := im.Delay
		if im.Jitter > 0 {
			d += time.Duration(rng.Int64N(2*int64(im.Jitter)+1)) - im.Jitter
		}
		if d > 0 {
			p.due = now.Add(d)
		}
		if im.Rate > 0 {
			p.due = later(p.due, l.linkFree)
			l.linkFree = p.due.Add(time.Duration(int64(p.n-vnetLen-ethLen) * 8 * int64(time.Second) / im.Rate))
		}
		hold = !dup && im.Reorder > 0 && rng.Float64() < im.Reorder
	}
	switch {
	case hold:
		p.gap, p.deadline = im.ReorderGap, p.due.Add(im.ReorderHold)
		l.held = append(l.held, p)
		l.c.Held.Inc()
		l.wake()
	case !p.due.After(now) && len(l.q) == 0:
		l.transmit(p)
	default:
		heap.Push(&l.q, p)
		l.wake()
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// transmit puts p on the out list, then every held packet that has now
// been overtaken by enough later packets.
func (l *lane) transmit(p *packet) {
	for p != nil {
		l.out = append(l.out, p)
		if p.seq+1 < l.sentHigh {
			l.c.Reordered.Inc()
		}
		l.sentHigh = max(l.sentHigh, p.seq+1)
		seq := p.seq
		p = nil
		for _, h := range l.held {
			if h.seq < seq {
				h.gap--
			}
		}
		for i, h := range l.held {
			if h.gap <= 0 {
				p = l.unhold(i)
				break
			}
		}
	}
}

// push sends the out list. l.mu must be held.
func (l *lane) push() {
	if len(l.out) == 0 {
		return
	}
	failed := 0
	if bs, ok := l.tx.(batchSender); ok {
		failed = bs.sendBatch(l.out)
	} else {
		for _, p := range l.out {
			if l.tx.send(p.buf[:p.n]) != nil {
				failed++
			}
		}
	}
	l.c.Forwarded.Add(uint64(len(l.out) - failed))
	l.c.TxErrors.Add(uint64(failed))
	for i, p := range l.out {
		l.pool.put(p)
		l.out[i] = nil
	}
	l.out = l.out[:0]
}

// pushLocked is push for callers that do not hold l.mu.
func (l *lane) pushLocked() {
	l.mu.Lock()
	l.push()
	l.mu.Unlock()
}

// unhold removes held[i] and returns it.
func (l *lane) unhold(i int) *packet {
	p := l.held[i]
	copy(l.held[i:], l.held[i+1:])
	l.held[len(l.held)-1] = nil
	l.held = l.held[:len(l.held)-1]
	return p
}

// flush sends everything due at now and returns when it next has work
// (zero if nothing is queued).
func (l *lane) flush(now time.Time) time.Time {
	for len(l.q) > 0 && !l.q[0].due.After(now) {
		l.transmit(heap.Pop(&l.q).(*packet))
	}
	for i := 0; i < len(l.held); {
		if l.held[i].deadline.After(now) {
			i++
			continue
		}
		l.transmit(l.unhold(i))
		i = 0 // transmit may have released others
	}
	l.push()
	var next time.Time
	if len(l.q) > 0 {
		next = l.q[0].due
	}
	for _, h := range l.held {
		if next.IsZero() || h.deadline.Before(next) {
			next = h.deadline
		}
	}
	return next
}

// run is the lane's scheduler goroutine: it sends queued packets when
// they fall due, until done is closed.
func (l *lane) run(done <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		l.mu.Lock()
		next := l.flush(time.Now())
		l.mu.Unlock()
		var wake <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			wake = timer.C
		}
		select {
		case <-l.kick:
		case <-wake:
		case <-done:
			return
		}
	}
}

// drain frees every queued packet; call it after run has returned.
func (l *lane) drain() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.q {
		l.pool.put(p)
	}
	for _, p := range l.held {
		l.pool.put(p)
	}
	for _, p := range l.out {
		l.pool.put(p)
	}
	l.q, l.held, l.out = nil, nil, nil
}

// queued returns how many packets wait in the lane.
func (l *lane) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.q) + len(l.held)
}
