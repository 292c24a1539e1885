package udp_test

import (
	"bytes"
	"testing"

	"softib/udp"
)

// TestGROStaleSegmentSize is a regression test: after a GRO super-datagram
// (which carries a UDP_GRO control message), a later plain datagram in the
// same receive slot carries none, and must not be split at the stale
// segment size left in the control buffer.
func TestGROStaleSegmentSize(t *testing.T) {
	tx := listen(t, "127.0.0.1:0", &udp.Config{})
	rx := listen(t, "127.0.0.1:0", &udp.Config{})
	in := make([]udp.Message, 64)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	for round := range 20 {
		// A run of equal-size datagrams that GSO sends as one and GRO
		// may receive as one.
		var out []udp.Message
		for i := range 16 {
			p := payload(round*100+i, 1000)
			out = append(out, udp.Message{Buf: p, N: len(p), Addr: rx.LocalAddr()})
		}
		if _, err := tx.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(out); {
			n, err := rx.ReadBatch(in)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if in[i].N != 1000 {
					t.Fatalf("round %d: segment of %d bytes, want 1000", round, in[i].N)
				}
			}
			got += n
		}
		// One plain datagram, longer than the segment size above.
		p := payload(round, 1044)
		if _, err := tx.WriteBatch([]udp.Message{{Buf: p, N: len(p), Addr: rx.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		n, err := rx.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || !bytes.Equal(in[0].Buf[:in[0].N], p) {
			t.Fatalf("round %d: plain 1044-byte datagram arrived as %d message(s), first %d bytes", round, n, in[0].N)
		}
	}
}
