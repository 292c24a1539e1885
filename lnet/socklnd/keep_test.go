//go:build linux

package socklnd_test

import (
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/socklnd"
	"softib/wire/lnetwire"
)

// A router between two tcp nets of one socklnd LND forwards large
// payloads through pipes (splice, no copy in the router): these tests
// run lnet instances A (tcp) — R (tcp, tcp1) — B (tcp1) on loopback.

// routedSock is A, R and B with their NIDs.
type routedSock struct {
	a, r, b *inst
	rLND    *socklnd.LND
	rNIDs   [2]lnetwire.NID
}

// sockNode starts an instance with one NI per nid on one socklnd LND.
func sockNode(t testing.TB, cfg socklnd.Config, router bool, nids ...lnetwire.NID) (*lnet.Instance, *socklnd.LND) {
	t.Helper()
	l := socklnd.New(cfg)
	c := lnet.Config{LNDs: []lnd.LND{l}, Router: lnet.RouterConfig{Enabled: router}, Log: socklnd.TestLog}
	for _, nid := range nids {
		c.Nets = append(c.Nets, lnet.NetConfig{Net: nid.Net(), Addr: nid.Addr()})
	}
	in, err := lnet.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in, l
}

func newRoutedSock(t testing.TB, cfg socklnd.Config) *routedSock {
	t.Helper()
	ips := socklnd.TestIPs(4)
	aNID := lnetwire.MustParseNID(ips[0] + "@tcp")
	r0 := lnetwire.MustParseNID(ips[1] + "@tcp")
	r1 := lnetwire.MustParseNID(ips[2] + "@tcp1")
	bNID := lnetwire.MustParseNID(ips[3] + "@tcp1")
	rs := &routedSock{rNIDs: [2]lnetwire.NID{r0, r1}}
	var rin *lnet.Instance
	rin, rs.rLND = sockNode(t, cfg, true, r0, r1)
	rs.r = &inst{in: rin, lnd: rs.rLND, nid: r0}
	mk := func(nid lnetwire.NID, net lnetwire.Net, gw lnetwire.NID) *inst {
		in, l := sockNode(t, cfg, false, nid)
		if err := in.AddRoute(lnet.RouteConfig{Net: net, Gateway: gw, Hops: 1}); err != nil {
			t.Fatal(err)
		}
		eq, err := in.EQAlloc(4096, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &inst{in: in, lnd: l, nid: nid, eq: eq}
	}
	rs.a = mk(aNID, bNID.Net(), r0)
	rs.b = mk(bNID, aNID.Net(), r1)
	return rs
}

// rStats sums R's two drivers' kept-payload counters.
func (rs *routedSock) rStats() (rx, tx, fallbacks uint64) {
	for _, nid := range rs.rNIDs {
		st := rs.rLND.Driver(nid).Stats()
		rx += st.KeptRx.Load()
		tx += st.KeptTx.Load()
		fallbacks += st.KeptFallbacks.Load()
	}
	return
}

// checkIdle waits for R's buffers and pipes to come back.
func (rs *routedSock) checkIdle(t *testing.T) {
	t.Helper()
	waitFor(t, "router buffers back", func() bool {
		for _, p := range rs.r.in.RouterPools() {
			if p.Credits != p.NBuffers {
				return false
			}
		}
		total, idle := rs.rLND.KeptPipes()
		return total == idle
	})
}

var routedSizes = []int{0, 100, 4097, 65535, 65536, 65537, 300000, 1<<20 - 1, 1 << 20}

// TestRoutedSockKeep: PUT and GET of every size both ways through R; the
// large ones go through R's pipes, the data arrives intact, R's buffers
// and pipes all come back.
func TestRoutedSockKeep(t *testing.T) {
	rs := newRoutedSock(t, socklnd.BaseConfig())
	for i, size := range routedSizes {
		putGet(t, rs.a, rs.b, size, uint64(10+i))
		putGet(t, rs.b, rs.a, size, uint64(50+i))
	}
	// Per direction and size ≥ 64 KiB: the PUT, and the GET's REPLY.
	want := uint64(0)
	for _, size := range routedSizes {
		if size >= 64<<10 {
			want += 4
		}
	}
	// R's writer counts a splice just after it, when B may already have
	// the message and the test its events.
	waitFor(t, "R's splice counters", func() bool { _, tx, _ := rs.rStats(); return tx >= want })
	rx, tx, fb := rs.rStats()
	if rx != want || tx != want || fb != 0 {
		t.Errorf("R kept %d payloads, sent %d from pipes, %d fallbacks; want %d, %d, 0", rx, tx, fb, want, want)
	}
	rs.checkIdle(t)
}

// TestRoutedSockCsum: with checksums the payload must pass through the
// router's memory (the sum covers it): nothing is kept, data intact.
func TestRoutedSockCsum(t *testing.T) {
	cfg := socklnd.BaseConfig()
	cfg.EnableCsum = true
	rs := newRoutedSock(t, cfg)
	putGet(t, rs.a, rs.b, 1<<20, 1)
	putGet(t, rs.b, rs.a, 300000, 2)
	if rx, tx, _ := rs.rStats(); rx != 0 || tx != 0 {
		t.Errorf("R kept %d payloads, sent %d from pipes with checksums on", rx, tx)
	}
	rs.checkIdle(t)
}

// TestRoutedSockCapture: with Config.Capture a router's connections
// may be wrapped or not (a connection whose other end in this process
// captured it first stays a plain socket), so a payload spliced in from
// a plain one could meet a wrapped one with no socket to splice into:
// capturing drivers keep nothing, the data arrives intact.
func TestRoutedSockCapture(t *testing.T) {
	cfg := socklnd.BaseConfig()
	cfg.Capture = io.Discard
	rs := newRoutedSock(t, cfg)
	for i, size := range []int{65536, 1 << 20} {
		putGet(t, rs.a, rs.b, size, uint64(10+i))
		putGet(t, rs.b, rs.a, size, uint64(20+i))
	}
	if rx, tx, _ := rs.rStats(); rx != 0 || tx != 0 {
		t.Errorf("R kept %d payloads, sent %d from pipes while capturing", rx, tx)
	}
	rs.checkIdle(t)
}

// TestRoutedSockPipeFull: pipes of a few pages run out of slots mid-payload:
// R copies what the pipe holds and reads the rest (the fallback), and
// the data arrives intact.
func TestRoutedSockPipeFull(t *testing.T) {
	old := *socklnd.KeptPipeSize
	*socklnd.KeptPipeSize = 4096
	t.Cleanup(func() { *socklnd.KeptPipeSize = old })
	rs := newRoutedSock(t, socklnd.BaseConfig())
	for i, size := range []int{65536, 300000, 1 << 20} {
		putGet(t, rs.a, rs.b, size, uint64(10+i))
	}
	rx, _, fb := rs.rStats()
	if fb == 0 {
		t.Errorf("no fallback with pipes of a few pages (%d kept)", rx)
	}
	t.Logf("pipes of a few pages: %d kept, %d fallbacks", rx, fb)
	rs.checkIdle(t)
}

// TestRoutedSockTshark: the forwarded traffic R splices (header written,
// then the payload spliced from the pipe) decodes in Wireshark's LNet
// dissector with no malformed frame, on both hops.
func TestRoutedSockTshark(t *testing.T) {
	rs := newRoutedSock(t, socklnd.BaseConfig())
	var hosts []string
	for _, x := range []*inst{rs.a, rs.b} {
		hosts = append(hosts, nidIP(x.nid))
	}
	path, stop := capture(t, socklnd.TestPort(), append(hosts, nidIP(rs.rNIDs[0]), nidIP(rs.rNIDs[1]))...)
	for i, size := range []int{100, 65536, 1 << 20} {
		putGet(t, rs.a, rs.b, size, uint64(10+i))
	}
	stop()
	if rx, tx, _ := rs.rStats(); rx == 0 || tx == 0 {
		t.Fatalf("R kept %d, spliced %d: the capture has no spliced traffic", rx, tx)
	}
	checkDecode(t, path, []string{"-d", "tcp.port==" + strconv.Itoa(socklnd.TestPort()) + ",lnet"})
}

// nidIP is a tcp NID's dotted address.
func nidIP(n lnetwire.NID) string {
	a := n.Addr()
	return fmt.Sprintf("%d.%d.%d.%d", byte(a>>24), byte(a>>16), byte(a>>8), byte(a))
}

// benchStream PUTs b.N payloads of size bytes from s to r, keeping
// benchWindow in flight, and waits until r has them all.
func benchStream(b *testing.B, s, r *inst, size int) {
	var got atomic.Int64
	var want atomic.Int64
	done := make(chan struct{}, 1)
	me, err := r.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.in.MDAttach(me, lnet.MD{Start: make([]byte, size), Threshold: lnet.ThreshInf,
		Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: func(ev *lnet.Event) {
			if ev.Type == lnet.EventPut && got.Add(1) == want.Load() {
				done <- struct{}{}
			}
		}}, lnet.Retain); err != nil {
		b.Fatal(err)
	}
	h, err := s.in.MDBind(lnet.MD{Start: socklnd.Pattern(size, 1), Threshold: lnet.ThreshInf, EQ: s.eq}, lnet.Retain)
	if err != nil {
		b.Fatal(err)
	}
	inflight := 0
	reap := func() {
		ev := poll(b, s)
		if ev.Status != nil {
			b.Fatalf("%v: %v", ev.Type, ev.Status)
		}
		if ev.Type == lnet.EventSend {
			inflight--
		}
	}
	run := func(n int) {
		got.Store(0)
		want.Store(int64(n))
		for range n {
			for inflight >= benchWindow {
				reap()
			}
			if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.id(), e2ePortal, 0, 0, 0); err != nil {
				b.Fatal(err)
			}
			inflight++
		}
		for inflight > 0 {
			reap()
		}
		<-done
	}
	run(benchWindow) // connect and warm up
	b.SetBytes(int64(size))
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
}

