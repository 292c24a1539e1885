package lnet_test

import (
	"runtime"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// heapNow is the live heap after a full collection: HeapAlloc (bytes of
// live objects) and HeapInuse (bytes of spans holding them).
func heapNow() (alloc, inuse int64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), int64(ms.HeapInuse)
}

// TestRouterMemoryScale builds a router's tables at the scale —
// 10,000 routes (5,000 remote nets, each through two gateways) and 1,000
// peers created by traffic — and logs the heap per route and per peer,
// the cost of a route lookup among them, and the time to add and delete
// the table at a quarter and at the full size (linear growth expected:
// the times are logged, not asserted; BENCHMARKS.md records them). The
// heap bound is a leak guard, far above the figures.
func TestRouterMemoryScale(t *testing.T) {
	for _, nets := range []int{1250, 5000} {
		n := lndtest.New(lnetwire.SOCKLND)
		in := rtNode(t, []lnd.LND{n.LND()}, lnet.RouterConfig{Enabled: true}, noChecker(), lnd.Tunables{}, rtR0, rtR1)
		gws := []lnetwire.NID{lnetwire.MustParseNID("10.0.0.50@tcp"), lnetwire.MustParseNID("10.0.1.50@tcp1")}
		a0, i0 := heapNow()
		start := time.Now()
		for i := range nets {
			for _, gw := range gws {
				net := lnetwire.MakeNet(lnetwire.SOCKLND, uint16(100+i))
				if err := in.AddRoute(lnet.RouteConfig{Net: net, Gateway: gw, Hops: 1 + i%3, Priority: uint32(i % 2)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		addTime := time.Since(start)
		routes := 2 * nets
		if got := len(in.Routes()); got != routes {
			t.Fatalf("%d routes, want %d", got, routes)
		}
		a1, i1 := heapNow()

		const peers = 1000
		eq, err := in.EQAlloc(4*peers, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range peers {
			h, err := in.MDBind(lnet.MD{Start: []byte("x"), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
			if err != nil {
				t.Fatal(err)
			}
			// Peers on both local nets (none answers: each send fails).
			nid := lnetwire.MakeNID(tcp, uint32(0x0a000100+i))
			if i%2 == 1 {
				nid = lnetwire.MakeNID(tcp1, uint32(0x0a000100+i))
			}
			if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: nid, PID: 12345}, 1, 0, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		// Every send completes (fails) before the heap is measured: no
		// message is in flight.
		for range peers {
			if _, _, err := in.EQPoll([]*lnet.EQ{eq}, 30*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(in.Peers()); got < peers {
			t.Fatalf("%d peers, want %d", got, peers)
		}
		a2, i2 := heapNow()

		start = time.Now()
		const lookups = 1000
		for i := range lookups {
			h, _ := in.MDBind(lnet.MD{Start: []byte("x"), Threshold: 1}, lnet.AutoUnlink)
			net := lnetwire.MakeNet(lnetwire.SOCKLND, uint16(100+i%nets))
			in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: lnetwire.MakeNID(net, 1), PID: 12345}, 1, 0, 0, 0)
		}
		sendTime := time.Since(start)

		start = time.Now()
		if err := in.DelRoute(0, gws[0]); err != nil { // every route via one gateway
			t.Fatal(err)
		}
		for i := range nets { // the rest net by net
			if err := in.DelRoute(lnetwire.MakeNet(lnetwire.SOCKLND, uint16(100+i)), lnetwire.NIDAny); err != nil {
				t.Fatal(err)
			}
		}
		delTime := time.Since(start)
		if got := len(in.Routes()); got != 0 {
			t.Fatalf("%d routes left", got)
		}
		perRoute := float64(a1-a0) / float64(routes)
		perPeer := float64(a2-a1) / peers
		t.Logf("%d routes: heap alloc +%d KiB (%.0f B per route), in use +%d KiB; added in %v (%.2f µs each), deleted in %v",
			routes, (a1-a0)>>10, perRoute, (i1-i0)>>10, addTime.Round(time.Microsecond),
			float64(addTime.Microseconds())/float64(routes), delTime.Round(time.Microsecond))
		t.Logf("%d peers: heap alloc +%d KiB (%.0f B per peer), in use +%d KiB; %d routed sends %v (%.2f µs each)",
			peers, (a2-a1)>>10, perPeer, (i2-i1)>>10, lookups, sendTime.Round(time.Microsecond),
			float64(sendTime.Microseconds())/lookups)
		if perRoute > 4096 || perPeer > 16384 {
			t.Errorf("%.0f B per route, %.0f B per peer", perRoute, perPeer)
		}
		in.Close()
	}
}
