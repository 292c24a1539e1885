//go:build linux

package lnetd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/internal/testenv"
	"softib/tools/lst"
)

// Issue #12's multi-process routing list: lnetd processes in network
// namespaces on two subnets (each subnet a bridge in a hub namespace),
// one or two of them routers with an NI on each subnet. The router
// checker runs with 2 s intervals and a 2 s ping timeout so that failover
// and recovery happen within seconds; every wait is bounded by hangGuard
// (a hang guard, never a timing assertion) unless the test measures the
// configured times.

const (
	rtPingTimeout = 2 // router_ping_timeout, seconds
	rtCheck       = 2 // live/dead_router_check_interval, seconds
)

var rtSeq atomic.Uint32

// rtTopo is a set of namespaces attached to numbered subnets
// 10.213.<s>.0/24.
type rtTopo struct {
	t    *testing.T
	id   string
	hubs map[int]string
	n    int
	// maxReconnectMS, if set, is every tcp NI's max_reconnectms.
	maxReconnectMS int
}

func newRtTopo(t *testing.T) *rtTopo {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	t.Parallel()
	return &rtTopo{t: t, id: fmt.Sprintf("%d%c", os.Getpid()%100000, 'a'+rune(rtSeq.Add(1)%26)), hubs: map[int]string{}}
}

func (tp *rtTopo) ip(args ...string) {
	tp.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		tp.t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

func (tp *rtTopo) addNS(name string) {
	tp.t.Helper()
	tp.ip("netns", "add", name)
	tp.t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	tp.ip("-n", name, "link", "set", "lo", "up")
}

// hub returns subnet s's bridge namespace, creating it.
func (tp *rtTopo) hub(s int) string {
	if h, ok := tp.hubs[s]; ok {
		return h
	}
	h := fmt.Sprintf("softib-rt%s-h%d", tp.id, s)
	tp.addNS(h)
	tp.ip("-n", h, "link", "add", "br0", "type", "bridge")
	tp.ip("-n", h, "link", "set", "br0", "up")
	tp.hubs[s] = h
	return h
}

// node creates a namespace with one interface on each subnet given, host
// address host; it returns the namespace and the addresses (in order).
func (tp *rtTopo) node(host int, subnets ...int) (string, []string) {
	tp.n++
	ns := fmt.Sprintf("softib-rt%s-%d", tp.id, tp.n)
	tp.addNS(ns)
	var addrs []string
	for _, s := range subnets {
		dev := fmt.Sprintf("r%sn%ds%d", tp.id, tp.n, s)
		hdev := fmt.Sprintf("r%sh%ds%d", tp.id, tp.n, s)
		hub := tp.hub(s)
		tp.ip("link", "add", dev, "netns", ns, "type", "veth", "peer", "name", hdev, "netns", hub)
		tp.ip("-n", hub, "link", "set", hdev, "master", "br0", "up")
		addr := fmt.Sprintf("10.213.%d.%d", s, host)
		tp.ip("-n", ns, "addr", "add", addr+"/24", "dev", dev)
		tp.ip("-n", ns, "link", "set", dev, "up")
		addrs = append(addrs, addr)
	}
	return ns, addrs
}

// rtNI is one NI of a node: net type and interface address.
type rtNI struct{ net, addr string }

func (ni rtNI) nid() string { return ni.addr + "@" + ni.net }

// rtRoute is a "route:" entry.
func rtRoute(net string, gw rtNI) string {
	return fmt.Sprintf("    - net: %s\n      gateway: %s\n      hop: 1\n", net, gw.nid())
}

// rtYAML is a node's configuration: its NIs, routes, routing switch and
// extra top-level sections.
// A non-zero maxReconnectMS is the tcp NIs' max_reconnectms.
func rtYAML(nis []rtNI, routes string, routing bool, extra string, maxReconnectMS int) string {
	var b strings.Builder
	b.WriteString("net:\n")
	for _, ni := range nis {
		fmt.Fprintf(&b, "    - net type: %s\n      local NI(s):\n        - interfaces:\n              0: %s\n", ni.net, ni.addr)
		if maxReconnectMS > 0 && strings.HasPrefix(ni.net, "tcp") {
			fmt.Fprintf(&b, "          lnd tunables:\n              max_reconnectms: %d\n", maxReconnectMS)
		}
	}
	if routes != "" {
		b.WriteString("route:\n" + routes)
	}
	pingTimeout := rtPingTimeout
	if routing {
		b.WriteString("routing:\n    enable: 1\n")
		// A router reports an NI down when no ping came on it for its
		// router_ping_timeout + live interval: leave room for pings
		// delayed on a loaded machine.
		pingTimeout = 10
	}
	fmt.Fprintf(&b, `global:
    accept_port: 988
    accept: all
    transaction_timeout: 20
    router_ping_timeout: %d
    live_router_check_interval: %d
    dead_router_check_interval: %d
`, pingTimeout, rtCheck, rtCheck)
	b.WriteString(extra)
	return b.String()
}

// start runs lnetd in ns.
func (tp *rtTopo) start(name, ns string, nis []rtNI, routes string, routing bool, extra string) *procNode {
	tp.t.Helper()
	n := startProc(tp.t, name, nis[0].addr, rtYAML(nis, routes, routing, extra, tp.maxReconnectMS), "ip", "netns", "exec", ns)
	n.nid = nis[0].nid()
	return n
}

// routeStates returns gateway → state of n's routes to net (route show -v).
func routeStates(n *procNode, net string) map[string]string {
	out := map[string]string{}
	rs, _ := n.doc("route", "show", "-v").Get("route").(List)
	for _, r := range rs {
		m := r.(Map)
		if m.Get("net") == net {
			out[m.Get("gateway").(string)] = m.Get("state").(string)
		}
	}
	return out
}

// rtWatch names routes of a node: those to net through gws.
type rtWatch struct {
	n   *procNode
	net string
	gws []rtNI
}

// waitRoutesSince waits until each watch's routes are all in state and
// returns, per watch, the time from t0 to the end of the first query that
// showed them so (an upper bound of when they changed). The nodes are
// polled together: one after the other, the second would be charged with
// the wait for the first.
func waitRoutesSince(t *testing.T, t0 time.Time, state string, ws ...rtWatch) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(ws))
	waitUntil(t, "routes "+state, func() bool {
		all := true
		for i, w := range ws {
			if took[i] > 0 {
				continue
			}
			if routesIn(w.n, w.net, state, w.gws) {
				took[i] = time.Since(t0)
			} else {
				all = false
			}
		}
		return all
	})
	return took
}

