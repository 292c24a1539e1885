package udptest_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"softib/udp"
	"softib/udp/udptest"
)

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
	addrC = netip.MustParseAddrPort("[fd00::3]:4791")
)

// send writes datagrams numbered from..to-1 (4 bytes each, big-endian
// index, plus filler) from ep to dst, reusing one buffer to check that
// the network copies.
func send(t *testing.T, ep udp.Conn, dst netip.AddrPort, from, to int) {
	t.Helper()
	buf := make([]byte, 64)
	for i := from; i < to; i++ {
		buf[0], buf[1], buf[2], buf[3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		for j := 4; j < len(buf); j++ {
			buf[j] = byte(i + j)
		}
		if n, err := ep.WriteBatch([]udp.Message{{Buf: buf, N: len(buf), Addr: dst}}); n != 1 || err != nil {
			t.Fatalf("WriteBatch: %d, %v", n, err)
		}
	}
}

func index(b []byte) int { return int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3]) }

// drain reads everything queued at ep without blocking (inside a bubble,
// after synctest.Wait).
func drain(t *testing.T, ep *udptest.Endpoint) (ids []int, pkts [][]byte) {
	t.Helper()
	for ep.Pending() > 0 {
		msgs := make([]udp.Message, 5)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 128)
		}
		n, err := ep.ReadBatch(msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs[:n] {
			ids = append(ids, index(m.Buf))
			pkts = append(pkts, m.Buf[:m.N])
		}
	}
	return ids, pkts
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func TestPerfectNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		send(t, a, addrB, 0, 100)
		ids, pkts := drain(t, b)
		if !slices.Equal(ids, seq(0, 100)) {
			t.Fatalf("got %v", ids)
		}
		for i, p := range pkts {
			if len(p) != 64 || p[63] != byte(i+63) {
				t.Fatalf("datagram %d corrupted: %x", i, p)
			}
		}
		if got := nw.Stats.Delivered.Load(); got != 100 {
			t.Fatalf("Delivered = %d", got)
		}
	})
}

func TestBlockingReadAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		got := make(chan int)
		go func() {
			msgs := []udp.Message{{Buf: make([]byte, 100)}}
			for {
				n, err := b.ReadBatch(msgs)
				if err != nil {
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("ReadBatch: %v", err)
					}
					close(got)
					return
				}
				got <- n
			}
		}()
		synctest.Wait()
		send(t, a, addrB, 0, 1)
		if n := <-got; n != 1 {
			t.Fatalf("n = %d", n)
		}
		nw.Close()
		if _, ok := <-got; ok {
			t.Fatal("reader not closed")
		}
		if _, err := a.WriteBatch([]udp.Message{{Buf: []byte{1}, N: 1, Addr: addrB}}); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteBatch after Close: %v", err)
		}
	})
}

func TestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		nw.SetFaults(udptest.Faults{Delay: 50 * time.Millisecond})
		start := time.Now()
		send(t, a, addrB, 0, 10)
		msgs := make([]udp.Message, 20)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 100)
		}
		// All ten are due at the same virtual instant, but the reader may
		// wake before the last of them is queued: read until all are in.
		next := 0
		for next < 10 {
			n, err := b.ReadBatch(msgs)
			if err != nil || n == 0 {
				t.Fatalf("ReadBatch = %d, %v", n, err)
			}
			if d := time.Since(start); d != 50*time.Millisecond {
				t.Fatalf("delivered after %v (virtual), want 50ms", d)
			}
			for _, m := range msgs[:n] {
				if index(m.Buf) != next {
					t.Fatalf("fixed delay reordered: %d at %d", index(m.Buf), next)
				}
				next++
			}
		}
	})
}

func TestJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(7)
		defer nw.Close()
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		nw.SetFaults(udptest.Faults{Delay: 10 * time.Millisecond, Jitter: 10 * time.Millisecond})
		send(t, a, addrB, 0, 200)
		time.Sleep(10*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if b.Pending() != 0 {
			t.Fatalf("%d delivered before the fixed delay", b.Pending())
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		ids, _ := drain(t, b)
		if len(ids) != 200 {
			t.Fatalf("got %d of 200", len(ids))
		}
		if slices.IsSorted(ids) {
			t.Fatalf("jitter did not reorder anything")
		}
		slices.Sort(ids)
		if !slices.Equal(ids, seq(0, 200)) {
			t.Fatalf("lost or duplicated: %v", ids)
		}
	})
}

// fates returns the ids received after sending 0..n-1 with faults f.
func fates(t *testing.T, seed uint64, f udptest.Faults, n int) ([]int, *udptest.Network) {
	var ids []int
	var nw *udptest.Network
	synctest.Test(t, func(t *testing.T) {
		nw = udptest.NewNetwork(seed)
		defer nw.Close()
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		nw.SetFaults(f)
		send(t, a, addrB, 0, n)
		time.Sleep(time.Second)
		synctest.Wait()
		ids, _ = drain(t, b)
	})
	return ids, nw
}

