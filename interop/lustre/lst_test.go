package lustre_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"softib/internal/tsharktest"
	"softib/interop/lustre"
	"softib/interop/vm"
)

// lnet_selftest between the Lustre 2.17 kernel module and softib (issue
// #10): the kernel's lst console drives softib lnetd's selftest node, and
// softib's console (`softib lst` through lnetd) drives the kernel's node,
// on tcp and on o2ib, with softib and the kernel as brw/ping servers and
// clients, in groups of their own and mixed.
//
// The kernel's node runs with one net at a time (LNetUp(net)): a kernel
// console reaching its own node through a secondary NID fails with -110
// (../shared/lustre/README.md), so on o2ib the guest's only (primary) NID
// is its o2ib one. softib lnetd keeps both nets throughout, with discovery
// on (so the kernel discovers it as a Multi-Rail peer), its NI on the net
// under test first: the kernel matches lnet_selftest's replies and bulk by
// softib's primary NID (see lustre.PrimaryFirst), so the console names
// softib by its primary NID, as it must name a Multi-Rail kernel node.

// lstKey is the kernel lst's LST_SESSION (its netlink port key).
const lstKey = "4242"

// lstSample is one group's block of an lst stat sample (the kernel's and
// softib's lst print the same lines).
type lstSample struct {
	RPCR, RPCW float64 // [LNet Rates of G] [R]/[W] Avg, RPC/s
	MiBR, MiBW float64 // [LNet Bandwidth of G] [R]/[W] Avg, MiB/s
}

var (
	statHeadRe = regexp.MustCompile(`^\[LNet (Rates|Bandwidth) of (\S+)\]`)
	statAvgRe  = regexp.MustCompile(`^\[(R|W)\] Avg: +([0-9.]+) +(RPC/s|MiB/s)`)
)

// parseStat returns every group's samples from lst stat's output, in order.
func parseStat(out string) map[string][]lstSample {
	res := map[string][]lstSample{}
	group, kind := "", ""
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if m := statHeadRe.FindStringSubmatch(l); m != nil {
			kind, group = m[1], m[2]
			if kind == "Rates" {
				res[group] = append(res[group], lstSample{})
			}
			continue
		}
		m := statAvgRe.FindStringSubmatch(l)
		if m == nil || group == "" || len(res[group]) == 0 {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		s := &res[group][len(res[group])-1]
		switch {
		case kind == "Rates" && m[1] == "R":
			s.RPCR = v
		case kind == "Rates" && m[1] == "W":
			s.RPCW = v
		case kind == "Bandwidth" && m[1] == "R":
			s.MiBR = v
		case kind == "Bandwidth" && m[1] == "W":
			s.MiBW = v
		}
	}
	return res
}

// steady averages a group's samples after the first (which covers the
// run's start), or all of them when there are only one or two.
func steady(ss []lstSample) lstSample {
	if len(ss) > 2 {
		ss = ss[1:]
	}
	var a lstSample
	for _, s := range ss {
		a.RPCR += s.RPCR
		a.RPCW += s.RPCW
		a.MiBR += s.MiBR
		a.MiBW += s.MiBW
	}
	if n := float64(len(ss)); n > 0 {
		a.RPCR, a.RPCW, a.MiBR, a.MiBW = a.RPCR/n, a.RPCW/n, a.MiBR/n, a.MiBW/n
	}
	return a
}

func (s lstSample) String() string {
	return fmt.Sprintf("rates R %.0f W %.0f RPC/s, bandwidth R %.2f W %.2f MiB/s", s.RPCR, s.RPCW, s.MiBR, s.MiBW)
}

// lstCase is one test of a batch: clients in From, servers in To.
type lstCase struct {
	Name     string
	From, To string
	Args     string // e.g. "brw write size=1M check=full", "ping"
	Dist     string // --distribute, "" for the default 1:1
	Bulk     bool   // a brw test: bandwidth must show
}

func (c lstCase) addTest(batch string) string {
	s := "add_test --batch " + batch + " --from " + c.From + " --to " + c.To
	if c.Dist != "" {
		s += " --distribute " + c.Dist
	}
	return s + " " + c.Args
}

// brwDataCorrupt matches the kernel's brw_test.c messages for a data
// check failure (brw_check_page, brw_check_bulk, brw_client_done_rpc,
// brw_server_rpc_done): corrupted data, never allowed.
var brwDataCorrupt = regexp.MustCompile(`Bad data in page|Bulk page \S+ \(\d+/\d+\) is corrupted|Bulk data from \S+ is corrupted`)

// checkNoCorruption fails t when the guest's kernel log has a brw data
// check failure.
func checkNoCorruption(t *testing.T, g *lustre.Guest) {
	t.Helper()
	d, err := g.Dmesg()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(d, "\n") {
		if brwDataCorrupt.MatchString(l) {
			t.Errorf("guest kernel: brw data check failed: %s", l)
		}
	}
}

