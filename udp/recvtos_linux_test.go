//go:build linux

package udp_test

import (
	"fmt"
	"testing"

	"softib/udp"
)

// tosPlan is a send order whose classes change inside runs of equal
// size (so GSO splits its runs there and GRO must not merge across
// them): ECT(0) with DSCP, CE, not-ECT, ECT(1).
var tosPlan = []uint8{0x62, 0x62, 0x62, 0x63, 0x63, 0x00, 0xB8 | 2, 0x62, 0x01, 0x03, 0x03, 0x03}

// TestRecvTOS: a RecvTOS socket reports each datagram's TOS / traffic
// class, ECN bits included, through ReadBatch and through a PollReader,
// with GRO on and off, on IPv4 and IPv6; GSO-coalesced runs of one
// class arrive as GRO super-datagrams whose segments all carry it.
func TestRecvTOS(t *testing.T) {
	for _, fam := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, gro := range []bool{true, false} {
			for _, poll := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/gro=%v/poll=%v", fam, gro, poll), func(t *testing.T) {
					rx := listen(t, fam, &udp.Config{RecvTOS: true, DisableGRO: !gro})
					tx := listen(t, fam, nil)
					out := make([]udp.Message, len(tosPlan))
					for i, tos := range tosPlan {
						out[i] = udp.Message{Buf: payload(i, 1000), N: 1000, Addr: rx.LocalAddr(), TOS: tos}
					}
					if _, err := tx.WriteBatch(out); err != nil {
						t.Fatal(err)
					}
					var got []udp.Message
					msgs := newMsgs(5, 2048)
					var r *udp.PollReader
					if poll {
						r = rx.PollReader(5)
					}
					for len(got) < len(out) {
						for i := range msgs {
							msgs[i].TOS = 0xAA // must be overwritten
						}
						var n int
						if poll {
							n = waitRead(t, rx, r, msgs)
						} else {
							var err error
							if n, err = rx.ReadBatch(msgs); err != nil {
								t.Fatal(err)
							}
						}
						for _, m := range msgs[:n] {
							m.Buf = append([]byte(nil), m.Buf[:m.N]...)
							got = append(got, m)
						}
					}
					for _, m := range got {
						i := int(m.Buf[3])
						if m.TOS != tosPlan[i] {
							t.Errorf("datagram %d: TOS %#x, want %#x", i, m.TOS, tosPlan[i])
						}
					}
					if gro && rx.Stats.RxGROSplit.Load() == 0 {
						t.Error("no GRO super-datagram: the same-class runs were not coalesced")
					}
				})
			}
		}
	}
}

// TestRecvTOSOff: without RecvTOS a read reports TOS 0 whatever the
// datagram carried (Message.TOS is not left from an earlier send).
func TestRecvTOSOff(t *testing.T) {
	rx := listen(t, "127.0.0.1:0", &udp.Config{DisableGRO: true})
	tx := listen(t, "127.0.0.1:0", nil)
	if _, err := tx.WriteBatch([]udp.Message{{Buf: payload(0, 100), N: 100, Addr: rx.LocalAddr(), TOS: 0x03}}); err != nil {
		t.Fatal(err)
	}
	msgs := newMsgs(1, 2048)
	msgs[0].TOS = 0x55
	if _, err := rx.ReadBatch(msgs); err != nil {
		t.Fatal(err)
	}
	if msgs[0].TOS != 0 {
		t.Fatalf("TOS %#x without RecvTOS, want 0", msgs[0].TOS)
	}
}

// TestRecvTOSAllocs: reporting the received class costs no allocation
// (PollReader, GRO and direct).
func TestRecvTOSAllocs(t *testing.T) {
	for _, gro := range []bool{false, true} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			rx := listen(t, "127.0.0.1:0", &udp.Config{DisableGRO: !gro, RecvTOS: true})
			tx := listen(t, "127.0.0.1:0", nil)
			r := rx.PollReader(4)
			out := make([]udp.Message, 8)
			for i := range out {
				out[i] = udp.Message{Buf: payload(i, 1000), N: 1000, Addr: rx.LocalAddr(), TOS: 0x03}
			}
			msgs := newMsgs(3, 2048)
			round := func() {
				if _, err := tx.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < len(out); {
					n, err := r.TryRead(msgs)
					if err != nil {
						t.Fatal(err)
					}
					for _, m := range msgs[:n] {
						if m.TOS != 0x03 {
							t.Fatalf("TOS %#x, want 0x03", m.TOS)
						}
					}
					got += n
				}
			}
			round()
			if a := testing.AllocsPerRun(100, round); a != 0 {
				t.Fatalf("%v allocations per send and read", a)
			}
		})
	}
}