func TestDropDeterministic(t *testing.T) {
	f := udptest.Faults{Drop: 0.3}
	ids1, nw := fates(t, 42, f, 1000)
	ids2, _ := fates(t, 42, f, 1000)
	ids3, _ := fates(t, 43, f, 1000)
	if !slices.Equal(ids1, ids2) {
		t.Fatal("same seed, different fates")
	}
	if slices.Equal(ids1, ids3) {
		t.Fatal("different seeds, same fates")
	}
	dropped := nw.Stats.Dropped.Load()
	if dropped+uint64(len(ids1)) != 1000 || dropped < 200 || dropped > 400 {
		t.Fatalf("dropped %d, received %d", dropped, len(ids1))
	}
	if !slices.IsSorted(ids1) {
		t.Fatal("drop reordered")
	}
}

func TestDuplicate(t *testing.T) {
	ids, nw := fates(t, 1, udptest.Faults{Duplicate: 0.2}, 500)
	dups := int(nw.Stats.Duplicated.Load())
	if len(ids) != 500+dups || dups < 50 || dups > 150 {
		t.Fatalf("received %d with %d duplicates", len(ids), dups)
	}
	if !slices.IsSorted(ids) {
		t.Fatal("duplicates out of order without delay")
	}
	if len(slices.Compact(ids)) != 500 {
		t.Fatal("lost datagrams")
	}
}

func TestReorderGap(t *testing.T) {
	ids, nw := fates(t, 3, udptest.Faults{Reorder: 0.1, ReorderGap: 3}, 300)
	if len(ids) != 300 {
		t.Fatalf("received %d", len(ids))
	}
	r := int(nw.Stats.Reordered.Load())
	if r < 10 || r > 60 {
		t.Fatalf("reordered %d", r)
	}
	// Only held datagrams arrive late, so there are at most as many
	// inversions as holds.
	late := 0
	for i := 1; i < len(ids); i++ {
		if ids[i] < ids[i-1] {
			late++
		}
	}
	if late == 0 || late > r {
		t.Fatalf("%d inversions for %d holds", late, r)
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	if !slices.Equal(sorted, seq(0, 300)) {
		t.Fatal("lost or duplicated")
	}
}

func TestReorderExactGapAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		nw.SetFaults(udptest.Faults{Reorder: 1, ReorderGap: 2, ReorderTimeout: 30 * time.Millisecond})
		// Hold everything: each new datagram releases the one sent two
		// before it, so 0..4 arrive as 0,1,2 after 2,3,4 are sent.
		send(t, a, addrB, 0, 5)
		ids, _ := drain(t, b)
		if !slices.Equal(ids, []int{0, 1, 2}) {
			t.Fatalf("after gap: %v", ids)
		}
		// The last two wait for the timeout.
		// Both are released at the same virtual instant; the reader may
		// wake before the second is queued.
		start := time.Now()
		var got []int
		for len(got) < 2 {
			msgs := []udp.Message{{Buf: make([]byte, 100)}, {Buf: make([]byte, 100)}}
			n, err := b.ReadBatch(msgs)
			if err != nil || n == 0 || time.Since(start) != 30*time.Millisecond {
				t.Fatalf("timeout release: n=%d err=%v after %v", n, err, time.Since(start))
			}
			for _, m := range msgs[:n] {
				got = append(got, index(m.Buf))
			}
		}
		if !slices.Equal(got, []int{3, 4}) {
			t.Fatalf("timeout release order: %v", got)
		}
	})
}

func TestCorrupt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(5)
		defer nw.Close()
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		nw.SetFaults(udptest.Faults{Corrupt: 1})
		orig := bytes.Repeat([]byte{0xAA}, 64)
		for range 50 {
			a.WriteBatch([]udp.Message{{Buf: orig, N: len(orig), Addr: addrB}})
		}
		_, pkts := drain(t, b)
		if len(pkts) != 50 || nw.Stats.Corrupted.Load() != 50 {
			t.Fatalf("got %d, corrupted %d", len(pkts), nw.Stats.Corrupted.Load())
		}
		for _, p := range pkts {
			diff := 0
			for j := range p {
				if p[j] != orig[j] {
					diff++
				}
			}
			if diff != 1 {
				t.Fatalf("%d bytes differ, want 1", diff)
			}
		}
		if orig[0] != 0xAA {
			t.Fatal("sender's buffer modified")
		}
	})
}

