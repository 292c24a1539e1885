package lnetd

import (
	"strings"
	"testing"

	"softib/lnet"
)

// TestPeerHealthCommands: peer add/show -v/set/del and net set --health
// through lnetctl, with Lustre 2.17's keys and errnos; stats show has the
// health counters.
func TestPeerHealthCommands(t *testing.T) {
	a := startInproc(t, testIP(), reservePort(), "")
	ctlOK(t, a.sock, "peer", "add", "--prim_nid", "10.1.2.1@tcp", "--nid", "10.1.2.2@tcp,10.1.3.1@tcp1")
	p := ctlDoc(t, a.sock, "peer", "show", "-v", "--nid", "10.1.3.1@tcp1")
	state := int64(lnet.PeerConfigured | lnet.PeerMultiRail)
	if p.Path("peer", 0, keyPrimaryNID) != "10.1.2.1@tcp" || p.Path("peer", 0, keyMultiRail) != true ||
		p.Path("peer", 0, "peer state") != state || len(p.Path("peer", 0, keyPeerNI).(List)) != 3 ||
		p.Path("peer", 0, keyPeerNI, 1, "health stats", "health value") != int64(lnet.MaxHealthValue) ||
		p.Path("peer", 0, keyPeerNI, 1, "statistics", "send_count") != int64(0) {
		t.Fatalf("peer show -v:\n%s", YAML(p))
	}

	ctlOK(t, a.sock, "peer", "set", "--nid", "10.1.2.2@tcp", "--health", "300")
	p = ctlDoc(t, a.sock, "peer", "show", "-v", "--nid", "10.1.2.1@tcp")
	if p.Path("peer", 0, keyPeerNI, 1, "health stats", "health value") != int64(300) {
		t.Errorf("after peer set --health 300:\n%s", YAML(p))
	}
	ctlOK(t, a.sock, "net", "set", "--nid", a.nid, "--health", "500")
	n := ctlDoc(t, a.sock, "net", "show", "-v", "--net", "tcp")
	if n.Path("net", 0, keyLocalNIs, 0, "health stats", "health value") != int64(500) ||
		n.Path("net", 0, keyLocalNIs, 0, "health stats", "fatal_error") != int64(0) {
		t.Errorf("net show -v after net set --health 500:\n%s", YAML(n))
	}
	if code, _, errs := ctlRun(t, a.sock, "net", "set", "--nid", a.nid, "--health", "1001"); code != 1 || !strings.Contains(errs, "errno: -22") {
		t.Errorf("health 1001: %d %q", code, errs)
	}

	// Lustre's errnos: a non-MR peer has one NID per net (ENOTUNIQ); a NID
	// configured for another peer (EEXIST); the primary must be given
	// (ENODEV).
	for _, c := range []struct {
		args  []string
		errno string
	}{
		{[]string{"peer", "add", "--prim_nid", "10.1.4.1@tcp", "--nid", "10.1.4.2@tcp", "--non_mr"}, "errno: -76"},
		{[]string{"peer", "add", "--prim_nid", "10.1.5.1@tcp", "--nid", "10.1.2.2@tcp"}, "errno: -17"},
		{[]string{"peer", "del", "--prim_nid", "10.1.2.2@tcp"}, "errno: -19"},
	} {
		if code, _, errs := ctlRun(t, a.sock, c.args...); code != 1 || !strings.Contains(errs, c.errno) {
			t.Errorf("%v: %d %q, want %s", c.args, code, errs, c.errno)
		}
	}

	// Deleting one NID, then the peer.
	ctlOK(t, a.sock, "peer", "del", "--prim_nid", "10.1.2.1@tcp", "--nid", "10.1.3.1@tcp1")
	if p := ctlDoc(t, a.sock, "peer", "show", "--nid", "10.1.2.1@tcp"); len(p.Path("peer", 0, keyPeerNI).(List)) != 2 {
		t.Errorf("after deleting one NID:\n%s", YAML(p))
	}
	if e := ctlDoc(t, a.sock, "export"); len(e.Path("peer", 0, keyPeerNI).(List)) != 2 {
		t.Errorf("export after deleting one NID:\n%s", YAML(e))
	}
	ctlOK(t, a.sock, "peer", "del", "--prim_nid", "10.1.2.1@tcp")
	if code, _, errs := ctlRun(t, a.sock, "peer", "show", "--nid", "10.1.2.2@tcp"); code != 1 || !strings.Contains(errs, "errno: -2") {
		t.Errorf("peer show after del: %d %q", code, errs)
	}

	s := ctlOK(t, a.sock, "stats", "show")
	for _, k := range []string{"rst_alloc:", "resend_count:", "response_timeout_count:", "local_dropped_count:",
		"remote_dropped_count:", "network_timeout_count:", "failed_resends:", "successful_resends:"} {
		if !strings.Contains(s, k) {
			t.Errorf("stats show lacks %s:\n%s", k, s)
		}
	}

	// The health globals reach the core.
	ctlOK(t, a.sock, "set", "retry_count", "5")
	ctlOK(t, a.sock, "set", "health_sensitivity", "7")
	ctlOK(t, a.sock, "set", "recovery_limit", "60")
	if g := a.d.Instance().Globals(); g.RetryCount != 5 || g.HealthSensitivity != 7 || g.RecoveryLimit.Seconds() != 60 {
		t.Errorf("globals %+v", g)
	}
}

