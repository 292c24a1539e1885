package selftest

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// hangGuard bounds waits; it is a guard against hangs, not a timing check.
const hangGuard = 45 * time.Second

type cluster struct {
	net     *lndtest.Network
	nodes   []*Service
	nids    []lnetwire.NID
	console *Console
}

func quietLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func newInst(t testing.TB, n *lndtest.Network, nid lnetwire.NID) *lnet.Instance {
	t.Helper()
	in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{n.LND()}, Nets: []lnet.NetConfig{{Net: nid.Net(), Addr: nid.Addr()}}, Log: quietLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// newCluster starts n selftest nodes 10.0.0.2.. and a console 10.0.0.1.
func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{net: lndtest.New(lnetwire.SOCKLND)}
	for i := range n {
		nid := lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.SOCKLND, 0), 0x0a000002+uint32(i))
		in := newInst(t, c.net, nid)
		s, err := NewService(in, Config{Log: quietLog(t), RPCTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c.nodes = append(c.nodes, s)
		c.nids = append(c.nids, nid)
	}
	cnid := lnetwire.MustParseNID("10.0.0.1@tcp")
	st := &State{Name: "t", Stamp: 42, Console: cnid.String(), Timeout: 60, RPCTimeout: 10}
	c.console = NewConsole(newInst(t, c.net, cnid), st, quietLog(t))
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// runTest sets up clients→servers, runs the test until each client did
// loop RPCs, and returns the summed counters.
func runTest(t *testing.T, c *cluster, clients, servers []lnetwire.NID, spec TestSpec) Counters {
	t.Helper()
	ctx := ctxT(t)
	con := c.console
	if _, err := con.AddGroup(ctx, "clients", clients); err != nil {
		t.Fatal(err)
	}
	if _, err := con.AddGroup(ctx, "servers", servers); err != nil {
		t.Fatal(err)
	}
	if err := con.AddBatch("b"); err != nil {
		t.Fatal(err)
	}
	spec.From, spec.To = "clients", "servers"
	if err := con.AddTest(ctx, "b", spec); err != nil {
		t.Fatal(err)
	}
	if _, err := con.BatchOp(ctx, "b", BatchRun); err != nil {
		t.Fatal(err)
	}
	for {
		res, err := con.BatchOp(ctx, "b", BatchQuery)
		if err != nil {
			t.Fatal(err)
		}
		active := 0
		for _, r := range res {
			active += int(r.Rep.Active)
		}
		if active == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("batch still active at the hang guard")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var sum Counters
	for _, r := range con.Stat(ctx, con.AllNodes()) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		k := r.Rep.Counters
		sum.TestRPCs += k.TestRPCs
		sum.TestBytes += k.TestBytes
		sum.Errors += k.Errors
		sum.BRWErrors += k.BRWErrors
		sum.BulkGet += k.BulkGet
		sum.BulkPut += k.BulkPut
		sum.RPCsRcvd += k.RPCsRcvd
	}
	for _, r := range con.End(ctx) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return sum
}

func TestE2EBRW(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec TestSpec
	}{
		{"write4K-full", TestSpec{Kind: "brw", Op: "write", Size: 4096, Check: "full", Concurrency: 4, Loop: 40}},
		{"read1M-full", TestSpec{Kind: "brw", Op: "read", Size: 1 << 20, Check: "full", Concurrency: 2, Loop: 6}},
		{"write1M-simple", TestSpec{Kind: "brw", Op: "write", Size: 1 << 20, Check: "simple", Concurrency: 2, Loop: 6}},
		{"read-odd-none", TestSpec{Kind: "brw", Op: "read", Size: 1000, Check: "none", Concurrency: 1, Loop: 5}},
		{"ping", TestSpec{Kind: "ping", Concurrency: 8, Loop: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			sum := runTest(t, c, c.nids[:1], c.nids[1:], tc.spec)
			if sum.Errors != 0 || sum.BRWErrors != 0 {
				t.Fatalf("errors: %+v", sum)
			}
			if sum.TestRPCs != uint64(tc.spec.Loop) {
				t.Fatalf("test RPCs %d, want %d", sum.TestRPCs, tc.spec.Loop)
			}
			if tc.spec.Kind == "brw" {
				want := uint64(tc.spec.Loop * tc.spec.Size)
				if sum.TestBytes != want || sum.BulkGet+sum.BulkPut != want {
					t.Fatalf("bytes: client %d, servers get %d put %d, want %d", sum.TestBytes, sum.BulkGet, sum.BulkPut, want)
				}
			}
		})
	}
}

