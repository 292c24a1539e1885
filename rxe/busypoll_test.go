package rxe_test

import (
	"bytes"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"softib/rxe"
	"softib/udp"
	"softib/udp/udptest"
	"softib/verbs"
)

// lossTimeout is the ACK timeout code of the pairs below: 4.096 µs ×
// 2^23, 34 s, beyond the tests' 20 s hang guards, so that a
// retransmission means a lost packet, never a thread of a loaded machine
// that the OS left unscheduled for seconds (with 4.3 s, 20, a variant of
// TestBusyPollPingPong whose two spinning goroutines waited for each
// other retransmitted twice in 64 s at nice 19 under a load of 10).
const lossTimeout = 23

// busyPair connects an RC pair of busy-poll devices over loopback UDP,
// those named by park with parked receive goroutines (parkedPair), with
// the ACK timeout lossTimeout.
func busyPair(t testing.TB, bufSize int, park parking) (x, y *end) {
	cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000, BusyPoll: true}}
	return parkedPair(t, cfg, connOpts{mtu: verbs.MTU4096, timeout: lossTimeout}, bufSize, park)
}

// spinWC waits for one completion on e's CQ the way a busy-polling
// application does: it spins on Poll (yielding between empty polls),
// and after 200 empty polls arms the CQ and sleeps on e's channel, as
// rdmautil.Waiter does. (On one P, GOMAXPROCS=1, an endless spin would
// leave the other device's receive goroutine to the netpoller's 10 ms
// sysmon polls.) Hang guard: 20 s.
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

// spinOnly waits for one completion on e's CQ by spinning on Poll alone
// (yielding between empty polls), never sleeping on the channel: on a
// parked device (parkedConn) nothing else would read the socket. Hang
// guard: 20 s.
func spinOnly(t testing.TB, e *end, wc []verbs.WC) verbs.WC {
	t.Helper()
	return spinPoll(t, e, wc, -1)
}

// spinPair waits for nx completions on x's CQ and ny on y's by spinning
// on both CQs' Polls in turn (yielding after a round where both were
// empty), never sleeping: on parked devices (parkedConn) a CQ's empty
// Poll is its device socket's only reader, so both sides must be polled
// while either waits, as two applications spinning on their CQs would.
// A completion beyond those wanted, or one that failed, fails the test.
// Hang guard: 20 s.
func spinPair(t testing.TB, x, y *end, nx, ny int, wcx, wcy []verbs.WC) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; nx > 0 || ny > 0; i++ {
		gx, gy := pollWanted(t, x, wcx, &nx), pollWanted(t, y, wcy, &ny)
		if gx || gy {
			continue
		}
		if i%1024 == 0 && time.Now().After(deadline) {
			t.Fatalf("%d and %d completions missing; stats %v; %v", nx, ny, rxe.CQDeviceStats(x.cq), rxe.CQDeviceStats(y.cq))
		}
		runtime.Gosched()
	}
}

// pollWanted polls e's CQ once for one of the *want completions still
// expected there and reports whether it got one.
func pollWanted(t testing.TB, e *end, wc []verbs.WC, want *int) bool {
	t.Helper()
	n, err := e.cq.Poll(wc[:1])
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return false
	}
	if *want == 0 || wc[0].Status != verbs.WCSuccess {
		t.Fatalf("unexpected completion %+v", wc[0])
	}
	*want--
	return true
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
// retransmitted. Whether a spinning poller or a device's receive
// goroutine reads a datagram first is up to the scheduler, so both
// receive goroutines are parked (parkedConn): the pollers are the
// sockets' only readers, and a poller that did not read would hang the
// test instead of losing a race.
func TestBusyPollPingPong(t *testing.T) {
	x, y := busyPair(t, 1<<16, parkBoth)
	spinPingPong(t, x, y, 1000)
}

