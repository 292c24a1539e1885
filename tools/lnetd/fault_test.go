//go:build linux

package lnetd

import (
	"context"
	"strings"
	"testing"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// waitPeer polls in's peer owning nid until ok accepts it (a guard
// against hangs only: pushes between the daemons are asynchronous).
func waitPeer(t *testing.T, in *lnet.Instance, nid, what string, ok func(lnet.PeerDetail) bool) {
	t.Helper()
	n, err := lnetwire.ParseNID(nid)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hangGuard)
	for {
		p, found := in.PeerOf(n)
		if found && ok(p) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: peer of %s is still %+v (found %v)", what, nid, p, found)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustParse(t *testing.T, s string) lnetwire.NID {
	t.Helper()
	n, err := lnetwire.ParseNID(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDiscoverCommand: two lnetd; B has a second NI. A's `lnetctl
// discover B` lists both of B's NIDs, Multi-Rail; A pushed its buffer, so
// B knows A as a Multi-Rail peer; when B drops its second NI it pushes,
// and A's peer loses the NID. With discovery off on A, discover reports B
// as known (non-Multi-Rail) and A's ping buffer lacks the DISCOVERY bit.
// (Named in the brief as the softib-only discovery test between two
// lnetd.)
func TestDiscoverCommand(t *testing.T) {
	port := reservePort()
	// Discovery is on by default; these nodes say so, as the test is about it.
	a := startInproc(t, testIP(), port, "    discovery: 1\n")
	b := startInproc(t, testIP(), port, "    discovery: 1\n")
	b2ip := testIP()
	ctlOK(t, b.sock, "net", "add", "--net", "tcp1", "--if", b2ip)
	b2 := b2ip + "@tcp1"

	out := ctlOK(t, a.sock, "discover", b.nid)
	for _, want := range []string{"discover:", "primary nid: " + b.nid, "Multi-Rail: True", "nid: " + b.nid, "nid: " + b2} {
		if !strings.Contains(out, want) {
			t.Fatalf("discover output lacks %q:\n%s", want, out)
		}
	}
	// peer show -v: the state bits a Lustre node shows for a discovered
	// Multi-Rail peer (MULTI_RAIL | DISCOVERED | NIDS_UPTODATE = 273).
	if doc := ctlDoc(t, a.sock, "peer", "show", "-v", "--nid", b.nid); doc.Path("peer", 0, "peer state") != int64(273) ||
		doc.Path("peer", 0, keyMultiRail) != true {
		t.Fatalf("peer show -v of B:\n%s", YAML(doc))
	}
	if doc := ctlDoc(t, a.sock, "discover", "--primary", b2); doc.Path("primary_nid", 0, keyPrimaryNID) != b.nid {
		t.Fatalf("PrimaryNID(%s):\n%s", b2, YAML(doc))
	}
	// B got A's push: A is a discovered Multi-Rail peer there.
	waitPeer(t, b.d.Instance(), a.nid, "B's view of A", func(p lnet.PeerDetail) bool {
		return p.MultiRail && len(p.NIs) == 1 && p.State&lnet.PeerDiscovered != 0
	})

	// B's NIs change: it pushes its new buffer to A.
	ctlOK(t, b.sock, "net", "del", "--net", "tcp1")
	waitPeer(t, a.d.Instance(), b.nid, "A's view of B after B's net del", func(p lnet.PeerDetail) bool {
		return len(p.NIs) == 1 && p.NIs[0].NID.String() == b.nid
	})
	if st := a.d.Instance().DiscoveryStats(); st.PushesReceived == 0 {
		t.Errorf("A got no push from B: %+v", st)
	}

	// Discovery off on A at run time: A's ping buffer loses the
	// DISCOVERY bit (Multi-Rail stays, as in Lustre).
	ctlOK(t, a.sock, "set", "discovery", "0")
	if a.d.Instance().DiscoveryEnabled() {
		t.Fatal("discovery still on")
	}
	res, err := b.d.Instance().Ping(context.Background(), lnetwire.ProcessID{NID: mustParse(t, a.nid), PID: lnetwire.PIDAny}, hangGuard)
	if err != nil || res.Features&lnetwire.PingFeatDiscovery != 0 || res.Features&lnetwire.PingFeatMultiRail == 0 {
		t.Fatalf("ping of A with discovery off: features %#x, %v", res.Features, err)
	}
	// A node started with discovery: 0 keeps B non-Multi-Rail with the
	// one NID it knows.
	c := startInproc(t, testIP(), port, "    discovery: 0\n")
	ctlOK(t, b.sock, "net", "add", "--net", "tcp1", "--if", testIP())
	out = ctlOK(t, c.sock, "discover", b.nid)
	if !strings.Contains(out, "Multi-Rail: False") || strings.Count(out, "- nid: ") != 1 {
		t.Fatalf("discover with discovery off:\n%s", out)
	}
	if p, ok := c.d.Instance().PeerOf(mustParse(t, b.nid)); !ok || p.MultiRail || len(p.NIs) != 1 {
		t.Fatalf("C's peer B: %+v %v", p, ok)
	}
	// A bad NID is an error block.
	if code, _, errs := ctlRun(t, a.sock, "discover", "not-a-nid"); code != 1 || !strings.Contains(errs, "cannot parse NID") {
		t.Errorf("bad NID: %d %q", code, errs)
	}
}

// TestFaultCommands: lnetctl fault drop/delay add, show, reset, del
// against a live pair: a drop rule on B takes exactly the PUTs it
// selects (A's test put times out), show counts them, del lets traffic
// through again; bad command lines are refused with lnetctl's messages.
func TestFaultCommands(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	b := startInproc(t, testIP(), port, "")
	ctlOK(t, a.sock, "test", "put", "--nid", b.nid, "--size", "100")

	ctlOK(t, b.sock, "fault", "drop", "add", "-s", "*@tcp", "-d", b.nid, "-m", "PUT", "-r", "1", "-p", "60")
	if code, _, _ := ctlRun(t, a.sock, "test", "put", "--nid", b.nid, "--size", "100", "--timeout", "1s"); code == 0 {
		t.Fatal("PUT got through a drop-all rule")
	}
	// GETs are not selected.
	ctlOK(t, a.sock, "test", "get", "--nid", b.nid, "--size", "100")
	doc := ctlDoc(t, b.sock, "fault", "drop", "show")
	r, _ := doc.Path("fault", 0).(Map)
	if r == nil || r.Get("rule_type") != "drop" || r.Get("fa_src") != "255.255.255.255@tcp" || r.Get("fa_dst") != b.nid ||
		r.Get("fa_ptl_mask") != int64(1)<<60 || r.Get("fa_msg_mask") != int64(2) || r.Get("da_rate") != int64(1) ||
		r.Get("ds_dropped") != int64(1) || r.Get("fs_put") != int64(1) || r.Get("fs_count") != int64(1) {
		t.Fatalf("fault drop show:\n%s", YAML(doc))
	}
	ctlOK(t, b.sock, "fault", "drop", "reset")
	if doc := ctlDoc(t, b.sock, "fault", "drop", "show"); doc.Path("fault", 0, "ds_dropped") != int64(0) {
		t.Fatalf("after reset:\n%s", YAML(doc))
	}
	ctlOK(t, b.sock, "fault", "drop", "del", "-s", "*@tcp", "-d", b.nid)
	ctlOK(t, a.sock, "test", "put", "--nid", b.nid, "--size", "100")
	if doc := ctlDoc(t, b.sock, "fault", "drop", "show"); len(doc.Get("fault").(List)) != 0 {
		t.Fatalf("rule not deleted:\n%s", YAML(doc))
	}

	// A delay rule holds A's PUT for a second on A; the PUT still
	// completes.
	ctlOK(t, a.sock, "fault", "delay", "add", "-s", a.nid, "-d", "*", "-r", "1", "-l", "1")
	ctlOK(t, a.sock, "test", "put", "--nid", b.nid, "--size", "100")
	doc = ctlDoc(t, a.sock, "fault", "delay", "show")
	if d, _ := doc.Path("fault", 0).(Map); d == nil || d.Get("la_latency") != int64(1) || d.Get("ls_delayed") == int64(0) {
		t.Fatalf("fault delay show:\n%s", YAML(doc))
	}
	ctlOK(t, a.sock, "fault", "delay", "del", "--all")
	// On the receiving side (socklnd holds the received PUT, then
	// delivers it as a delayed receive).
	ctlOK(t, b.sock, "fault", "delay", "add", "-s", a.nid, "-d", b.nid, "-m", "PUT", "-r", "1", "-l", "1")
	ctlOK(t, a.sock, "test", "put", "--nid", b.nid, "--size", "5000", "--count", "2")
	if d := ctlDoc(t, b.sock, "fault", "delay", "show"); d.Path("fault", 0, "ls_delayed") != int64(2) || d.Path("fault", 0, "fs_put") != int64(2) {
		t.Fatalf("B fault delay show:\n%s", YAML(d))
	}
	ctlOK(t, b.sock, "fault", "delay", "del", "-s", a.nid, "-d", b.nid)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fault", "drop", "add", "-s", "*", "-d", "*"}, "either drop rate or interval"},
		{[]string{"fault", "drop", "add", "-s", "*", "-d", "*", "-r", "1", "-i", "2"}, "either drop rate or interval"},
		{[]string{"fault", "drop", "add", "-d", "*", "-r", "1"}, "both source and destination"},
		{[]string{"fault", "delay", "add", "-s", "*", "-d", "*", "-r", "1"}, "latency cannot be zero"},
		{[]string{"fault", "drop", "add", "-s", "*", "-d", "*", "-r", "1", "-e", "bogus"}, "unknown health error"},
		{[]string{"fault", "delay", "add", "-s", "*", "-d", "*", "-r", "1", "-l", "1", "-e", "local_error"}, "drop rule options"},
		{[]string{"fault", "drop", "del", "-a", "-s", "*"}, "cannot be combined"},
		{[]string{"fault", "drop", "add", "-s", "*", "-d", "*", "-r", "1", "-p", "64"}, "invalid portal"},
	} {
		if code, _, errs := ctlRun(t, a.sock, c.args...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %q, want 2 and %q", c.args, code, errs, c.want)
		}
	}
	if code, _, errs := ctlRun(t, a.sock, "fault", "drop", "add", "-s", "*@nonet", "-d", "*", "-r", "1"); code != 1 || !strings.Contains(errs, "errno: -22") {
		t.Errorf("bad NID: %d %q", code, errs)
	}
	if code, _, errs := ctlRun(t, a.sock, "fault", "drop", "add", "-s", "*", "-d", "*", "-r", "1", "-p", "5", "-m", "ACK"); code != 1 || !strings.Contains(errs, "PUT and GET only") {
		t.Errorf("portal with ACK: %d %q", code, errs)
	}
}

// TestE2EDiscovery: discovery between two lnetd processes. B has a tcp
// and a tcp1 NI; A (tcp only) runs `lnetctl discover B`: both of B's
// NIDs, Multi-Rail; LNetPrimaryNID of B's tcp1 NID (which A cannot reach)
// is B's tcp NID. A pushed its buffer in that round, so B's own discover
// of A then pushes nothing new and lists A Multi-Rail; with discovery off
// on B, B's discover of A sends nothing and reports A as B knows it.
func TestE2EDiscovery(t *testing.T) {
	port := reservePort()
	ipA, ipB, ipB2 := testIP(), testIP(), testIP()
	a := startProc(t, "A", ipA, nodeYAML(ipA, port, "    discovery: 1\n"))
	b := startProc(t, "B", ipB, nodeYAML(ipB, port, "    discovery: 1\n"))
	b.ctl("net", "add", "--net", "tcp1", "--if", ipB2)
	b2 := ipB2 + "@tcp1"

	out := a.ctl("discover", b.nid)
	for _, want := range []string{"primary nid: " + b.nid, "Multi-Rail: True", "- nid: " + b.nid, "- nid: " + b2} {
		if !strings.Contains(out, want) {
			t.Fatalf("A discover B lacks %q:\n%s", want, out)
		}
	}
	if d := a.doc("discover", "--primary", b2); d.Path("primary_nid", 0, keyPrimaryNID) != b.nid {
		t.Fatalf("LNetPrimaryNID(%s) on A:\n%s", b2, YAML(d))
	}
	out = b.ctl("discover", a.nid)
	if !strings.Contains(out, "primary nid: "+a.nid) || !strings.Contains(out, "Multi-Rail: True") {
		t.Fatalf("B discover A:\n%s", out)
	}
	b.ctl("set", "discovery", "0")
	if d := b.doc("global", "show"); d.Path("global", "discovery") != int64(0) {
		t.Fatalf("global show:\n%s", YAML(d))
	}
	// A's view of B's buffer after B turned discovery off: B pushed it.
	res := a.doc("ping", b.nid)
	if res.Path("ping", 0, keyMultiRail) != true {
		t.Fatalf("A ping B:\n%s", YAML(res))
	}
}
