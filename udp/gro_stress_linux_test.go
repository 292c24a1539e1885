package udp_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softib/udp"
)

// stressDatagram fills b (len(b) >= 8) as datagram seq of sender id:
// id, seq, length, then a pattern derived from them.
func stressDatagram(b []byte, id, seq int) {
	binary.BigEndian.PutUint16(b[0:], uint16(id))
	binary.BigEndian.PutUint32(b[2:], uint32(seq))
	binary.BigEndian.PutUint16(b[6:], uint16(len(b)))
	for j := 8; j < len(b); j++ {
		b[j] = byte(seq*13 + id + j)
	}
}

// appendStressBurst appends to msgs 1 to maxShapes rxe-like runs
// (rxeShapes, chosen by r) of stress datagrams from sender id to to,
// numbered from *seq on.
func appendStressBurst(msgs []udp.Message, r *rand.Rand, maxShapes, id int, seq *int, to netip.AddrPort) []udp.Message {
	for range 1 + r.IntN(maxShapes) {
		for _, l := range rxeShapes[r.IntN(len(rxeShapes))] {
			b := make([]byte, l)
			stressDatagram(b, id, *seq)
			*seq++
			msgs = append(msgs, udp.Message{Buf: b, N: l, Addr: to})
		}
	}
	return msgs
}

// listenGRO is listen for a socket that must receive with UDP GRO.
func listenGRO(t testing.TB, cfg *udp.Config) *udp.Socket {
	t.Helper()
	s := listen(t, "127.0.0.1:0", cfg)
	if _, gro := s.Offloads(); !gro {
		t.Fatal("no UDP GRO")
	}
	return s
}

// stressTally counts the stress datagrams a test received: intact ones
// (got), malformed ones and duplicates.
type stressTally struct {
	seen          map[[2]int]bool
	got, bad, dup int
}

// add checks one received datagram and reports whether it was intact;
// the first five malformed ones are reported through t.
func (s *stressTally) add(t testing.TB, m udp.Message) bool {
	id, seq, ok := checkStress(m.Buf[:max(m.N, 0)])
	if !ok {
		if s.bad++; s.bad <= 5 {
			t.Errorf("malformed datagram of %d bytes (sender %d, seq %d)", m.N, id, seq)
		}
		return false
	}
	if s.seen == nil {
		s.seen = map[[2]int]bool{}
	}
	k := [2]int{id, seq}
	if s.seen[k] {
		s.dup++
	}
	s.seen[k] = true
	s.got++
	return true
}

// checkStress reports whether b is an intact datagram built by
// stressDatagram, and its sender and sequence number.
func checkStress(b []byte) (id, seq int, ok bool) {
	if len(b) < 8 || int(binary.BigEndian.Uint16(b[6:])) != len(b) {
		return 0, 0, false
	}
	id, seq = int(binary.BigEndian.Uint16(b[0:])), int(binary.BigEndian.Uint32(b[2:]))
	for j := 8; j < len(b); j++ {
		if b[j] != byte(seq*13+id+j) {
			return id, seq, false
		}
	}
	return id, seq, true
}

// rxeShapes are batches shaped like rxe's: data runs (a longer FIRST
// packet, equal MIDDLEs, a LAST), ACKs and READ requests in between.
var rxeShapes = [][]int{
	{1056, 1040, 1040, 1040, 1040, 1040, 1036},
	{1040, 1040, 1040, 1040, 1040, 1040, 1040, 1040, 20},
	{20, 20, 20},
	{1044, 1040, 1040, 1040, 1044, 20},
	{32, 32, 20},
	{4124, 4112, 4112, 4112, 4112, 4108},
	{4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 4112, 20},
	{20},
	{1040},
}

// TestGROStress sends rxe-shaped batches from several goroutines on two
// sockets (two flows) to one GRO receiver and checks that every datagram
// arrives whole: exactly one datagram per Message, never a piece of one
// or two glued together.
func TestGROStress(t *testing.T) {
	for _, rc := range []struct {
		name string
		cfg  udp.Config
		nmsg int // Messages per ReadBatch
	}{
		{"batch64", udp.Config{}, 64},
		{"read7", udp.Config{}, 7},
		{"batch4", udp.Config{BatchSize: 4}, 64},
		{"busypoll", udp.Config{BusyPoll: true}, 64},
	} {
		t.Run(rc.name, func(t *testing.T) { groStress(t, rc.cfg, rc.nmsg) })
	}
}

