package lnet

import (
	"context"
	"sync"
	"time"
)

// EQ is an event queue (struct lnet_eq): a ring of events, as in Lustre
// 2.12, with sequence numbers that reveal overflow, and an optional handler
// called for each event.
//
// The ring never blocks a producer: when it is full the oldest unread
// events are overwritten, and the next Poll returns the oldest surviving
// event together with ErrEQOverflow (LNetEQPoll's -EOVERFLOW).
type EQ struct {
	in      *Instance
	handler func(*Event)

	mu     sync.Mutex // guards the fields below
	ring   []Event    // len is a power of two, or 0 for handler-only EQs
	enqSeq uint64     // sequence of the next event
	deqSeq uint64     // sequence the reader expects next
	refs   int        // MDs using the EQ (guarded by in.mu, not mu)
	freed  bool
}

// EQAlloc creates an EQ with room for count events (rounded up to a power
// of two) and an optional handler (LNetEQAlloc). count 0 makes a
// handler-only EQ that Poll never returns events from.
func (in *Instance) EQAlloc(count int, handler func(*Event)) (*EQ, error) {
	if count < 0 || (count == 0 && handler == nil) {
		return nil, ErrInvalid
	}
	eq := &EQ{in: in, handler: handler, enqSeq: 1, deqSeq: 1}
	if count > 0 {
		eq.ring = make([]Event, roundPow2(count))
	}
	return eq, nil
}

// EQFree releases eq (LNetEQFree). It fails with ErrBusy while an MD still
// uses it.
func (in *Instance) EQFree(eq *EQ) error {
	if eq == nil || eq.in != in {
		return ErrInvalid
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if eq.refs > 0 {
		return ErrBusy
	}
	eq.mu.Lock()
	eq.freed = true
	eq.mu.Unlock()
	return nil
}

// Len returns the ring size (0 for handler-only EQs).
func (eq *EQ) Len() int { return len(eq.ring) }

// enqueue appends ev to the ring with the next sequence number and wakes
// pollers. It does not call the handler (callers do, outside locks).
func (eq *EQ) enqueue(ev *Event) {
	eq.mu.Lock()
	ev.Sequence = eq.enqSeq
	eq.enqSeq++
	if n := len(eq.ring); n > 0 && !eq.freed {
		eq.ring[ev.Sequence&uint64(n-1)] = *ev
	}
	eq.mu.Unlock()
	if len(eq.ring) > 0 {
		eq.in.waiters.wake()
	}
}

// dequeue takes the next event, reporting overflow (lnet_eq_dequeue_event).
func (eq *EQ) dequeue(ev *Event) (ok bool, err error) {
	eq.mu.Lock()
	defer eq.mu.Unlock()
	n := len(eq.ring)
	if n == 0 || eq.freed {
		return false, nil
	}
	slot := &eq.ring[eq.deqSeq&uint64(n-1)]
	if slot.Sequence < eq.deqSeq {
		return false, nil // nothing new
	}
	*ev = *slot
	if slot.Sequence != eq.deqSeq {
		err = ErrEQOverflow // events between deqSeq and slot.Sequence were overwritten
	}
	eq.deqSeq = slot.Sequence + 1
	return true, err
}

// Get returns the next event without waiting (LNetEQGet): ok is false if
// none; err is ErrEQOverflow if events were lost before this one.
func (eq *EQ) Get() (ev Event, ok bool, err error) {
	ok, err = eq.dequeue(&ev)
	return ev, ok, err
}

// waiterSet wakes EQPoll callers when any EQ of the instance gets an
// event (Lustre's single ln_eq_waitq). Channels are reused, so waking
// allocates nothing.
type waiterSet struct {
	mu   sync.Mutex
	set  map[chan struct{}]struct{}
	free []chan struct{}
}

func (w *waiterSet) add() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	var c chan struct{}
	if n := len(w.free); n > 0 {
		c = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		c = make(chan struct{}, 1)
	}
	if w.set == nil {
		w.set = make(map[chan struct{}]struct{})
	}
	w.set[c] = struct{}{}
	return c
}

func (w *waiterSet) remove(c chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.set, c)
	select {
	case <-c:
	default:
	}
	w.free = append(w.free, c)
}

func (w *waiterSet) wake() {
	w.mu.Lock()
	for c := range w.set {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

// EQPoll waits for an event on any of eqs (LNetEQPoll). It returns the
// event and the index in eqs of the EQ it came from. EQs are scanned in
// order, so earlier EQs have priority. timeout 0 polls without waiting; a
// negative timeout waits forever. With no event in time it returns
// ErrTimeout and index -1. If events were lost on that EQ before the one
// returned, the event is valid and err is ErrEQOverflow.
func (in *Instance) EQPoll(eqs []*EQ, timeout time.Duration) (Event, int, error) {
	var ev Event
	for i, eq := range eqs { // fast path: no allocation when an event is ready
		if eq == nil || eq.in != in {
			return ev, -1, ErrInvalid
		}
		if ok, err := eq.dequeue(&ev); ok {
			return ev, i, err
		}
	}
	if timeout == 0 {
		if len(eqs) == 0 {
			return ev, -1, ErrInvalid
		}
		return ev, -1, ErrTimeout
	}
	ctx := context.Background()
	if timeout >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return in.EQPollContext(ctx, eqs)
}

// EQPollContext is EQPoll bounded by ctx instead of a timeout; on ctx's
// end it returns ErrTimeout (for a deadline) or ctx.Err().
func (in *Instance) EQPollContext(ctx context.Context, eqs []*EQ) (Event, int, error) {
	var ev Event
	if len(eqs) == 0 {
		return ev, -1, ErrInvalid
	}
	for _, eq := range eqs {
		if eq == nil || eq.in != in {
			return ev, -1, ErrInvalid // its events would not wake us
		}
	}
	scan := func() (int, error, bool) {
		for i, eq := range eqs {
			if ok, err := eq.dequeue(&ev); ok {
				return i, err, true
			}
		}
		return -1, nil, false
	}
	if i, err, ok := scan(); ok {
		return ev, i, err
	}
	w := in.waiters.add()
	defer in.waiters.remove(w)
	for {
		// Re-scan after registering so a wake between the first scan and
		// add is not lost.
		if i, err, ok := scan(); ok {
			return ev, i, err
		}
		select {
		case <-w:
		case <-ctx.Done():
			if i, err, ok := scan(); ok {
				return ev, i, err
			}
			if ctx.Err() == context.DeadlineExceeded {
				return ev, -1, ErrTimeout
			}
			return ev, -1, ctx.Err()
		}
	}
}

// Wait blocks until eq has an event (LNetEQWait) or ctx ends.
func (eq *EQ) Wait(ctx context.Context) (Event, error) {
	ev, _, err := eq.in.EQPollContext(ctx, []*EQ{eq})
	return ev, err
}
