package rxe_test

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// benchPair connects an RC pair over loopback UDP with a 4096-byte path
// MTU (NetMTU 9000 → active MTU 4096).
func benchPair(b *testing.B, busy bool, bufSize int) (x, y *end) {
	cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000, BusyPoll: busy}}
	return pair(b, verbs.QPTypeRC, cfg, connOpts{mtu: verbs.MTU4096}, bufSize)
}

// pollSpin waits for one completion: poll, arm, poll again, then block on
// the completion channel. (Spinning with runtime.Gosched instead would
// starve Go's netpoller, which then runs only from sysmon every ~10 ms.)
func pollSpin(tb testing.TB, cq verbs.CQ, wc []verbs.WC) {
	for {
		n, err := cq.Poll(wc[:1])
		if err != nil {
			tb.Fatal(err)
		}
		if n == 0 {
			cq.ReqNotify(false)
			n, err = cq.Poll(wc[:1])
			if err != nil {
				tb.Fatal(err)
			}
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				tb.Fatalf("completion %+v", wc[0])
			}
			return
		}
		<-cq.Channel().C()
	}
}

// busySpin bounds how long pollBusy spins before it sleeps on the
// completion channel.
const busySpin = 50 * time.Microsecond

// pollBusy waits for one completion by polling, the busy-poll style of
// perftest and rdmautil.Waiter: each empty Poll may receive from the
// socket itself. After busySpin of empty polls it arms the CQ and
// sleeps, so that a peer whose thread the OS descheduled (a loaded
// 2-core machine) gets the core back instead of waiting out our spin.
func pollBusy(tb testing.TB, cq verbs.CQ, wc []verbs.WC, stop <-chan struct{}) bool {
	var start time.Time
	for i := 0; ; i++ {
		n, err := cq.Poll(wc[:1])
		if err != nil {
			tb.Fatal(err)
		}
		if n == 0 && i%16 == 15 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > busySpin {
				cq.ReqNotify(false)
				if n, err = cq.Poll(wc[:1]); err != nil {
					tb.Fatal(err)
				}
				if n == 0 {
					select {
					case <-cq.Channel().C():
					case <-stop:
						return false
					}
					i, start = 0, time.Time{}
					continue
				}
			}
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				tb.Fatalf("completion %+v", wc[0])
			}
			return true
		}
		select {
		case <-stop:
			return false
		default:
		}
		runtime.Gosched()
	}
}

func benchWrite(b *testing.B, size int) {
	x, y := benchPair(b, false, size*writeDepth)
	el := streamWrites(b, x, y, size)
	b.ReportMetric(float64(size)*float64(b.N)/el.Seconds()/1e9, "GB/s")
}

// writeDepth is the RDMA WRITEs streamWrites keeps in flight; ends need
// buffers of size*writeDepth bytes.
const writeDepth = 32

// streamWrites times b.N RDMA WRITEs of size bytes from x into y, with
// writeDepth in flight, as perftest's ib_write_bw does: it re-posts as
// many as completed, in one PostSend call.
func streamWrites(b *testing.B, x, y *end, size int) time.Duration {
	const depth = writeDepth
	wcs := make([]verbs.WC, depth)
	wrs := make([]verbs.SendWR, depth)
	sgl := make([]verbs.SGE, depth)
	for i := range wrs {
		sgl[i] = x.mr.SGE(i*size, size)
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: sgl[i : i+1], RemoteAddr: y.mr.Addr() + uint64(i*size), RKey: y.mr.RKey()}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	posted, done := 0, 0
	for done < b.N {
		if k := min(depth-(posted-done), b.N-posted); k > 0 {
			if _, err := x.qp.PostSend(wrs[:k]); err != nil {
				b.Fatal(err)
			}
			posted += k
		}
		done += waitSome(b, x.cq, wcs)
	}
	return time.Since(start)
}

// waitSome waits for at least one completion and returns how many it
// polled into wcs.
func waitSome(tb testing.TB, cq verbs.CQ, wcs []verbs.WC) int {
	for {
		n, err := cq.Poll(wcs)
		if err != nil {
			tb.Fatal(err)
		}
		if n == 0 {
			cq.ReqNotify(false)
			if n, err = cq.Poll(wcs); err != nil {
				tb.Fatal(err)
			}
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				tb.Fatalf("completion %+v", wc)
			}
		}
		if n > 0 {
			return n
		}
		<-cq.Channel().C()
	}
}

