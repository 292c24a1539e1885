package lnetd

import (
	"context"
	"testing"

	"softib/lnet/selftest"
	"softib/tools/lst"
	"softib/wire/lnetwire"
)

// TestSelftestService checks that a daemon hosts the selftest service: a
// console node reaches it over tcp, joins it to a session, reads its
// counters and removes it from the session.
func TestSelftestService(t *testing.T) {
	port := reservePort()
	n := startInproc(t, testIP(), port, "")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	nid := lnetwire.MustParseNID(n.nid)
	in, cnid, err := lst.ConsoleNode("tcp", testIP(), port, nid, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c := selftest.NewConsole(in, &selftest.State{Name: "lnetd", Stamp: 1, Console: cnid.String(), RPCTimeout: 20}, nil)
	if _, err := c.AddGroup(ctx, "g", []lnetwire.NID{nid}); err != nil {
		t.Fatal(err)
	}
	res := c.Stat(ctx, []lnetwire.NID{nid})
	if res[0].Err != nil || res[0].Counters().RPC.RPCsRcvd == 0 || res[0].Counters().LNet.RecvCount == 0 {
		t.Fatalf("stat: %+v", res[0])
	}
	if _, st := c.Query(ctx, []lnetwire.NID{nid}); st[0] != selftest.NodeActive {
		t.Fatalf("node state %v, want Active", st[0])
	}
	for _, r := range c.End(ctx) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// TestSelftestProxy drives a session through node A's control socket
// (the lst.call op), with A itself in the groups: the console RPCs leave
// from A's own instance.
func TestSelftestProxy(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	b := startInproc(t, testIP(), port, "")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cl, err := Dial(a.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := selftest.NewConsoleVia(selftest.ProxyCaller(cl.Call), &selftest.State{Name: "proxy", Stamp: 2, RPCTimeout: 20})
	nids := []lnetwire.NID{lnetwire.MustParseNID(a.nid), lnetwire.MustParseNID(b.nid)}
	if _, err := c.AddGroup(ctx, "c", nids[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddGroup(ctx, "s", nids[1:]); err != nil {
		t.Fatal(err)
	}
	if err := c.AddBatch("b"); err != nil {
		t.Fatal(err)
	}
	spec := selftest.TestSpec{Kind: "brw", Op: "write", Size: 4096, Check: "full", From: "c", To: "s", Concurrency: 2, Loop: 50}
	if err := c.AddTest(ctx, "b", spec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchOp(ctx, "b", selftest.BatchRun); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitIdle(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// Concurrency 2, one destination: two units of 50 RPCs. The console
	// RPCs A sent for the proxy are not in A's counters.
	st := c.Stat(ctx, nids)
	if k := st[0].Counters(); st[0].Err != nil || k.RPC.RPCsSent != 100 || k.FW.BRWErrors != 0 || k.RPC.Errors != 0 {
		t.Fatalf("client stat: %+v %+v", st[0], k)
	}
	if k := st[1].Counters(); k.RPC.BulkGet != 100*4096 {
		t.Fatalf("server stat: %+v", k)
	}
	// Test requests are refused through the proxy.
	bad := selftest.NewMsg(selftest.MsgBRWReq, selftest.FeatsMask)
	if _, err := selftest.ProxyCaller(cl.Call)(ctx, nids[1], bad, nil, 0); err == nil {
		t.Fatal("a BRW request was proxied")
	}
	for _, r := range c.End(ctx) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}