// waitRoutes waits until n's routes to net through gws are all in state.
func waitRoutes(t *testing.T, n *procNode, net, state string, gws ...rtNI) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%s: routes to %s %s", n.name, net, state), func() bool {
		return routesIn(n, net, state, gws)
	})
}

// routesIn reports whether n's routes to net through gws are all in state.
func routesIn(n *procNode, net, state string, gws []rtNI) bool {
	st := routeStates(n, net)
	for _, g := range gws {
		if st[g.nid()] != state {
			return false
		}
	}
	return true
}

// lstQuick runs `softib lst quick` with n's lnetd as console.
func lstQuick(t *testing.T, n *procNode, from, to string, conc int, seconds float64, test ...string) (int, lst.QuickResult, string) {
	t.Helper()
	// --force: a run cut short by a dead router may leave its session on
	// the nodes until its RPCs time out.
	args := append([]string{"lst", "quick", "--force", "--socket", n.sock, "--from", from, "--to", to,
		"--concurrency", fmt.Sprint(conc), "--seconds", fmt.Sprint(seconds), "--delay", "1", "--json"}, test...)
	code, out, errs := run(t, args...)
	var res lst.QuickResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("lst %v: exit %d, bad JSON %v:\n%s\n%s", test, code, err, out, errs)
	}
	return code, res, errs
}

// lstClean runs lst quick and requires every RPC to succeed with its
// data verified.
func lstClean(t *testing.T, n *procNode, from, to string, conc int, test ...string) lst.QuickResult {
	t.Helper()
	code, res, errs := lstQuick(t, n, from, to, conc, 2, test...)
	if code != 0 || !res.OK || res.Errors != 0 || res.BRWErr != 0 || res.RPCs == 0 {
		t.Fatalf("lst %v %s→%s: exit %d: %+v\n%s", test, from, to, code, res, errs)
	}
	t.Logf("lst %v %s→%s: %d RPCs, %.0f RPC/s, %.1f MiB/s", test, from, to, res.RPCs, res.RPCRate, res.MiBRate)
	return res
}

// putGetVia PUTs and GETs size bytes from a to the echo service of the
// node whose NID is to, checking the CRCs (xfer's test put/get).
func putGetVia(t *testing.T, from, to *procNode, toNID string, size, slot, seed int) {
	t.Helper()
	code, p, errs := xfer(t, from, "put", toNID, size, slot, seed, 30*time.Second)
	if code != 0 || p.Get("ok") != int64(1) || !strings.Contains(eventTypes(p), "ACK") {
		t.Fatalf("%s→%s put %d: exit %d\n%s%s", from.name, toNID, size, code, YAML(p), errs)
	}
	if n, crc := slotCRC(t, to, slot); n != int64(size) || crc != p.Get("crc32") {
		t.Fatalf("%s→%s put %d: receiver holds %d B crc %v, sender crc %v", from.name, toNID, size, n, crc, p.Get("crc32"))
	}
	code, g, errs := xfer(t, from, "get", toNID, size, slot, 0, 30*time.Second)
	if code != 0 || g.Get("ok") != int64(1) || g.Get("crc32") != p.Get("crc32") || !strings.Contains(eventTypes(g), "REPLY") {
		t.Fatalf("%s→%s get %d: exit %d\n%s%s", from.name, toNID, size, code, YAML(g), errs)
	}
}

