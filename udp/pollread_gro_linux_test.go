package udp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"softib/udp"
)

// gsoSend sends segs from tx to rx as one UDP GSO send of segment size
// len(segs[0]) (all equal but a shorter last one), which loopback hands
// to a GRO socket as one super-datagram.
func gsoSend(t testing.TB, tx, rx *udp.Socket, segs ...[]byte) {
	t.Helper()
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(len(segs[0])))
	b := bytes.Join(segs, nil)
	if _, _, err := tx.UDPConn().WriteMsgUDPAddrPort(b, oob, rx.LocalAddr()); err != nil {
		t.Fatal(err)
	}
}

// groPair returns a GRO receiver with a PollReader of batch datagrams
// and a sender.
func groPair(t testing.TB, batch int) (rx, tx *udp.Socket, r *udp.PollReader) {
	t.Helper()
	rx = listenGRO(t, nil)
	tx = listen(t, "127.0.0.1:0", &udp.Config{DisableGRO: true})
	r = rx.PollReader(batch)
	if r == nil {
		t.Fatal("no PollReader for a GRO socket")
	}
	return rx, tx, r
}

func newMsgs(n, size int) []udp.Message {
	m := make([]udp.Message, n)
	for i := range m {
		m[i].Buf = make([]byte, size)
	}
	return m
}

