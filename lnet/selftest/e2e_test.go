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
	conIn   *lnet.Instance // the console's instance
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
	return newClusterCfg(t, n, Config{Log: quietLog(t), RPCTimeout: 10 * time.Second})
}

func newClusterCfg(t testing.TB, n int, cfg Config) *cluster {
	t.Helper()
	c := &cluster{net: lndtest.New(lnetwire.SOCKLND)}
	for i := range n {
		nid := lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.SOCKLND, 0), 0x0a000002+uint32(i))
		in := newInst(t, c.net, nid)
		s, err := NewService(in, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c.nodes = append(c.nodes, s)
		c.nids = append(c.nids, nid)
	}
	cnid := lnetwire.MustParseNID("10.0.0.1@tcp")
	st := &State{Name: "t", Stamp: 42, Console: cnid.String(), Timeout: 60, RPCTimeout: 10}
	c.conIn = newInst(t, c.net, cnid)
	c.console = NewConsole(c.conIn, st, quietLog(t))
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// runSum sums the counters of a finished run.
type runSum struct {
	Sent       uint64 // requests the clients sent
	Rcvd       uint64 // requests the servers received
	BulkGet    uint64 // bytes the servers fetched
	BulkPut    uint64 // bytes the servers sent
	BRWErrors  uint64
	PingErrors uint64
	RPCErrors  uint64
	Expired    uint64
	Dropped    uint64
}

func sumOf(t *testing.T, con *Console, clients, servers []lnetwire.NID) runSum {
	t.Helper()
	var sum runSum
	res := con.Stat(ctxT(t), con.AllNodes())
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		k := r.Counters()
		sum.BRWErrors += uint64(k.FW.BRWErrors)
		sum.PingErrors += uint64(k.FW.PingErrors)
		sum.RPCErrors += uint64(k.RPC.Errors)
		sum.Expired += uint64(k.RPC.RPCsExpired)
		sum.Dropped += uint64(k.RPC.RPCsDropped)
		for _, n := range clients {
			if n == r.NID {
				sum.Sent += uint64(k.RPC.RPCsSent)
			}
		}
		for _, n := range servers {
			if n == r.NID {
				sum.Rcvd += uint64(k.RPC.RPCsRcvd)
				sum.BulkGet += k.RPC.BulkGet
				sum.BulkPut += k.RPC.BulkPut
			}
		}
	}
	return sum
}

// runTest sets up clients→servers, runs the test until each unit did
// its loop RPCs, and returns the summed counters.
func runTest(t *testing.T, c *cluster, clients, servers []lnetwire.NID, spec TestSpec) runSum {
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
	if err := con.WaitIdle(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	sum := sumOf(t, con, clients, servers)
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
		{"write4K-full", TestSpec{Kind: "brw", Op: "write", Size: 4096, Check: "full", Concurrency: 4, Loop: 10}},
		{"read1M-full", TestSpec{Kind: "brw", Op: "read", Size: 1 << 20, Check: "full", Concurrency: 2, Loop: 3}},
		{"write1M-simple", TestSpec{Kind: "brw", Op: "write", Size: 1 << 20, Check: "simple", Concurrency: 2, Loop: 3}},
		{"read-odd-none", TestSpec{Kind: "brw", Op: "read", Size: 1000, Check: "none", Concurrency: 1, Loop: 5}},
		{"read-off-full", TestSpec{Kind: "brw", Op: "read", Size: 12288, Offset: 1024, Check: "full", Concurrency: 1, Loop: 5}},
		{"ping", TestSpec{Kind: "ping", Concurrency: 8, Loop: 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			sum := runTest(t, c, c.nids[:1], c.nids[1:], tc.spec)
			if sum.BRWErrors != 0 || sum.PingErrors != 0 || sum.RPCErrors != 0 || sum.Dropped != 0 {
				t.Fatalf("errors: %+v", sum)
			}
			// 1 client, distribute 1:1: one destination, Concurrency units
			// of Loop RPCs each.
			want := uint64(tc.spec.Concurrency * tc.spec.Loop)
			if sum.Sent != want {
				t.Fatalf("client sent %d RPCs, want %d", sum.Sent, want)
			}
			if tc.spec.Kind == "brw" {
				if got := sum.BulkGet + sum.BulkPut; got != want*uint64(tc.spec.Size) {
					t.Fatalf("servers moved %d bytes (get %d put %d), want %d", got, sum.BulkGet, sum.BulkPut, want*uint64(tc.spec.Size))
				}
			}
		})
	}
}

// TestE2ECorruption flips one byte of brw write data: the server's
// check=full replies EBADMSG.
func TestE2ECorruption(t *testing.T) {
	c := newCluster(t, 2)
	ctx := ctxT(t)
	cl := c.nodes[0]
	buf := make([]byte, 8192)
	FillPattern(buf, 0, CheckFull, BRWMagic)
	buf[5000] ^= 0x40
	req := NewMsg(MsgBRWReq, FeatsMask)
	req.SetRpyID(cl.ep.ids.next())
	bid := cl.ep.ids.next()
	req.BRWReq().SetBulkID(bid)
	req.BRWReq().Set(BRWWrite, uint32(len(buf)), CheckFull)
	_, err := cl.ep.call(ctx, lnetwire.ProcessID{NID: c.nids[1], PID: lnetwire.PIDLustre}, req, bid, buf, bulkGet, 10*time.Second, make([]byte, MsgSize))
	if !errors.Is(err, ErrDataMismatch) {
		t.Fatalf("corrupted write: err %v, want a data mismatch", err)
	}
}