// figure logs one measured lst figure in a greppable line.
func figure(t *testing.T, console, net string, c lstCase, group string, s lstSample) {
	t.Helper()
	t.Logf("FIGURE console=%s net=%s test=%q from=%s to=%s group=%s: %v", console, net, c.Args, c.From, c.To, group, s)
}

// kernelLst runs `lst` commands in the guest (one per line, each echoed
// as "### lst ARGS") under LST_SESSION and returns the combined output and
// the exit status of the last one.
func kernelLst(t *testing.T, g *lustre.Guest, timeout time.Duration, cmds ...string) (string, int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("export LST_SESSION=" + lstKey + "\nrc=0\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "echo '### lst %s'\nlst %s 2>&1; rc=$?\necho \"### rc=$rc\"\n", c, c)
	}
	b.WriteString("exit $rc\n")
	r, err := g.RunTimeout(g.Context(), b.String(), timeout)
	if err != nil {
		t.Fatalf("guest lst: %v\n%s%s", err, r.Stdout, r.Stderr)
	}
	return r.Stdout + r.Stderr, r.Code
}

// mustKernelLst is kernelLst failing t unless every command exits 0.
func mustKernelLst(t *testing.T, g *lustre.Guest, cmds ...string) string {
	t.Helper()
	out, _ := kernelLst(t, g, 3*time.Minute, cmds...)
	if lstFailed.MatchString(out) {
		t.Fatalf("guest lst failed:\n%s", out)
	}
	return out
}

// lstFailed matches kernelLst's output when a command exited non-zero.
var lstFailed = regexp.MustCompile(`### rc=[1-9]`)

// noErrorNodes reports whether `lst show_error` output says "Total 0
// error nodes" for every group.
func noErrorNodes(out string, groups ...string) bool {
	for _, gr := range groups {
		if !strings.Contains(out, "Total 0 error nodes in "+gr+"\n") {
			return false
		}
	}
	return true
}

// showErrorsNone checks `lst show_error` output: every group reports
// "Total 0 error nodes".
func showErrorsNone(t *testing.T, out string, groups ...string) {
	t.Helper()
	for _, gr := range groups {
		if !noErrorNodes(out, gr) {
			t.Errorf("lst show_error %s reports errors:\n%s", gr, out)
		}
	}
}

// checkRates checks that every group in groups shows traffic in its
// stat samples (RPCs, and bandwidth for a brw test) and returns each
// group's steady figures.
func checkRates(t *testing.T, what string, out string, c lstCase, groups ...string) map[string]lstSample {
	t.Helper()
	stats := parseStat(out)
	res := map[string]lstSample{}
	for _, gr := range groups {
		ss := stats[gr]
		if len(ss) == 0 {
			t.Errorf("%s: %s: lst stat printed no sample of %s:\n%s", what, c.Name, gr, out)
			continue
		}
		s := steady(ss)
		res[gr] = s
		if s.RPCR+s.RPCW == 0 || (c.Bulk && s.MiBR+s.MiBW == 0) {
			t.Errorf("%s: %s: group %s shows no traffic: %v\n%s", what, c.Name, gr, s, out)
		}
		if strings.Contains(out, "Failed to stat on") {
			t.Errorf("%s: %s: lst stat failed on some nodes:\n%s", what, c.Name, out)
		}
	}
	return res
}

// runKernelCase runs c as its own batch under the kernel console's
// session: run, stat for a few seconds, show_error, stop. It returns the
// steady figures of the From and To groups.
func runKernelCase(t *testing.T, g *lustre.Guest, net string, i int, c lstCase) map[string]lstSample {
	t.Helper()
	batch := fmt.Sprintf("b%d", i)
	groups := c.From + " " + c.To
	if c.From == c.To {
		groups = c.From
	}
	start := time.Now()
	out := mustKernelLst(t, g,
		"add_batch "+batch,
		c.addTest(batch),
		"run "+batch,
		"stat --delay 2 --count 4 "+groups,
		"show_error "+groups,
		"stop "+batch)
	t.Logf("kernel console, %s, %s (%v):\n%s", net, c.Name, time.Since(start).Round(time.Millisecond), out)
	showErrorsNone(t, out, strings.Fields(groups)...)
	figs := checkRates(t, "kernel console "+net, out, c, strings.Fields(groups)...)
	for gr, s := range figs {
		figure(t, "kernel", net, c, gr, s)
	}
	return figs
}