// TestE2ECorruption flips one byte of the bulk data in flight (in the
// test LND) and checks that check=full reports it on both sides.
func TestE2ECorruption(t *testing.T) {
	c := newCluster(t, 2)
	// A hand-made client RPC whose data has one flipped byte.
	ctx := ctxT(t)
	con := c.console
	if _, err := con.AddGroup(ctx, "s", c.nids[1:]); err != nil {
		t.Fatal(err)
	}
	sid := con.SID()
	cl := c.nodes[0]
	if _, err := con.AddGroup(ctx, "c", c.nids[:1]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8192)
	rpy, bid := cl.ep.newIDs()
	FillPattern(buf, bid, CheckFull)
	buf[5000] ^= 0x40
	req := Msg{Type: MsgBRWReq, RpyID: rpy, BulkID: bid, SID: sid, BRWOp: BRWWrite, BulkLen: uint32(len(buf)), Check: CheckFull}
	var rep Msg
	err := cl.ep.call(ctx, lnetwire.ProcessID{NID: c.nids[1], PID: lnetwire.PIDLustre}, &req, buf, BRWWrite, 10*time.Second, &rep, make([]byte, 512))
	if !errors.Is(err, ErrDataMismatch) {
		t.Fatalf("corrupted write: err %v, want a data mismatch", err)
	}
	if k := c.nodes[1].Counters(); k.BRWErrors != 1 {
		t.Fatalf("server brw errors %d, want 1", k.BRWErrors)
	}
}

// TestE2EDistribution: two clients, two servers, 1:1: each server serves
// exactly one client's RPCs.
func TestE2EDistribution(t *testing.T) {
	c := newCluster(t, 4)
	spec := TestSpec{Kind: "brw", Op: "write", Size: 8192, Check: "simple", Concurrency: 3, Loop: 17, Distribute: "1:1"}
	sum := runTest(t, c, c.nids[:2], c.nids[2:], spec)
	if sum.Errors != 0 || sum.TestRPCs != 2*17 {
		t.Fatalf("counters %+v", sum)
	}
	for _, s := range c.nodes[2:] {
		if k := s.Counters(); k.BulkGet != 17*8192 {
			t.Fatalf("server got %d bytes, want %d (one client's share)", k.BulkGet, 17*8192)
		}
	}
}

