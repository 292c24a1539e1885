package stats_test

import (
	"maps"
	"sync"
	"testing"

	"softib/internal/stats"
)

type qpStats struct {
	OutOfSeqReq stats.Counter
	DupReq      stats.Counter
	Ignored     int // not a counter
	private     stats.Counter
	Retry       struct {
		Exceeded stats.Counter
		RNR      stats.Counter
	}
	Shared *stats.Counter
	Nested *inner
	Nil    *inner
}

type inner struct{ Dropped stats.Counter }

func TestCounter(t *testing.T) {
	var c stats.Counter
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				c.Inc()
			}
			c.Add(10)
		})
	}
	wg.Wait()
	if c.Load() != 4040 || c.String() != "4040" {
		t.Fatalf("counter = %d (%s)", c.Load(), c.String())
	}
	if a := testing.AllocsPerRun(100, func() { c.Inc() }); a != 0 {
		t.Fatalf("Inc allocates %v", a)
	}
}

func TestSnapshot(t *testing.T) {
	s := &qpStats{Shared: new(stats.Counter), Nested: &inner{}}
	s.OutOfSeqReq.Add(3)
	s.DupReq.Inc()
	s.private.Inc()
	s.Retry.RNR.Add(7)
	s.Shared.Add(2)
	s.Nested.Dropped.Add(5)
	want := map[string]uint64{
		"OutOfSeqReq":    3,
		"DupReq":         1,
		"Retry.Exceeded": 0,
		"Retry.RNR":      7,
		"Shared":         2,
		"Nested.Dropped": 5,
	}
	if got := stats.Snapshot(s); !maps.Equal(got, want) {
		t.Fatalf("Snapshot = %v, want %v", got, want)
	}
	var nilp *qpStats
	for _, v := range []any{nil, nilp, 42, "x"} {
		if got := stats.Snapshot(v); len(got) != 0 {
			t.Fatalf("Snapshot(%v) = %v", v, got)
		}
	}
	var byValue inner
	byValue.Dropped.Inc()
	if got := stats.Snapshot(&byValue); got["Dropped"] != 1 {
		t.Fatalf("got %v", got)
	}
}
