package verbs_test

import (
	"errors"
	"testing"

	"softib/verbs"
)

// eventDev is a Device whose only working method is Events.
type eventDev struct {
	verbs.Device
	ch chan verbs.AsyncEvent
}

func (d eventDev) Events() <-chan verbs.AsyncEvent { return d.ch }

// TestEventFanout: every subscriber sees every event, in order; a slow
// one loses its oldest without holding up the others; Close closes them.
func TestEventFanout(t *testing.T) {
	d := eventDev{ch: make(chan verbs.AsyncEvent)}
	f := verbs.NewEventFanout(d)
	a, b := f.Subscribe(16), f.Subscribe(2)
	for p := range uint8(5) {
		d.ch <- verbs.AsyncEvent{Type: verbs.EventPortActive, Port: p}
	}
	for p := range uint8(5) {
		if e := <-a; e.Port != p {
			t.Fatalf("subscriber a: event %d, want %d", e.Port, p)
		}
	}
	// d.ch is unbuffered: the fanout delivered the 5th event to both
	// before it took the next send; b keeps its newest two.
	d.ch <- verbs.AsyncEvent{Type: verbs.EventPortErr}
	<-a
	// a has the event, so the fanout is delivering it under its lock or
	// done: Dropped, which takes the lock, returns once b has it too.
	if n := f.Dropped(); n != 4 {
		t.Errorf("dropped %d, want 4", n)
	}
	if e := <-b; e.Port != 4 {
		t.Errorf("subscriber b's oldest kept event: port %d, want 4", e.Port)
	}
	f.Unsubscribe(a)
	if _, ok := <-a; ok {
		t.Error("unsubscribed channel still open")
	}
	f.Close()
	for range b {
	}
	if c := f.Subscribe(1); c != nil {
		if _, ok := <-c; ok {
			t.Error("subscription after Close is open")
		}
	}
}

// TestOptionalNotSupported: the optional verbs report ErrNotSupported
// for providers without them.
func TestOptionalNotSupported(t *testing.T) {
	var d verbs.Device = eventDev{}
	if err := verbs.ModifyDevice(d, verbs.DeviceModifyNodeDesc, &verbs.DeviceModify{}); !errors.Is(err, verbs.ErrNotSupported) {
		t.Error(err)
	}
	if err := verbs.ModifyPort(d, 1, 0, &verbs.PortModify{}); !errors.Is(err, verbs.ErrNotSupported) {
		t.Error(err)
	}
	var cq verbs.CQ
	if _, err := verbs.PeekCQ(cq, 1); !errors.Is(err, verbs.ErrNotSupported) {
		t.Error(err)
	}
	var qp verbs.QP
	if err := verbs.AttachMcast(qp, verbs.GID{0xff}, 0); !errors.Is(err, verbs.ErrNotSupported) {
		t.Error(err)
	}
}