// routeCount is n's route_count.
func routeCount(n *procNode) int64 {
	v, _ := n.doc("stats", "show").Path("statistics", "route_count").(int64)
	return v
}

// checkPoolsIdle checks a router's pools are back to full with the
// low-water mark of pool name below minBelow (if minBelow > 0).
func checkPoolsIdle(t *testing.T, r *procNode) Map {
	t.Helper()
	var cpt Map
	waitUntil(t, r.name+" router buffers back", func() bool {
		cpt = r.doc("routing", "show").Path("routing", 0, "cpt[0]").(Map)
		for _, pool := range []string{"tiny", "small", "large"} {
			p := cpt.Get(pool).(Map)
			if p.Get("credits") != p.Get("nbuffers") {
				return false
			}
		}
		return true
	})
	return cpt
}

// rtTrio is A (net an) — R — B (net bn) on two subnets.
func rtTrio(t *testing.T, an, bn string, extraR string) (a, r, b *procNode, aNI, rA, rB, bNI rtNI) {
	tp := newRtTopo(t)
	nsA, ipA := tp.node(1, 1)
	nsR, ipR := tp.node(2, 1, 2)
	nsB, ipB := tp.node(3, 2)
	aNI, rA, rB, bNI = rtNI{an, ipA[0]}, rtNI{an, ipR[0]}, rtNI{bn, ipR[1]}, rtNI{bn, ipB[0]}
	r = tp.start("R", nsR, []rtNI{rA, rB}, "", true, extraR)
	a = tp.start("A", nsA, []rtNI{aNI}, rtRoute(bn, rA), false, "")
	b = tp.start("B", nsB, []rtNI{bNI}, rtRoute(an, rB), false, "")
	waitRoutes(t, a, bn, "up", rA)
	waitRoutes(t, b, an, "up", rB)
	return
}

// TestE2ERouteTCPToTCP1: three lnetd processes, A on tcp, B on tcp1, R
// routing between them: lnetctl ping both ways, PUT/GET of every buffer
// class with verified CRCs, lst brw 1 MiB check=full write and read;
// R's route_count grows and its buffers all come back.
func TestE2ERouteTCPToTCP1(t *testing.T) {
	a, r, b, aNI, _, _, bNI := rtTrio(t, "tcp", "tcp1", "")
	if out := a.ctl("ping", bNI.nid(), "--timeout", "10s"); !strings.Contains(out, bNI.nid()) {
		t.Fatalf("ping B through R:\n%s", out)
	}
	if out := b.ctl("ping", aNI.nid(), "--timeout", "10s"); !strings.Contains(out, aNI.nid()) {
		t.Fatalf("ping A through R:\n%s", out)
	}
	for i, size := range []int{0, 100, 4096, 4097, 1 << 20} {
		putGetVia(t, a, b, bNI.nid(), size, i%4, i+1)
	}
	before := routeCount(r)
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "read", "size=1M", "check=full")
	lstClean(t, b, bNI.nid(), aNI.nid(), 4, "ping")
	if after := routeCount(r); after <= before {
		t.Fatalf("R route_count %d → %d", before, after)
	}
	// The 1 MiB payloads went through R's pipes (splice), data verified
	// by check=full and the CRCs above.
	if rx, tx, fb := spliced(r); rx == 0 || tx == 0 {
		t.Errorf("R spliced %d payloads in, %d out (%d fallbacks)", rx, tx, fb)
	}
	cpt := checkPoolsIdle(t, r)
	t.Logf("R routing show cpt[0]: %s", JSON(cpt))
	p := r.doc("peer", "show", "-v", "--nid", aNI.nid()).Path("peer", 0, keyPeerNI, 0).(Map)
	if p.Get("available_rtr_credits") != p.Get("max_ni_tx_credits") && p.Get("available_rtr_credits") != int64(8) {
		t.Errorf("R's router credits for A not back:\n%s", YAML(p))
	}
}

// TestE2ERouteTCPToO2IB: a softib router between tcp (socklnd) and o2ib
// (o2iblnd over soft-RoCE): ping and lst brw 1 MiB check=full both ways.
func TestE2ERouteTCPToO2IB(t *testing.T) {
	a, r, b, aNI, _, _, bNI := rtTrio(t, "tcp", "o2ib", "")
	a.ctl("ping", bNI.nid(), "--timeout", "10s")
	b.ctl("ping", aNI.nid(), "--timeout", "10s")
	putGetVia(t, a, b, bNI.nid(), 1<<20, 0, 1)
	putGetVia(t, b, a, aNI.nid(), 1<<20, 1, 2)
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "read", "size=1M", "check=full")
	lstClean(t, b, bNI.nid(), aNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	if routeCount(r) == 0 {
		t.Fatal("R forwarded nothing")
	}
	checkPoolsIdle(t, r)
}