// lstCases are the tests both consoles run: softib as server and as
// client, the kernel the other side, and a mixed group talking to itself
// (every client to both servers).
func lstCases() []lstCase {
	return []lstCase{
		{Name: "kernel->softib brw write 1M", From: "kern", To: "soft", Args: "brw write size=1M check=full", Bulk: true},
		{Name: "kernel->softib brw read 1M", From: "kern", To: "soft", Args: "brw read size=1M check=full", Bulk: true},
		{Name: "kernel->softib brw write 4k", From: "kern", To: "soft", Args: "brw write size=4k", Bulk: true},
		{Name: "kernel->softib ping", From: "kern", To: "soft", Args: "ping"},
		{Name: "softib->kernel brw write 1M", From: "soft", To: "kern", Args: "brw write size=1M check=full", Bulk: true},
		{Name: "softib->kernel brw read 1M", From: "soft", To: "kern", Args: "brw read size=1M check=full", Bulk: true},
		{Name: "softib->kernel brw write 4k", From: "soft", To: "kern", Args: "brw write size=4k", Bulk: true},
		{Name: "softib->kernel ping", From: "soft", To: "kern", Args: "ping"},
		{Name: "mixed brw write 1M", From: "mixed", To: "mixed", Dist: "1:2", Args: "brw write size=1M check=full", Bulk: true},
		{Name: "mixed brw read 64k", From: "mixed", To: "mixed", Dist: "1:2", Args: "brw read size=64k check=full", Bulk: true},
		{Name: "mixed ping", From: "mixed", To: "mixed", Dist: "1:2", Args: "ping"},
	}
}

// lstNets is the nets the lst tests cover, in order; SOFTIB_LST_NETS
// (comma-separated) narrows it for a run by hand.
func lstNets() []string {
	if v := os.Getenv("SOFTIB_LST_NETS"); v != "" {
		return strings.Split(v, ",")
	}
	return lustre.Nets
}

// upNet brings the kernel's LNet up on net alone (reloading the modules
// when they are loaded) and, after the first net, restarts softib's lnetd
// with its NI on net as primary NID (see [lustre.PrimaryFirst]).
func upNet(t *testing.T, g *lustre.Guest, d *lustre.Lnetd, i int, net string) {
	t.Helper()
	if i == 0 {
		g.LNetUp(net)
	} else {
		g.ReloadModules(net)
		d.Reconfigure(lnetdFor(net))
	}
}

// lnetdFor is softib lnetd's configuration for the lst tests on net: both
// nets, the NI on net primary.
func lnetdFor(net string) lustre.LnetdConfig {
	return lustre.LnetdConfig{Nets: lustre.PrimaryFirst(net)}
}

// kernelGroups adds the kern, soft and mixed groups to the kernel
// console's session and checks each node is active.
func kernelGroups(t *testing.T, g *lustre.Guest, d *lustre.Lnetd, net string) string {
	t.Helper()
	k, s := g.NID(net), d.NID(net)
	out := mustKernelLst(t, g,
		"add_group kern "+k,
		"add_group soft "+s,
		"add_group mixed "+k+" "+s,
		"list_group kern --active",
		"list_group soft --active",
		"list_group mixed --active")
	return out
}

// TestInteropLstKernelConsole: the kernel's lst console (Lustre 2.17
// lnet_selftest) runs brw write/read 1M with check=full, brw write 4k and
// ping with softib lnetd's selftest node as server and as client (the
// kernel node the other side), and in a mixed group of both where every
// client talks to both servers, on tcp and on o2ib. Each test runs as its
// own batch: lst stat shows traffic in every group, lst show_error reports
// no error node, and the kernel logs neither an LNetError nor a brw data
// check failure; tshark decodes the capture without a malformed frame.
func TestInteropLstKernelConsole(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	d := lustre.StartLnetd(t, g, lnetdFor(lstNets()[0]))
	for i, net := range lstNets() {
		upNet(t, g, d, i, net)
		start := time.Now()
		out := mustKernelLst(t, g, "new_session --force --timeout 300 k2s_"+net)
		out += kernelGroups(t, g, d, net)
		t.Logf("kernel console, %s: session and groups:\n%s", net, out)
		for j, lc := range lstCases() {
			runKernelCase(t, g, net, j, lc)
		}
		t.Logf("kernel console, %s: end: %s", net, mustKernelLst(t, g, "end_session"))
		t.Logf("kernel console, %s: %v", net, time.Since(start).Round(time.Second))
		checkNoCorruption(t, g)
		g.CheckNoLNetError(t)
	}
	lustre.StopCapture(t, c)
	checkLstDecode(t, g, c.Path)
}