func groStress(t *testing.T, rcfg udp.Config, nmsg int) {
	const (
		senders   = 2
		writers   = 2 // goroutines per sender socket
		batches   = 250
		maxInFly  = 2 << 20
		bufCap    = 4096 + 128 // rxe's packet buffer
		seqStride = 1 << 24    // writers of one sender use disjoint seq ranges
	)
	rx := listenGRO(t, &rcfg)
	var txs [senders]*udp.Socket
	for i := range txs {
		txs[i] = listen(t, "127.0.0.1:0", &udp.Config{})
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		sent int
	)
	for s := range senders {
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(s), uint64(w)))
				seq := w * seqStride
				var msgs []udp.Message
				n := 0
				for range batches {
					// One to three shapes per WriteBatch.
					msgs = appendStressBurst(msgs[:0], r, 3, s, &seq, rx.LocalAddr())
					if _, err := txs[s].WriteBatch(msgs); err != nil {
						t.Error(err)
						return
					}
					n += len(msgs)
					if r.IntN(8) == 0 {
						time.Sleep(50 * time.Microsecond) // vary how datagrams queue up
					}
				}
				mu.Lock()
				sent += n
				mu.Unlock()
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	msgs := make([]udp.Message, nmsg)
	for i := range msgs {
		msgs[i].Buf = make([]byte, bufCap)
	}
	var tally stressTally
	for !(isClosed(done) && tally.got == sent) {
		// The deadline only ends the loop once the writers are done and
		// the rest was lost (loopback drops when the receiver lags).
		rx.UDPConn().SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := rx.ReadBatch(msgs)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if isClosed(done) {
				break
			}
			continue
		}
		if err != nil {
			t.Fatalf("ReadBatch: %v", err)
		}
		for _, m := range msgs[:n] {
			tally.add(t, m)
		}
	}
	st := &rx.Stats
	t.Logf("sent %d, received %d (%d GRO splits, %d syscalls), %d malformed, %d duplicates, %d truncated",
		sent, tally.got, st.RxGROSplit.Load(), st.RxSyscalls.Load(), tally.bad, tally.dup, st.RxTruncated.Load())
	if tally.bad != 0 || tally.dup != 0 || st.RxTruncated.Load() != 0 {
		t.Fatalf("%d malformed, %d duplicate, %d truncated datagrams", tally.bad, tally.dup, st.RxTruncated.Load())
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestGRODuplex is TestGROStress with rxe's socket use: each socket sends
// and receives at the same time (sendmmsg and recvmmsg on one descriptor),
// two writer goroutines per socket, with small and large batch sizes.
func TestGRODuplex(t *testing.T) {
	for _, bs := range []int{8, 64} {
		cfg := udp.Config{BatchSize: bs}
		s := [2]*udp.Socket{listen(t, "127.0.0.1:0", &cfg), listen(t, "127.0.0.1:0", &cfg)}
		var (
			bad, got atomic.Int64
			writers  sync.WaitGroup
			readers  sync.WaitGroup
		)
		stop := make(chan struct{})
		for side := range 2 {
			me, peer := s[side], s[1-side]
			for w := range 2 {
				writers.Go(func() {
					r := rand.New(rand.NewPCG(uint64(side), uint64(w)))
					seq := w << 24
					for range 300 {
						msgs := appendStressBurst(nil, r, 3, side, &seq, peer.LocalAddr())
						if _, err := me.WriteBatch(msgs); err != nil {
							t.Error(err)
							return
						}
						if r.IntN(4) == 0 {
							time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
						}
					}
				})
			}
			readers.Go(func() {
				msgs := make([]udp.Message, bs)
				for i := range msgs {
					msgs[i].Buf = make([]byte, 4096+128)
				}
				for {
					me.UDPConn().SetReadDeadline(time.Now().Add(500 * time.Millisecond))
					n, err := me.ReadBatch(msgs)
					if errors.Is(err, os.ErrDeadlineExceeded) {
						if isClosed(stop) {
							return
						}
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					for _, m := range msgs[:n] {
						if _, _, ok := checkStress(m.Buf[:m.N]); !ok && bad.Add(1) <= 5 {
							t.Errorf("batch %d: malformed datagram of %d bytes", bs, m.N)
						}
					}
					got.Add(int64(n))
				}
			})
		}
		writers.Wait()
		close(stop)
		readers.Wait()
		t.Logf("batch %d: %d datagrams received, %d malformed", bs, got.Load(), bad.Load())
	}
}
