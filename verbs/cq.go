package verbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// CompChannel is a completion channel (ibv_comp_channel): CQs created with
// it signal it once per ReqNotify when a completion arrives. C can be used
// in a select statement.
//
// A channel holds at most Capacity pending events, which is also the number
// of CQs that may be attached to it, so a CQ's event is never lost.
type CompChannel struct {
	c        chan CQ
	mu       sync.Mutex
	attached int
	dropped  atomic.Uint64
}

// DefaultCompChannelCapacity is the capacity NewCompChannel uses for 0.
const DefaultCompChannelCapacity = 1024

// NewCompChannel creates a completion channel for up to capacity CQs
// (0 means DefaultCompChannelCapacity).
func NewCompChannel(capacity int) *CompChannel {
	if capacity <= 0 {
		capacity = DefaultCompChannelCapacity
	}
	return &CompChannel{c: make(chan CQ, capacity)}
}

// C returns the channel on which armed CQs are delivered.
func (ch *CompChannel) C() <-chan CQ { return ch.c }

// Get waits for the next event (ibv_get_cq_event) or for ctx to end.
func (ch *CompChannel) Get(ctx context.Context) (CQ, error) {
	select {
	case cq := <-ch.c:
		return cq, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Attach reserves room for one more CQ; providers call it from CreateCQ.
func (ch *CompChannel) Attach() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.attached >= cap(ch.c) {
		return fmt.Errorf("%w: completion channel serves %d CQs already", ErrResourceLimit, cap(ch.c))
	}
	ch.attached++
	return nil
}

// Detach releases a CQ's room; providers call it from Destroy.
func (ch *CompChannel) Detach() {
	ch.mu.Lock()
	ch.attached--
	ch.mu.Unlock()
}

// Notify delivers an event for cq without blocking; providers call it when
// an armed CQ gets a matching completion. An event that finds the channel
// full (only possible when an application re-arms a CQ whose previous
// event it has not read yet) is counted in Dropped.
func (ch *CompChannel) Notify(cq CQ) {
	select {
	case ch.c <- cq:
	default:
		ch.dropped.Add(1)
	}
}

// Dropped returns the number of events Notify could not queue.
func (ch *CompChannel) Dropped() uint64 { return ch.dropped.Load() }

// PollBudget is the direct polling style of the kernel CQ API
// (ib_process_cq_direct): it polls at most budget completions, in chunks of
// len(wcs), calls fn for each and returns how many it handled.
func PollBudget(cq CQ, wcs []WC, budget int, fn func(*WC)) (int, error) {
	done := 0
	for done < budget {
		want := min(len(wcs), budget-done)
		n, err := cq.Poll(wcs[:want])
		for i := 0; i < n; i++ {
			fn(&wcs[i])
		}
		done += n
		if err != nil {
			return done, err
		}
		if n < want {
			break
		}
	}
	return done, nil
}

// CQWorker runs a handler for every completion of one CQ on its own
// goroutine, woken through the CQ's completion channel: the kernel CQ
// API's workqueue polling style (IB_POLL_WORKQUEUE).
type CQWorker struct {
	cq     CQ
	fn     func(*WC)
	budget int
	stop   chan struct{}
	done   chan struct{}
	err    error
}

// StartCQWorker starts a worker for cq, which must have a completion
// channel of its own (the worker consumes every event on it). fn runs on
// the worker goroutine; budget bounds the completions handled per wakeup
// before the worker yields (0 means 64).
func StartCQWorker(cq CQ, budget int, fn func(*WC)) (*CQWorker, error) {
	if cq.Channel() == nil {
		return nil, fmt.Errorf("%w: CQ has no completion channel", ErrInvalidArgument)
	}
	if budget <= 0 {
		budget = 64
	}
	w := &CQWorker{cq: cq, fn: fn, budget: budget, stop: make(chan struct{}), done: make(chan struct{})}
	if err := cq.ReqNotify(false); err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

func (w *CQWorker) run() {
	defer close(w.done)
	wcs := make([]WC, 16)
	for {
		// Drain, re-arm, then poll once more: a completion that arrived
		// between the last poll and the re-arm would otherwise wait for
		// the next one.
		for {
			n, err := PollBudget(w.cq, wcs, w.budget, w.fn)
			if err != nil {
				w.err = err
				return
			}
			if n < w.budget {
				if err := w.cq.ReqNotify(false); err != nil {
					w.err = err
					return
				}
				if n2, err := PollBudget(w.cq, wcs, w.budget, w.fn); err != nil || n2 == 0 {
					w.err = err
					if err != nil {
						return
					}
					break
				}
			}
		}
		select {
		case <-w.cq.Channel().C():
		case <-w.stop:
			return
		}
	}
}

// Stop stops the worker and waits for it; it returns the error that ended
// the worker early, if any.
func (w *CQWorker) Stop() error {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.err
}