// TestUDSPCommands: lnetctl udsp add/show/del with liblnetconfig's keys.
func TestUDSPCommands(t *testing.T) {
	a := startInproc(t, testIP(), reservePort(), "")
	ctlOK(t, a.sock, "udsp", "add", "--src", "tcp", "--priority", "3")
	ctlOK(t, a.sock, "udsp", "add", "--dst", "10.1.9.[1-3]@tcp", "--priority", "0", "--idx", "0")
	u := ctlDoc(t, a.sock, "udsp", "show")
	if u.Path("udsp", 0, "dst") != "10.1.9.[1-3]@tcp" || u.Path("udsp", 1, "src") != "tcp" ||
		u.Path("udsp", 1, "action", "priority") != int64(3) || u.Path("udsp", 1, "idx") != int64(1) {
		t.Fatalf("udsp show:\n%s", YAML(u))
	}
	// Router rules as lnetctl parses them: --dst and --rte without a
	// priority (a preferred-router list, shown without an action); --rte
	// alone, with --src, or with --priority is refused.
	for _, bad := range [][]string{
		{"--rte", "10.1.9.1@tcp"},
		{"--src", "tcp", "--rte", "10.1.9.1@tcp"},
		{"--dst", "tcp1", "--rte", "10.1.9.1@tcp", "--priority", "1"},
	} {
		if code, _, errs := ctlRun(t, a.sock, append([]string{"udsp", "add"}, bad...)...); code != 1 || !strings.Contains(errs, "errno: -22") {
			t.Errorf("udsp add %v: %d %q", bad, code, errs)
		}
	}
	ctlOK(t, a.sock, "udsp", "add", "--dst", "*@tcp1", "--rte", "10.1.9.1@tcp")
	// --dst without --priority: priority 0, as lnetctl.
	ctlOK(t, a.sock, "udsp", "add", "--dst", "tcp2")
	u = ctlDoc(t, a.sock, "udsp", "show")
	if u.Path("udsp", 2, "dst") != "*@tcp1" || u.Path("udsp", 2, "rte") != "10.1.9.1@tcp" || u.Path("udsp", 2, "action") != nil ||
		u.Path("udsp", 3, "action", "priority") != int64(0) {
		t.Fatalf("udsp show with a router rule:\n%s", YAML(u))
	}
	ctlOK(t, a.sock, "udsp", "del", "--idx", "3")
	ctlOK(t, a.sock, "udsp", "del", "--idx", "2")
	ctlOK(t, a.sock, "udsp", "del", "--idx", "0")
	if u := ctlDoc(t, a.sock, "udsp", "show"); u.Path("udsp", 0, "src") != "tcp" {
		t.Errorf("after del --idx 0:\n%s", YAML(u))
	}
	ctlOK(t, a.sock, "udsp", "del", "--all")
	if code, _, errs := ctlRun(t, a.sock, "udsp", "show", "--idx", "0"); code != 1 || !strings.Contains(errs, "errno: -2") {
		t.Errorf("show of a deleted rule: %d %q", code, errs)
	}
}
