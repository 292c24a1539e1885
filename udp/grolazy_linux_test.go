package udp_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"softib/udp"
)

// TestGROBuffersLazy: a GRO reader starts with a few receive buffers and
// doubles them after a read that filled every one it had, up to its
// batch, for both the PollReader and ReadBatch; every datagram arrives
// once, in order, and reads allocate nothing once the buffers are there.
// How many datagrams one read finds depends on when loopback delivers
// them, so the test checks the rule after every read, not a final count.
func TestGROBuffersLazy(t *testing.T) {
	const batch, sent = 64, 40
	check := func(t *testing.T, read func(msgs []udp.Message) int, bufs func() int, rx, tx *udp.Socket) {
		if n := bufs(); n != 4 {
			t.Fatalf("%d GRO buffers before the first read, want 4", n)
		}
		// Datagrams of growing size, which GRO cannot merge.
		for i := range sent {
			if _, err := tx.WriteBatch([]udp.Message{{Buf: payload(i, 100+i), N: 100 + i, Addr: rx.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
		}
		msgs := newMsgs(batch, 2048)
		grew := false
		for got := 0; got < sent; {
			before := bufs()
			n := read(msgs[:min(len(msgs), before)])
			for _, m := range msgs[:n] {
				if want := payload(got, 100+got); !bytes.Equal(m.Buf[:m.N], want) {
					t.Fatalf("datagram %d: %d bytes, want %d", got, m.N, len(want))
				}
				got++
			}
			want := before
			if n == before {
				want = min(2*before, batch)
			}
			if after := bufs(); after != want {
				t.Fatalf("a read of %d datagrams with %d buffers left %d, want %d", n, before, after, want)
			}
			grew = grew || want > before
		}
		if !grew {
			// Loopback handed the burst over slower than it was read
			// (a loaded machine): the doubling rule held for every read,
			// but none was full.
			t.Log("no read filled every buffer: growth not exercised")
		}
		one := []udp.Message{{Buf: payload(0, 64), N: 64, Addr: rx.LocalAddr()}}
		round := func() {
			if _, err := tx.WriteBatch(one); err != nil {
				t.Fatal(err)
			}
			if n := read(msgs); n != 1 {
				t.Fatalf("read %d datagrams, want 1", n)
			}
		}
		if a := testing.AllocsPerRun(50, round); a != 0 {
			t.Fatalf("%v allocations per read", a)
		}
	}
	t.Run("PollReader", func(t *testing.T) {
		rx, tx, r := groPair(t, batch)
		// Hang guard: a datagram that never comes fails after 20 s.
		read := func(msgs []udp.Message) int {
			for deadline := time.Now().Add(20 * time.Second); ; runtime.Gosched() {
				n, err := r.TryRead(msgs)
				if err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					return n
				}
				if time.Now().After(deadline) {
					t.Fatal("no datagram within 20 s")
				}
			}
		}
		check(t, read, func() int { return udp.GROBuffers(r) }, rx, tx)
	})
	t.Run("ReadBatch", func(t *testing.T) {
		rx := listenGRO(t, nil)
		tx := listen(t, "127.0.0.1:0", &udp.Config{DisableGRO: true})
		read := func(msgs []udp.Message) int {
			n, err := rx.ReadBatch(msgs)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		// The vector is made at the first ReadBatch.
		bufs := func() int { return max(udp.ReadBatchGROBuffers(rx), 4) }
		check(t, read, bufs, rx, tx)
	})
}
