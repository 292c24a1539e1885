//go:build linux

package lnetd

import (
	"strings"
	"testing"
)

// TestRoutingCommands: lnetctl set routing / *_buffers reach the router
// (routing show), route add/del/show -v go to the core with Lustre's
// errors, and peer show -v carries the router credit columns.
func TestRoutingCommands(t *testing.T) {
	a := startInproc(t, testIP(), reservePort(), "")
	r := ctlDoc(t, a.sock, "routing", "show")
	if r.Path("routing", 1, "enable") != int64(0) || r.Path("routing", 0, "cpt[0]", "large", "nbuffers") != int64(1024) ||
		r.Path("buffers", "small") != int64(16384) {
		t.Fatalf("routing show (defaults):\n%s", YAML(r))
	}
	ctlOK(t, a.sock, "set", "routing", "1")
	ctlOK(t, a.sock, "set", "large_buffers", "10")
	r = ctlDoc(t, a.sock, "routing", "show")
	large := r.Path("routing", 0, "cpt[0]", "large").(Map)
	if r.Path("routing", 1, "enable") != int64(1) || large.Get("nbuffers") != int64(10) || large.Get("credits") != int64(10) ||
		large.Get("npages") != int64(256) {
		t.Fatalf("routing show after set:\n%s", YAML(r))
	}
	gw := a.ip[:strings.LastIndexByte(a.ip, '.')] + ".250@tcp"
	ctlOK(t, a.sock, "route", "add", "--net", "tcp9", "--gateway", gw, "--hop", "1", "--priority", "3")
	rs := ctlDoc(t, a.sock, "route", "show", "-v", "--net", "tcp9")
	// "multi-hop" until a ping reply lists an NI of the gateway on tcp9
	// (Lustre's lr_single_hop starts zeroed; none answers here).
	if rs.Path("route", 0, "gateway") != gw || rs.Path("route", 0, "hop") != int64(1) || rs.Path("route", 0, "priority") != int64(3) ||
		rs.Path("route", 0, "type") != "multi-hop" {
		t.Fatalf("route show -v:\n%s", YAML(rs))
	}
	// route show --priority filters as lnetctl's (0 is a priority too).
	for prio, want := range map[string]int{"3": 1, "0": 0} {
		if rs := ctlDoc(t, a.sock, "route", "show", "--priority", prio); len(rs.Get("route").(List)) != want {
			t.Errorf("route show --priority %s: want %d routes:\n%s", prio, want, YAML(rs))
		}
	}
	// Nobody answers at the gateway: the router checker's first ping
	// (sent at once) fails and the route goes down.
	waitUntil(t, "route down", func() bool {
		return ctlDoc(t, a.sock, "route", "show", "-v").Path("route", 0, "state") == "down"
	})
	if plain := ctlDoc(t, a.sock, "route", "show"); plain.Path("route", 0, "hop") != nil {
		t.Errorf("route show without -v prints details:\n%s", YAML(plain))
	}
	for _, c := range []struct {
		args  []string
		errno string
	}{
		{[]string{"route", "add", "--net", "tcp9", "--gateway", gw}, "errno: -17"},                 // exists
		{[]string{"route", "add", "--net", "tcp", "--gateway", "1.2.3.4@o2ib"}, "errno: -17"},      // local net
		{[]string{"route", "add", "--net", "tcp8", "--gateway", "1.2.3.4@o2ib"}, "errno: -113"},    // gateway not local
		{[]string{"route", "add", "--net", "tcp8", "--gateway", gw, "--hop", "300"}, "errno: -22"}, // hops
		{[]string{"route", "add", "--net", "tcp8", "--gateway", gw, "--hop", "0"}, "errno: -22"},   // hops
		{[]string{"route", "del", "--net", "tcp8", "--gateway", gw}, "errno: -2"},                  // no such route
	} {
		if code, _, errs := ctlRun(t, a.sock, c.args...); code != 1 || !strings.Contains(errs, c.errno) {
			t.Errorf("lnetctl %v: exit %d, want %s:\n%s", c.args, code, c.errno, errs)
		}
	}
	exp := ctlOK(t, a.sock, "export", "--backup")
	if !strings.Contains(exp, "gateway: "+gw) || !strings.Contains(exp, "large: 10") || !strings.Contains(exp, "enable: 1") {
		t.Errorf("export lacks the route or router settings:\n%s", exp)
	}
	// Options lnetctl's route del and add do not have are refused.
	for _, args := range [][]string{{"del", "--hop", "1"}, {"del", "--priority", "3"}, {"add", "-v"}} {
		argv := append([]string{"route", args[0], "--net", "tcp9", "--gateway", gw}, args[1:]...)
		if code, _, _ := ctlRun(t, a.sock, argv...); code == 0 {
			t.Errorf("lnetctl %v: exit 0, want a usage error", argv)
		}
	}
	ctlOK(t, a.sock, "route", "del", "--net", "tcp9", "--gateway", gw)
	if rs := ctlDoc(t, a.sock, "route", "show"); len(rs.Get("route").(List)) != 0 {
		t.Errorf("route left after del:\n%s", YAML(rs))
	}
	ctlOK(t, a.sock, "set", "routing", "0")
	if r := ctlDoc(t, a.sock, "routing", "show"); r.Path("routing", 1, "enable") != int64(0) {
		t.Errorf("routing still on:\n%s", YAML(r))
	}
}
