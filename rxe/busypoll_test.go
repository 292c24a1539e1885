package rxe_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// busyPair connects an RC pair of busy-poll devices over loopback UDP.
// The ACK timeout is 4.3 s (20), so that a retransmission means a lost
// ACK, not a loaded machine.
func busyPair(t testing.TB, bufSize int) (x, y *end) {
	cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000, BusyPoll: true}}
	return pair(t, verbs.QPTypeRC, cfg, connOpts{mtu: verbs.MTU4096, timeout: 20}, bufSize)
}

// spinWC waits for one completion on e's CQ the way a busy-polling
// application does: it spins on Poll (yielding between empty polls),
// and after 200 empty polls arms the CQ and sleeps on e's channel, as
// rdmautil.Waiter does. (With GOMAXPROCS=1, as in AllocsPerRun, an
// endless spin would leave the other device's receive goroutine to the
// netpoller's 10 ms sysmon polls.) Hang guard: 20 s.
func spinWC(t testing.TB, e *end, wc []verbs.WC) verbs.WC {
	t.Helper()
	return spinPoll(t, e, wc, 200)
}

// spinPoll spins on Poll for one completion on e's CQ, yielding between
// empty polls; after sleepAfter empty polls (never if negative) it arms
// the CQ and sleeps on e's channel between polls. Hang guard: 20 s.
func spinPoll(t testing.TB, e *end, wc []verbs.WC, sleepAfter int) verbs.WC {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		n, err := e.cq.Poll(wc[:1])
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && sleepAfter >= 0 && i >= sleepAfter {
			e.cq.ReqNotify(false)
			if n, err = e.cq.Poll(wc[:1]); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				select {
				case <-e.ch.C():
				case <-e.guard().C:
					if time.Now().After(deadline) {
						t.Fatalf("no completion; stats %v", rxe.CQDeviceStats(e.cq))
					}
				}
				continue
			}
		}
		if n == 1 {
			return wc[0]
		}
		if i%1024 == 0 && time.Now().After(deadline) {
			t.Fatalf("no completion; stats %v", rxe.CQDeviceStats(e.cq))
		}
		runtime.Gosched()
	}
}

func wantClean(t *testing.T, cq verbs.CQ) {
	t.Helper()
	st := rxe.CQDeviceStats(cq)
	for _, k := range []string{"CompRetry", "OutOfSeqReq", "RcvSeqErr", "RxQueueFull", "RxTruncated", "LinkDowned"} {
		if st[k] != 0 {
			t.Errorf("%s = %d: %v", k, st[k], st)
		}
	}
}

// TestBusyPollPingPong runs SEND ping-pong between busy-poll devices with
// both sides spinning on Poll: the polls receive from the sockets
// themselves, the data arrives intact and in order, and nothing is
// retransmitted.
func TestBusyPollPingPong(t *testing.T) {
	x, y := busyPair(t, 1<<16)
	spinPingPong(t, x, y, 1000)
}

