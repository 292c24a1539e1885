package selftest

import (
	"testing"
	"time"

	"softib/wire/lnetwire"
)

// benchRPC measures one client RPC at a time between two in-process nodes
// (lndtest), reporting allocations per RPC (both sides, core included).
func benchRPC(b *testing.B, op uint32, size int, check uint32) {
	c := newCluster(b, 2)
	ctx := ctxT(b)
	if _, err := c.console.AddGroup(ctx, "g", c.nids); err != nil {
		b.Fatal(err)
	}
	cl := c.nodes[0]
	sid := c.console.SID()
	t := &TestBody{Service: ServiceBRW, BRWOp: op, Size: uint32(size), Check: check}
	if size == 0 {
		t.Service = ServicePing
	}
	bulk, rbuf := make([]byte, size), make([]byte, 512)
	srv := lnetwire.ProcessID{NID: c.nids[1], PID: lnetwire.PIDLustre}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	for i := 0; b.Loop(); i++ {
		if err := cl.testRPC(ctx, sid, t, srv, bulk, rbuf, uint32(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rpc/s")
	_ = time.Second
}

func BenchmarkPing(b *testing.B)           { benchRPC(b, 0, 0, CheckNone) }
func BenchmarkBRWWrite4K(b *testing.B)     { benchRPC(b, BRWWrite, 4096, CheckNone) }
func BenchmarkBRWRead4K(b *testing.B)      { benchRPC(b, BRWRead, 4096, CheckNone) }
func BenchmarkBRWWrite1MFull(b *testing.B) { benchRPC(b, BRWWrite, 1<<20, CheckFull) }

// TestRPCAllocs bounds the allocations of one brw RPC, both sides. What
// remains is in the lnet core (an ME/MD object per operation, one event
// copy per MD handler call, the unique portal's per-match-bits list) plus
// the request handler's goroutine: every RPC uses fresh match bits, as
// the protocol requires. Race builds are skipped (pools drop items).
func TestRPCAllocs(t *testing.T) {
	if raceEnabled {
		t.Log("race build: sync.Pool is not reliable, allocations not checked")
		return
	}
	c := newCluster(t, 2)
	ctx := ctxT(t)
	if _, err := c.console.AddGroup(ctx, "g", c.nids); err != nil {
		t.Fatal(err)
	}
	tb := &TestBody{Service: ServiceBRW, BRWOp: BRWWrite, Size: 4096, Check: CheckFull}
	bulk, rbuf := make([]byte, 4096), make([]byte, 512)
	srv := lnetwire.ProcessID{NID: c.nids[1], PID: lnetwire.PIDLustre}
	sid := c.console.SID()
	i := uint32(0)
	n := testing.AllocsPerRun(500, func() {
		i++
		if err := c.nodes[0].testRPC(ctx, sid, tb, srv, bulk, rbuf, i); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.1f allocations per brw write RPC (both nodes, lnet core included)", n)
	if n > 20 {
		t.Fatalf("%.1f allocations per brw RPC, want ≤ 20", n)
	}
}
