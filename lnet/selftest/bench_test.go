package selftest

import (
	"testing"

	"softib/wire/lnetwire"
)

// benchUnit returns a test instance and unit as a client node runs them.
func benchUnit(op uint32, size int, check uint32) (*testInst, *unit) {
	ti := &testInst{sess: &session{feats: FeatsMask}, service: ServiceBRW, opc: op, length: size, flags: check}
	if size == 0 {
		ti.service = ServicePing
	}
	return ti, &unit{req: make([]byte, MsgSize), rep: make([]byte, MsgSize), bulk: make([]byte, size)}
}

// benchRPC measures one client RPC at a time between two in-process nodes
// (lndtest), reporting allocations per RPC (both sides, core included).
func benchRPC(b *testing.B, op uint32, size int, check uint32) {
	c := newCluster(b, 2)
	ctx := ctxT(b)
	ti, u := benchUnit(op, size, check)
	srv := lnetwire.ProcessID{NID: c.nids[1], PID: lnetwire.PIDLustre}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	for b.Loop() {
		if err := c.nodes[0].testRPC(ctx, ti, srv, u); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rpc/s")
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
	ti, u := benchUnit(BRWWrite, 4096, CheckFull)
	srv := lnetwire.ProcessID{NID: c.nids[1], PID: lnetwire.PIDLustre}
	n := testing.AllocsPerRun(500, func() {
		if err := c.nodes[0].testRPC(ctx, ti, srv, u); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.1f allocations per brw write RPC (both nodes, lnet core included)", n)
	if n > 20 {
		t.Fatalf("%.1f allocations per brw RPC, want ≤ 20", n)
	}
}
