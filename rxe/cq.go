package rxe

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"softib/verbs"
)

// CQ is a completion queue: a ring of completions that QP engines push
// into (under mu) and applications poll.
type CQ struct {
	dev     *Device
	ch      *verbs.CompChannel
	handler func(verbs.CQ)
	context any
	// hrun serialises handler calls: hIdle, hRunning, or hAgain (an
	// event arrived while the handler ran: run it once more).
	hrun atomic.Int32

	mu       sync.Mutex
	ring     []verbs.WC // lazily grown up to cqe entries
	head, n  int
	cqe      int
	armed    bool
	solOnly  bool
	overrun  bool
	dead     bool
	users    atomic.Int32 // QPs using the CQ
	rx       cqPoll       // the device's poll hook state (busypoll.go)
	waitCond *sync.Cond   // signalled on every push (for tests and Drain)
}

var _ verbs.CQ = (*CQ)(nil)

// CreateCQ creates a completion queue of at least attr.CQE entries.
func (d *Device) CreateCQ(attr verbs.CQAttr) (verbs.CQ, error) {
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	if attr.CQE < 1 || attr.CQE > MaxCQE {
		return nil, fmt.Errorf("rxe: create CQ: cqe %d not in [1, %d]: %w", attr.CQE, MaxCQE, verbs.ErrInvalidArgument)
	}
	cq := &CQ{dev: d, ch: attr.Channel, handler: attr.Handler, context: attr.Context, cqe: attr.CQE}
	cq.waitCond = sync.NewCond(&cq.mu)
	d.mu.Lock()
	if len(d.cqs) >= MaxCQ {
		d.mu.Unlock()
		return nil, fmt.Errorf("rxe: create CQ: %d CQs: %w", MaxCQ, verbs.ErrResourceLimit)
	}
	d.cqs[cq] = struct{}{}
	d.mu.Unlock()
	if attr.Channel != nil {
		if err := attr.Channel.Attach(); err != nil {
			d.mu.Lock()
			delete(d.cqs, cq)
			d.mu.Unlock()
			return nil, err
		}
	}
	return cq, nil
}

// pushEvent is what a push notified.
type pushEvent uint8

const (
	// pushWoke: the completion channel got an event (a goroutine may be
	// waiting for it).
	pushWoke pushEvent = 1 << iota
	// pushHandler: the completion handler is due; the QP calls it once
	// it has released its mutex (QP.runHandlers).
	pushHandler
)

// push appends a completion. solicited marks a receive completion of a
// solicited message. On overflow the CQ enters error: the completion is
// lost, Poll reports ErrCQOverrun and an EventCQErr is raised. push
// reports whether it notified the completion channel and whether the
// handler is due.
func (cq *CQ) push(wc *verbs.WC, solicited bool) pushEvent {
	cq.mu.Lock()
	if cq.dead || cq.overrun {
		cq.mu.Unlock()
		return 0
	}
	if cq.n == cq.cqe {
		cq.overrun = true
		cq.mu.Unlock()
		cq.dev.stats.CQOverrun.Inc()
		cq.dev.raise(verbs.AsyncEvent{Type: verbs.EventCQErr, CQ: cq})
		return 0
	}
	if cq.n == len(cq.ring) {
		cq.grow(min(max(2*len(cq.ring), 16), cq.cqe))
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = *wc
	cq.n++
	notify := cq.armed && (!cq.solOnly || solicited || wc.Status != verbs.WCSuccess)
	if notify {
		cq.armed = false
	}
	cq.waitCond.Broadcast()
	cq.mu.Unlock()
	var ev pushEvent
	if notify && cq.ch != nil {
		cq.ch.Notify(cq)
		ev |= pushWoke
	}
	if notify && cq.handler != nil {
		ev |= pushHandler
	}
	return ev
}

// Handler call states (CQ.hrun).
const (
	hIdle int32 = iota
	hRunning
	hAgain
)

// callHandler runs the completion handler on the calling goroutine, or,
// if another call is running, makes that one run it again when it
// returns: calls never overlap and no event is lost.
func (cq *CQ) callHandler() {
	for {
		switch cq.hrun.Load() {
		case hIdle:
			if !cq.hrun.CompareAndSwap(hIdle, hRunning) {
				continue
			}
		case hRunning:
			if !cq.hrun.CompareAndSwap(hRunning, hAgain) {
				continue
			}
			return
		default:
			return
		}
		break
	}
	for {
		cq.handler(cq)
		if cq.hrun.CompareAndSwap(hRunning, hIdle) {
			return
		}
		cq.hrun.Store(hRunning) // hAgain: an event came in meanwhile
	}
}

func (cq *CQ) grow(size int) {
	r := make([]verbs.WC, size)
	for i := range cq.n {
		r[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = r, 0
}

// Poll moves up to len(wcs) completions into wcs. The CQ is a store of
// completions; a Poll that finds it empty calls the device's hook
// (Device.pollEmpty, busypoll.go), which sends the responses the device
// deferred for the application and, in busy-poll mode or when the
// application has been spinning on Poll (Config.PollRxAfter), receives
// from the device's sockets itself.
func (cq *CQ) Poll(wcs []verbs.WC) (int, error) {
	n, err := cq.poll(wcs)
	if n == 0 && err == nil && len(wcs) > 0 && cq.dev.pollEmpty(cq) {
		n, err = cq.poll(wcs)
	}
	if n > 0 && cq.rx.empties.Load() != 0 {
		cq.rx.empties.Store(0)
	}
	return n, err
}

// nonEmpty reports whether completions are queued.
func (cq *CQ) nonEmpty() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n > 0 || cq.overrun || cq.dead
}

func (cq *CQ) poll(wcs []verbs.WC) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return 0, verbs.ErrClosed
	}
	k := min(len(wcs), cq.n)
	for i := range k {
		wcs[i] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
	}
	cq.n -= k
	if cq.overrun && cq.n == 0 {
		return k, verbs.ErrCQOverrun
	}
	return k, nil
}

