package lustre_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"softib/internal/tsharktest"
	"softib/interop/lustre"
)

// Issue #12 against the Lustre 2.17 kernel: LNet routing between the
// guest's kernel node and softib nodes, both ways round.
//
//	(a) kernel (tcp, eth0) ── softib router R (tcp on the tap, o2ib on a
//	    veth in the same namespace) ── softib B (o2ib, the veth's peer)
//	(b) softib A (tcp, tap address) ── kernel router (tcp and o2ib on
//	    eth0) ── softib B (o2ib, a second tap address)
//
// Each direction runs lnetctl ping and lst brw 1 MiB check=full through
// the router.

// forwarded matches lnetctl stats show of a node that forwarded messages.
// wsErrMsg takes the message type and o2iblnd message type out of
// Wireshark 4.0's LNet dissector error ("Capture:N offset:N (length:N)
// msg_type:1 ib_type:00").
var wsErrMsg = regexp.MustCompile(`msg_type:(\d+) ib_type:(\S*)`)

var forwarded = regexp.MustCompile(`(?m)^\s+route_count: [1-9]`)

// rtQuick is the part of `softib lst quick --json` the tests read.
type rtQuick struct {
	RPCs     uint64   `json:"rpcs"`
	MiBRate  float64  `json:"mib_per_s"`
	Errors   uint64   `json:"errors"`
	BRWErr   uint64   `json:"brw_errors"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
}

// routedLst runs `softib lst quick` with d as console from → to and
// requires every RPC to succeed with verified data.
func routedLst(t *testing.T, d *lustre.Lnetd, from, to string, test ...string) {
	t.Helper()
	args := append([]string{"lst", "quick", "--force", "--socket", d.Socket(), "--from", from, "--to", to,
		"--concurrency", "2", "--seconds", "4", "--delay", "2", "--json"}, test...)
	out, err := d.Run(args...)
	var r rtQuick
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("lst %v %s→%s: %v (bad JSON %v)\n%s", test, from, to, err, jerr, out)
	}
	if err != nil || !r.OK || r.Errors != 0 || r.BRWErr != 0 || r.RPCs == 0 {
		t.Fatalf("lst %v %s→%s: %v: %+v", test, from, to, err, r)
	}
	t.Logf("lst %v %s→%s through the router: %d RPCs, %.1f MiB/s", test, from, to, r.RPCs, r.MiBRate)
}

// nsIP runs ip -n <the VM's namespace> args.
func nsIP(t *testing.T, g *lustre.Guest, args ...string) {
	t.Helper()
	a := append([]string{"-n", g.VM.Namespace()}, args...)
	if out, err := exec.Command("ip", a...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", a, err, out)
	}
}

// rtLnetdYAML is a softib node's configuration for these tests.
func rtLnetdYAML(nis [][2]string, routes [][2]string, routing bool) string {
	var b strings.Builder
	b.WriteString("net:\n")
	for _, ni := range nis {
		fmt.Fprintf(&b, "    - net type: %s\n      local NI(s):\n        - interfaces:\n              0: %s\n", ni[0], ni[1])
	}
	if len(routes) > 0 {
		b.WriteString("route:\n")
		for _, r := range routes {
			fmt.Fprintf(&b, "    - net: %s\n      gateway: %s\n      hop: 1\n", r[0], r[1])
		}
	}
	if routing {
		// A router reports an NI down when nobody pinged it for its
		// router_ping_timeout + alive interval; the kernel pings its
		// gateways every 60 s (alive_router_check_interval): Lustre's
		// defaults (50 + 60 s) cover that.
		b.WriteString("routing:\n    enable: 1\nglobal:\n    transaction_timeout: 60\n")
		return b.String()
	}
	b.WriteString(`global:
    transaction_timeout: 60
    router_ping_timeout: 10
    live_router_check_interval: 5
    dead_router_check_interval: 5
`)
	return b.String()
}

// waitSoftibRouteUp waits until d's route to net has been up for two
// router-checker intervals (a new route starts up, before its gateway's
// first ping reply; a Lustre router reports an NI down until it has seen
// a ping on that net).
func waitSoftibRouteUp(t *testing.T, d *lustre.Lnetd, net string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var since time.Time
	for {
		out, err := d.Ctl("route", "show", "-v", "--net", net)
		switch {
		case err != nil || !strings.Contains(out, "state: up"):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) > 12*time.Second:
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("softib route to %s not up: %v\n%s", net, err, out)
		}
		time.Sleep(time.Second)
	}
}

// kernelRtrCheck is the guest kernel's alive_router_check_interval and
// router_ping_timeout (lnet module parameters, seconds) in these tests:
// Lustre's defaults are 60 and 50.
const (
	kernelRtrCheck       = 5
	kernelRtrPingTimeout = 15
)

// waitKernelRouteUp waits until the kernel's route to net has been up for
// more than two of its router checks (alive_router_check_interval,
// kernelRtrCheck). Seeing "state: up" once proves nothing: Lustre starts
// a new route up (lnet_add_route, unless check_routers_before_use) before
// its gateway's first ping reply, and that reply can take it down
// (lnet_router_discovery_ping_reply: a single-hop route is up only if the
// gateway reports its NI on the remote net up, which a Lustre router does
// once that net has carried traffic within its timeout); which comes first
// is scheduling. Up across two checks means replies seen since say up.
func waitKernelRouteUp(t *testing.T, g *lustre.Guest, net string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var since time.Time
	for {
		out, err := g.Lnetctl(g.Context(), "route", "show", "-v", "--net", net)
		switch {
		case err != nil || !strings.Contains(out, "state: up"):
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) > (2*kernelRtrCheck+2)*time.Second:
			t.Logf("kernel route show -v:\n%s", out)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel route to %s not up: %v\n%s", net, err, out)
		}
		time.Sleep(time.Second)
	}
}

// TestInteropRouteSoftibRouter: softib lnetd routes between the kernel
// node on tcp and a softib node on o2ib: ping and lst brw 1 MiB
// check=full both ways through it.
func TestInteropRouteSoftibRouter(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t) // the tap: the kernel ↔ R hop (tcp)
	// The kernel checks its gateway every kernelRtrCheck seconds, so
	// that waitKernelRouteUp sees the state R's replies give the route.
	g.MustRun(fmt.Sprintf("modprobe libcfs && modprobe lnet alive_router_check_interval=%d", kernelRtrCheck))
	g.LNetUp("tcp")
	// The o2ib subnet behind the router: a veth pair in the VM's
	// namespace holding R's and B's o2ib addresses (the kernel here has
	// no dummy interfaces).
	nsIP(t, g, "link", "add", "rt0", "type", "veth", "peer", "name", "rt1")
	nsIP(t, g, "addr", "add", "10.214.0.1/24", "dev", "rt0")
	nsIP(t, g, "addr", "add", "10.214.0.2/24", "dev", "rt1")
	nsIP(t, g, "link", "set", "rt0", "up")
	nsIP(t, g, "link", "set", "rt1", "up")
	rTCP, rIB, bIB := g.VM.HostIP()+"@tcp", "10.214.0.1@o2ib", "10.214.0.2@o2ib"
	kTCP := g.NID("tcp")
	r := lustre.StartLnetd(t, g, lustre.LnetdConfig{YAML: rtLnetdYAML(
		[][2]string{{"tcp", g.VM.HostIP()}, {"o2ib", "10.214.0.1"}}, nil, true)})
	b := lustre.StartLnetd(t, g, lustre.LnetdConfig{YAML: rtLnetdYAML(
		[][2]string{{"o2ib", "10.214.0.2"}}, [][2]string{{"tcp", rIB}}, false)})
	// The kernel logs every change of a route's state as an LNetError
	// (lnet_set_route_aliveness, lib-lnet.h). Two are protocol, not
	// faults: a new route starts up, and R's first ping reply takes it
	// down (then up again) when R had not yet carried traffic on o2ib
	// (which of B's first ping and the kernel's comes first is
	// scheduling); and the cleanup stops R before the kernel log's final
	// check, which the kernel's next router check sees. The log is allowed
	// those lines, and routeChanges below asserts that none happens
	// between the route's start-up and the end of the test's traffic.
	flap := regexp.MustCompile(`lnet_set_route_aliveness\(\)\) route to o2ib through ` + regexp.QuoteMeta(rTCP) + ` has gone from`)
	g.AllowLNetError(flap.String())
	routeChanges := func() []string {
		d, err := g.Dmesg()
		if err != nil {
			t.Fatal(err)
		}
		var ls []string
		for _, l := range strings.Split(d, "\n") {
			if flap.MatchString(l) {
				ls = append(ls, l)
			}
		}
		return ls
	}
	if _, err := g.Lnetctl(g.Context(), "route", "add", "--net", "o2ib", "--gateway", rTCP, "--hop", "1"); err != nil {
		t.Fatal(err)
	}
	// B's route up means R has answered B's pings on o2ib, so R reports
	// its o2ib NI up to the kernel's router checks from then on.
	waitSoftibRouteUp(t, b, "tcp")
	waitKernelRouteUp(t, g, "o2ib")
	startChanges := routeChanges()
	t.Logf("kernel route changes at start-up: %q", startChanges)
	if _, err := g.Ping(g.Context(), bIB); err != nil {
		t.Fatalf("kernel → softib B through softib R: %v", err)
	}
	if _, err := b.Ping(kTCP); err != nil {
		t.Fatalf("softib B → kernel through softib R: %v", err)
	}
	routedLst(t, b, kTCP, bIB, "brw", "write", "size=1M", "check=full")
	routedLst(t, b, kTCP, bIB, "brw", "read", "size=1M", "check=full")
	routedLst(t, b, bIB, kTCP, "brw", "write", "size=1M", "check=full")
	routedLst(t, b, bIB, kTCP, "brw", "read", "size=1M", "check=full")
	out, _ := r.Ctl("stats", "show")
	t.Logf("softib router stats:\n%s", out)
	if !forwarded.MatchString(out) {
		t.Fatalf("softib router forwarded nothing:\n%s", out)
	}
	out, _ = r.Ctl("routing", "show")
	t.Logf("softib routing show:\n%s", out)
	out, _ = g.Lnetctl(g.Context(), "stats", "show")
	t.Logf("kernel stats:\n%s", out)
	if ch := routeChanges(); len(ch) > len(startChanges) {
		t.Errorf("the kernel's route through softib R changed state while traffic ran: %q", ch[len(startChanges):])
	}
	// tshark decodes the forwarded traffic on the tap (routed PUTs, GETs,
	// ACKs and REPLYs between the kernel and R) with no malformed frame.
	lustre.StopCapture(t, c)
	t.Setenv("SOFTIB_LST_NETS", "tcp")
	checkLstDecodeFrom(t, g.VM.HostIP(), g.VM.GuestIP(), c.Path)
}

// TestInteropRouteKernelRouter: the kernel's LNet routes between two
// softib nodes, A on tcp and B on o2ib: ping and lst brw 1 MiB check=full
// both ways through it.
func TestInteropRouteKernelRouter(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	// Router buffers that fit the guest's 1 GiB (the defaults would take
	// 1 GiB of large buffers alone): module parameters, read when routing
	// is enabled.
	// Short router-checker times: Lustre 2.17 starts forwarding (and
	// stops advertising RTE_DISABLED in its ping replies) only after
	// alive_router_check_interval + router_ping_timeout (LU-15135). The
	// same sum is how long a router's net may go without receiving a
	// message before it reports that net down to its peers
	// (lnet_update_ni_status_locked), which takes A's or B's route down:
	// A and B ping the kernel every 5 s, so it must be several of their
	// intervals (a 10 s sum left one missed ping of margin under load).
	c := g.Capture(t) // the tap: both hops (A ↔ kernel on tcp, kernel ↔ B on o2ib)
	g.MustRun(fmt.Sprintf("modprobe libcfs && modprobe lnet tiny_router_buffers=512 small_router_buffers=512 large_router_buffers=64"+
		" alive_router_check_interval=%d router_ping_timeout=%d", kernelRtrCheck, kernelRtrPingTimeout))
	g.LNetUp()
	if _, err := g.Lnetctl(g.Context(), "set", "routing", "1"); err != nil {
		t.Fatal(err)
	}
	var out string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, _ = g.Lnetctl(g.Context(), "routing", "show")
		if strings.Contains(out, "enable: 1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel forwarding not enabled:\n%s", out)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("kernel routing show:\n%s", out)
	bIP := "192.168.77.3"
	nsIP(t, g, "addr", "add", bIP+"/24", "dev", g.VM.Tap())
	aTCP, bIB := g.VM.HostIP()+"@tcp", bIP+"@o2ib"
	a := lustre.StartLnetd(t, g, lustre.LnetdConfig{YAML: rtLnetdYAML(
		[][2]string{{"tcp", g.VM.HostIP()}}, [][2]string{{"o2ib", g.NID("tcp")}}, false)})
	b := lustre.StartLnetd(t, g, lustre.LnetdConfig{YAML: rtLnetdYAML(
		[][2]string{{"o2ib", bIP}}, [][2]string{{"tcp", g.NID("o2ib")}}, false)})
	waitSoftibRouteUp(t, a, "o2ib")
	waitSoftibRouteUp(t, b, "tcp")
	if _, err := a.Ping(bIB); err != nil {
		t.Fatalf("softib A → softib B through the kernel: %v", err)
	}
	if _, err := b.Ping(aTCP); err != nil {
		t.Fatalf("softib B → softib A through the kernel: %v", err)
	}
	routedLst(t, a, aTCP, bIB, "brw", "write", "size=1M", "check=full")
	routedLst(t, a, aTCP, bIB, "brw", "read", "size=1M", "check=full")
	routedLst(t, a, bIB, aTCP, "brw", "write", "size=1M", "check=full")
	routedLst(t, a, bIB, aTCP, "brw", "read", "size=1M", "check=full")
	out, _ = g.Lnetctl(g.Context(), "stats", "show")
	t.Logf("kernel router stats:\n%s", out)
	if !forwarded.MatchString(out) {
		t.Fatalf("the kernel forwarded nothing:\n%s", out)
	}
	out, _ = g.Lnetctl(g.Context(), "routing", "show")
	t.Logf("kernel routing show:\n%s", out)
	// tshark decodes both hops.
	lustre.StopCapture(t, c)
	checkRouteDecode(t, c.Path, g.VM.GuestIP())
}

// checkRouteDecode has tshark decode a capture of routed traffic and
// fails t for every malformed frame or error except Wireshark 4.0's LNet
// dissector limitation (lustre.SelftestFrame): it reads a PUT's payload on an
// lnet_selftest portal, and a REPLY's carried by an o2iblnd PUT_REQ, as a
// Lustre RPC. That limitation must show on the kernel's frames as on
// softib's (same bytes on the wire), or it is softib's fault.
func checkRouteDecode(t *testing.T, path, kernelIP string) {
	t.Helper()
	rows := tsharktest.Fields(t, path, []string{"frame.number", "ip.src", "_ws.malformed", "_ws.expert.severity",
		"_ws.expert.message", "_ws.col.Info", "lnet.msg_type", "lnet.ptl_index", "lnet.ib.type", "lnet.ksm_type",
		"lnet.msg_dst_match_bits", lustre.GapField},
		"-d", "tcp.port==988,lnet", "--disable-protocol", "rpcordma")
	known := map[string]map[string]int{} // sender → "msg_type/ib_type" (or "exception") → errors
	pushes := map[string]int{}           // sender → discovery push frames flagged
	lnetMsgs := map[string]int{}
	sock, ib, bad := 0, 0, 0
	gaps := lustre.NewGaps(path)
	for _, r := range rows {
		afterGap := gaps.AfterGap(r[11], r[4])
		types := splitList(r[6])
		for _, ty := range types {
			lnetMsgs[ty]++
		}
		if r[9] != "" {
			sock++
		}
		if r[8] != "" {
			ib++
		}
		sev, msgs := strings.Split(r[3], ","), strings.Split(r[4], ",")
		var errs []string
		resent := false // error items that are only TCP resending bytes (tsharktest.TCPResentOverlap)
		for i, sv := range sev {
			if v, err := strconv.ParseUint(sv, 0, 32); err == nil && v >= 0x00800000 {
				if i < len(msgs) && tsharktest.TCPResentOverlap(r[5], msgs[i]) {
					resent = true
					continue
				}
				if i < len(msgs) {
					errs = append(errs, msgs[i])
				} else {
					errs = append(errs, "?")
				}
			}
		}
		if (r[2] == "" || resent) && len(errs) == 0 && !strings.Contains(r[5], "Malformed") {
			continue
		}
		if lustre.PushFrame(errs, r[6], r[7], r[10]) {
			pushes[r[1]]++ // a discovery push (lustre.PushFrame)
			continue
		}
		if afterGap {
			gaps.Skipped++
			continue
		}
		if lustre.SelftestFrame(errs, r[6], r[7], r[10], true) {
			// By the message Wireshark names in its error, not by the
			// frame's list of messages: how many LNet messages share
			// one TCP segment is timing, not format.
			if known[r[1]] == nil {
				known[r[1]] = map[string]int{}
			}
			for _, e := range errs {
				class := "exception"
				if m := wsErrMsg.FindStringSubmatch(e); m != nil {
					class = m[1] + "/" + m[2]
				}
				known[r[1]][class]++
			}
			continue
		}
		bad++
		if bad <= 20 {
			t.Errorf("tshark: frame %s from %s malformed or in error: %q (%s)", r[0], r[1], errs, r[5])
		}
	}
	t.Logf("tshark: %d frames; LNet messages %v; socklnd frames %d, o2iblnd frames %d; dissector limitation (msg_type/ib_type) by sender: %v; discovery pushes flagged, by sender: %v; frames in error after a capture gap (not judged): %d",
		len(rows), lnetMsgs, sock, ib, known, pushes, gaps.Skipped)
	for ip, classes := range known {
		if ip == kernelIP {
			continue
		}
		for class := range classes {
			if known[kernelIP][class] == 0 {
				t.Errorf("tshark flags %s's %s frames, never the kernel's", ip, class)
			}
		}
	}
	if lnetMsgs["1"] == 0 || lnetMsgs["2"] == 0 || lnetMsgs["3"] == 0 || sock == 0 || ib == 0 {
		t.Errorf("tshark decoded too little: LNet %v, socklnd %d, o2iblnd %d", lnetMsgs, sock, ib)
	}
}