// TestE2EDistribution: two clients, two servers, 1:1: each server serves
// exactly one client's RPCs.
func TestE2EDistribution(t *testing.T) {
	c := newCluster(t, 4)
	spec := TestSpec{Kind: "brw", Op: "write", Size: 8192, Check: "simple", Concurrency: 3, Loop: 5, Distribute: "1:1"}
	sum := runTest(t, c, c.nids[:2], c.nids[2:], spec)
	if sum.BRWErrors != 0 || sum.Sent != 2*3*5 {
		t.Fatalf("counters %+v", sum)
	}
	for _, s := range c.nodes[2:] {
		if k := s.Counters(); k.RPC.BulkGet != 15*8192 {
			t.Fatalf("server got %d bytes, want %d (one client's share)", k.RPC.BulkGet, 15*8192)
		}
	}
}

// TestE2EStopForever runs a loop -1 test, stops it, and checks that the
// stop is clean (no errors) and the batch runs again.
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
	for c.nodes[0].Counters().RPC.RPCsSent < 50 {
		if ctx.Err() != nil {
			t.Fatal("no progress")
		}
		time.Sleep(time.Millisecond)
	}
	if k := c.nodes[0].Counters(); k.FW.ActiveBatches != 1 {
		t.Fatalf("active batches %d while running", k.FW.ActiveBatches)
	}
	if _, err := con.BatchOp(ctx, "b", BatchStop); err != nil {
		t.Fatal(err)
	}
	if err := con.WaitIdle(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.nodes {
		if k := s.Counters(); k.RPC.Errors != 0 || k.FW.BRWErrors != 0 || k.FW.ActiveBatches != 0 || k.RPC.RPCsDropped != 0 {
			t.Fatalf("counters after stop: %+v", k)
		}
	}
	// A stopped batch runs again.
	before := c.nodes[0].Counters().RPC.RPCsSent
	if _, err := con.BatchOp(ctx, "b", BatchRun); err != nil {
		t.Fatal(err)
	}
	for c.nodes[0].Counters().RPC.RPCsSent < before+10 {
		if ctx.Err() != nil {
			t.Fatal("no progress after rerun")
		}
		time.Sleep(time.Millisecond)
	}
	// Ending the session aborts the running test.
	for _, r := range con.End(ctx) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if sid, _ := c.nodes[0].Session(); !sid.IsZero() {
		t.Fatal("node still in the session after end")
	}
	for c.nodes[0].Counters().FW.ZombieSessions != 0 {
		if ctx.Err() != nil {
			t.Fatal("ended session's tests never stopped")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestE2ESessions: a second console is refused, then takes the node with
// Force; the first console's requests then fail with ESRCH; DEBUG shows
// who owns the node; an idle session expires on the node's timeout.
func TestE2ESessions(t *testing.T) {
	c := newClusterCfg(t, 1, Config{Log: quietLog(t), RPCTimeout: 10 * time.Second, SessionTimeout: time.Second})
	ctx := ctxT(t)
	if _, err := c.console.AddGroup(ctx, "g", c.nids); err != nil {
		t.Fatal(err)
	}
	if _, st := c.console.Query(ctx, c.nids); st[0] != NodeActive {
		t.Fatalf("node state %v, want Active", st[0])
	}
	cnid := lnetwire.MustParseNID("10.0.0.100@tcp")
	st2 := &State{Name: "other", Stamp: 7, Console: cnid.String(), RPCTimeout: 10}
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
	if _, st := c.console.Query(ctx, c.nids); st[0] != NodeBusy {
		t.Fatalf("node state %v for the old console, want Busy", st[0])
	}
	// Session timeout 1 s: the node drops the session once left alone.
	for {
		if sid, _ := c.nodes[0].Session(); sid.IsZero() {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("session never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, st := other.Query(ctx, c.nids); st[0] != NodeUnknown {
		t.Fatalf("node state %v after expiry, want Unknown", st[0])
	}
}

// TestE2EReadCorruption: a server sends brw read data with one byte
// flipped in the middle of a page; the client's check=full catches it,
// counts a brw error and (stop on error, as Lustre's console asks)
// stops the unit, while check=simple (first and last word of each page)
// does not see it.
func TestE2EReadCorruption(t *testing.T) {
	for _, tc := range []struct {
		check string
		errs  uint64
		sent  uint64
	}{{"full", 1, 1}, {"simple", 0, 3}} {
		t.Run(tc.check, func(t *testing.T) {
			c := newCluster(t, 2)
			c.nodes[1].corruptRead = func(b []byte) { b[len(b)/2+100] ^= 0x10 } // mid-page
			sum := runTest(t, c, c.nids[:1], c.nids[1:], TestSpec{Kind: "brw", Op: "read", Size: 16384, Check: tc.check, Concurrency: 1, Loop: 3})
			if sum.BRWErrors != tc.errs || sum.Sent != tc.sent {
				t.Fatalf("check=%s: brw errors %d, sent %d, want %d and %d", tc.check, sum.BRWErrors, sum.Sent, tc.errs, tc.sent)
			}
		})
	}
}