// BenchmarkRCWrite measures RC RDMA WRITE bandwidth between two devices
// over loopback UDP (16 WRs in flight, path MTU 4096).
func BenchmarkRCWrite(b *testing.B) {
	b.Run("64KiB", func(b *testing.B) { benchWrite(b, 64<<10) })
	b.Run("1MiB", func(b *testing.B) { benchWrite(b, 1<<20) })
}

// benchPingPong: busyDev sets DeviceConfig.BusyPoll; busy makes both
// sides wait with pollBusy (spinning on Poll) instead of pollSpin.
func benchPingPong(b *testing.B, busyDev, busy bool, typ verbs.QPType) {
	cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000, BusyPoll: busyDev}}
	benchPingPongOn(b, cfg, busy, typ)
}

// benchPingPongOn is benchPingPong on devices opened with cfg.
func benchPingPongOn(b *testing.B, cfg rxe.Config, busy bool, typ verbs.QPType) {
	x, y := pair(b, typ, cfg, connOpts{mtu: verbs.MTU4096}, 4096)
	wcx, wcy := make([]verbs.WC, 1), make([]verbs.WC, 1)
	rx := []verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{x.mr.SGE(0, 64)}}}
	ry := []verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{y.mr.SGE(0, 64)}}}
	sx := []verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: make([]byte, 8)}}
	sy := []verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: make([]byte, 8)}}
	// rxDepth receives stay posted, as ibv_rc_pingpong keeps its
	// rx_depth: each side re-posts one after it replied, off the
	// critical path.
	for range rxDepth {
		postRecv(b, x, rx...)
		postRecv(b, y, ry...)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	// Echo side: wait for a receive, re-post it, send back.
	go func() {
		defer close(done)
		for {
			for {
				if busy {
					if !pollBusy(b, y.cq, wcy, stop) {
						return
					}
					break
				}
				n, _ := y.cq.Poll(wcy)
				if n == 1 {
					break
				}
				y.cq.ReqNotify(false)
				if n, _ = y.cq.Poll(wcy); n == 1 {
					break
				}
				select {
				case <-stop:
					return
				case <-y.ch.C():
				}
			}
			y.qp.PostSend(sy)
			y.qp.PostRecv(ry)
		}
	}()
	lat := make([]int64, b.N)
	sx0, sy0 := rxe.SockStats(x.cq), rxe.SockStats(y.cq)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := x.qp.PostSend(sx); err != nil {
			b.Fatal(err)
		}
		if busy {
			pollBusy(b, x.cq, wcx, nil)
		} else {
			pollSpin(b, x.cq, wcx)
		}
		lat[i] = int64(time.Since(t0))
		x.qp.PostRecv(rx)
	}
	b.StopTimer()
	close(stop)
	<-done
	reportLatency(b, lat)
	if testing.Verbose() {
		b.Logf("x %v\ny %v", rxe.CQDeviceStats(x.cq), rxe.CQDeviceStats(y.cq))
	}
	// sendmmsg calls per one-way hop: 1 when every ACK rides with the
	// reply (the socket's receive counters miss the token path's reads).
	sx1, sy1 := rxe.SockStats(x.cq), rxe.SockStats(y.cq)
	b.ReportMetric(float64(sx1["TxSyscalls"]-sx0["TxSyscalls"]+sy1["TxSyscalls"]-sy0["TxSyscalls"])/float64(b.N)/2, "sendmmsg/hop")
}

// rxDepth is the receives each ping-pong side keeps posted.
const rxDepth = 16