// spinPingPong runs rounds of 64-byte SEND ping-pong between x and y
// with both sides spinning on Poll, checks the data and that pollers
// received from the sockets on both sides, without retransmissions.
func spinPingPong(t *testing.T, x, y *end, rounds int) {
	t.Helper()
	wcx, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	done := make(chan error, 1)
	go func() {
		for i := range rounds {
			wc := spinWC(t, y, wcy)
			if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv || wc.ByteLen != 64 {
				done <- &wcError{wc}
				return
			}
			y.sync()
			if y.buf[0] != byte(i) || y.buf[63] != byte(i) {
				done <- &dataError{i, y.buf[0]}
				return
			}
			y.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i + 1), SGL: []verbs.SGE{y.mr.SGE(0, 64)}}})
			y.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: y.buf[:64]}})
		}
		done <- nil
	}()
	postRecv(t, y, verbs.RecvWR{SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
	postRecv(t, x, verbs.RecvWR{SGL: []verbs.SGE{x.mr.SGE(4096, 64)}})
	for i := range rounds {
		for j := range 64 {
			x.buf[j] = byte(i)
		}
		post(t, x, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: x.buf[:64]})
		wc := spinWC(t, x, wcx)
		wantOK(t, wc, verbs.WCRecv)
		x.sync()
		if !bytes.Equal(x.buf[4096:4096+64], x.buf[:64]) {
			t.Fatalf("round %d: echo %v", i, x.buf[4096:4096+64])
		}
		postRecv(t, x, verbs.RecvWR{SGL: []verbs.SGE{x.mr.SGE(4096, 64)}})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, e := range []*end{x, y} {
		wantClean(t, e.cq)
		if st := rxe.CQDeviceStats(e.cq); st["PollRxBatches"] == 0 {
			t.Errorf("no batch was received by a poller: %v", st)
		}
	}
}

type wcError struct{ wc verbs.WC }

func (e *wcError) Error() string { return "unexpected completion" }

type dataError struct {
	round int
	got   byte
}

func (e *dataError) Error() string { return "echo data mismatch" }

// TestBusyPollDeferredAckFallback: a poller's round defers its ACK for the
// application's next post, and here the application never calls rxe
// again. The ACK must still go out (the QP timer sends it after
// respDeferMax), so the sender's signaled completion arrives without a
// retransmission (the ACK timeout is 4.3 s, far above respDeferMax).
func TestBusyPollDeferredAckFallback(t *testing.T) {
	x, y := busyPair(t, 1<<16)
	wcy := make([]verbs.WC, 1)
	// A poller can only defer what it receives itself; the receive
	// goroutine may win the race for a datagram, so repeat until a
	// deferral happened (usually at once: the poller spins first). The
	// 4.3 s ACK timeout makes a retransmission, not the timer, the slow
	// way out.
	for i := 0; i < 50 && rxe.CQDeviceStats(y.cq)["RespDeferred"] == 0; i++ {
		postRecv(t, y, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
		got := make(chan verbs.WC, 1)
		go func() { got <- spinWC(t, y, wcy) }()
		post(t, x, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("deferred")})
		wantOK(t, <-got, verbs.WCRecv)
		// y's application stops here: no post, no poll.
		wantOK(t, waitWC(t, x.cq, 1)[0], verbs.WCSend)
	}
	if rxe.CQDeviceStats(y.cq)["RespDeferred"] == 0 {
		t.Fatal("no poller round deferred its ACK")
	}
	wantClean(t, x.cq)
	wantClean(t, y.cq)
}

// TestBusyPollBulk moves WRITEs and READs of 256 KiB between busy-poll
// devices while the application alternates between spinning on Poll and
// sleeping on the completion channel, so that the receive token passes
// between pollers and the receive goroutines: the data must arrive
// intact, in order, without retransmissions.
func TestBusyPollBulk(t *testing.T) {
	const size = 256 << 10
	x, y := busyPair(t, 4*size)
	wcx := make([]verbs.WC, 1)
	fill(x.buf[:size], 3)
	fill(y.buf[2*size:3*size], 4)
	x.sync()
	y.sync()
	for i := range 16 {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{x.mr.SGE(0, size)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
		if i%2 == 1 {
			wr.Opcode = verbs.WRRDMARead
			wr.SGL = []verbs.SGE{x.mr.SGE(size, size)}
			wr.RemoteAddr = y.mr.Addr() + 2*size
		}
		post(t, x, wr)
		var wc verbs.WC
		if i%4 < 2 {
			wc = spinWC(t, x, wcx)
		} else {
			wc = waitWC(t, x.cq, 1)[0]
		}
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("WR %d: %+v", i, wc)
		}
	}
	x.sync()
	y.sync()
	if !bytes.Equal(y.buf[:size], x.buf[:size]) {
		t.Fatal("WRITE data differs")
	}
	if !bytes.Equal(x.buf[size:2*size], y.buf[2*size:3*size]) {
		t.Fatal("READ data differs")
	}
	wantClean(t, x.cq)
	wantClean(t, y.cq)
}

// TestBusyPollZeroAllocs checks that the busy-poll data path (a spinning
// poller receiving, deferring and flushing ACKs) allocates nothing.
func TestBusyPollZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	x, y := busyPair(t, 1<<16)
	spinZeroAllocs(t, x, y)
}

// TestGROTokenZeroAllocs is TestBusyPollZeroAllocs on default devices
// (GRO on): spinning pollers that take the receive token and split GRO
// super-datagrams allocate nothing either.
func TestGROTokenZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	x, y := groPair(t, 1<<16)
	spinZeroAllocs(t, x, y)
	// x spins for every completion; y finds its receive mostly done.
	if st := rxe.CQDeviceStats(x.cq); st["PollRxBatches"] == 0 {
		t.Errorf("no batch was received by a poller: %v", st)
	}
	wantGROSplit(t, y)
}