// spinPingPong runs rounds of 64-byte SEND ping-pong between the parked
// devices (parkBoth) of x and y, both sides spinning on Poll (spinPair:
// one goroutine plays both applications, so that every step is its own
// poll's doing and none waits for another thread to be scheduled),
// checks the data and that pollers received from the sockets on both
// sides, without retransmissions.
func spinPingPong(t *testing.T, x, y *end, rounds int) {
	t.Helper()
	wcx, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	postRecv(t, y, verbs.RecvWR{SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
	postRecv(t, x, verbs.RecvWR{SGL: []verbs.SGE{x.mr.SGE(4096, 64)}})
	for i := range rounds {
		for j := range 64 {
			x.buf[j] = byte(i)
		}
		post(t, x, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: x.buf[:64]})
		spinPair(t, x, y, 0, 1, wcx, wcy)
		if wc := wcy[0]; wc.Opcode != verbs.WCRecv || wc.ByteLen != 64 {
			t.Fatalf("round %d: ping completion %+v", i, wc)
		}
		y.sync()
		if y.buf[0] != byte(i) || y.buf[63] != byte(i) {
			t.Fatalf("round %d: ping %v", i, y.buf[:64])
		}
		postRecv(t, y, verbs.RecvWR{ID: uint64(i + 1), SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
		post(t, y, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: y.buf[:64]})
		spinPair(t, x, y, 1, 0, wcx, wcy)
		wantOK(t, wcx[0], verbs.WCRecv)
		x.sync()
		if !bytes.Equal(x.buf[4096:4096+64], x.buf[:64]) {
			t.Fatalf("round %d: echo %v", i, x.buf[4096:4096+64])
		}
		postRecv(t, x, verbs.RecvWR{SGL: []verbs.SGE{x.mr.SGE(4096, 64)}})
	}
	for _, e := range []*end{x, y} {
		wantClean(t, e.cq)
		if st := rxe.CQDeviceStats(e.cq); st["PollRxBatches"] == 0 {
			t.Errorf("no batch was received by a poller: %v", st)
		}
	}
}

// TestBusyPollDeferredAckFallback: a poller's round defers its ACK for the
// application's next post, and here the application never calls rxe
// again. The ACK must still go out (the QP timer sends it after
// respDeferMax), so the sender's signaled completion arrives without a
// retransmission (the ACK timeout is lossTimeout, 34 s: were the ACK
// left to it, the 20 s hang guard of waitWC would fail the test first).
//
// It runs in a synctest bubble on the simulated network, so that
// synctest.Wait can tell when y's QP is idle: a poller runs a QP's round
// only if nothing else is running it (else the QP's run loop does, and
// sends the ACK at once), and connecting kicks the run loop.
func TestBusyPollDeferredAckFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		// y's receive goroutine is parked (parkedSim): a poller can only
		// defer what it receives itself.
		open := func(ip string, park bool) *rxe.Device {
			a := netip.AddrPortFrom(netip.MustParseAddr(ip), rxe.RoCEv2Port) // on the simulated network
			ep := nw.Endpoint(a)
			var c udp.Conn = ep
			if park {
				c = newParkedSim(ep)
			}
			return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a.Addr(), NetMTU: 9000, BusyPoll: true}, Conn: c})
		}
		x, y := newEnd(t, open("10.0.0.1", false), verbs.QPTypeRC, 4096), newEnd(t, open("10.0.0.2", true), verbs.QPTypeRC, 4096)
		o := connOpts{mtu: verbs.MTU4096, timeout: lossTimeout}
		connect(t, x, y, o)
		connect(t, y, x, o)
		postRecv(t, y, verbs.RecvWR{SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
		synctest.Wait() // every goroutine of the bubble is blocked: y's QP run loop is idle
		post(t, x, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("deferred")})
		// The simulated network has delivered the SEND already, and in
		// busy-poll mode y's first empty Poll reads it and runs the QP.
		wcy := make([]verbs.WC, 1)
		if n, err := y.cq.Poll(wcy); n != 1 || err != nil {
			t.Fatalf("poll: %d completions, %v; stats %v", n, err, rxe.CQDeviceStats(y.cq))
		}
		wantOK(t, wcy[0], verbs.WCRecv)
		if n := rxe.CQDeviceStats(y.cq)["RespDeferred"]; n != 1 {
			t.Fatalf("the poller's round deferred %d ACKs, want 1", n)
		}
		// y's application stops here: no post, no poll; only y's QP
		// timer can send the ACK.
		wantOK(t, waitWC(t, x.cq, 1)[0], verbs.WCSend)
		wantClean(t, x.cq)
		wantClean(t, y.cq)
	})
}

