package udp_test

import (
	"errors"
	"syscall"
	"testing"

	"softib/udp"
)

// TestGSOFallback makes GSO sends fail, as a device or kernel without
// UDP GSO would (EIO), and checks that the datagrams still arrive, that
// GSO is switched off for good, and that the reason is kept.
func TestGSOFallback(t *testing.T) {
	for _, fam := range []string{"127.0.0.1:0", "[::1]:0"} {
		tx := listen(t, fam, nil)
		rx := listen(t, fam, nil)
		udp.FailGSOSends(tx, syscall.EIO)
		msgs := make([]udp.Message, 10)
		for i := range msgs {
			msgs[i] = udp.Message{Buf: payload(i, 1000), N: 1000, Addr: rx.LocalAddr()}
		}
		for round := range 2 {
			if n, err := tx.WriteBatch(msgs); n != len(msgs) || err != nil {
				t.Fatalf("round %d: WriteBatch = %d, %v", round, n, err)
			}
			got := readN(t, rx, len(msgs))
			for i, m := range got {
				if string(m.Buf[:m.N]) != string(msgs[i].Buf) {
					t.Fatalf("round %d: datagram %d differs", round, i)
				}
			}
		}
		err := tx.GSODisabled()
		if !errors.Is(err, udp.ErrGSODisabled) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("GSODisabled() = %v", err)
		}
		if gso, _ := tx.Offloads(); gso {
			t.Fatal("GSO still on")
		}
		if d := tx.Stats.TxDatagrams.Load(); d != 20 {
			t.Fatalf("TxDatagrams = %d, want 20", d)
		}
		if r := tx.Stats.TxGSORetry.Load(); r != 1 {
			t.Fatalf("TxGSORetry = %d, want 1 (sticky)", r)
		}
	}
}
