package lnetd

import (
	"context"
	"testing"
	"time"

	"softib/lnet/selftest"
	"softib/wire/lnetwire"
)

// TestSelftestService checks that a daemon hosts the selftest service: a
// console node reaches it over tcp, joins it to a session, reads its
// counters and removes it from the session.
func TestSelftestService(t *testing.T) {
	port := freePort(t)
	n := startInproc(t, testIP(), port, "")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	nid := lnetwire.MustParseNID(n.nid)
	in, cnid, err := selftest.ConsoleNode("tcp", testIP(), port, nid, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c := selftest.NewConsole(in, &selftest.State{Name: "lnetd", Stamp: 1, Console: cnid.String(), RPCTimeout: 20}, nil)
	if _, err := c.AddGroup(ctx, "g", []lnetwire.NID{nid}); err != nil {
		t.Fatal(err)
	}
	res := c.Stat(ctx, []lnetwire.NID{nid})
	if res[0].Err != nil || res[0].Rep.Counters.RPCsRcvd == 0 {
		t.Fatalf("stat: %+v", res[0])
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
	port := freePort(t)
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
	for {
		res, err := c.BatchOp(ctx, "b", selftest.BatchQuery)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Rep.Active == 0 && res[1].Rep.Active == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("batch never finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := c.Stat(ctx, nids)
	if st[0].Err != nil || st[0].Rep.Counters.TestRPCs != 50 || st[0].Rep.Counters.Errors != 0 {
		t.Fatalf("client stat: %+v", st[0])
	}
	// Bulk-carrying requests are refused through the proxy.
	bad := (&selftest.Msg{Type: selftest.MsgBRWReq}).Append(nil)
	if _, err := selftest.ProxyCaller(cl.Call)(ctx, nids[1], bad, 0); err == nil {
		t.Fatal("a BRW request was proxied")
	}
	for _, r := range c.End(ctx) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}