// TestE2ERouterBufferExhaustion: 64 concurrent 1 MiB brw writes through a
// router with 4 large buffers and 4 router credits per peer: messages
// wait for buffers (mincredits negative), none is dropped (no error, data
// verified), and every buffer and credit comes back.
func TestE2ERouterBufferExhaustion(t *testing.T) {
	extra := "buffers:\n    tiny: 512\n    small: 512\n    large: 4\n"
	a, r, b, aNI, _, _, bNI := rtTrio(t, "tcp", "tcp1", extra)
	_ = b
	lstClean(t, a, aNI.nid(), bNI.nid(), 64, "brw", "write", "size=1M", "check=full")
	cpt := checkPoolsIdle(t, r)
	large := cpt.Get("large").(Map)
	if large.Get("nbuffers") != int64(4) {
		t.Fatalf("large pool %s", JSON(large))
	}
	if m, _ := large.Get("mincredits").(int64); m >= 0 {
		t.Errorf("large pool never ran short: %s", JSON(large))
	}
	st := r.doc("stats", "show").Get("statistics").(Map)
	if st.Get("drop_count") != int64(0) {
		t.Errorf("R dropped messages: %s", JSON(st))
	}
	t.Logf("R large pool after 64×1 MiB: %s; stats %s", JSON(large), JSON(st))
}