// BenchmarkRoutedSockPut1M: LNet PUT of 1 MiB in one process over
// loopback: direct between two tcp nodes, through a router between tcp
// and tcp1 that splices the payloads, and through the same router
// copying them into its buffers (the path before splice).
func BenchmarkRoutedSockPut1M(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		ips := socklnd.TestIPs(2)
		benchStream(b, newInst(b, ips[0], socklnd.BaseConfig()), newInst(b, ips[1], socklnd.BaseConfig()), 1<<20)
	})
	b.Run("routed-splice", func(b *testing.B) {
		rs := newRoutedSock(b, socklnd.BaseConfig())
		benchStream(b, rs.a, rs.b, 1<<20)
	})
	b.Run("routed-copy", func(b *testing.B) {
		*socklnd.KeepOff = true
		defer func() { *socklnd.KeepOff = false }()
		rs := newRoutedSock(b, socklnd.BaseConfig())
		benchStream(b, rs.a, rs.b, 1<<20)
	})
}

// raceOn is the package's raceEnabled, for the external tests.
var raceOn = socklnd.RaceEnabled

// TestRoutedSockAllocs: forwarding adds no allocation: a routed 1 MiB
// PUT, A → R (splice in, splice out) → B, in steady state allocates no
// more in the whole process than a direct one between two tcp nodes (the
// few both make are the test's EQPoll deadline and lnet's event
// delivery, on the endpoints): R's socklnd pools its pipes and binds its
// splice steps once per connection, R's core reuses its buffers.
func TestRoutedSockAllocs(t *testing.T) {
	if raceOn || testing.CoverMode() != "" {
		t.Skip("allocation counts are meaningless under -race or -cover")
	}
	ips := socklnd.TestIPs(2)
	direct := allocsPerPut(t, newInst(t, ips[0], socklnd.BaseConfig()), newInst(t, ips[1], socklnd.BaseConfig()))
	rs := newRoutedSock(t, socklnd.BaseConfig())
	routed := allocsPerPut(t, rs.a, rs.b)
	rx, tx, _ := rs.rStats()
	if rx < 100 || tx < 100 { // 120 rounds; the last splices may still be counting
		t.Fatalf("R spliced %d in, %d out: the rounds did not take the splice path", rx, tx)
	}
	t.Logf("allocations per 1 MiB PUT in the process: direct %v, routed %v", direct, routed)
	if routed > direct {
		t.Fatalf("routed PUT allocates %v, direct %v: the router allocates per message", routed, direct)
	}
}

// allocsPerPut measures the allocations of one 1 MiB PUT from s to r,
// after a warm-up, in the whole process.
func allocsPerPut(t *testing.T, s, r *inst) float64 {
	t.Helper()
	const size = 1 << 20
	done := make(chan struct{}, 1)
	me, err := r.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.in.MDAttach(me, lnet.MD{Start: make([]byte, size), Threshold: lnet.ThreshInf,
		Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: func(ev *lnet.Event) {
			if ev.Type == lnet.EventPut {
				done <- struct{}{}
			}
		}}, lnet.Retain); err != nil {
		t.Fatal(err)
	}
	h, err := s.in.MDBind(lnet.MD{Start: socklnd.Pattern(size, 1), Threshold: lnet.ThreshInf, EQ: s.eq}, lnet.Retain)
	if err != nil {
		t.Fatal(err)
	}
	round := func() {
		if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.id(), e2ePortal, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		if ev := poll(t, s); ev.Type != lnet.EventSend || ev.Status != nil {
			t.Fatalf("%v: %v", ev.Type, ev.Status)
		}
		<-done
	}
	for range 20 {
		round() // connect and warm up pools
	}
	return testing.AllocsPerRun(100, round)
}
