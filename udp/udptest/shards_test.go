package udptest_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"

	"softib/udp"
	"softib/udp/udptest"
)

// readAll reads everything queued at ep through a udp.Reader.
func readAll(t *testing.T, r udp.Reader) (ids []int, srcs []netip.AddrPort) {
	t.Helper()
	msgs := make([]udp.Message, 7)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 128)
	}
	for {
		n, err := r.TryRead(msgs)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return ids, srcs
		}
		for _, m := range msgs[:n] {
			ids = append(ids, index(m.Buf))
			srcs = append(srcs, m.Addr)
		}
	}
}

func TestShardByFlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := udptest.NewNetwork(1)
		defer n.Close()
		group, err := n.ListenShards(addrB, 3, udptest.ShardByFlow)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Listen(addrB); err == nil {
			t.Fatal("Listen on a shard group's address succeeded")
		}
		const flows = 12
		for f := range flows {
			src := n.Endpoint(netip.AddrPortFrom(addrA.Addr(), uint16(1000+f)))
			send(t, src, addrB, f*100, f*100+10)
		}
		synctest.Wait()
		used, total := 0, 0
		shardOf := map[netip.AddrPort]int{}
		for si, ep := range group {
			ids, srcs := readAll(t, ep.NewReader(8))
			if len(ids) > 0 {
				used++
			}
			total += len(ids)
			last := map[netip.AddrPort]int{}
			for i, s := range srcs {
				if prev, ok := shardOf[s]; ok && prev != si {
					t.Fatalf("flow %v on shards %d and %d", s, prev, si)
				}
				shardOf[s] = si
				if l, ok := last[s]; ok && ids[i] != l+1 {
					t.Fatalf("flow %v: %d after %d", s, ids[i], l)
				}
				last[s] = ids[i]
			}
		}
		if total != flows*10 || used < 2 {
			t.Fatalf("%d datagrams over %d shards, want %d over 2 or more", total, used, flows*10)
		}
	})
}

func TestShardSpray(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := udptest.NewNetwork(2)
		defer n.Close()
		group, err := n.ListenShards(addrB, 2, udptest.ShardSpray)
		if err != nil {
			t.Fatal(err)
		}
		a := n.Endpoint(addrA)
		send(t, a, addrB, 0, 64)
		synctest.Wait()
		var all []int
		for _, ep := range group {
			ids, _ := readAll(t, ep.NewReader(8))
			if len(ids) == 0 || len(ids) == 64 {
				t.Fatalf("one flow's 64 datagrams gave a shard %d", len(ids))
			}
			all = append(all, ids...)
		}
		slices.Sort(all)
		if !slices.Equal(all, seq(0, 64)) {
			t.Fatalf("got %v", all)
		}
	})
}

// TestReaderWait: Wait calls ready at once, parks while it returns false
// after an empty read, wakes on the next datagram, and fails after Close.
func TestReaderWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := udptest.NewNetwork(3)
		defer n.Close()
		a, b := n.Endpoint(addrA), n.Endpoint(addrB)
		r := b.NewReader(4)
		msgs := make([]udp.Message, 4)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 128)
		}
		got := make(chan int, 1)
		calls := 0
		go func() {
			err := r.Wait(func() bool {
				calls++
				k, err := r.ReadNowOne(msgs)
				if err != nil {
					t.Error(err)
					return true
				}
				if k == 0 {
					return false
				}
				got <- index(msgs[0].Buf)
				return true
			})
			if err != nil {
				t.Error(err)
			}
		}()
		synctest.Wait()
		if calls != 1 {
			t.Fatalf("ready called %d times before data, want 1", calls)
		}
		send(t, a, addrB, 7, 8)
		if id := <-got; id != 7 {
			t.Fatalf("read %d, want 7", id)
		}
		if r.Pending() {
			t.Fatal("Pending after a whole read")
		}
		done := make(chan error)
		go func() { done <- r.Wait(func() bool { _, _ = r.ReadNow(msgs); return false }) }()
		synctest.Wait()
		b.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
		if _, err := r.TryRead(msgs); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("TryRead after Close: %v", err)
		}
	})
}
