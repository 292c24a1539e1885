package lnetd

import (
	"context"
	"testing"

	"softib/lnet/selftest"
	"softib/wire/lnetwire"
)

// TestSelftestService checks that a daemon hosts the selftest service: a
// console node reaches it over tcp, joins it to a session, reads its
// counters, and after Close the service is gone with the instance.
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
