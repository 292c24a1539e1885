package lnet_test

import (
	"fmt"
	"runtime"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// benchSetup binds a reusable source MD on A and an infinite sink on B.
func benchSetup(tb testing.TB, size int) (*pair, lnet.MDHandle) {
	p := newPair(tb, lnd.Tunables{})
	me, err := p.b.MEAttach(8, lnetwire.ProcessIDAny, 0, 0, lnet.Retain, lnet.InsAfter)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := p.b.MDAttach(me, lnet.MD{Start: make([]byte, size), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDManageRemote, EQ: p.eqB}, lnet.Retain); err != nil {
		tb.Fatal(err)
	}
	h, err := p.a.MDBind(lnet.MD{Start: make([]byte, size), Threshold: lnet.ThreshInf, EQ: p.eqA}, lnet.Retain)
	if err != nil {
		tb.Fatal(err)
	}
	return p, h
}

// putOnce does one PUT with ACK and consumes its three events.
func putOnce(tb testing.TB, p *pair, h lnet.MDHandle, target lnetwire.ProcessID) {
	if err := p.a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, target, 8, 0, 0, 0); err != nil {
		tb.Fatal(err)
	}
	for _, eq := range []*lnet.EQ{p.eqA, p.eqA, p.eqB} {
		ev, ok, err := eq.Get()
		if !ok || err != nil || ev.Status != nil {
			tb.Fatalf("event %v ok=%v err=%v status=%v", ev.Type, ok, err, ev.Status)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	for _, size := range []int{0, 4096, 1 << 20} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			p, h := benchSetup(b, size)
			target := p.idB()
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				putOnce(b, p, h, target)
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	p, _ := benchSetup(b, 4096)
	me, _ := p.b.MEAttach(9, lnetwire.ProcessIDAny, 0, 0, lnet.Retain, lnet.InsAfter)
	p.b.MDAttach(me, lnet.MD{Start: make([]byte, 4096), Threshold: lnet.ThreshInf, Options: lnet.MDOpGet | lnet.MDManageRemote, EQ: p.eqB}, lnet.Retain)
	h, _ := p.a.MDBind(lnet.MD{Start: make([]byte, 4096), Threshold: lnet.ThreshInf, EQ: p.eqA}, lnet.Retain)
	target := p.idB()
	b.ReportAllocs()
	b.SetBytes(4096)
	for b.Loop() {
		if err := p.a.Get(lnetwire.NIDAny, h, target, 9, 0, 0); err != nil {
			b.Fatal(err)
		}
		for _, eq := range []*lnet.EQ{p.eqA, p.eqA, p.eqB} {
			if _, ok, _ := eq.Get(); !ok {
				b.Fatal("missing event")
			}
		}
	}
}

// TestPutAllocs asserts the steady-state PUT+ACK path allocates nothing.
func TestPutAllocs(t *testing.T) {
	for _, size := range []int{0, 1 << 20} {
		p, h := benchSetup(t, size)
		target := p.idB()
		putOnce(t, p, h, target) // warm the pools
		n := testing.AllocsPerRun(200, func() { putOnce(t, p, h, target) })
		switch {
		case n > 0 && (raceEnabled || testing.CoverMode() != ""):
			t.Logf("%d B PUT: %.1f allocs per message (race/cover build: pools are not reliable)", size, n)
		case n > 0:
			t.Errorf("%d B PUT: %.1f allocs per message, want 0", size, n)
		}
	}
}

// TestPeerTableScale creates 10,000 peers and reports the memory an idle
// peer costs.
func TestPeerTableScale(t *testing.T) {
	const npeers = 10000
	n := lndtest.New(lnetwire.SOCKLND)
	a := newInstance(t, n, nidA, lnd.Tunables{})
	h, _ := a.MDBind(lnet.MD{Start: nil, Threshold: lnet.ThreshInf}, lnet.Retain)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range npeers {
		// Peers that are not on the network: each send fails, but the
		// peer entry exists afterwards (as after a failed connect).
		target := lnetwire.ProcessID{NID: lnetwire.MakeNID(nidA.Net(), 0x0B000000+uint32(i)), PID: 12345}
		a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, target, 1, 0, 0, 0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	peers := a.Peers()
	if len(peers) != npeers {
		t.Fatalf("peer table has %d entries, want %d", len(peers), npeers)
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / npeers
	t.Logf("%d peers: %.0f bytes per idle peer (struct + map entry)", npeers, per)
	if per > 512 {
		t.Errorf("%.0f bytes per idle peer, want ≤ 512", per)
	}
	if st := a.Stats(); st.MsgsAlloc != 0 || st.Errors != npeers {
		t.Errorf("stats %+v", st)
	}
}