// ReqNotify arms the CQ for one channel event. The application is about
// to sleep, so deferred responses go now.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.dev.flushDeferred()
	cq.rx.empties.Store(0) // the waiter is about to sleep, not spin
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return verbs.ErrClosed
	}
	if cq.overrun {
		return verbs.ErrCQOverrun
	}
	cq.armed, cq.solOnly = true, solicitedOnly
	return nil
}

// Resize changes the capacity.
func (cq *CQ) Resize(cqe int) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.dead {
		return verbs.ErrClosed
	}
	if cqe < 1 || cqe > MaxCQE || cqe < cq.n {
		return fmt.Errorf("rxe: resize CQ to %d (%d queued): %w", cqe, cq.n, verbs.ErrInvalidArgument)
	}
	if len(cq.ring) > cqe {
		cq.grow(cqe)
	}
	cq.cqe = cqe
	return nil
}

// CQE returns the capacity.
func (cq *CQ) CQE() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.cqe
}

// Channel returns the completion channel.
func (cq *CQ) Channel() *verbs.CompChannel { return cq.ch }

// Context returns CQAttr.Context.
func (cq *CQ) Context() any { return cq.context }

// Destroy frees the CQ; ErrBusy while QPs use it.
func (cq *CQ) Destroy() error {
	if cq.users.Load() != 0 {
		return fmt.Errorf("rxe: destroy CQ: %w", verbs.ErrBusy)
	}
	cq.mu.Lock()
	if cq.dead {
		cq.mu.Unlock()
		return verbs.ErrClosed
	}
	cq.dead = true
	cq.waitCond.Broadcast()
	cq.mu.Unlock()
	if cq.ch != nil {
		cq.ch.Detach()
	}
	cq.dev.mu.Lock()
	delete(cq.dev.cqs, cq)
	cq.dev.mu.Unlock()
	return nil
}

// Wait blocks until the CQ holds a completion, the CQ is destroyed or the
// timeout passes, and reports whether a completion is there. It is a
// softib convenience for tests and simple tools (a completion channel is
// the verbs way).
func (cq *CQ) Wait(timeout time.Duration) bool {
	// The timer's own flag ends the wait: comparing the clock with a
	// deadline taken after the timer started could miss its only
	// wakeup and sleep forever.
	expired := false
	t := time.AfterFunc(timeout, func() {
		cq.mu.Lock()
		expired = true
		cq.waitCond.Broadcast()
		cq.mu.Unlock()
	})
	defer t.Stop()
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for cq.n == 0 && !cq.dead && !cq.overrun && !expired {
		cq.waitCond.Wait()
	}
	return cq.n > 0
}

// recvWQE is a posted receive.
type recvWQE struct {
	id  uint64
	sgl []verbs.SGE
}

// ring is a FIFO of T, grown by doubling up to a limit. Positions are
// absolute counters, so they stay valid across growth.
type ring[T any] struct {
	buf        []T
	head, tail uint64
	max        int
}

func (r *ring[T]) len() int { return int(r.tail - r.head) }

func (r *ring[T]) full() bool { return r.len() >= r.max }

// at returns the element at absolute position p.
func (r *ring[T]) at(p uint64) *T { return &r.buf[p&uint64(len(r.buf)-1)] }