// checkLstDecode has tshark decode the capture (socklnd as LNet on port
// 988, RoCEv2 by the infiniband dissector and o2iblnd's by the LNet one)
// and fails t for every malformed frame or error, but one kind:
// Wireshark 4.0 flags every LNet PUT (and o2iblnd GET_REQ) to an
// lnet_selftest portal (50, 51, 52) as malformed, because it reads the
// payload of a message to a portal it does not know as a Lustre RPC. Those frames are counted per sender, and
// accepted only when the error is exactly that one and the kernel's own
// PUTs are flagged the same way. Every selftest message (a PUT to portal
// 50 or 51) must be 160 bytes, whoever sent it.
//
// The RPC-over-RDMA dissector is disabled (there is no NFS/RDMA here): its
// heuristic, tried before LNet's on RoCE payloads outside a known
// conversation, claimed the first IMMEDIATE PUT of an o2ib connection
// softib had opened (a MKSN request to portal 51) and threw on it; with
// it off, that frame decodes as LNet like every other. It checks the capture has LNet PUTs and GETs, and socklnd or o2iblnd
// messages for every net tested.
func checkLstDecode(t *testing.T, g *lustre.Guest, path string) {
	t.Helper()
	checkLstDecodeFrom(t, g.VM.HostIP(), g.VM.GuestIP(), path)
}