// TestE2EStopForever runs a loop -1 test, stops it, and checks that the
// RPCs cut short by the stop are not counted as errors.
func TestE2EStopForever(t *testing.T) {
	c := newCluster(t, 2)
	ctx := ctxT(t)
	con := c.console
	if _, err := con.AddGroup(ctx, "c", c.nids[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := con.AddGroup(ctx, "s", c.nids[1:]); err != nil {
		t.Fatal(err)
	}
	if err := con.AddBatch("b"); err != nil {
		t.Fatal(err)
	}
	if err := con.AddTest(ctx, "b", TestSpec{Kind: "brw", Op: "read", Size: 1 << 16, Check: "full", From: "c", To: "s", Concurrency: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := con.BatchOp(ctx, "b", BatchRun); err != nil {
		t.Fatal(err)
	}
	for c.nodes[0].Counters().TestRPCs < 50 {
		if ctx.Err() != nil {
			t.Fatal("no progress")
		}
		time.Sleep(time.Millisecond)
	}
	if k := c.nodes[0].Counters(); k.ActiveBatches != 1 {
		t.Fatalf("active batches %d while running", k.ActiveBatches)
	}
	if _, err := con.BatchOp(ctx, "b", BatchStop); err != nil {
		t.Fatal(err)
	}
	res, err := con.BatchOp(ctx, "b", BatchQuery)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Rep.Active != 0 {
			t.Fatalf("%v still active after stop", r.NID)
		}
	}
	for _, s := range c.nodes {
		if k := s.Counters(); k.Errors != 0 || k.BRWErrors != 0 || k.ActiveBatches != 0 {
			t.Fatalf("counters after stop: %+v", k)
		}
	}
	// A stopped batch runs again.
	before := c.nodes[0].Counters().TestRPCs
	if _, err := con.BatchOp(ctx, "b", BatchRun); err != nil {
		t.Fatal(err)
	}
	for c.nodes[0].Counters().TestRPCs < before+10 {
		if ctx.Err() != nil {
			t.Fatal("no progress after rerun")
		}
		time.Sleep(time.Millisecond)
	}
	for _, r := range con.End(ctx) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if sid, _ := c.nodes[0].Session(); !sid.IsZero() {
		t.Fatal("node still in the session after end")
	}
}

// TestE2ESessions: a second console is refused, then takes the node with
// Force; the first console's requests then fail with ESRCH; an idle
// session expires on its own.
func TestE2ESessions(t *testing.T) {
	c := newCluster(t, 1)
	ctx := ctxT(t)
	if _, err := c.console.AddGroup(ctx, "g", c.nids); err != nil {
		t.Fatal(err)
	}
	cnid := lnetwire.MustParseNID("10.0.0.100@tcp")
	st2 := &State{Name: "other", Stamp: 7, Console: cnid.String(), Timeout: 1, RPCTimeout: 10}
	other := NewConsole(newInst(t, c.net, cnid), st2, quietLog(t))
	var se *StatusError
	if _, err := other.AddGroup(ctx, "g", c.nids); !errors.As(err, &se) || se.Errno != 16 {
		t.Fatalf("joining a busy node: %v, want EBUSY", err)
	}
	st2.Force = true
	if _, err := other.AddGroup(ctx, "g2", c.nids); err != nil {
		t.Fatal(err)
	}
	if sid, name := c.nodes[0].Session(); sid != other.SID() || name != "other" {
		t.Fatalf("node in session %v %q", sid, name)
	}
	if r := c.console.Stat(ctx, c.nids); !errors.As(r[0].Err, &se) || se.Errno != 3 {
		t.Fatalf("old console's stat: %v, want ESRCH", r[0].Err)
	}
	// Timeout 1 s: the node drops the session once left alone.
	for {
		if sid, _ := c.nodes[0].Session(); sid.IsZero() {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("session never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestE2EReadCorruption: a server sends brw read data with one byte
// flipped; the client's check=full catches it and counts a brw error,
// while check=simple (page headers only) does not see a mid-page byte.
func TestE2EReadCorruption(t *testing.T) {
	for _, tc := range []struct {
		check string
		errs  uint64
	}{{"full", 3}, {"simple", 0}} {
		t.Run(tc.check, func(t *testing.T) {
			c := newCluster(t, 2)
			c.nodes[1].corruptRead = func(b []byte) { b[len(b)/2+100] ^= 0x10 } // mid-page
			sum := runTest(t, c, c.nids[:1], c.nids[1:], TestSpec{Kind: "brw", Op: "read", Size: 16384, Check: tc.check, Concurrency: 1, Loop: 3})
			if sum.BRWErrors != tc.errs || sum.Errors != tc.errs {
				t.Fatalf("check=%s: brw errors %d, errors %d, want %d", tc.check, sum.BRWErrors, sum.Errors, tc.errs)
			}
		})
	}
}
