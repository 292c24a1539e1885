package udp_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"softib/udp"
)

var configs = []struct {
	name string
	cfg  udp.Config
}{
	{"default", udp.Config{}},
	{"noGSO", udp.Config{DisableGSO: true}},
	{"noGRO", udp.Config{DisableGRO: true}},
	{"noOffload", udp.Config{DisableGSO: true, DisableGRO: true}},
	{"smallBatch", udp.Config{BatchSize: 3}},
	{"busyPoll", udp.Config{BusyPoll: true}},
}

func listen(t testing.TB, addr string, cfg *udp.Config) *udp.Socket {
	t.Helper()
	s, err := udp.Listen(netip.MustParseAddrPort(addr), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// payload returns the i-th test datagram of length n: a header naming i
// and a pattern derived from it.
func payload(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j)
	}
	if n >= 4 {
		b[0], b[1], b[2], b[3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	}
	return b
}

// sizes yields a mix that exercises GSO runs: long equal runs, shorter
// tails, a size change, and single datagrams.
func sizes(n int) []int {
	pattern := []int{4200, 4200, 4200, 4200, 1000, 4200, 4200, 64, 64, 64, 9000, 1, 4200, 4200, 4200}
	out := make([]int, n)
	for i := range out {
		out[i] = pattern[i%len(pattern)]
	}
	return out
}

// readN reads exactly n datagrams from s into fresh buffers.
func readN(t *testing.T, s *udp.Socket, n int) []udp.Message {
	t.Helper()
	var got []udp.Message
	msgs := make([]udp.Message, 16)
	for len(got) < n {
		for i := range msgs {
			msgs[i] = udp.Message{Buf: make([]byte, 0, 9216)}
		}
		k, err := s.ReadBatch(msgs)
		if err != nil {
			t.Fatalf("ReadBatch after %d datagrams: %v", len(got), err)
		}
		if k <= 0 || k > len(msgs) {
			t.Fatalf("ReadBatch returned %d", k)
		}
		got = append(got, msgs[:k]...)
	}
	if len(got) != n {
		t.Fatalf("got %d datagrams, want %d", len(got), n)
	}
	return got
}

func testExchange(t *testing.T, local string, cfg udp.Config) {
	tx := listen(t, local, &cfg)
	rxA := listen(t, local, &cfg)
	rxB := listen(t, local, &cfg)
	for _, batch := range []int{1, 2, 7, 64, 65, 200} {
		sz := sizes(batch)
		msgs := make([]udp.Message, batch)
		var wantA, wantB [][]byte
		for i := range msgs {
			dst := rxA.LocalAddr()
			// Destinations switch every 5 datagrams, so GSO runs end.
			if (i/5)%2 == 1 {
				dst = rxB.LocalAddr()
			}
			p := payload(i, sz[i])
			msgs[i] = udp.Message{Buf: p, N: len(p), Addr: dst}
			if dst == rxA.LocalAddr() {
				wantA = append(wantA, p)
			} else {
				wantB = append(wantB, p)
			}
		}
		n, err := tx.WriteBatch(msgs)
		if err != nil || n != batch {
			t.Fatalf("WriteBatch(%d) = %d, %v", batch, n, err)
		}
		for _, c := range []struct {
			rx   *udp.Socket
			want [][]byte
		}{{rxA, wantA}, {rxB, wantB}} {
			got := readN(t, c.rx, len(c.want))
			for i, m := range got {
				if m.Addr != tx.LocalAddr() {
					t.Errorf("batch %d: datagram %d from %v, want %v", batch, i, m.Addr, tx.LocalAddr())
				}
				if !bytes.Equal(m.Buf[:m.N], c.want[i]) {
					t.Fatalf("batch %d: datagram %d: got %d bytes %x..., want %d bytes %x...",
						batch, i, m.N, head(m.Buf[:m.N]), len(c.want[i]), head(c.want[i]))
				}
			}
		}
	}
	if err := tx.GSODisabled(); err != nil {
		t.Logf("GSO was disabled: %v", err)
	}
}

func head(b []byte) []byte { return b[:min(len(b), 8)] }

func TestExchangeIPv4(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) { testExchange(t, "127.0.0.1:0", c.cfg) })
	}
}

func TestExchangeIPv6(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) { testExchange(t, "[::1]:0", c.cfg) })
	}
}