// waitRead reads with Wait and ReadNow until something comes (the
// loopback delivery of a send may lag the send); hang guard: closing
// the socket after 20 s.
func waitRead(t testing.TB, s *udp.Socket, r *udp.PollReader, msgs []udp.Message) int {
	t.Helper()
	guard := time.AfterFunc(20*time.Second, func() { s.Close() })
	defer guard.Stop()
	n := 0
	err := r.Wait(func() bool {
		k, err := r.ReadNow(msgs)
		if err != nil {
			t.Error(err)
			return true
		}
		n = k
		return k > 0
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wantSeg checks that m is segment want from src.
func wantSeg(t testing.TB, m udp.Message, want []byte, src *udp.Socket, what string) {
	t.Helper()
	if m.N != len(want) || !bytes.Equal(m.Buf[:m.N], want) {
		t.Fatalf("%s: %d bytes, want %d (%x...)", what, m.N, len(want), want[:4])
	}
	if m.Addr != src.LocalAddr() {
		t.Fatalf("%s: source %v, want %v", what, m.Addr, src.LocalAddr())
	}
}

func wantStats(t testing.TB, s *udp.Socket, syscalls, datagrams, splits, truncated uint64) {
	t.Helper()
	st := &s.Stats
	if st.RxSyscalls.Load() != syscalls || st.RxDatagrams.Load() != datagrams ||
		st.RxGROSplit.Load() != splits || st.RxTruncated.Load() != truncated {
		t.Fatalf("stats: %d syscalls, %d datagrams, %d splits, %d truncated; want %d, %d, %d, %d",
			st.RxSyscalls.Load(), st.RxDatagrams.Load(), st.RxGROSplit.Load(), st.RxTruncated.Load(),
			syscalls, datagrams, splits, truncated)
	}
}

// TestPollReaderGROSplit: a GSO burst (five equal segments and a shorter
// last) arrives as one super-datagram and comes out of one TryRead as
// six messages, in order, each from the sender, counted as ReadBatch
// counts them.
func TestPollReaderGROSplit(t *testing.T) {
	rx, tx, r := groPair(t, 8)
	msgs := newMsgs(8, 4096)
	if n, err := r.TryRead(msgs); n != 0 || err != nil {
		t.Fatalf("empty socket: %d, %v", n, err)
	}
	segs := [][]byte{payload(0, 1000), payload(1, 1000), payload(2, 1000), payload(3, 1000), payload(4, 1000), payload(5, 600)}
	gsoSend(t, tx, rx, segs...)
	n := waitRead(t, rx, r, msgs)
	if n != len(segs) {
		t.Fatalf("read %d messages, want %d", n, len(segs))
	}
	for i, s := range segs {
		wantSeg(t, msgs[i], s, tx, fmt.Sprint("segment ", i))
	}
	if r.Pending() {
		t.Fatal("pending after a read that fit")
	}
	wantStats(t, rx, 1, 6, 1, 0)
	// An empty datagram takes a message of its own, as without GRO.
	if _, err := tx.WriteBatch([]udp.Message{{Buf: nil, N: 0, Addr: rx.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if n := waitRead(t, rx, r, msgs); n != 1 || msgs[0].N != 0 || msgs[0].Addr != tx.LocalAddr() {
		t.Fatalf("empty datagram: %d messages, %+v", n, msgs[0])
	}
}

// TestPollReaderGROPending: with a small msgs slice, the segments of one
// receive that did not fit stay pending and come out in order on the
// following TryRead and ReadNow calls, without a syscall; Wait returns
// at once while segments are pending (they raise no readiness); only an
// empty socket with nothing pending reads 0.
func TestPollReaderGROPending(t *testing.T) {
	rx, tx, r := groPair(t, 8)
	msgs := newMsgs(2, 4096)
	a := [][]byte{payload(10, 700), payload(11, 700), payload(12, 700)}
	b := [][]byte{payload(20, 500), payload(21, 500), payload(22, 500), payload(23, 100)}
	gsoSend(t, tx, rx, a...)
	gsoSend(t, tx, rx, b...)
	want := append(append([][]byte{}, a...), b...)
	got := 0
	check := func(n int, what string) {
		t.Helper()
		for i := range n {
			wantSeg(t, msgs[i], want[got], tx, fmt.Sprintf("%s: segment %d", what, got))
			got++
		}
	}
	// Both super-datagrams may have queued by now, or only the first.
	check(waitRead(t, rx, r, msgs), "first read")
	if !r.Pending() {
		t.Fatal("nothing pending after reading 2 of 3 segments")
	}
	sys := rx.Stats.RxSyscalls.Load()
	n, err := r.TryRead(msgs[:1])
	if err != nil || n != 1 {
		t.Fatalf("TryRead = %d, %v", n, err)
	}
	check(n, "TryRead")
	if rx.Stats.RxSyscalls.Load() != sys {
		t.Fatal("TryRead with segments pending made a syscall")
	}
	for got < len(want) {
		if r.Pending() {
			// Wait's callback gets the pending segments at once.
			check(waitRead(t, rx, r, msgs), "Wait")
			continue
		}
		n, err := r.TryRead(msgs)
		if err != nil {
			t.Fatal(err)
		}
		check(n, "TryRead")
		if n == 0 {
			check(waitRead(t, rx, r, msgs), "Wait")
		}
	}
	if n, err := r.TryRead(msgs); n != 0 || err != nil || r.Pending() {
		t.Fatalf("drained socket: %d, %v, pending %v", n, err, r.Pending())
	}
	st := &rx.Stats
	if st.RxDatagrams.Load() != 7 || st.RxGROSplit.Load() != 2 || st.RxTruncated.Load() != 0 {
		t.Fatalf("stats: %d datagrams, %d splits, %d truncated; want 7, 2, 0",
			st.RxDatagrams.Load(), st.RxGROSplit.Load(), st.RxTruncated.Load())
	}
	if s := st.RxSyscalls.Load(); s < 1 || s > 2 {
		t.Fatalf("%d syscalls for two super-datagrams", s)
	}
}

// TestPollReaderGROTruncated: segments longer than their message's
// buffer take their slots with N = -1 and are counted; a shorter last
// segment that fits, and a plain datagram after, come out intact.
func TestPollReaderGROTruncated(t *testing.T) {
	rx, tx, r := groPair(t, 8)
	msgs := newMsgs(8, 64)
	gsoSend(t, tx, rx, payload(0, 100), payload(1, 100), payload(2, 100), payload(3, 40))
	n := waitRead(t, rx, r, msgs)
	if n != 4 || msgs[0].N != -1 || msgs[1].N != -1 || msgs[2].N != -1 {
		t.Fatalf("read %d: %+v", n, msgs[:n])
	}
	wantSeg(t, msgs[3], payload(3, 40), tx, "short last segment")
	wantStats(t, rx, 1, 1, 1, 3)
	if _, err := tx.WriteBatch([]udp.Message{{Buf: payload(7, 200), N: 200, Addr: rx.LocalAddr()}, {Buf: payload(8, 30), N: 30, Addr: rx.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 2 {
		n := waitRead(t, rx, r, msgs[got:])
		got += n
	}
	if msgs[0].N != -1 {
		t.Fatalf("200-byte datagram in a 64-byte buffer: N = %d", msgs[0].N)
	}
	wantSeg(t, msgs[1], payload(8, 30), tx, "datagram after a truncated one")
	if tr := rx.Stats.RxTruncated.Load(); tr != 4 {
		t.Fatalf("RxTruncated = %d, want 4", tr)
	}
}

// TestPollReaderAllocs: reading, both without and with GRO (splitting
// and carrying segments over), allocates nothing.
func TestPollReaderAllocs(t *testing.T) {
	for _, gro := range []bool{false, true} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			rx := listen(t, "127.0.0.1:0", &udp.Config{DisableGRO: !gro})
			if _, on := rx.Offloads(); on != gro {
				t.Fatalf("GRO %v, want %v", on, gro)
			}
			tx := listen(t, "127.0.0.1:0", nil)
			r := rx.PollReader(4)
			out := make([]udp.Message, 8)
			for i := range out {
				out[i] = udp.Message{Buf: payload(i, 1000), N: 1000, Addr: rx.LocalAddr()}
			}
			out[7].N = 300
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
					got += n
				}
				if n, _ := r.TryRead(msgs); n != 0 {
					t.Fatalf("%d datagrams more than sent", n)
				}
			}
			round()
			if a := testing.AllocsPerRun(100, round); a != 0 {
				t.Fatalf("%v allocations per send and read", a)
			}
			if gro && rx.Stats.RxGROSplit.Load() == 0 {
				t.Fatal("no GRO super-datagram received")
			}
		})
	}
}

// TestPollReaderGROStress runs the receive token discipline rxe uses on
// a GRO socket: a reader goroutine parked in Wait (its callback takes
// the token with TryLock and reads with ReadNow) and a poller goroutine
// that takes the token and reads with TryRead, sometimes leaving
// segments pending for the next holder, sometimes draining them, and
// now and then sleeping so that the reader gets the socket. rxe-shaped
// batches come from two senders. Every datagram must arrive whole and
// once, received by either goroutine.
func TestPollReaderGROStress(t *testing.T) {
	const (
		senders = 2
		batches = 300
	)
	rx := listenGRO(t, nil)
	r := rx.PollReader(8)
	var (
		tok                       sync.Mutex // the receive token: guards msgs and the tallies
		msgs                      = newMsgs(5, 4096+128)
		tally                     stressTally
		byR, byP                  int
		sent                      int
		sentMu                    sync.Mutex
		writers, readers          sync.WaitGroup
		stop                      = make(chan struct{})
		readerErr                 error
		pollerDrain, pollerSleeps int
	)
	consume := func(n int, byReader bool) {
		for _, m := range msgs[:n] {
			if !tally.add(t, m) {
				continue
			}
			if byReader {
				byR++
			} else {
				byP++
			}
		}
	}
	for s := range senders {
		writers.Go(func() {
			tx := listen(t, "127.0.0.1:0", &udp.Config{DisableGRO: true})
			rnd := rand.New(rand.NewPCG(uint64(s), 7))
			seq, n := 0, 0
			var out []udp.Message
			for range batches {
				out = appendStressBurst(out[:0], rnd, 2, s, &seq, rx.LocalAddr())
				if _, err := tx.WriteBatch(out); err != nil {
					t.Error(err)
					return
				}
				n += len(out)
				if rnd.IntN(4) == 0 {
					time.Sleep(time.Duration(rnd.IntN(300)) * time.Microsecond)
				}
			}
			sentMu.Lock()
			sent += n
			sentMu.Unlock()
		})
	}
	// Each side is certain to take datagrams, whatever the scheduler
	// does during the stress: a first burst is read with the token held
	// here, as the poller (before the reader runs), and a last one after
	// the poller has stopped, by the reader alone.
	burst := func(id int) int {
		tx := listen(t, "127.0.0.1:0", &udp.Config{DisableGRO: true})
		seq := 0
		out := appendStressBurst(nil, rand.New(rand.NewPCG(uint64(id), 9)), 2, id, &seq, rx.LocalAddr())
		if _, err := tx.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		sentMu.Lock()
		sent += len(out)
		sentMu.Unlock()
		return len(out)
	}
	first := burst(senders)
	for deadline := time.Now().Add(20 * time.Second); byP < first; {
		n, err := r.TryRead(msgs)
		if err != nil {
			t.Fatal(err)
		}
		consume(n, false)
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("first burst: read %d of %d datagrams (hang guard)", byP, first)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The reader goroutine, as rxe's rxLoopPoll.
	readers.Go(func() {
		var (
			n     int
			taken bool
			rerr  error
		)
		ready := func() bool {
			if !tok.TryLock() {
				taken = true
				return true
			}
			n, rerr = r.ReadNow(msgs)
			if rerr != nil {
				return true
			}
			if n == 0 {
				tok.Unlock()
				return false
			}
			return true
		}
		for {
			n, taken, rerr = 0, false, nil
			if err := r.Wait(ready); err != nil {
				readerErr = err
				return
			}
			if taken {
				tok.Lock()
				n, rerr = r.TryRead(msgs)
			}
			if rerr != nil {
				readerErr = rerr
				tok.Unlock()
				return
			}
			consume(n, true)
			tok.Unlock()
		}
	})
	// The poller, as rxe's CQ poller (but it may let the token go with
	// segments pending: it comes back for them, or the reader's next
	// Wait callback takes them).
	var poller sync.WaitGroup
	poller.Go(func() {
		rnd := rand.New(rand.NewPCG(3, 4))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if tok.TryLock() {
				drain := rnd.IntN(2) == 0
				if drain {
					pollerDrain++
				}
				for {
					n, err := r.TryRead(msgs)
					if err != nil {
						tok.Unlock()
						t.Error(err)
						return
					}
					consume(n, false)
					if n == 0 || !drain || !r.Pending() {
						break
					}
				}
				tok.Unlock()
			}
			if i%64 == 63 {
				pollerSleeps++
				time.Sleep(time.Duration(rnd.IntN(500)) * time.Microsecond)
			} else {
				runtime.Gosched()
			}
		}
	})
	writers.Wait()
	close(stop)
	poller.Wait()
	tok.Lock()
	byRBefore := byR
	tok.Unlock()
	burst(senders + 1)
	// Give the reader until nothing has arrived for a while (hang
	// guard, not a timing assertion).
	last, quiet := -1, 0
	for quiet < 20 {
		time.Sleep(50 * time.Millisecond)
		tok.Lock()
		g := tally.got + tally.bad
		tok.Unlock()
		if g == sent {
			break
		}
		if g == last {
			quiet++
		} else {
			last, quiet = g, 0
		}
	}
	drops := kernelDrops(t, rx)
	rx.Close()
	readers.Wait()
	t.Logf("sent %d, received %d (reader %d, poller %d; poller drained %d times, slept %d), %d syscalls, %d GRO splits, %d kernel drops",
		sent, tally.got, byR, byP, pollerDrain, pollerSleeps, rx.Stats.RxSyscalls.Load(), rx.Stats.RxGROSplit.Load(), drops)
	if readerErr == nil {
		t.Error("reader ended without an error")
	}
	if tally.bad != 0 || tally.dup != 0 || rx.Stats.RxTruncated.Load() != 0 {
		t.Fatalf("%d malformed, %d duplicate, %d truncated datagrams", tally.bad, tally.dup, rx.Stats.RxTruncated.Load())
	}
	if drops == 0 && tally.got != sent {
		t.Fatalf("received %d of %d datagrams, no kernel drops", tally.got, sent)
	}
	if byP < first || byR == byRBefore && drops == 0 {
		t.Errorf("reader received %d (%d after the poller stopped), poller %d (first burst %d): want both", byR, byR-byRBefore, byP, first)
	}
	if rx.Stats.RxGROSplit.Load() == 0 {
		t.Error("no GRO super-datagram received")
	}
}

// kernelDrops returns the kernel's receive drop count of s (sk_drops,
// the drops column of /proc/net/udp), read with SO_MEMINFO: scanning
// /proc/net/udp can miss a socket while other sockets come and go.
func kernelDrops(t testing.TB, s *udp.Socket) int {
	rc, err := s.UDPConn().SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	const skMeminfoDrops = 8 // SK_MEMINFO_DROPS
	var mem [skMeminfoDrops + 1]uint32
	var serr error
	if err := rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mem))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			serr = e
		}
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("getsockopt SO_MEMINFO: %v", serr)
	}
	return int(mem[skMeminfoDrops])
}