// TestE2ERouteFailover: two parallel gateways between tcp and tcp1. Kill
// one during traffic: transfers either complete with verified data or
// fail with an error (none is reported delivered when it was not);
// within the configured times the routes through it are down and traffic
// flows through the other; restarted, its routes come back up and carry
// traffic again.
//
// The configured times are bounds in wall time (issue #12: failover
// "within the configured times"), checked with a margin that a loaded
// machine cannot eat for any reason but a bug: each is measured from the
// event itself (the router's process reaped; the restarted router
// ready), on the nodes polled together; it allows one check interval more
// than the configuration needs (a check due while the machine is busy may
// run late) and 2 s for the polling (each poll runs lnetctl processes);
// and socklnd's reconnect backoff, which would grow with the time R1 is
// down (with the machine's load) up to max_reconnectms' default 60 s, is
// capped by max_reconnectms.
func TestE2ERouteFailover(t *testing.T) {
	const maxReconnect = 2 * time.Second // max_reconnectms
	tp := newRtTopo(t)
	tp.maxReconnectMS = int(maxReconnect / time.Millisecond)
	nsA, ipA := tp.node(1, 1)
	nsR1, ipR1 := tp.node(2, 1, 2)
	nsR2, ipR2 := tp.node(3, 1, 2)
	nsB, ipB := tp.node(4, 2)
	aNI, bNI := rtNI{"tcp", ipA[0]}, rtNI{"tcp1", ipB[0]}
	r1A, r1B := rtNI{"tcp", ipR1[0]}, rtNI{"tcp1", ipR1[1]}
	r2A, r2B := rtNI{"tcp", ipR2[0]}, rtNI{"tcp1", ipR2[1]}
	r1 := tp.start("R1", nsR1, []rtNI{r1A, r1B}, "", true, "")
	r2 := tp.start("R2", nsR2, []rtNI{r2A, r2B}, "", true, "")
	a := tp.start("A", nsA, []rtNI{aNI}, rtRoute("tcp1", r1A)+rtRoute("tcp1", r2A), false, "")
	b := tp.start("B", nsB, []rtNI{bNI}, rtRoute("tcp", r1B)+rtRoute("tcp", r2B), false, "")
	waitRoutes(t, a, "tcp1", "up", r1A, r2A)
	waitRoutes(t, b, "tcp", "up", r1B, r2B)

	// Both gateways carry traffic (round robin among equals).
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	if routeCount(r1) == 0 || routeCount(r2) == 0 {
		t.Fatalf("round robin: R1 forwarded %d, R2 %d", routeCount(r1), routeCount(r2))
	}

	// Traffic during the kill: lst brw with full checks, and echo PUTs
	// whose success must mean the data is there.
	var wg sync.WaitGroup
	var lstRes lst.QuickResult
	var lstCode int
	before1 := routeCount(r1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		lstCode, lstRes, _ = lstQuick(t, a, aNI.nid(), bNI.nid(), 8, 6, "brw", "write", "size=1M", "check=full")
	}()
	// Kill R1 once the run's traffic goes through it.
	waitUntil(t, "lst traffic through R1", func() bool { return routeCount(r1) > before1 })
	r1.kill() // returns once the process is reaped: its sockets are closed
	killed := time.Now()
	// The routes through R1 go down within the configured times: at once
	// when the LNDs see the connections die, at the latest after a live
	// interval plus the ping timeout (a ping sent just before the kill
	// was answered; the next, a live interval later, times out).
	down := waitRoutesSince(t, killed, "down", rtWatch{a, "tcp1", []rtNI{r1A}}, rtWatch{b, "tcp", []rtNI{r1B}})
	t.Logf("routes through R1 down %v (A) and %v (B) after the kill", down[0], down[1])
	if limit := time.Duration(rtCheck+rtPingTimeout+rtCheck+2) * time.Second; down[0] > limit || down[1] > limit {
		t.Errorf("routes through R1 went down after %v/%v: configured %d s live interval + %d s ping timeout, limit %v",
			down[0], down[1], rtCheck, rtPingTimeout, limit)
	}
	// Echo PUTs meanwhile: each either completes with the data in place
	// or fails with an error event; after failover they all go via R2.
	var ok, failed int
	for i := 0; time.Since(killed) < 5*time.Second; i++ {
		code, p, _ := xfer(t, a, "put", bNI.nid(), 1<<20, i%4, 100+i, 10*time.Second)
		if code == 0 && p.Get("ok") == int64(1) {
			ok++
			if n, crc := slotCRC(t, b, i%4); n != 1<<20 || crc != p.Get("crc32") {
				t.Fatalf("PUT %d reported delivered, B holds %d B crc %v (sent %v)", i, n, crc, p.Get("crc32"))
			}
		} else {
			failedWithEvent(t, fmt.Sprintf("PUT %d during failover", i), code, p)
			failed++
		}
	}
	wg.Wait()
	// RPCs lost inside R1 fail (after their timeouts); data mismatches
	// are never allowed.
	t.Logf("during the kill: lst exit %d, %d RPCs, errors %d, brw errors %d, problems %v; echo PUTs ok %d failed %d",
		lstCode, lstRes.RPCs, lstRes.Errors, lstRes.BRWErr, lstRes.Problems, ok, failed)
	for _, p := range lstRes.Problems {
		if strings.Contains(p, "mismatch") || strings.Contains(p, "corrupt") {
			t.Fatalf("lst saw bad data: %v", lstRes.Problems)
		}
	}
	if ok == 0 {
		t.Fatal("no PUT got through after the failover")
	}
	before2 := routeCount(r2)
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "read", "size=1M", "check=full")
	if routeCount(r2) <= before2 {
		t.Fatal("R2 did not carry the traffic")
	}
	for i := range 4 {
		putGetVia(t, a, b, bNI.nid(), 1<<20, i, 200+i)
	}

	// Restart R1: its routes come back within the configured times. The
	// ping that finds it again waits for socklnd's reconnect backoff (the
	// last refused connect before R1 listened again, plus at most
	// max_reconnectms), then for the checker's next ping (a dead-router
	// interval later) and its reply (within the ping timeout).
	r1.start() // returns once R1 is ready: its acceptor listens
	restarted := time.Now()
	up := waitRoutesSince(t, restarted, "up", rtWatch{a, "tcp1", []rtNI{r1A, r2A}}, rtWatch{b, "tcp", []rtNI{r1B, r2B}})
	t.Logf("routes through R1 up %v (A) and %v (B) after its restart", up[0], up[1])
	if limit := maxReconnect + time.Duration(rtCheck+rtPingTimeout+rtCheck+2)*time.Second; up[0] > limit || up[1] > limit {
		t.Errorf("routes through R1 came back after %v/%v: configured max_reconnectms %v + %d s dead interval + %d s ping timeout, limit %v",
			up[0], up[1], maxReconnect, rtCheck, rtPingTimeout, limit)
	}
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	if routeCount(r1) == 0 {
		t.Fatal("restarted R1 carries no traffic")
	}
}

