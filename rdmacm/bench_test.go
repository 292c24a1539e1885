//go:build linux

package rdmacm_test

import (
	"context"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"softib/internal/verbstest"
	"softib/rdmacm"
	"softib/verbs"
)

// connPair is one established connection with both ends in this process.
type connPair struct {
	c, s     *rdmacm.ID
	ccq, scq verbs.CQ
}

// smallCap keeps the QPs of the scale tests small.
var smallCap = verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}

// bench is a listener on e.b and the channels of both sides.
type bench struct {
	e        *env
	sch, cch *rdmacm.EventChannel
	dst      netip.AddrPort
}

func newBench(tb testing.TB, port uint16) *bench {
	tb.Helper()
	e := newEnvTB(tb)
	bn := &bench{e: e, sch: rdmacm.NewEventChannel(), cch: rdmacm.NewEventChannel(), dst: netip.AddrPortFrom(e.b, port)}
	lis, err := e.m.CreateID(bn.sch, nil, rdmacm.PSTCP)
	if err != nil {
		tb.Fatal(err)
	}
	if err := lis.BindAddr(bn.dst); err != nil {
		tb.Fatal(err)
	}
	if err := lis.Listen(4096); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lis.Destroy() })
	return bn
}

// newEnvTB is newEnv for tests and benchmarks alike.
func newEnvTB(tb testing.TB) *env { tb.Helper(); return newEnvOn(tb, verbstest.Loopback()) }

func waitEv(tb testing.TB, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	tb.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
		ev, err := ch.GetEvent(ctx)
		cancel()
		if err != nil {
			tb.Fatalf("waiting for %v: %v", want, err)
		}
		if ev.Type == rdmacm.EventTimewaitExit || ev.Type == rdmacm.EventDisconnected && want != rdmacm.EventDisconnected {
			continue
		}
		if ev.Type != want {
			tb.Fatalf("event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
		}
		return ev
	}
}

// connect makes one connection with QPs on both ends: resolve, connect,
// accept, established on both sides.
func (bn *bench) connect(tb testing.TB) *connPair {
	p := &connPair{}
	var err error
	if p.c, err = bn.e.m.CreateID(bn.cch, nil, rdmacm.PSTCP); err != nil {
		tb.Fatal(err)
	}
	if err := p.c.ResolveAddr(netip.AddrPortFrom(bn.e.a, 0), bn.dst, time.Second); err != nil {
		tb.Fatal(err)
	}
	waitEv(tb, bn.cch, rdmacm.EventAddrResolved)
	if err := p.c.ResolveRoute(time.Second); err != nil {
		tb.Fatal(err)
	}
	waitEv(tb, bn.cch, rdmacm.EventRouteResolved)
	if p.ccq, err = p.c.Device().CreateCQ(verbs.CQAttr{CQE: 8}); err != nil {
		tb.Fatal(err)
	}
	if _, err := p.c.CreateQP(nil, &verbs.QPInitAttr{SendCQ: p.ccq, RecvCQ: p.ccq, Cap: smallCap}); err != nil {
		tb.Fatal(err)
	}
	if err := p.c.Connect(&rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		tb.Fatal(err)
	}
	req := waitEv(tb, bn.sch, rdmacm.EventConnectRequest)
	p.s = req.ID
	if p.scq, err = p.s.Device().CreateCQ(verbs.CQAttr{CQE: 8}); err != nil {
		tb.Fatal(err)
	}
	if _, err := p.s.CreateQP(nil, &verbs.QPInitAttr{SendCQ: p.scq, RecvCQ: p.scq, Cap: smallCap}); err != nil {
		tb.Fatal(err)
	}
	if err := p.s.Accept(nil); err != nil {
		tb.Fatal(err)
	}
	waitEv(tb, bn.cch, rdmacm.EventEstablished)
	waitEv(tb, bn.sch, rdmacm.EventEstablished)
	return p
}

func (p *connPair) close() {
	p.c.Disconnect()
	for _, id := range []*rdmacm.ID{p.c, p.s} {
		id.DestroyQP()
		id.Destroy()
	}
	p.ccq.Destroy()
	p.scq.Destroy()
}

// BenchmarkConnect measures connection setup on loopback: resolve,
// connect, accept and ESTABLISHED on both ends, with RC QPs; it reports
// connections per second and the p50/p99 setup latency.
func BenchmarkConnect(b *testing.B) {
	bn := newBench(b, 7200)
	lat := make([]time.Duration, 0, b.N)
	var total time.Duration
	for b.Loop() {
		t0 := time.Now()
		p := bn.connect(b)
		d := time.Since(t0)
		lat = append(lat, d)
		total += d
		b.StopTimer()
		p.close()
		b.StartTimer()
	}
	slices.Sort(lat)
	pct := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(float64(len(lat))/total.Seconds(), "conns/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// holdConnections establishes n connections at once in one process and
// returns the heap and goroutine-stack bytes and the goroutines per
// connection (both ends, QPs and CQs included).
func holdConnections(tb testing.TB, bn *bench, n int) (heap, stack, goroutines float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	pairs := make([]*connPair, 0, n)
	for range n {
		pairs = append(pairs, bn.connect(tb))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Every connection is still up.
	for _, p := range pairs {
		if p.c.State() != rdmacm.StateConnect || p.c.QP().State() != verbs.QPStateRTS || p.s.QP().State() != verbs.QPStateRTS {
			tb.Fatalf("connection %v: %v %v %v", p.c.LocalAddr(), p.c.State(), p.c.QP().State(), p.s.QP().State())
		}
	}
	heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	stack = float64(int64(after.StackInuse)-int64(before.StackInuse)) / float64(n)
	goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)
	for _, p := range pairs {
		p.close()
	}
	return heap, stack, goroutines
}

// TestHoldConnections holds 1,000 concurrent connections (200 with
// -short) in one process.
func TestHoldConnections(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	bn := newBench(t, 7201)
	t0 := time.Now()
	heap, stack, g := holdConnections(t, bn, n)
	t.Logf("%d concurrent connections (set up in %v), per connection with both ends: %.0f heap bytes, %.0f stack bytes, %.1f goroutines",
		n, time.Since(t0).Round(time.Millisecond), heap, stack, g)
}

// BenchmarkHold1000 reports the memory per connection of 1,000
// concurrent connections.
func BenchmarkHold1000(b *testing.B) {
	bn := newBench(b, 7202)
	var heap, stack float64
	for b.Loop() {
		heap, stack, _ = holdConnections(b, bn, 1000)
	}
	b.ReportMetric(heap, "heap-B/conn")
	b.ReportMetric(stack, "stack-B/conn")
}
