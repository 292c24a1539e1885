package rdmacm

import (
	"context"
	"sync"
)

// EventChannel queues the events of the IDs created on it
// (rdma_event_channel). The queue is unbounded so that CM callbacks never
// block on a slow reader.
type EventChannel struct {
	mu     sync.Mutex
	q      []*Event
	closed bool
	ready  chan struct{} // capacity 1: "the queue may be non-empty"
}

// NewEventChannel creates an event channel (rdma_create_event_channel).
func NewEventChannel() *EventChannel {
	return &EventChannel{ready: make(chan struct{}, 1)}
}

func (c *EventChannel) push(e *Event) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.q = append(c.q, e)
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// TryGetEvent returns the next event without blocking, or nil.
func (c *EventChannel) TryGetEvent() *Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) == 0 {
		return nil
	}
	e := c.q[0]
	c.q[0] = nil
	c.q = c.q[1:]
	if len(c.q) > 0 {
		select {
		case c.ready <- struct{}{}:
		default:
		}
	}
	return e
}

// GetEvent waits for the next event (rdma_get_cm_event).
func (c *EventChannel) GetEvent(ctx context.Context) (*Event, error) {
	for {
		if e := c.TryGetEvent(); e != nil {
			return e, nil
		}
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close wakes waiters with ErrClosed and drops queued events
// (rdma_destroy_event_channel).
func (c *EventChannel) Close() error {
	c.mu.Lock()
	c.closed = true
	c.q = nil
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
	return nil
}