func TestFilterScripted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
		// Drop the 3rd datagram whose byte 4 is 0x0C (an "opcode") and
		// duplicate the 5th datagram overall.
		seen, total := 0, 0
		nw.SetFilter(func(src, dst netip.AddrPort, pkt []byte) udptest.Verdict {
			total++
			if total == 5 {
				return udptest.Duplicate
			}
			if src == addrA && pkt[4] == 0x0C {
				seen++
				if seen == 3 {
					return udptest.Drop
				}
			}
			return udptest.Pass
		})
		nw.SetFaults(udptest.Faults{Drop: 1}) // Deliver/Duplicate bypass this
		nw.SetLinkFaults(addrA, addrB, udptest.Faults{})
		buf := make([]byte, 8)
		for i := range 10 {
			buf[3], buf[4] = byte(i), 0x0C
			if i%2 == 1 {
				buf[4] = 0x11
			}
			a.WriteBatch([]udp.Message{{Buf: buf, N: len(buf), Addr: addrB}})
		}
		ids, _ := drain(t, b)
		// 0x0C datagrams are the even ones; the 3rd is 4, but the 5th
		// datagram (also 4) is duplicated first, so the 3rd 0x0C
		// datagram the filter drops is 6.
		want := []int{0, 1, 2, 3, 4, 4, 5, 7, 8, 9}
		if !slices.Equal(ids, want) {
			t.Fatalf("got %v, want %v", ids, want)
		}
		if nw.Stats.Filtered.Load() != 1 {
			t.Fatalf("Filtered = %d", nw.Stats.Filtered.Load())
		}
	})
}

func TestLinkRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		a, b, c := nw.Endpoint(addrA), nw.Endpoint(addrB), nw.Endpoint(addrC)
		nw.SetLinkFaults(addrA, addrB, udptest.Faults{Drop: 1})                       // A→B dead
		nw.SetLinkFaults(netip.AddrPort{}, addrC, udptest.Faults{Delay: time.Second}) // →C slow
		send(t, a, addrB, 0, 5)
		send(t, b, addrA, 0, 5)
		send(t, a, addrC, 0, 5)
		if ids, _ := drain(t, b); len(ids) != 0 {
			t.Fatalf("A→B delivered %v", ids)
		}
		if ids, _ := drain(t, a); len(ids) != 5 {
			t.Fatalf("B→A delivered %v", ids)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if ids, _ := drain(t, c); len(ids) != 5 {
			t.Fatalf("A→C delivered %v", ids)
		}
		nw.ClearLinkFaults(addrA, addrB)
		send(t, a, addrB, 0, 5)
		if ids, _ := drain(t, b); len(ids) != 5 {
			t.Fatalf("A→B after clear delivered %v", ids)
		}
	})
}

func TestEdgeCases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		a := nw.Endpoint(netip.MustParseAddrPort("10.0.0.1:0"))
		if a.LocalAddr().Port() == 0 || a.BatchSize() != udptest.BatchSize {
			t.Fatalf("ephemeral endpoint %v", a.LocalAddr())
		}
		if _, err := nw.Listen(a.LocalAddr()); err == nil {
			t.Fatal("duplicate address accepted")
		}
		b := nw.Endpoint(addrB)
		send(t, a, netip.MustParseAddrPort("10.9.9.9:1"), 0, 1)
		if nw.Stats.NoRoute.Load() != 1 {
			t.Fatal("NoRoute not counted")
		}
		nw.SetQueueLimit(3)
		send(t, a, addrB, 0, 5)
		if nw.Stats.Overflow.Load() != 2 || b.Pending() != 3 {
			t.Fatalf("Overflow = %d, pending %d", nw.Stats.Overflow.Load(), b.Pending())
		}
		// A too-small buffer drops the datagram (counted), like a socket.
		n, err := b.ReadBatch([]udp.Message{{Buf: make([]byte, 100)}, {Buf: make([]byte, 10)}, {Buf: make([]byte, 10)}})
		if n != 1 || err != nil || nw.Stats.Truncated.Load() != 2 {
			t.Fatalf("ReadBatch = %d, %v; truncated %d", n, err, nw.Stats.Truncated.Load())
		}
		if _, err := a.WriteBatch([]udp.Message{{Buf: make([]byte, 2), N: 3, Addr: addrB}}); !errors.Is(err, udp.ErrMessageSize) {
			t.Fatalf("oversize N: %v", err)
		}
		b.Close()
		if _, err := b.ReadBatch([]udp.Message{{Buf: make([]byte, 10)}}); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v", err)
		}
		// The address is free again.
		nw.Endpoint(addrB)
	})
}

func TestAllocs(t *testing.T) {
	nw := udptest.NewNetwork(1)
	defer nw.Close()
	a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
	out := make([]udp.Message, 16)
	in := make([]udp.Message, 16)
	for i := range out {
		out[i] = udp.Message{Buf: make([]byte, 4200), N: 4200, Addr: addrB}
		in[i].Buf = make([]byte, 4300)
	}
	allocs := testing.AllocsPerRun(100, func() {
		a.WriteBatch(out)
		for got := 0; got < len(out); {
			n, _ := b.ReadBatch(in)
			got += n
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per batch round trip", allocs)
	}
}

// TestRealTime checks that delays also work outside a synctest bubble.
func TestRealTime(t *testing.T) {
	nw := udptest.NewNetwork(1)
	defer nw.Close()
	a, b := nw.Endpoint(addrA), nw.Endpoint(addrB)
	nw.SetFaults(udptest.Faults{Delay: 5 * time.Millisecond, Jitter: time.Millisecond})
	send(t, a, addrB, 0, 20)
	msgs := make([]udp.Message, 32)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 100)
	}
	for got := 0; got < 20; {
		n, err := b.ReadBatch(msgs)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
}