// TestE2ERoutePerf measures lst brw 1 MiB (write and read) through a
// softib router (tcp → tcp1) against the same between two nodes on one
// subnet (tcp), alternating, and logs the medians, their ratio (the
// issue's ≥ 0.8× goal; not asserted: the machine is shared), the load
// average, and the CPU time per MiB moved: of each lnetd process (client
// A, and server C direct; A, router R and server B routed) and their sum,
// and of the whole machine (/proc/stat, which counts the kernel's TCP
// work in softirqs too). SOFTIB_ROUTE_PERF_ROUNDS sets
// the rounds (default 1; BENCHMARKS.md takes medians of more),
// SOFTIB_ROUTE_PERF_SECONDS each run's length (default 2),
// SOFTIB_ROUTE_PERF_ROUTER_CPU=N puts the router alone on CPU N. Each
// round also streams bare TCP on the same links, direct and through a
// splicing relay (tcpfloor_test.go): the second hop's own cost.
func TestE2ERoutePerf(t *testing.T) {
	tp := newRtTopo(t)
	nsA, ipA := tp.node(1, 1)
	nsR, ipR := tp.node(2, 1, 2)
	nsB, ipB := tp.node(3, 2)
	nsC, ipC := tp.node(4, 1)
	aNI, rA, rB, bNI, cNI := rtNI{"tcp", ipA[0]}, rtNI{"tcp", ipR[0]}, rtNI{"tcp1", ipR[1]}, rtNI{"tcp1", ipB[0]}, rtNI{"tcp", ipC[0]}
	r := tp.start("R", nsR, []rtNI{rA, rB}, "", true, "")
	a := tp.start("A", nsA, []rtNI{aNI}, rtRoute("tcp1", rA), false, "")
	b := tp.start("B", nsB, []rtNI{bNI}, rtRoute("tcp", rB), false, "")
	c := tp.start("C", nsC, []rtNI{cNI}, "", false, "")
	waitRoutes(t, a, "tcp1", "up", rA)
	waitRoutes(t, b, "tcp", "up", rB)
	t.Logf("pids: A %d, R %d, B %d, C %d", a.cmd.Process.Pid, r.cmd.Process.Pid, b.cmd.Process.Pid, c.cmd.Process.Pid)
	rounds, seconds := envInt("SOFTIB_ROUTE_PERF_ROUNDS", 1), envInt("SOFTIB_ROUTE_PERF_SECONDS", 2)
	if cpu := os.Getenv("SOFTIB_ROUTE_PERF_ROUTER_CPU"); cpu != "" {
		// The router on a core of its own, the end nodes on the others:
		// what a router with its own CPU forwards of what the end nodes
		// move direct (the bare floor's processes stay unpinned).
		others := cpusExcept(t, cpu)
		for _, p := range []*procNode{r, a, b, c} {
			set := others
			if p == r {
				set = cpu
			}
			if out, err := exec.Command("taskset", "-a", "-p", "-c", set, strconv.Itoa(p.cmd.Process.Pid)).CombinedOutput(); err != nil {
				t.Fatalf("taskset %s %s: %v\n%s", set, p.name, err, out)
			}
		}
		t.Logf("pinned: R on CPU %s, A, B, C on CPUs %s", cpu, others)
	}
	// The bare TCP floor (tcpfloor_test.go) on the same links.
	sinkC := startFloor(t, nsC, "sink", ipC[0])
	relayR := startFloor(t, nsR, "relay", ipR[0], startFloor(t, nsB, "sink", ipB[0]))
	var floor [2][]floorSample // [relayed]
	runFloors := func() {
		for i, to := range []string{sinkC, relayR} {
			f := runFloor(t, nsA, to, time.Duration(seconds)*time.Second)
			floor[i] = append(floor[i], f)
			t.Logf("bare TCP stream %s: %.0f MiB/s, host CPU %.2f ms/MiB (load %s)",
				[]string{"direct A→C", "A→R→B through a splicing relay"}[i], f.mib, f.host, loadAvg())
		}
	}

	// sample is one run: MiB/s and CPU ms per MiB moved of each lnetd
	// (direct: A, C; routed: A, R, B) and of the host.
	type sample struct {
		mib     float64
		cpu     []float64 // per process, in the order of names
		cpuHost float64
	}
	names := [2][]string{{"A", "C"}, {"A", "R", "B"}}
	var samples [2][2][]sample // [routed][read]
	run := func(routed, read bool) {
		to, procs := cNI.nid(), []*procNode{a, c}
		if routed {
			to, procs = bNI.nid(), []*procNode{a, r, b}
		}
		op := "write"
		if read {
			op = "read"
		}
		p0, h0 := procCPUs(t, procs...), hostCPU(t)
		code, res, errs := lstQuick(t, a, aNI.nid(), to, 8, float64(seconds), "brw", op, "size=1M", "check=simple")
		p1, h1 := procCPUs(t, procs...), hostCPU(t)
		if code != 0 || !res.OK || res.Errors != 0 || res.BRWErr != 0 || res.RPCs == 0 {
			t.Fatalf("lst brw %s → %s: exit %d: %+v\n%s", op, to, code, res, errs)
		}
		mib := res.MiBRate * res.Seconds
		s := sample{mib: res.MiBRate, cpuHost: (h1 - h0) / mib * 1e3}
		for i := range procs {
			s.cpu = append(s.cpu, (p1[i]-p0[i])/mib*1e3)
		}
		samples[b2i(routed)][b2i(read)] = append(samples[b2i(routed)][b2i(read)], s)
		t.Logf("brw %s 1 MiB %s: %.0f MiB/s, CPU ms/MiB: %s, host %.2f (load %s)",
			op, map[bool]string{false: "direct", true: "routed"}[routed], s.mib, cpuSplit(names[b2i(routed)], s.cpu), s.cpuHost, loadAvg())
	}
	for range rounds {
		for _, read := range []bool{false, true} {
			run(false, read)
			run(true, read)
		}
		runFloors()
	}
	rx, tx, fb := spliced(r)
	t.Logf("R spliced %d payloads in and %d out, %d fallbacks to copying", rx, tx, fb)
	med := medianOf[sample]
	for _, read := range []bool{false, true} {
		d, rt := samples[0][b2i(read)], samples[1][b2i(read)]
		mibD, mibR := med(d, func(s sample) float64 { return s.mib }), med(rt, func(s sample) float64 { return s.mib })
		medCPU := func(ss []sample) []float64 {
			v := make([]float64, len(ss[0].cpu))
			for i := range v {
				v[i] = med(ss, func(s sample) float64 { return s.cpu[i] })
			}
			return v
		}
		t.Logf("median of %d, lst brw %s 1 MiB, concurrency 8: direct tcp %.0f MiB/s, through a softib router tcp→tcp1 %.0f MiB/s: %.2f×; "+
			"CPU ms/MiB direct %s (host %.2f), routed %s (host %.2f); load %s",
			rounds, map[bool]string{false: "write", true: "read"}[read], mibD, mibR, mibR/mibD,
			cpuSplit(names[0], medCPU(d)), med(d, func(s sample) float64 { return s.cpuHost }),
			cpuSplit(names[1], medCPU(rt)), med(rt, func(s sample) float64 { return s.cpuHost }), loadAvg())
	}
	medF := medianOf[floorSample]
	fd, fr := floor[0], floor[1]
	mibFD, mibFR := medF(fd, func(s floorSample) float64 { return s.mib }), medF(fr, func(s floorSample) float64 { return s.mib })
	hostFD, hostFR := medF(fd, func(s floorSample) float64 { return s.host }), medF(fr, func(s floorSample) float64 { return s.host })
	hop := hostFR - hostFD
	if raceEnabled {
		t.Log("the bare TCP figures below come from this race-instrumented test binary: compare them only in a run without -race")
	}
	t.Logf("median of %d, bare TCP (no LNet, 2 streams of 1 MiB writes): direct %.0f MiB/s (host %.2f ms/MiB), through a splicing relay %.0f MiB/s (host %.2f): %.2f×; "+
		"the second hop alone costs the machine %.2f ms/MiB", rounds, mibFD, hostFD, mibFR, hostFR, mibFR/mibFD, hop)
	for _, read := range []bool{false, true} {
		d, rt := samples[0][b2i(read)], samples[1][b2i(read)]
		hostD, hostR := med(d, func(s sample) float64 { return s.cpuHost }), med(rt, func(s sample) float64 { return s.cpuHost })
		t.Logf("lst brw %s: the softib router adds %.2f host ms/MiB (bare hop %.2f); with the bare hop's cost only, CPU-bound: %.2f×",
			map[bool]string{false: "write", true: "read"}[read], hostR-hostD, hop, hostD/(hostD+hop))
	}
}

