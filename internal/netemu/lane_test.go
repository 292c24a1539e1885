package netemu

import (
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// departure is a packet seen leaving a lane.
type departure struct {
	seq uint32
	at  time.Time
}

// timeline is a sender recording numbered UDP packets (see numbered).
type timeline struct {
	mu  sync.Mutex
	out []departure
}

func (tl *timeline) send(b []byte) error {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	f := b[vnetLen:]
	p, _ := parseIP(f)
	tl.out = append(tl.out, departure{binary.BigEndian.Uint32(f[p.l4+8:]), time.Now()})
	return nil
}

// numbered is an IPv4 UDP frame whose payload starts with seq; the IP
// packet is size bytes.
func numbered(seq uint32, size int) []byte {
	payload := make([]byte, size-28)
	binary.BigEndian.PutUint32(payload, seq)
	return build(frameSpec{proto: protoUDP, payload: payload})
}

// runLane feeds n numbered packets through a forwarder with impairment
// im, one every gap of (fake) time, and returns what left and the
// counters. It must run inside a synctest bubble.
func runLane(t *testing.T, im Impairment, seed uint64, n, size int, gap time.Duration) ([]departure, DirStats, time.Time) {
	t.Helper()
	var tl timeline
	fw := newTestForwarder(&tl, seed)
	fw.lane.set(im)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { fw.lane.run(done) })
	start := time.Now()
	for i := range n {
		fw.handle(numbered(uint32(i), size))
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	time.Sleep(time.Second) // everything is due by now
	synctest.Wait()
	close(done)
	wg.Wait()
	if q := fw.lane.queued(); q != 0 {
		t.Fatalf("%d packets still queued", q)
	}
	return tl.out, fw.c.snapshot(), start
}

func seqsOf(d []departure) []uint32 {
	var s []uint32
	for _, x := range d {
		s = append(s, x.seq)
	}
	return s
}

func TestLaneDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 5 * time.Millisecond
		out, st, start := runLane(t, Impairment{Delay: delay}, 1, 10, 100, time.Millisecond)
		if len(out) != 10 || st.Forwarded != 10 {
			t.Fatalf("%d of 10 left; %+v", len(out), st)
		}
		for i, d := range out {
			if d.seq != uint32(i) || d.at.Sub(start) != delay+time.Duration(i)*time.Millisecond {
				t.Fatalf("packet %d: seq %d left after %v", i, d.seq, d.at.Sub(start))
			}
		}
	})
}

func TestLaneJitterDeterministic(t *testing.T) {
	im := Impairment{Delay: 2 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.1, Duplicate: 0.1, Reorder: 0.1}
	run := func(seed uint64) (s []uint32, st DirStats) {
		synctest.Test(t, func(t *testing.T) {
			out, stats, start := runLane(t, im, seed, 300, 100, 100*time.Microsecond)
			for _, d := range out {
				// Jitter never takes a packet below 0 or beyond
				// Delay+Jitter, and holding adds at most ReorderHold.
				if d.at.Before(start) || d.at.After(start.Add(30*time.Millisecond+DefaultReorderHold+4*time.Millisecond)) {
					t.Errorf("packet %d left at %v", d.seq, d.at.Sub(start))
				}
			}
			s, st = seqsOf(out), stats
		})
		return s, st
	}
	a, sa := run(7)
	b, sb := run(7)
	c, _ := run(8)
	if !slices.Equal(a, b) || sa != sb {
		t.Fatal("same seed, different outcome")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds, same outcome")
	}
	if sa.Dropped == 0 || sa.Duplicated == 0 || sa.Held == 0 || sa.Reordered == 0 {
		t.Fatalf("an impairment did not happen: %+v", sa)
	}
	if sa.Forwarded != uint64(len(a)) || sa.Forwarded != 300-sa.Dropped+sa.Duplicated {
		t.Fatalf("%d left; %+v", len(a), sa)
	}
	t.Logf("%+v", sa)
}

func TestLaneReorderGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		out, st, _ := runLane(t, Impairment{Reorder: 0.25, ReorderGap: 3}, 3, n, 100, 10*time.Microsecond)
		s := seqsOf(out)
		sorted := slices.Sorted(slices.Values(s))
		for i, v := range sorted {
			if v != uint32(i) {
				t.Fatalf("packets lost or duplicated: %v", s)
			}
		}
		// A held packet leaves after exactly ReorderGap later packets,
		// unless it is overtaken by another held one as well.
		late := 0
		for i, v := range s {
			if i > 0 && v < slices.Max(s[:i]) {
				late++
			}
		}
		if late == 0 || uint64(late) != st.Reordered || st.Held < uint64(late) {
			t.Fatalf("late %d, stats %+v: %v", late, st, s)
		}
	})
}

func TestLaneReorderHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Everything held and no later packet to overtake: each leaves
		// when its hold runs out, in order.
		out, st, start := runLane(t, Impairment{Reorder: 1}, 1, 5, 100, time.Millisecond)
		for i, d := range out {
			if d.seq != uint32(i) || d.at.Sub(start) != DefaultReorderHold+time.Duration(i)*time.Millisecond {
				t.Fatalf("packet %d: seq %d left after %v", i, d.seq, d.at.Sub(start))
			}
		}
		if len(out) != 5 || st.Held != 5 || st.Reordered != 0 {
			t.Fatalf("%d left, stats %+v", len(out), st)
		}
	})
}

func TestLaneRateAndLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1000-byte packets at 8 Mbit/s take 1ms each; a burst of 10
		// into a 4-packet queue keeps the first (sent at once) and the
		// next 4.
		out, st, start := runLane(t, Impairment{Rate: 8_000_000, Limit: 4}, 1, 10, 1000, 0)
		if len(out) != 5 || st.Overflow != 5 {
			t.Fatalf("%d left, stats %+v", len(out), st)
		}
		for i, d := range out {
			if d.seq != uint32(i) || d.at.Sub(start) != time.Duration(i)*time.Millisecond {
				t.Fatalf("packet %d: seq %d left after %v", i, d.seq, d.at.Sub(start))
			}
		}
	})
}

func TestLaneFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Port 9 matches nothing: every packet passes unimpaired.
		out, st, _ := runLane(t, Impairment{Loss: 1, Match: Filter{Port: 9}}, 1, 10, 100, 0)
		if len(out) != 10 || st.Dropped != 0 {
			t.Fatalf("%d left, stats %+v", len(out), st)
		}
		out, st, _ = runLane(t, Impairment{Loss: 1, Match: Filter{Proto: protoUDP, Port: 4791}}, 1, 10, 100, 0)
		if len(out) != 0 || st.Dropped != 10 {
			t.Fatalf("%d left, stats %+v", len(out), st)
		}
	})
}

func TestImpairmentDefaults(t *testing.T) {
	nan := 0.0
	nan /= nan
	got := Impairment{Loss: 2, Duplicate: -1, Corrupt: nan, Delay: -time.Second, Rate: -5}.withDefaults()
	want := Impairment{Loss: 1, ReorderGap: DefaultReorderGap, ReorderHold: DefaultReorderHold, Limit: DefaultLimit}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// nopSender discards frames.
type nopSender struct{ n int }

func (s *nopSender) send([]byte) error { s.n++; return nil }

// TestForwardAllocs checks that forwarding allocates nothing per packet,
// whether the packet leaves at once or waits in the delay queue.
func TestForwardAllocs(t *testing.T) {
	for _, c := range []struct {
		name string
		im   Impairment
		in   []byte
	}{
		{"direct", Impairment{}, numbered(1, 1000)},
		{"partial-csum", Impairment{}, build(frameSpec{proto: protoTCP, payload: seqPayload(1000), partial: true})},
		{"gso", Impairment{}, build(frameSpec{proto: protoTCP, payload: seqPayload(4000), gso: 1448})},
		{"delayed", Impairment{Delay: time.Hour, Jitter: time.Millisecond, Duplicate: 0.5, Corrupt: 0.5, Reorder: 0.2, Rate: 1e9}, numbered(1, 1000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tx nopSender
			fw := newTestForwarder(&tx, 1)
			fw.lane.set(c.im)
			frame := make([]byte, len(c.in))
			step := func() {
				copy(frame, c.in)
				fw.handle(frame)
				fw.lane.mu.Lock()
				fw.lane.flush(time.Now().Add(3 * time.Hour))
				fw.lane.mu.Unlock()
			}
			for range 100 { // warm the pool and grow the queue slices
				step()
			}
			if a := testing.AllocsPerRun(1000, step); a != 0 && !raceEnabled {
				t.Fatalf("%v allocs per packet", a)
			}
			if tx.n == 0 {
				t.Fatal("nothing sent")
			}
		})
	}
}

// BenchmarkHandle measures the userspace cost of forwarding one
// packet (parsing, impairment model, queueing), without the sockets.
func BenchmarkHandle(b *testing.B) {
	for _, c := range []struct {
		name string
		im   Impairment
	}{
		{"direct", Impairment{}},
		{"impaired", Impairment{Delay: time.Millisecond, Jitter: time.Millisecond, Loss: 0.01, Duplicate: 0.01, Reorder: 0.05}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var tx nopSender
			fw := newTestForwarder(&tx, 1)
			fw.lane.set(c.im)
			in := numbered(1, 1000)
			frame := make([]byte, len(in))
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			i := 0
			for b.Loop() {
				copy(frame, in)
				fw.handle(frame)
				if i++; i%64 == 0 {
					fw.lane.mu.Lock()
					fw.lane.flush(time.Now().Add(time.Hour))
					fw.lane.mu.Unlock()
				}
			}
		})
	}
}