// push reserves the tail slot and returns it (nil when full). Slots keep
// their old contents so that slices in them are reused.
func (r *ring[T]) push() *T {
	if r.full() {
		return nil
	}
	if r.len() == len(r.buf) {
		n := max(4, 2*len(r.buf))
		b := make([]T, n)
		for p := r.head; p != r.tail; p++ {
			b[p&uint64(n-1)] = *r.at(p)
		}
		// Carry spare slots' buffers over so that their capacity is
		// reused.
		r.buf = b
	}
	e := r.at(r.tail)
	r.tail++
	return e
}

func (r *ring[T]) pop() { r.head++ }

// SRQ is a shared receive queue.
type SRQ struct {
	pd      *PD
	context any

	mu     sync.Mutex
	rq     ring[recvWQE]
	maxSGE int
	limit  int
	dead   bool
	users  atomic.Int32
}

var _ verbs.SRQ = (*SRQ)(nil)

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQ, error) {
	if err := pd.check(); err != nil {
		return nil, err
	}
	a := attr.Attr
	if a.MaxWR < 1 || a.MaxWR > MaxSRQWR || a.MaxSGE < 0 || a.MaxSGE > MaxSRQSGE || a.Limit < 0 || a.Limit > a.MaxWR {
		return nil, fmt.Errorf("rxe: create SRQ %+v: %w", a, verbs.ErrInvalidArgument)
	}
	if pd.dev.srqs.Add(1) > MaxQP {
		pd.dev.srqs.Add(-1)
		return nil, fmt.Errorf("rxe: create SRQ: %d SRQs: %w", MaxQP, verbs.ErrResourceLimit)
	}
	s := &SRQ{pd: pd, context: attr.Context, maxSGE: max(a.MaxSGE, 1), limit: a.Limit}
	s.rq.max = a.MaxWR
	pd.users.Add(1)
	return s, nil
}

// PostRecv posts receive work requests.
func (s *SRQ) PostRecv(wrs []verbs.RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return 0, verbs.ErrClosed
	}
	for i := range wrs {
		if len(wrs[i].SGL) > s.maxSGE {
			return i, fmt.Errorf("rxe: SRQ post recv: %d SGEs > %d: %w", len(wrs[i].SGL), s.maxSGE, verbs.ErrInvalidArgument)
		}
		e := s.rq.push()
		if e == nil {
			return i, fmt.Errorf("rxe: SRQ post recv: %w", verbs.ErrQueueFull)
		}
		e.id = wrs[i].ID
		e.sgl = append(e.sgl[:0], wrs[i].SGL...)
	}
	return len(wrs), nil
}

// take copies the head receive into dst and pops it. It reports false when
// the SRQ is empty, and raises the limit event when the count drops below
// an armed limit.
func (s *SRQ) take(dst *recvWQE) bool {
	s.mu.Lock()
	if s.rq.len() == 0 || s.dead {
		s.mu.Unlock()
		return false
	}
	e := s.rq.at(s.rq.head)
	dst.id = e.id
	dst.sgl = append(dst.sgl[:0], e.sgl...)
	s.rq.pop()
	fire := s.limit > 0 && s.rq.len() < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		s.pd.dev.raise(verbs.AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: s})
	}
	return true
}

// Modify resizes the SRQ and/or arms its limit.
func (s *SRQ) Modify(attr verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrClosed
	}
	maxWR := s.rq.max
	if mask&verbs.SRQAttrMaxWR != 0 {
		if attr.MaxWR < s.rq.len() || attr.MaxWR < 1 || attr.MaxWR > MaxSRQWR {
			return fmt.Errorf("rxe: SRQ max_wr %d: %w", attr.MaxWR, verbs.ErrInvalidArgument)
		}
		maxWR = attr.MaxWR
	}
	if mask&verbs.SRQAttrLimit != 0 && (attr.Limit < 0 || attr.Limit > maxWR) {
		return fmt.Errorf("rxe: SRQ limit %d: %w", attr.Limit, verbs.ErrInvalidArgument)
	}
	s.rq.max = maxWR
	if mask&verbs.SRQAttrLimit != 0 {
		s.limit = attr.Limit
	}
	return nil
}

// Query returns the current attributes.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.SRQAttr{}, verbs.ErrClosed
	}
	return verbs.SRQAttr{MaxWR: s.rq.max, MaxSGE: s.maxSGE, Limit: s.limit}, nil
}

// Context returns SRQInitAttr.Context.
func (s *SRQ) Context() any { return s.context }

// Destroy frees the SRQ; ErrBusy while QPs use it.
func (s *SRQ) Destroy() error {
	if s.users.Load() != 0 {
		return fmt.Errorf("rxe: destroy SRQ: %w", verbs.ErrBusy)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.ErrClosed
	}
	s.dead = true
	s.pd.users.Add(-1)
	s.pd.dev.srqs.Add(-1)
	return nil
}