// TestBusyPollBulk moves WRITEs and READs of 256 KiB between busy-poll
// devices while the application alternates between spinning on Poll and
// sleeping on the completion channel, so that the receive token passes
// between pollers and the receive goroutines: the data must arrive
// intact, in order, without retransmissions.
func TestBusyPollBulk(t *testing.T) {
	const size = 256 << 10
	x, y := busyPair(t, 4*size, parkNone)
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
// poller receiving, deferring and flushing ACKs) allocates nothing. Both
// devices are parked (parkedConn), so that pollers receive every
// datagram and the measure is of that path, whatever the scheduler does.
func TestBusyPollZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	x, y := busyPair(t, 1<<16, parkBoth)
	spinZeroAllocs(t, x, y)
}

// TestGROTokenZeroAllocs is TestBusyPollZeroAllocs on default devices
// (GRO on): spinning pollers that take the receive token and split GRO
// super-datagrams allocate nothing either.
func TestGROTokenZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	x, y := groPair(t, 1<<16, parkBoth)
	spinZeroAllocs(t, x, y)
	// The pollers are the only readers: every completion came from
	// their reads, the WRITEs' GRO super-datagrams on y included.
	for _, e := range []*end{x, y} {
		if st := rxe.CQDeviceStats(e.cq); st["PollRxBatches"] == 0 {
			t.Errorf("no batch was received by a poller: %v", st)
		}
	}
	wantGROSplit(t, y)
}

// spinZeroAllocs measures the allocations of WRITE and SEND rounds
// between the parked devices (parkBoth) of x and y, both sides spinning
// on Poll (spinPair: AllocsPerRun runs on one P, where a goroutine per
// side would only take turns too).
func spinZeroAllocs(t *testing.T, x, y *end) {
	t.Helper()
	wcx, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	w := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 16<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	s := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 100)}}}
	r := []verbs.RecvWR{{SGL: []verbs.SGE{y.mr.SGE(0, 4096)}}}
	round := func() {
		x.qp.PostSend(w)
		spinPair(t, x, y, 1, 0, wcx, wcy)
		y.qp.PostRecv(r)
		x.qp.PostSend(s)
		spinPair(t, x, y, 1, 1, wcx, wcy)
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
// loopback UDP, those named by park with parked receive goroutines
// (parkedPair), with the ACK timeout of busyPair (lossTimeout).
func groPair(t *testing.T, bufSize int, park parking) (x, y *end) {
	t.Helper()
	x, y = parkedPair(t, rxe.Config{}, connOpts{timeout: lossTimeout}, bufSize, park)
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
// GRO sockets and the echoes arrive intact. Both devices are parked, as
// in TestBusyPollPingPong.
func TestGROTokenPingPong(t *testing.T) {
	x, y := groPair(t, 1<<16, parkBoth)
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
// receive goroutine can win every time for a while), so the target's
// receive goroutine is parked (parkedConn): its poller reads the whole
// stream (the socket's 8 MiB buffer keeps a MiB until the poller runs).
// The source's poller and receive goroutine share its token as usual.
func TestGROTokenWriteStream(t *testing.T) {
	const (
		size   = 1 << 20
		chunk  = 64 << 10
		rounds = 8
	)
	x, y := groPair(t, 2*size, parkY)
	wcx, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	for i := range rounds {
		fill(x.buf[:size], uint64(100+i))
		x.sync()
		postRecv(t, y, verbs.RecvWR{ID: uint64(i)})
		got := make(chan verbs.WC, 1)
		go func() { got <- spinOnly(t, y, wcy) }()
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
		t.Errorf("the target's poller never received from the socket: %v", st)
	}
	wantGROSplit(t, y)
}
