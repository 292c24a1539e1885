//go:build linux

package lnetd

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"softib/tools/lst"
)

// TestE2EO2IBThreeNodes runs three lnetd processes, each with a tcp and an
// o2ib NI (its own rxe device on its loopback address), and drives them
// over o2ib: lnetctl ping, verified 1 MiB echo PUT/GET, and `softib lst
// quick` brw write 1M, brw read 4K and ping with A's lnetd as the console
// (--socket: lst's own short-lived node speaks tcp only).
func TestE2EO2IBThreeNodes(t *testing.T) {
	port := reservePort()
	var nodes []*procNode
	for i := range 3 {
		ip := testIP()
		nodes = append(nodes, startProc(t, fmt.Sprintf("node%d", i), ip, o2ibNodeYAML(ip, port, "              concurrent_sends: 8\n")))
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	ib := func(n *procNode) string { return n.ip + "@o2ib" }
	for _, n := range nodes {
		d := n.doc("net", "show", "--net", "o2ib")
		if d.Path("net", 0, "net type") != "o2ib" || d.Path("net", 0, "local NI(s)", 0, "nid") != ib(n) ||
			d.Path("net", 0, "local NI(s)", 0, "status") != "up" {
			t.Fatalf("%s net show:\n%s", n.name, YAML(d))
		}
	}
	for _, to := range []*procNode{b, c} {
		if out := a.ctl("ping", ib(to)); !strings.Contains(out, ib(to)) {
			t.Errorf("ping %s:\n%s", ib(to), out)
		}
	}
	if code, out, errs := run(t, "lnet", "ping", "--socket", a.sock, ib(b)); code != 0 || !strings.Contains(out, ib(b)) {
		t.Errorf("lnet ping %s: exit %d\n%s%s", ib(b), code, out, errs)
	}
	// Echo test service over o2ib, verified by CRC at both ends.
	for i, size := range []int{4096, 1 << 20} {
		put := a.doc("test", "put", "--nid", ib(b), "--size", fmt.Sprint(size), "--bits", fmt.Sprint(i), "--seed", fmt.Sprint(40+i))
		p := put.Get("test put").(Map)
		if p.Get("ok") != int64(1) || p.Get("bytes") != int64(size) || !strings.Contains(eventTypes(p), "ACK") {
			t.Fatalf("put %d over o2ib:\n%s", size, YAML(put))
		}
		sl := b.doc("test", "show").Path("test service", "slots", i).(Map)
		if sl.Get("length") != int64(size) || sl.Get("crc32") != p.Get("crc32") {
			t.Fatalf("put %d over o2ib: receiver holds %s, sender crc %v", size, YAML(sl), p.Get("crc32"))
		}
		g := a.doc("test", "get", "--nid", ib(b), "--size", fmt.Sprint(size), "--bits", fmt.Sprint(i)).Get("test get").(Map)
		if g.Get("ok") != int64(1) || g.Get("crc32") != p.Get("crc32") || !strings.Contains(eventTypes(g), "REPLY") {
			t.Fatalf("get %d over o2ib:\n%s", size, YAML(g))
		}
	}
	to := ib(b) + "," + ib(c)
	for _, test := range [][]string{
		{"brw", "write", "size=1M", "check=full"},
		{"brw", "read", "size=4K", "check=full"},
		{"ping"},
	} {
		args := append([]string{"lst", "quick", "--socket", a.sock, "--from", ib(a), "--to", to,
			"--seconds", "2", "--delay", "1", "--json"}, test...)
		code, out, errs := run(t, args...)
		var res lst.QuickResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: exit %d, bad JSON %v:\n%s\n%s", test, code, err, out, errs)
		}
		if code != 0 || !res.OK || res.Errors != 0 || res.BRWErr != 0 || res.RPCs == 0 {
			t.Fatalf("%v: exit %d: %+v\n%s", test, code, res, errs)
		}
		t.Logf("lst quick over o2ib %v: %d RPCs, %.0f RPC/s, %.2f MiB/s", test, res.RPCs, res.RPCRate, res.MiBRate)
	}
}