// TestOffloadsUsed checks that on loopback GSO sends and GRO splits
// actually happen, so the exchange tests cover the split code.
func TestOffloadsUsed(t *testing.T) {
	tx := listen(t, "127.0.0.1:0", nil)
	rx := listen(t, "127.0.0.1:0", nil)
	gso, _ := tx.Offloads()
	_, gro := rx.Offloads()
	if !gso || !gro {
		t.Fatalf("offloads not available on this kernel: gso=%v gro=%v", gso, gro)
	}
	msgs := make([]udp.Message, 32)
	for i := range msgs {
		p := payload(i, 4200)
		msgs[i] = udp.Message{Buf: p, N: len(p), Addr: rx.LocalAddr()}
	}
	if _, err := tx.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	got := readN(t, rx, len(msgs))
	for i, m := range got {
		if !bytes.Equal(m.Buf[:m.N], msgs[i].Buf) {
			t.Fatalf("datagram %d differs", i)
		}
	}
	if tx.Stats.TxDatagrams.Load() != 32 || rx.Stats.RxDatagrams.Load() != 32 {
		t.Errorf("TxDatagrams %v RxDatagrams %v, want 32", &tx.Stats.TxDatagrams, &rx.Stats.RxDatagrams)
	}
	if tx.Stats.TxGSOBatches.Load() == 0 {
		t.Errorf("no GSO batch sent")
	}
	if rx.Stats.RxGROSplit.Load() == 0 {
		t.Errorf("no GRO super-datagram received")
	}
	t.Logf("tx syscalls %v gso batches %v; rx syscalls %v splits %v",
		&tx.Stats.TxSyscalls, &tx.Stats.TxGSOBatches, &rx.Stats.RxSyscalls, &rx.Stats.RxGROSplit)
}

func TestTruncatedDropped(t *testing.T) {
	for _, c := range configs[:4] {
		t.Run(c.name, func(t *testing.T) {
			tx := listen(t, "127.0.0.1:0", &c.cfg)
			rx := listen(t, "127.0.0.1:0", &c.cfg)
			big, small := payload(1, 3000), payload(2, 100)
			out := []udp.Message{
				{Buf: big, N: len(big), Addr: rx.LocalAddr()},
				{Buf: small, N: len(small), Addr: rx.LocalAddr()},
			}
			if _, err := tx.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			// ReadBatch skips the dropped datagram and keeps reading
			// until the small one is there, whenever it arrives.
			in := []udp.Message{{Buf: make([]byte, 1000)}, {Buf: make([]byte, 1000)}}
			bufs := []*byte{&in[0].Buf[0], &in[1].Buf[0]}
			n, err := rx.ReadBatch(in)
			for i := range in {
				if &in[i].Buf[0] != bufs[i] || len(in[i].Buf) != 1000 {
					t.Fatalf("ReadBatch changed msgs[%d].Buf", i)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 || !bytes.Equal(in[0].Buf[:in[0].N], small) {
				t.Fatalf("got n=%d first N=%d, want the small datagram only", n, in[0].N)
			}
			if rx.Stats.RxTruncated.Load() != 1 {
				t.Fatalf("RxTruncated = %d", rx.Stats.RxTruncated.Load())
			}
		})
	}
}

func TestCloseUnblocksReader(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			s := listen(t, "127.0.0.1:0", &c.cfg)
			done := make(chan error)
			go func() {
				_, err := s.ReadBatch([]udp.Message{{Buf: make([]byte, 100)}})
				done <- err
			}()
			time.Sleep(20 * time.Millisecond)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
				}
			case <-time.After(10 * time.Second): // hang guard only
				t.Fatal("ReadBatch still blocked after Close")
			}
			if _, err := s.WriteBatch([]udp.Message{{Buf: []byte{1}, N: 1, Addr: s.LocalAddr()}}); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("WriteBatch after Close: %v", err)
			}
		})
	}
}