// checkLstDecodeFrom is checkLstDecode for softib at host, the kernel at
// guest.
func checkLstDecodeFrom(t *testing.T, host, guest, path string) {
	t.Helper()
	rows := tsharktest.Fields(t, path, []string{"frame.number", "ip.src", "_ws.malformed", "_ws.expert.severity",
		"_ws.expert.message", "_ws.col.Info", "lnet.ksm_type", "lnet.ib.type", "lnet.msg_type", "lnet.ptl_index",
		"lnet.payload_length", "infiniband.mad.attributeid", "lnet.ib.magic", "lnet.msg_dst_match_bits", lustre.GapField},
		"-d", "tcp.port==988,lnet", "--disable-protocol", "rpcordma")
	unknownPortal := map[string]int{}
	pushes := map[string]int{} // discovery pushes Wireshark flags, by sender
	lnetMsgs := map[string]int{}
	sock, ib := 0, 0
	bad, rejects := 0, 0
	wrongSize := map[string]int{}
	gaps := lustre.NewGaps(path)
	for _, r := range rows {
		afterGap := gaps.AfterGap(r[14], r[4])
		if r[11] == "0x0012" && r[12] != "" {
			rejects++ // a CM REJ with a kib_rej: see lustre.CheckDecode
			continue
		}
		types, lens := splitList(r[8]), splitList(r[10])
		for _, ty := range types {
			lnetMsgs[ty]++
		}
		// lnet.payload_length occurs for every message, the portal for
		// PUTs and GETs only: lustre.FrameMsgs pairs them by type.
		if msgs, ok := lustre.FrameMsgs(r[8], r[9], r[13]); afterGap {
			// A lossy capture's reassembly is lost after a gap.
		} else if ok && len(lens) == len(msgs) {
			for i, m := range msgs {
				if m.Type == "1" && (m.Portal == "50" || m.Portal == "51") && lens[i] != "160" {
					wrongSize[r[1]]++
					if wrongSize[r[1]] <= 5 {
						t.Errorf("tshark: frame %s from %s: selftest request of %s bytes on portal %s, want 160", r[0], r[1], lens[i], m.Portal)
					}
				}
			}
		} else if len(types) > 0 {
			t.Errorf("tshark: frame %s from %s: LNet fields do not pair: types %q, portals %q, match bits %q, lengths %q", r[0], r[1], r[8], r[9], r[13], r[10])
		}
		if r[6] != "" {
			sock++
		}
		if r[7] != "" {
			ib++
		}
		sev, msgs := strings.Split(r[3], ","), strings.Split(r[4], ",")
		var errs []string
		resent := false // error items that are only TCP resending bytes (tsharktest.TCPResentOverlap)
		for i, sv := range sev {
			v, err := strconv.ParseUint(sv, 0, 32)
			if err != nil || v < 0x00800000 {
				continue
			}
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
		if (r[2] == "" || resent) && len(errs) == 0 && !strings.Contains(r[5], "Malformed") {
			continue
		}
		if lustre.PushFrame(errs, r[8], r[9], r[13]) {
			pushes[r[1]]++
			continue
		}
		if afterGap {
			gaps.Skipped++
			continue
		}
		known := lustre.SelftestFrame(errs, r[8], r[9], r[13], false)
		if known {
			unknownPortal[r[1]]++
			continue
		}
		bad++
		if bad <= 20 {
			t.Errorf("tshark: frame %s from %s malformed or in error: %q (%s)", r[0], r[1], errs, r[5])
		}
	}
	if bad > 20 {
		t.Errorf("tshark: %d frames malformed or in error in all", bad)
	}
	t.Logf("tshark: %d frames; LNet messages %v; socklnd frames %d, o2iblnd frames %d; kib_rej REJs %d; "+
		"PUTs to a selftest portal Wireshark cannot decode, by sender: %v; discovery pushes it flags, by sender: %v; "+
		"frames in error after a capture gap (not judged): %d",
		len(rows), lnetMsgs, sock, ib, rejects, unknownPortal, pushes, gaps.Skipped)
	if unknownPortal[host] > 0 && unknownPortal[guest] == 0 {
		t.Errorf("tshark flags softib's selftest PUTs as malformed but none of the kernel's")
	}
	if lnetMsgs["1"] == 0 || lnetMsgs["2"] == 0 {
		t.Errorf("tshark decoded no LNet PUT or GET: %v", lnetMsgs)
	}
	for _, net := range lstNets() {
		if net == "tcp" && sock == 0 || net == "o2ib" && ib == 0 {
			t.Errorf("tshark decoded no %s LND message", net)
		}
		if net != "o2ib" {
			continue
		}
		// Every RoCE frame of both sides carries a correct ICRC.
		cs, err := vm.RoCECapture(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range []string{host, guest} {
			s := cs[netip.MustParseAddr(ip)]
			if s == nil || s.Frames == 0 {
				t.Errorf("capture: no RoCE frame from %s", ip)
				continue
			}
			t.Logf("capture: RoCE from %s: %+v", ip, *s)
			if s.BadICRC+s.Unparsed != 0 {
				t.Errorf("capture: %s sent %d RoCE frames with a bad ICRC, %d unparsable", ip, s.BadICRC, s.Unparsed)
			}
		}
	}
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// softibLst runs `softib lst --session FILE ARGS` through lnetd's
// namespace.
func softibLst(d *lustre.Lnetd, session string, args ...string) (string, error) {
	return d.Run(append([]string{"lst", "--session", session}, args...)...)
}

// mustSoftibLst fails t unless softib lst exits 0.
func mustSoftibLst(t *testing.T, d *lustre.Lnetd, session string, args ...string) string {
	t.Helper()
	out, err := softibLst(d, session, args...)
	if err != nil {
		t.Fatalf("softib lst %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// TestInteropLstSoftibConsole: softib's console (`softib lst`, its RPCs
// sent through the host lnetd, so from lnetd's NID) runs the same tests
// against the kernel's lnet_selftest node: the kernel as server and as
// client (softib's node the other side) and mixed groups, on tcp and on
// o2ib. lst stat must show traffic in every group and exit 0 (it exits 1
// on any error count or unreachable node); the kernel logs no LNetError
// and no brw data check failure; tshark decodes the capture.
func TestInteropLstSoftibConsole(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	d := lustre.StartLnetd(t, g, lnetdFor(lstNets()[0]))
	dir := t.TempDir()
	for i, net := range lstNets() {
		upNet(t, g, d, i, net)
		sess := filepath.Join(dir, "lst-"+net+".json")
		start := time.Now()
		k, s := g.NID(net), d.NID(net)
		out := mustSoftibLst(t, d, sess, "new_session", "s2k_"+net, "--force", "--socket", d.Socket(), "--net", net)
		out += mustSoftibLst(t, d, sess, "add_group", "kern", k)
		out += mustSoftibLst(t, d, sess, "add_group", "soft", s)
		out += mustSoftibLst(t, d, sess, "add_group", "mixed", k, s)
		out += mustSoftibLst(t, d, sess, "list_group", "mixed")
		t.Logf("softib console, %s: session and groups:\n%s", net, out)
		for j, lc := range lstCases() {
			runSoftibCase(t, d, sess, net, j, lc)
		}
		t.Logf("softib console, %s: end: %s", net, mustSoftibLst(t, d, sess, "end_session"))
		t.Logf("softib console, %s: %v", net, time.Since(start).Round(time.Second))
		checkNoCorruption(t, g)
		g.CheckNoLNetError(t)
	}
	lustre.StopCapture(t, c)
	checkLstDecode(t, g, c.Path)
}

// runSoftibCase is runKernelCase for softib's console.
func runSoftibCase(t *testing.T, d *lustre.Lnetd, sess, net string, i int, c lstCase) map[string]lstSample {
	t.Helper()
	batch := fmt.Sprintf("b%d", i)
	groups := []string{c.From, c.To}
	if c.From == c.To {
		groups = groups[:1]
	}
	start := time.Now()
	out := mustSoftibLst(t, d, sess, "add_batch", batch)
	add := []string{"add_test", "--batch", batch, "--from", c.From, "--to", c.To}
	if c.Dist != "" {
		add = append(add, "--distribute", c.Dist)
	}
	out += mustSoftibLst(t, d, sess, append(add, strings.Fields(c.Args)...)...)
	out += mustSoftibLst(t, d, sess, "run", batch)
	st, err := softibLst(d, sess, append([]string{"stat", "--delay", "2", "--count", "4"}, groups...)...)
	out += st
	if err != nil {
		t.Errorf("softib console, %s, %s: stat: %v", net, c.Name, err)
	}
	out += mustSoftibLst(t, d, sess, "stop", batch)
	t.Logf("softib console, %s, %s (%v):\n%s", net, c.Name, time.Since(start).Round(time.Millisecond), out)
	figs := checkRates(t, "softib console "+net, st, c, groups...)
	for gr, s := range figs {
		figure(t, "softib", net, c, gr, s)
	}
	return figs
}

// TestInteropLstSizes: brw write and read with check=full across sizes
// from 8 B to 1 MiB (LNet PUT and GET of the bulk, each way), and ping (no
// bulk), between the kernel and softib under the kernel's console, softib
// as server and as client, on tcp and on o2ib: no error node, no data
// check failure in the kernel log (softib's node fails brw with EBADMSG
// and counts a brw error on a mismatch, which show_error would report).
func TestInteropLstSizes(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	d := lustre.StartLnetd(t, g, lnetdFor(lstNets()[0]))
	for i, net := range lstNets() {
		upNet(t, g, d, i, net)
		start := time.Now()
		mustKernelLst(t, g, "new_session --force --timeout 300 sizes_"+net)
		kernelGroups(t, g, d, net)
		// Every size in one batch per direction: the tests run at once.
		var cmds []string
		n := 0
		for _, dir := range [][2]string{{"kern", "soft"}, {"soft", "kern"}} {
			b := "sz_" + dir[0]
			cmds = append(cmds, "add_batch "+b)
			for _, op := range []string{"write", "read"} {
				for _, size := range []string{"8", "4088", "4k", "12k", "64k", "1M"} {
					cmds = append(cmds, fmt.Sprintf("add_test --batch %s --from %s --to %s brw %s size=%s check=full", b, dir[0], dir[1], op, size))
					n++
				}
			}
			cmds = append(cmds, fmt.Sprintf("add_test --batch %s --from %s --to %s ping", b, dir[0], dir[1]))
			cmds = append(cmds, "run "+b, "stat --delay 2 --count 4 kern soft", "show_error kern soft", "stop "+b)
		}
		out := mustKernelLst(t, g, cmds...)
		t.Logf("kernel console, %s: %d brw tests and ping each way (%v):\n%s", net, n, time.Since(start).Round(time.Second), out)
		if got := strings.Count(out, "Total 0 error nodes in"); got != 4 {
			t.Errorf("%s: lst show_error: %d groups without error, want 4:\n%s", net, got, out)
		}
		checkRates(t, "sizes "+net, out, lstCase{Name: "sizes", Bulk: true}, "kern", "soft")
		mustKernelLst(t, g, "end_session")
		checkNoCorruption(t, g)
		g.CheckNoLNetError(t)
	}
	lustre.StopCapture(t, c)
	checkLstDecode(t, g, c.Path)
}

// trafficDeadline bounds [waitTraffic] and [waitReachable].
const trafficDeadline = 3 * time.Minute

// waitTraffic runs `lst stat --delay 2 --count 2 GROUPS` under the kernel
// console until every group has shown traffic (RPCs, and bandwidth for a
// brw case) in some sample, and fails t when trafficDeadline passes first.
// It returns the stat output. A fixed stat window right after a batch
// starts, a crash or a restart is a timing bet, not a protocol fact: a
// test's first RPC may wait for a connection set-up, for the discovery of
// a new peer incarnation or for a dead connection to fail, and under load
// (two QEMU TCG guests on two cores in CI) that can outlast a 4 s window.
// What Lustre guarantees is that a running brw or ping test keeps sending
// RPCs (lnet_selftest's test units loop until the batch stops) and so
// progresses; that is what this asserts. Every stat output is still
// checked for nodes lst could not stat.
func waitTraffic(t *testing.T, g *lustre.Guest, what string, c lstCase, groups ...string) string {
	t.Helper()
	seen := map[string]bool{}
	var all strings.Builder
	start := time.Now()
	for {
		out := mustKernelLst(t, g, "stat --delay 2 --count 2 "+strings.Join(groups, " "))
		all.WriteString(out)
		if strings.Contains(out, "Failed to stat on") {
			t.Errorf("%s: %s: lst stat failed on some nodes:\n%s", what, c.Name, out)
		}
		stats := parseStat(out)
		missing := 0
		for _, gr := range groups {
			for _, s := range stats[gr] {
				if s.RPCR+s.RPCW > 0 && (!c.Bulk || s.MiBR+s.MiBW > 0) && !seen[gr] {
					seen[gr] = true
					t.Logf("%s: %s: group %s shows traffic after %v: %v", what, c.Name, gr, time.Since(start).Round(time.Millisecond), s)
				}
			}
			if !seen[gr] {
				missing++
			}
		}
		if missing == 0 {
			return all.String()
		}
		if time.Since(start) > trafficDeadline {
			t.Errorf("%s: %s: a group shows no traffic in %v of lst stat (seen: %v):\n%s", what, c.Name, trafficDeadline, seen, all.String())
			return all.String()
		}
	}
}

// waitReachable waits until the kernel and softib lnetd reach each other
// by LNet ping on net (each side's `lnetctl ping`, 30 s timeout each),
// and fails t when trafficDeadline passes first. After lnetd was killed,
// how soon the kernel notices that its connections lead nowhere is not
// softib's to decide: ksocklnd learns it from the host's FIN or RST, but
// o2iblnd only when a send on the dead QP exhausts its retries or a
// keepalive or RPC times out (o2iblnd_cb.c kiblnd_check_conns,
// kiblnd_qp_event), and a message queued on such a connection until then
// fails. The session after the restart is judged once the two reach each
// other again.
func waitReachable(t *testing.T, g *lustre.Guest, d *lustre.Lnetd, net string) {
	t.Helper()
	start := time.Now()
	for {
		_, err := g.Ping(g.Context(), d.NID(net))
		if err == nil {
			_, err = d.Ping(g.NID(net))
		}
		if err == nil {
			t.Logf("%s: kernel and softib reach each other %v after the restart", net, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > trafficDeadline {
			t.Fatalf("%s: kernel and softib do not reach each other %v after lnetd restarted: %v", net, trafficDeadline, err)
		}
		t.Logf("%s: not yet reachable after the restart: %v", net, err)
		time.Sleep(time.Second)
	}
}

// TestInteropLstLnetdCrash: softib lnetd is killed (SIGKILL) and restarted
// while a kernel-console batch runs brw write and read 1M with check=full
// between the kernel (client) and softib (server). The kernel must report
// the failure through lst (show_error or stat errors on a node) and never
// a data check failure; after the restart, once the two reach each other
// by LNet ping again, a new session (ping and brw between the two) runs
// without errors. On tcp and on o2ib.
func TestInteropLstLnetdCrash(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	d := lustre.StartLnetd(t, g, lnetdFor(lstNets()[0]))
	// What the crash makes the kernel log: the brw RPCs and bulk
	// transfers in flight fail, and the LNDs lose the connection.
	for _, re := range []string{
		`brw_test\.c:\d+:brw_client_done_rpc\(\)\) BRW RPC to \S+ failed with`,
		`brw_test\.c:\d+:brw_server_rpc_done\(\)\) Bulk transfer`,
		`rpc\.c:\d+:srpc_`,
		`framework\.c:\d+:sfw_`,
		`socklnd\S*\.c:\d+:`,
		`o2iblnd\S*\.c:\d+:`,
		`lib-move\.c:\d+:`,
		`lib-msg\.c:\d+:`,
		// Console lines (no location): ksocknal_connect (socklnd_cb.c)
		// reports a failed ksocknal_create_conn through
		// lnet_connect_console_error (acceptor.c), an LCONSOLE_ERROR for
		// ECONNRESET and for errors it has no text for. A connection the
		// kernel was opening to softib when SIGKILL closed lnetd's
		// sockets is reset (a connection in the dead listener's backlog,
		// or the HELLO exchange cut: ECONNRESET, EPIPE, or ECONNABORTED
		// from lnet_sock_read's end of stream). Which of these, if any,
		// happens depends on whether a connection attempt was under way
		// at the kill.
		`Connection to ` + regexp.QuoteMeta(d.NID("tcp")) + ` at host \S+ was reset`,
		`Unexpected error -(32|103|104) connecting to ` + regexp.QuoteMeta(d.NID("tcp")) + ` at host`,
		// libcfs's note after a rate-limited console message: it has no
		// location, and follows one of the lines above (a line no
		// pattern allows fails the test on its own).
		`LNetError: Skipped \d+ previous similar messages?$`,
	} {
		g.AllowLNetError(re)
	}
	for i, net := range lstNets() {
		upNet(t, g, d, i, net)
		k, s := g.NID(net), d.NID(net)
		mustKernelLst(t, g, "new_session --force --timeout 300 crash_"+net)
		kernelGroups(t, g, d, net)
		out := mustKernelLst(t, g,
			"add_batch crash",
			"add_test --batch crash --from kern --to soft brw write size=1M check=full",
			"add_test --batch crash --from kern --to soft brw read size=1M check=full",
			"run crash")
		// The kill must land mid-batch: wait until both sides move data.
		out += waitTraffic(t, g, "crash "+net+" (before)", lstCase{Name: "before the crash", Bulk: true}, "kern", "soft")
		t.Logf("%s: before the crash:\n%s", net, out)
		d.Kill()
		t.Logf("%s: lnetd killed", net)
		// The outage: softib stays down while the kernel's brw test keeps
		// sending to it (not a wait for a condition).
		time.Sleep(3 * time.Second)
		d.Restart()
		t.Logf("%s: lnetd restarted", net)
		out, _ = kernelLst(t, g, 3*time.Minute, "stat --delay 2 --count 3 kern soft", "show_error kern soft", "stop crash", "end_session")
		t.Logf("%s: after the crash:\n%s", net, out)
		// Guaranteed: the restarted lnetd's selftest node has no session
		// (a new process), so stat and show_error on it fail or report
		// it (framework.c sfw_get_stats answers ESRCH for an unknown
		// session; show_error counts a framework or RPC failure as an
		// error node), whatever the kernel's brw RPCs have seen so far.
		if noErrorNodes(out, "kern", "soft") &&
			!strings.Contains(out, "Failed to stat on") {
			t.Errorf("%s: the kernel's lst reports no error after softib crashed mid-batch:\n%s", net, out)
		}
		checkNoCorruption(t, g)

		// A new session after the restart: clean, unless the kernel's
		// own o2iblnd connection fails on a local memory registration
		// error (kernelRegFailure); the debug log read here is dropped,
		// so the one read after the session covers it alone.
		waitReachable(t, g, d, net)
		kernelDebugLog(t, g)
		start := time.Now()
		ac := lstCase{Name: "after the restart", Bulk: true}
		out = mustKernelLst(t, g, "new_session --force --timeout 300 after_"+net,
			"add_group kern "+k, "add_group soft "+s,
			"add_batch again",
			"add_test --batch again --from kern --to soft ping",
			"add_test --batch again --from kern --to soft brw write size=1M check=full",
			"add_test --batch again --from soft --to kern brw read size=1M check=full",
			"run again")
		out += waitTraffic(t, g, "crash "+net+" (after)", ac, "kern", "soft")
		end, _ := kernelLst(t, g, 3*time.Minute,
			"show_error --session kern soft",
			"stop again",
			"end_session")
		out += end
		t.Logf("%s: new session after the restart (%v):\n%s", net, time.Since(start).Round(time.Second), out)
		// --session: the session's brw and ping errors (the nodes' RPC
		// error counters count since the module loaded, the crash too).
		if lstFailed.MatchString(end) || !noErrorNodes(end, "kern", "soft") {
			dk := kernelDebugLog(t, g)
			if why := kernelRegFailure(dk, s); why != "" {
				t.Logf("%s: the new session saw errors, and the kernel's own o2iblnd connection to softib failed on a local memory registration during it: %s\nkernel debug log:\n%s", net, why, dk)
			} else {
				t.Errorf("%s: the new session after the restart did not run clean, and the kernel's debug log names no local cause:\n%s\nkernel debug log:\n%s", net, out, dk)
			}
		}
		checkNoCorruption(t, g)
	}
	lustre.StopCapture(t, c)
	checkLstDecode(t, g, c.Path)
}

// kernelDebugLog returns the guest kernel's LNet debug log (libcfs's
// trace buffer, the text `lctl dk` prints; its default mask keeps the
// D_NETERROR lines the console does not show) and empties it: libcfs
// frees the pages it dumps.
func kernelDebugLog(t *testing.T, g *lustre.Guest) string {
	t.Helper()
	r, err := g.Run(g.Context(), `grep -qs ' /sys/kernel/debug ' /proc/mounts || mount -t debugfs none /sys/kernel/debug || exit 1
f=/sys/kernel/debug/lnet/dump_kernel
[ -e $f ] || { echo "no $f" >&2; exit 1; }
rm -f /tmp/lnet-dk
echo /tmp/lnet-dk > $f || exit 1
[ -e /tmp/lnet-dk ] || exit 0 # nothing logged
tr -c '[:print:]\n' '\n' < /tmp/lnet-dk | grep -v '^$'
rm -f /tmp/lnet-dk`)
	if err != nil || r.Code != 0 {
		t.Fatalf("guest kernel debug log: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// kernelRegFailure returns the lines of a kernel debug log that show
// o2iblnd closing its connection to softNID after one of its own memory
// registration work requests failed on the local QP, or "" when the log
// has no such pair. kiblnd_complete logs "FastReg failed: STATUS" for a
// failed IBLND_WID_MR completion (LOCAL_INV or REG_MR, posted before an
// RDMA), a local operation of the guest's rxe that no packet from softib
// takes part in; the QP then errors, its receives flush and
// kiblnd_close_conn_locked logs "Closing conn ... to NID: error -5". Seen
// only after the crash, when the kernel's earlier connection's work
// requests were flushed: the transfers and RPCs on the closed connection
// fail, as they would with a Lustre peer.
func kernelRegFailure(dk, softNID string) string {
	reg := regexp.MustCompile(`FastReg failed: \d+`).FindStringIndex(dk)
	if reg == nil {
		return ""
	}
	closed := regexp.MustCompile(`Closing conn \S+ to ` + regexp.QuoteMeta(softNID) + `: error -\d+\S*`).FindString(dk[reg[1]:])
	if closed == "" {
		return ""
	}
	return dk[reg[0]:reg[1]] + "; " + closed
}