// benchPingPongHandler is the event-driven ping-pong: both sides handle
// their completions in CQ completion handlers (verbs.CQAttr.Handler, the
// comp_handler style of kernel ULPs), which the device's receive
// goroutine runs: the echo side re-posts and replies, the timing side
// records the round trip and sends the next ping, with no goroutine
// hand-off and no spinning.
func benchPingPongHandler(b *testing.B, typ verbs.QPType) {
	var (
		x, y     *end
		rx, ry   []verbs.RecvWR
		sx, sy   []verbs.SendWR
		wcx, wcy = make([]verbs.WC, 4), make([]verbs.WC, 4)
		lat      = make([]int64, b.N)
		iter     int
		t0       time.Time
		done     = make(chan struct{})
		failed   atomic.Value
	)
	// poll drains cq into wcs, arming it when empty; it returns 0 when
	// the CQ is armed and empty.
	poll := func(cq verbs.CQ, wcs []verbs.WC) int {
		n, err := cq.Poll(wcs)
		if n == 0 && err == nil {
			cq.ReqNotify(false)
			n, err = cq.Poll(wcs)
		}
		if err != nil {
			failed.Store(err)
			return 0
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				failed.Store(fmt.Errorf("completion %+v", wc))
			}
		}
		return n
	}
	hy := func(cq verbs.CQ) {
		for n := poll(cq, wcy); n > 0; n = poll(cq, wcy) {
			for _, wc := range wcy[:n] {
				if wc.Opcode == verbs.WCRecv {
					y.qp.PostSend(sy)
					y.qp.PostRecv(ry)
				}
			}
		}
	}
	hx := func(cq verbs.CQ) {
		for n := poll(cq, wcx); n > 0; n = poll(cq, wcx) {
			for _, wc := range wcx[:n] {
				if wc.Opcode != verbs.WCRecv || iter == len(lat) {
					continue
				}
				lat[iter] = int64(time.Since(t0))
				iter++
				if iter == len(lat) {
					close(done)
					continue
				}
				t0 = time.Now()
				x.qp.PostSend(sx)
				x.qp.PostRecv(rx)
			}
		}
	}
	cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}}
	x, y = pairHandlers(b, typ, cfg, connOpts{mtu: verbs.MTU4096}, 4096, hx, hy)
	rx = []verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{x.mr.SGE(0, 64)}}}
	ry = []verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{y.mr.SGE(0, 64)}}}
	sx = []verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: make([]byte, 8)}}
	sy = []verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: make([]byte, 8)}}
	for range rxDepth {
		postRecv(b, x, rx...)
		postRecv(b, y, ry...)
	}
	x.cq.ReqNotify(false)
	y.cq.ReqNotify(false)
	b.ReportAllocs()
	b.ResetTimer()
	t0 = time.Now()
	if _, err := x.qp.PostSend(sx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("hang: %d of %d round trips; x %v y %v", iter, b.N, rxe.CQDeviceStats(x.cq), rxe.CQDeviceStats(y.cq))
	}
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	reportLatency(b, lat)
}

// reportLatency reports the mean and median half round trip of the
// per-iteration round-trip times in lat (ns). The median is the figure
// to compare on a shared machine: it ignores the iterations another
// process preempted.
func reportLatency(b *testing.B, lat []int64) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "µs/half-RTT")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/2e3, "p50-µs/half-RTT")
	b.ReportMetric(float64(lat[len(lat)*9/10])/2e3, "p90-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100])/2e3, "p99-µs")
	b.ReportMetric(float64(lat[len(lat)*999/1000])/2e3, "p999-µs")
}

// BenchmarkRCSendPingPong measures 8-byte RC SEND ping-pong latency
// (reported as half the round trip).
func BenchmarkRCSendPingPong(b *testing.B) {
	b.Run("normal", func(b *testing.B) { benchPingPong(b, false, false, verbs.QPTypeRC) })
	// Event-driven: completion handlers on a default device.
	b.Run("handler", func(b *testing.B) { benchPingPongHandler(b, verbs.QPTypeRC) })
	b.Run("busypoll", func(b *testing.B) { benchPingPong(b, true, true, verbs.QPTypeRC) })
	// Spinning waiters (perftest's and ibv_rc_pingpong's default) on a
	// default device: Poll takes over the receive after PollRxAfter
	// empty polls.
	b.Run("spin", func(b *testing.B) { benchPingPong(b, false, true, verbs.QPTypeRC) })
	// The same on devices without GRO (NoRxCoalescing).
	b.Run("spin-nogro", func(b *testing.B) {
		benchPingPongOn(b, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000, NoRxCoalescing: true}}, true, verbs.QPTypeRC)
	})
	b.Run("UC", func(b *testing.B) { benchPingPong(b, false, false, verbs.QPTypeUC) })
	b.Run("handler-UC", func(b *testing.B) { benchPingPongHandler(b, verbs.QPTypeUC) })
}

// udpPair opens two loopback UDP sockets, closed when b ends.
func udpPair(b *testing.B) (ca, cb *net.UDPConn) {
	for _, c := range []**net.UDPConn{&ca, &cb} {
		var err error
		if *c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(testAddr(), 0))); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { (*c).Close() })
	}
	return ca, cb
}