// spinZeroAllocs measures the allocations of WRITE and SEND rounds
// between x and y, both sides spinning on Poll.
func spinZeroAllocs(t *testing.T, x, y *end) {
	t.Helper()
	wcx, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	w := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 16<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	s := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 100)}}}
	r := []verbs.RecvWR{{SGL: []verbs.SGE{y.mr.SGE(0, 4096)}}}
	round := func() {
		x.qp.PostSend(w)
		spinWC(t, x, wcx)
		y.qp.PostRecv(r)
		x.qp.PostSend(s)
		spinWC(t, x, wcx)
		spinWC(t, y, wcy)
	}
	for range 50 {
		round()
	}
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Fatalf("%v allocations per WRITE+SEND round", a)
	}
}

// waitArm waits for one completion the verbs way: poll, arm, poll, sleep
// on the channel (hang guard: 20 s).
func waitArm(t testing.TB, e *end, wc []verbs.WC) verbs.WC {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := e.cq.Poll(wc[:1])
		if err == nil && n == 0 {
			e.cq.ReqNotify(false)
			n, err = e.cq.Poll(wc[:1])
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		select {
		case <-e.ch.C():
		case <-e.guard().C:
			if time.Now().After(deadline) {
				t.Fatal("no completion")
			}
		}
	}
}

// groPair connects an RC pair of default devices (UDP GRO on) over
// loopback UDP, with the 4.3 s ACK timeout of busyPair.
func groPair(t *testing.T, bufSize int) (x, y *end) {
	t.Helper()
	x, y = pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{timeout: 20}, bufSize)
	for _, e := range []*end{x, y} {
		if st := rxe.SockStats(e.cq); st == nil {
			t.Fatal("device without a udp.Socket")
		}
	}
	return x, y
}

// wantGROSplit checks that e's socket received GRO super-datagrams.
func wantGROSplit(t *testing.T, e *end) {
	t.Helper()
	if st := rxe.SockStats(e.cq); st["RxGROSplit"] == 0 {
		t.Errorf("no GRO super-datagram received: %v", st)
	}
}

// TestGROTokenPingPong is TestBusyPollPingPong on default devices (GRO
// on, no busy-poll mode): spinning pollers take the receive token on
// GRO sockets and the echoes arrive intact.
func TestGROTokenPingPong(t *testing.T) {
	x, y := groPair(t, 1<<16)
	spinPingPong(t, x, y, 1000)
	wantGROSplit(t, x)
}

// TestGROTokenWriteStream streams 1 MiB RDMA WRITEs (a WRITE with
// immediate ends each MiB, so that the target has a completion to spin
// for) between default devices whose applications both spin on Poll:
// the target's poller takes the receive token and splits the GRO
// super-datagrams of the stream itself. Every MiB must arrive intact,
// without retransmissions. Which goroutine holds the token when a burst
// lands is up to the scheduler (under -race on a loaded machine the
// receive goroutine can win every time for a while), so the stream goes
// on past the first rounds until the poller has received some, within a
// bound.
func TestGROTokenWriteStream(t *testing.T) {
	const (
		size      = 1 << 20
		chunk     = 64 << 10
		rounds    = 8
		maxRounds = 256
	)
	x, y := groPair(t, 2*size)
	wcx, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	for i := 0; i < rounds || (i < maxRounds && rxe.CQDeviceStats(y.cq)["PollRxBatches"] == 0); i++ {
		fill(x.buf[:size], uint64(100+i))
		x.sync()
		postRecv(t, y, verbs.RecvWR{ID: uint64(i)})
		got := make(chan verbs.WC, 1)
		go func() { got <- spinWC(t, y, wcy) }()
		for off := 0; off < size; off += chunk {
			wr := verbs.SendWR{ID: uint64(off), Opcode: verbs.WRRDMAWrite,
				SGL: []verbs.SGE{x.mr.SGE(off, chunk)}, RemoteAddr: y.mr.Addr() + uint64(off), RKey: y.mr.RKey()}
			if off+chunk == size {
				wr.Opcode, wr.Flags, wr.ImmData = verbs.WRRDMAWriteWithImm, verbs.SendSignaled, uint32(i)
			}
			post(t, x, wr)
		}
		wantOK(t, spinWC(t, x, wcx), verbs.WCRDMAWrite)
		wc := <-got
		if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ImmData != uint32(i) {
			t.Fatalf("round %d: target completion %+v", i, wc)
		}
		y.sync()
		if !bytes.Equal(y.buf[:size], x.buf[:size]) {
			t.Fatalf("round %d: WRITE data differs", i)
		}
	}
	wantClean(t, x.cq)
	wantClean(t, y.cq)
	if st := rxe.CQDeviceStats(y.cq); st["PollRxBatches"] == 0 {
		t.Errorf("the target's poller never received from the socket in %d rounds: %v", maxRounds, st)
	}
	wantGROSplit(t, y)
}
