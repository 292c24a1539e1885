package udp_test

import (
	"bytes"
	"testing"

	"softib/udp"
)

// TestGROBuffersLazy: a GRO reader starts with a few receive buffers and
// doubles them only when a read fills every one it has, for both the
// PollReader and ReadBatch; every datagram arrives once, in order, and
// reads allocate nothing once the buffers are there.
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
		for got := 0; got < sent; {
			n := read(msgs)
			for _, m := range msgs[:n] {
				if want := payload(got, 100+got); !bytes.Equal(m.Buf[:m.N], want) {
					t.Fatalf("datagram %d: %d bytes, want %d", got, m.N, len(want))
				}
				got++
			}
		}
		// Reads of 4, 8, 16 and then the last 12 of the 40: the
		// buffers doubled after each full read.
		if n := bufs(); n != 32 {
			t.Fatalf("%d GRO buffers after a burst of %d datagrams, want 32", n, sent)
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
		// Loopback queues a datagram within the send: TryRead finds it.
		read := func(msgs []udp.Message) int {
			n, err := r.TryRead(msgs)
			if err != nil || n == 0 {
				t.Fatalf("TryRead: %d datagrams, %v", n, err)
			}
			return n
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