// BenchmarkUDPPingPong is the baseline: raw Go UDP ping-pong of 8 bytes
// between two loopback sockets.
func BenchmarkUDPPingPong(b *testing.B) {
	ca, cb := udpPair(b)
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			cb.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	buf := make([]byte, 64)
	dst := cb.LocalAddr().(*net.UDPAddr).AddrPort()
	timeRounds(b, func() {
		ca.WriteToUDPAddrPort(buf[:8], dst)
		ca.ReadFromUDPAddrPort(buf)
	})
}

// timeRounds times b.N round trips of round and reports their latency.
func timeRounds(b *testing.B, round func()) {
	lat := make([]int64, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range lat {
		t0 := time.Now()
		round()
		lat[i] = int64(time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkUDPPingPongHandoff is raw Go UDP ping-pong with the hand-off
// that a completion channel implies: on each side a reader goroutine
// passes every datagram to the application goroutine through a channel,
// as the device's receive goroutine does with completions. Its difference
// to BenchmarkUDPPingPong is the cost of that Go scheduling hop alone,
// the floor under BenchmarkRCSendPingPong/normal.
func BenchmarkUDPPingPongHandoff(b *testing.B) {
	ca, cb := udpPair(b)
	type dgram struct {
		n    int
		from netip.AddrPort
	}
	// reader passes each datagram of c to ch; bufs alternate so that the
	// consumer's buffer is not overwritten while it uses it.
	reader := func(c *net.UDPConn, bufs *[2][64]byte, ch chan<- dgram) {
		for i := 0; ; i ^= 1 {
			n, from, err := c.ReadFromUDPAddrPort(bufs[i][:])
			if err != nil {
				close(ch)
				return
			}
			ch <- dgram{n, from}
		}
	}
	var ba, bb [2][64]byte
	cha, chb := make(chan dgram, 1), make(chan dgram, 1)
	go reader(ca, &ba, cha)
	go reader(cb, &bb, chb)
	go func() { // echo side
		i := 0
		for d := range chb {
			cb.WriteToUDPAddrPort(bb[i][:d.n], d.from)
			i ^= 1
		}
	}()
	buf := make([]byte, 8)
	dst := cb.LocalAddr().(*net.UDPAddr).AddrPort()
	timeRounds(b, func() {
		ca.WriteToUDPAddrPort(buf, dst)
		<-cha
	})
}

// TestZeroAllocs checks that the steady-state data path (post, packets
// out, packets in on both devices, ACKs, completions) allocates nothing.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	x, y := pair(t, verbs.QPTypeRC, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}}, connOpts{mtu: verbs.MTU4096}, 1<<16)
	wc := make([]verbs.WC, 1)
	w := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 16<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	rd := []verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(32<<10, 16<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	s := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 100)}}}
	r := []verbs.RecvWR{{SGL: []verbs.SGE{y.mr.SGE(0, 4096)}}}
	wcy := make([]verbs.WC, 1)
	round := func() {
		x.qp.PostSend(w)
		pollSpin(t, x.cq, wc)
		x.qp.PostSend(rd)
		pollSpin(t, x.cq, wc)
		y.qp.PostRecv(r)
		x.qp.PostSend(s)
		pollSpin(t, x.cq, wc)
		pollSpin(t, y.cq, wcy)
	}
	for range 50 {
		round() // warm pools and rings
	}
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Fatalf("%v allocations per WRITE+READ+SEND round", a)
	}
}

// idleQPBytes creates n RC QPs in RTS on one device and returns the heap
// and stack bytes each costs.
func idleQPBytes(tb testing.TB, n int) int64 {
	d := openDev(tb, rxe.Config{})
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 16})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	qps := make([]verbs.QP, n)
	for i := range qps {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
		if err != nil {
			tb.Fatal(err)
		}
		e := &end{dev: d, qp: qp}
		connect(tb, e, e, connOpts{})
		qps[i] = qp
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(qps)
	return (int64(after.HeapAlloc+after.StackInuse) - int64(before.HeapAlloc+before.StackInuse)) / int64(n)
}

// TestIdleQPMemory checks the cost of 1,000 idle RC QPs in RTS.
func TestIdleQPMemory(t *testing.T) {
	per := idleQPBytes(t, 1000)
	t.Logf("%d bytes per idle RC QP (heap+stack)", per)
	if per > 64<<10 {
		t.Fatalf("%d bytes per idle QP", per)
	}
}

// BenchmarkIdleQPMemory reports the memory of one idle RC QP among 1,000.
func BenchmarkIdleQPMemory(b *testing.B) {
	var per int64
	for range b.N {
		per = idleQPBytes(b, 1000)
	}
	b.ReportMetric(float64(per), "B/QP")
}