// cpusExcept is the machine's online CPUs but cpu, as a taskset list.
func cpusExcept(t *testing.T, cpu string) string {
	t.Helper()
	n, err := strconv.Atoi(cpu)
	if err != nil {
		t.Fatalf("SOFTIB_ROUTE_PERF_ROUTER_CPU=%q: want one CPU number", cpu)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var others []string
	for i := range 1024 {
		if i != n && set.IsSet(i) {
			others = append(others, strconv.Itoa(i))
		}
	}
	if !set.IsSet(n) || len(others) == 0 {
		t.Fatalf("SOFTIB_ROUTE_PERF_ROUTER_CPU=%d: not one of this process's CPUs, or no other CPU left", n)
	}
	return strings.Join(others, ",")
}

// medianOf is the median of f over ss.
func medianOf[T any](ss []T, f func(T) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// cpuSplit formats per-process CPU figures as BENCHMARKS.md's Routing
// tables do: "A 0.24 + R 0.20 + B 0.33 = 0.77".
func cpuSplit(names []string, v []float64) string {
	var b strings.Builder
	var sum float64
	for i, x := range v {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%s %.2f", names[i], x)
		sum += x
	}
	fmt.Fprintf(&b, " = %.2f", sum)
	return b.String()
}

// spliced sums n's socklnd counters of forwarded payloads moved through
// pipes (net show -v: spliced_rx, spliced_tx, splice_fallbacks).
func spliced(n *procNode) (rx, tx, fallbacks int64) {
	nets, _ := n.doc("net", "show", "-v").Get("net").(List)
	for _, x := range nets {
		nis, _ := x.(Map).Get(keyLocalNIs).(List)
		for _, ni := range nis {
			st, _ := ni.(Map).Get("lnd statistics").(Map)
			v, _ := st.Get("spliced_rx").(int64)
			w, _ := st.Get("spliced_tx").(int64)
			f, _ := st.Get("splice_fallbacks").(int64)
			rx, tx, fallbacks = rx+v, tx+w, fallbacks+f
		}
	}
	return
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// envInt is the positive integer in environment variable name, else def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// procCPUs is the user+system CPU seconds each process has used
// (/proc/PID/stat utime, stime).
func procCPUs(t *testing.T, ns ...*procNode) []float64 {
	t.Helper()
	out := make([]float64, len(ns))
	for i, n := range ns {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		// Fields after the parenthesised command name; utime and stime
		// are fields 14 and 15 of the whole line.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[i] = (ut + st) / clkTck
	}
	return out
}

// clkTck is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clkTck = 100

// hostCPU is the machine's busy CPU seconds (/proc/stat: all but idle
// and iowait).
func hostCPU(t *testing.T) float64 {
	t.Helper()
	busy, err := procStatBusy()
	if err != nil {
		t.Fatal(err)
	}
	return busy
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestE2ERouteChain: four lnetd processes on three subnets, A (tcp) —
// R1 (tcp, tcp1) — R2 (tcp1, tcp2) — B (tcp2): every message crosses two
// routers (R1 reaches tcp2 through R2 as an endpoint would). ping both
// ways, PUT/GET with CRCs, lst brw 1 MiB check=full write and read; both
// routers count the traffic, splice the 1 MiB payloads, and get every
// buffer back.
func TestE2ERouteChain(t *testing.T) {
	tp := newRtTopo(t)
	nsA, ipA := tp.node(1, 1)
	nsR1, ipR1 := tp.node(2, 1, 2)
	nsR2, ipR2 := tp.node(3, 2, 3)
	nsB, ipB := tp.node(4, 3)
	aNI, r1A, r1B := rtNI{"tcp", ipA[0]}, rtNI{"tcp", ipR1[0]}, rtNI{"tcp1", ipR1[1]}
	r2A, r2B, bNI := rtNI{"tcp1", ipR2[0]}, rtNI{"tcp2", ipR2[1]}, rtNI{"tcp2", ipB[0]}
	hops := func(net string, gw rtNI, n int) string {
		return fmt.Sprintf("    - net: %s\n      gateway: %s\n      hop: %d\n", net, gw.nid(), n)
	}
	r1 := tp.start("R1", nsR1, []rtNI{r1A, r1B}, hops("tcp2", r2A, 1), true, "")
	r2 := tp.start("R2", nsR2, []rtNI{r2A, r2B}, hops("tcp", r1B, 1), true, "")
	a := tp.start("A", nsA, []rtNI{aNI}, hops("tcp1", r1A, 1)+hops("tcp2", r1A, 2), false, "")
	b := tp.start("B", nsB, []rtNI{bNI}, hops("tcp1", r2B, 1)+hops("tcp", r2B, 2), false, "")
	// Each router started while the other was not listening yet: its
	// route through the other comes up once a router-checker ping gets
	// through (after socklnd's reconnect backoff).
	waitRoutes(t, r1, "tcp2", "up", r2A)
	waitRoutes(t, r2, "tcp", "up", r1B)
	waitRoutes(t, a, "tcp2", "up", r1A)
	waitRoutes(t, b, "tcp", "up", r2B)
	if out := a.ctl("ping", bNI.nid(), "--timeout", "10s"); !strings.Contains(out, bNI.nid()) {
		t.Fatalf("ping B through R1 and R2:\n%s", out)
	}
	if out := b.ctl("ping", aNI.nid(), "--timeout", "10s"); !strings.Contains(out, aNI.nid()) {
		t.Fatalf("ping A through R2 and R1:\n%s", out)
	}
	for i, size := range []int{0, 4097, 1 << 20} {
		putGetVia(t, a, b, bNI.nid(), size, i, 300+i)
	}
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "read", "size=1M", "check=full")
	for _, r := range []*procNode{r1, r2} {
		if routeCount(r) == 0 {
			t.Errorf("%s forwarded nothing", r.name)
		}
		if rx, tx, fb := spliced(r); rx == 0 || tx == 0 {
			t.Errorf("%s spliced %d payloads in, %d out (%d fallbacks)", r.name, rx, tx, fb)
		}
		checkPoolsIdle(t, r)
	}
}

// TestE2ERouteO2IBToO2IB1: a router between two RDMA nets (two soft-RoCE
// devices in the router): the RDMA of each hop happens on that hop.
func TestE2ERouteO2IBToO2IB1(t *testing.T) {
	a, r, b, aNI, _, _, bNI := rtTrio(t, "o2ib", "o2ib1", "")
	a.ctl("ping", bNI.nid(), "--timeout", "10s")
	putGetVia(t, a, b, bNI.nid(), 1<<20, 0, 1)
	putGetVia(t, b, a, aNI.nid(), 5000, 1, 2)
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "write", "size=1M", "check=full")
	lstClean(t, a, aNI.nid(), bNI.nid(), 8, "brw", "read", "size=1M", "check=full")
	if routeCount(r) == 0 {
		t.Fatal("R forwarded nothing")
	}
	checkPoolsIdle(t, r)
}
