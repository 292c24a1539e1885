package lnet_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// loPut PUTs n bytes from in to itself on portal 1 (an ME must exist) with
// the SEND event on eq.
func loPut(t testing.TB, in *lnet.Instance, eq *lnet.EQ, bits uint64) {
	t.Helper()
	h, err := in.MDBind(lnet.MD{Start: []byte{1, 2, 3}, Threshold: 1, EQ: eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: in.PID()}, 1, bits, 0, 0); err != nil {
		t.Fatal(err)
	}
}

func TestEQOrderAndSequence(t *testing.T) {
	in := newLo(t)
	eq, _ := in.EQAlloc(8, nil)
	for i := range 5 {
		loPut(t, in, eq, uint64(i))
	}
	for i := range 5 {
		ev, ok, err := eq.Get()
		if !ok || err != nil || ev.Sequence != uint64(i+1) || ev.MatchBits != uint64(i) || ev.Type != lnet.EventSend {
			t.Fatalf("event %d: %s ok=%v err=%v", i, evStr(ev), ok, err)
		}
	}
	if _, ok, _ := eq.Get(); ok {
		t.Fatal("queue should be empty")
	}
}

func TestEQOverflow(t *testing.T) {
	in := newLo(t)
	eq, _ := in.EQAlloc(3, nil) // rounds up to 4
	if eq.Len() != 4 {
		t.Fatalf("ring %d, want 4", eq.Len())
	}
	for i := range 7 { // sequences 1..7 in slots seq%4: 5 6 7 4
		loPut(t, in, eq, uint64(i))
	}
	// As lnet_eq_dequeue_event: the reader expects seq 1, finds 5 in its
	// slot, returns it with the overflow error and continues after it.
	ev, _, err := in.EQPoll([]*lnet.EQ{eq}, 0)
	if !errors.Is(err, lnet.ErrEQOverflow) || ev.Sequence != 5 || ev.MatchBits != 4 {
		t.Fatalf("first after overflow: %s err=%v", evStr(ev), err)
	}
	for seq := uint64(6); seq <= 7; seq++ {
		ev, _, err := in.EQPoll([]*lnet.EQ{eq}, 0)
		if err != nil || ev.Sequence != seq {
			t.Fatalf("seq %d: %s err=%v", seq, evStr(ev), err)
		}
	}
	if _, i, err := in.EQPoll([]*lnet.EQ{eq}, 0); !errors.Is(err, lnet.ErrTimeout) || i != -1 {
		t.Fatalf("empty poll: %d %v", i, err)
	}
	// Wrapping further without overflow keeps working.
	loPut(t, in, eq, 100)
	if ev, _, err := in.EQPoll([]*lnet.EQ{eq}, 0); err != nil || ev.Sequence != 8 {
		t.Fatalf("after wrap: %s %v", evStr(ev), err)
	}
}

func TestEQPollSeveral(t *testing.T) {
	in := newLo(t)
	e0, _ := in.EQAlloc(4, nil)
	e1, _ := in.EQAlloc(4, nil)
	e2, _ := in.EQAlloc(4, nil)
	eqs := []*lnet.EQ{e0, e1, e2}
	loPut(t, in, e2, 2)
	loPut(t, in, e1, 1)
	// Earlier EQs first, regardless of arrival order.
	if ev, i, err := in.EQPoll(eqs, 0); err != nil || i != 1 || ev.MatchBits != 1 {
		t.Fatalf("got eq %d %s %v", i, evStr(ev), err)
	}
	if ev, i, err := in.EQPoll(eqs, 0); err != nil || i != 2 || ev.MatchBits != 2 {
		t.Fatalf("got eq %d %s %v", i, evStr(ev), err)
	}
	if _, _, err := in.EQPoll(nil, 0); !errors.Is(err, lnet.ErrInvalid) {
		t.Fatalf("no EQs: %v", err)
	}
}

// TestEQPollWait: a blocked poll wakes for an event on any of its EQs, and
// times out (virtual time) when none comes.
func TestEQPollWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in, err := lnet.New(lnet.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		e0, _ := in.EQAlloc(4, nil)
		e1, _ := in.EQAlloc(4, nil)

		start := time.Now()
		_, i, err := in.EQPoll([]*lnet.EQ{e0, e1}, 3*time.Second)
		if !errors.Is(err, lnet.ErrTimeout) || i != -1 || time.Since(start) != 3*time.Second {
			t.Fatalf("timeout: %d %v after %v", i, err, time.Since(start))
		}

		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Second)
			loPut(t, in, e1, 42)
		}()
		ev, i, err := in.EQPoll([]*lnet.EQ{e0, e1}, -1)
		if err != nil || i != 1 || ev.MatchBits != 42 {
			t.Fatalf("woken: %d %s %v", i, evStr(ev), err)
		}
		wg.Wait()

		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Second); cancel() }()
		if _, err := e0.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel: %v", err)
		}
	})
}

func TestEQHandler(t *testing.T) {
	in := newLo(t)
	var got []lnet.EventType
	eq, err := in.EQAlloc(0, func(ev *lnet.Event) { got = append(got, ev.Type) })
	if err != nil {
		t.Fatal(err)
	}
	if eq.Len() != 0 {
		t.Fatal("handler-only EQ has a ring")
	}
	loPut(t, in, eq, 1)
	if len(got) != 1 || got[0] != lnet.EventSend {
		t.Fatalf("handler saw %v", got)
	}
	if _, ok, _ := eq.Get(); ok {
		t.Fatal("handler-only EQ returned an event")
	}
	if _, err := in.EQAlloc(0, nil); !errors.Is(err, lnet.ErrInvalid) {
		t.Fatalf("EQAlloc(0, nil): %v", err)
	}
	// Ring plus handler: both see the event.
	var n int
	eq2, _ := in.EQAlloc(2, func(*lnet.Event) { n++ })
	loPut(t, in, eq2, 1)
	if _, ok, _ := eq2.Get(); !ok || n != 1 {
		t.Fatalf("ring+handler: ok=%v n=%d", ok, n)
	}
}