func TestWriteErrors(t *testing.T) {
	s4 := listen(t, "127.0.0.1:0", nil)
	s6 := listen(t, "[::1]:0", nil)
	good := udp.Message{Buf: []byte("x"), N: 1, Addr: s4.LocalAddr()}
	cases := []struct {
		s    *udp.Socket
		msgs []udp.Message
		n    int
		want error
	}{
		{s4, []udp.Message{good, {Buf: []byte("x"), N: 1, Addr: s6.LocalAddr()}}, 1, udp.ErrAddrFamily},
		{s6, []udp.Message{{Buf: []byte("x"), N: 1, Addr: s4.LocalAddr()}}, 0, udp.ErrAddrFamily},
		{s4, []udp.Message{good, good, {Buf: make([]byte, 2), N: 3, Addr: s4.LocalAddr()}}, 2, udp.ErrMessageSize},
		{s4, []udp.Message{{Buf: make([]byte, 70000), N: 70000, Addr: s4.LocalAddr()}}, 0, nil},
	}
	for i, c := range cases {
		n, err := c.s.WriteBatch(c.msgs)
		if n != c.n || err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("case %d: WriteBatch = %d, %v; want %d, %v", i, n, err, c.n, c.want)
		}
	}
}

func TestConfigClamp(t *testing.T) {
	s := listen(t, "127.0.0.1:0", &udp.Config{BatchSize: 1 << 20})
	if s.BatchSize() != udp.MaxBatchSize {
		t.Fatalf("BatchSize = %d", s.BatchSize())
	}
	s = listen(t, "127.0.0.1:0", nil)
	if s.BatchSize() != udp.DefaultBatchSize {
		t.Fatalf("BatchSize = %d", s.BatchSize())
	}
}

func TestAllocs(t *testing.T) {
	for _, c := range configs {
		for _, fam := range []string{"127.0.0.1:0", "[::1]:0"} {
			t.Run(fmt.Sprintf("%s/%s", c.name, fam), func(t *testing.T) {
				tx := listen(t, fam, &c.cfg)
				rx := listen(t, fam, &c.cfg)
				if allocs := roundAllocs(t, tx, rx, 16, 4200); allocs != 0 {
					t.Fatalf("%v allocs per WriteBatch+ReadBatch, want 0", allocs)
				}
			})
		}
	}
}

// roundAllocs returns the allocations of one round: n datagrams of size
// bytes written by tx in one WriteBatch and read by rx with ReadBatch.
func roundAllocs(t *testing.T, tx, rx *udp.Socket, n, size int) float64 {
	t.Helper()
	out := make([]udp.Message, n)
	for i := range out {
		out[i] = udp.Message{Buf: payload(i, size), N: size, Addr: rx.LocalAddr()}
	}
	in := make([]udp.Message, n)
	for i := range in {
		in[i].Buf = make([]byte, size+100)
	}
	return testing.AllocsPerRun(50, func() {
		if _, err := tx.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(out); {
			k, err := rx.ReadBatch(in)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	})
}

// TestConcurrent has several goroutines write through one socket while
// another goroutine reads from it, so that -race checks the locking.
func TestConcurrent(t *testing.T) {
	s := listen(t, "127.0.0.1:0", nil)
	rx := listen(t, "127.0.0.1:0", nil)
	const writers, per = 4, 200
	done := make(chan int)
	go func() {
		msgs := make([]udp.Message, 8)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 2000)
		}
		got := 0
		for got < writers*per {
			n, err := rx.ReadBatch(msgs)
			if err != nil {
				break
			}
			got += n
		}
		done <- got
	}()
	// s also echoes into itself from a reader goroutine.
	go func() {
		msgs := make([]udp.Message, 4)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 2000)
		}
		for {
			if _, err := s.ReadBatch(msgs); err != nil {
				return
			}
		}
	}()
	errc := make(chan error, writers)
	for w := range writers {
		go func() {
			msgs := make([]udp.Message, 10)
			for i := range msgs {
				msgs[i] = udp.Message{Buf: payload(w, 1500), N: 1500, Addr: rx.LocalAddr()}
			}
			msgs[9].Addr = s.LocalAddr()
			for range per / 9 {
				if _, err := s.WriteBatch(msgs); err != nil {
					errc <- err
					return
				}
			}
			// Top up to exactly per datagrams for rx.
			if _, err := s.WriteBatch(msgs[:per%9]); err != nil {
				errc <- err
				return
			}
			errc <- nil
		}()
	}
	for range writers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case got := <-done:
		if got != writers*per {
			t.Fatalf("got %d of %d", got, writers*per)
		}
	case <-time.After(30 * time.Second): // hang guard
		t.Fatal("reader stuck")
	}
}
