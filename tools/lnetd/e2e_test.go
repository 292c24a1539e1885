//go:build linux

package lnetd

// Multi-process tests: the softib binary is built once, lnetd runs as
// separate processes on loopback addresses (or in network namespaces),
// and `softib lnetctl` / `softib lnet ping` drive them as a user would.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
)

var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	tcpFloorMain() // a re-executed tcp floor role (tcpfloor_test.go) exits here
	d, err := os.MkdirTemp("", "lnetd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// softibBin builds ./cmd/softib once per test binary (on first use, so
// the in-process tests do not pay for it) and returns its path.
func softibBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "softib")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binPath, "softib/cmd/softib")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binError = fmt.Errorf("go build softib/cmd/softib: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// procNode is an lnetd running as a separate process.
type procNode struct {
	t      *testing.T
	name   string
	ip     string
	nid    string
	sock   string
	config string
	prefix []string // command prefix (ip netns exec NS) or nil
	cmd    *exec.Cmd
	log    *testenv.Buffer
	exited chan struct{}
}

// startProc writes yaml to a file and starts lnetd on it; it returns once
// the control socket answers. The process is killed in cleanup.
func startProc(t *testing.T, name, ip, yaml string, prefix ...string) *procNode {
	t.Helper()
	dir := t.TempDir()
	n := &procNode{t: t, name: name, ip: ip, nid: ip + "@tcp", sock: filepath.Join(dir, "run", "lnetd.sock"),
		config: filepath.Join(dir, "lnet.yaml"), prefix: prefix}
	if err := os.WriteFile(n.config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	n.start()
	t.Cleanup(n.kill)
	return n
}

func (n *procNode) start() {
	t := n.t
	t.Helper()
	args := append(append([]string{}, n.prefix...), softibBin(t), "lnetd", "--config", n.config, "--socket", n.sock)
	n.cmd = exec.Command(args[0], args[1:]...)
	// A restarted node keeps one log across its processes.
	if n.log == nil {
		n.log = &testenv.Buffer{}
	}
	from := len(n.log.String())
	n.cmd.Stderr = n.log
	n.cmd.Stdout = n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func() { n.cmd.Wait(); close(n.exited) }()
	deadline := time.Now().Add(hangGuard)
	for !strings.Contains(n.log.String()[from:], "lnetd: ready") {
		select {
		case <-n.exited:
			t.Fatalf("%s: lnetd exited at start:\n%s", n.name, n.log)
		default:
		}
		if time.Now().After(deadline) {
			n.kill()
			t.Fatalf("%s: lnetd not ready:\n%s", n.name, n.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the process and waits for it.
func (n *procNode) kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.exited:
	default:
		n.cmd.Process.Kill()
		<-n.exited
	}
	if n.t.Failed() {
		n.t.Logf("%s log:\n%s", n.name, n.log)
	}
}

// run runs `softib args...` with a hang guard and returns exit code,
// stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, softibBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("softib %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// ctl runs `softib lnetctl --socket <n.sock> args...` and requires success.
func (n *procNode) ctl(args ...string) string {
	n.t.Helper()
	code, out, errs := run(n.t, append([]string{"lnetctl", "--socket", n.sock}, args...)...)
	if code != 0 {
		n.t.Fatalf("%s: lnetctl %v: exit %d\n%s%s", n.name, args, code, out, errs)
	}
	return out
}

// doc runs an lnetctl show command with --json.
func (n *procNode) doc(args ...string) Map {
	n.t.Helper()
	out := n.ctl(append([]string{"--json"}, args...)...)
	var m Map
	if err := m.UnmarshalJSON([]byte(out)); err != nil {
		n.t.Fatalf("lnetctl %v: %v\n%s", args, err, out)
	}
	return m
}

// putGet PUTs size bytes from n to peer's echo slot and GETs them back,
// checking the CRC at the sender, the receiver and after the GET.
func putGet(t *testing.T, from, to *procNode, size, slot int, seed int) {
	t.Helper()
	put := from.doc("test", "put", "--nid", to.nid, "--size", fmt.Sprint(size), "--bits", fmt.Sprint(slot), "--seed", fmt.Sprint(seed))
	p := put.Get("test put").(Map)
	if p.Get("ok") != int64(1) || p.Get("bytes") != int64(size) || !strings.Contains(eventTypes(p), "ACK") {
		t.Fatalf("%s→%s put %d:\n%s", from.name, to.name, size, YAML(put))
	}
	sl := to.doc("test", "show").Path("test service", "slots", slot).(Map)
	if sl.Get("length") != int64(size) || sl.Get("crc32") != p.Get("crc32") {
		t.Fatalf("%s→%s put %d: receiver holds %s, sender crc %v", from.name, to.name, size, YAML(sl), p.Get("crc32"))
	}
	get := from.doc("test", "get", "--nid", to.nid, "--size", fmt.Sprint(size), "--bits", fmt.Sprint(slot))
	g := get.Get("test get").(Map)
	if g.Get("ok") != int64(1) || g.Get("crc32") != p.Get("crc32") || !strings.Contains(eventTypes(g), "REPLY") {
		t.Fatalf("%s→%s get %d:\n%s", from.name, to.name, size, YAML(get))
	}
}

// TestE2EThreeNodes runs three lnetd processes on loopback and exercises
// lnetctl and lnet ping between all of them.
func TestE2EThreeNodes(t *testing.T) {
	port := reservePort()
	var nodes []*procNode
	for i := range 3 {
		ip := testIP()
		nodes = append(nodes, startProc(t, fmt.Sprintf("node%d", i), ip, nodeYAML(ip, port, "")))
	}
	for _, n := range nodes {
		d := n.doc("net", "show")
		if d.Path("net", 1, "local NI(s)", 0, "nid") != n.nid {
			t.Fatalf("%s net show:\n%s", n.name, YAML(d))
		}
		if !strings.Contains(n.log.String(), "lnetd: NI up") || !strings.Contains(n.log.String(), "nid="+n.nid) {
			t.Errorf("%s: no NI-up log line:\n%s", n.name, n.log)
		}
	}
	// A second lnetd on a live socket refuses to start, before binding
	// any port.
	if code, _, errs := run(t, "lnetd", "--config", nodes[0].config, "--socket", nodes[0].sock); code != 1 ||
		!strings.Contains(errs, "another lnetd is already listening") {
		t.Errorf("second lnetd on the same socket: %d %s", code, errs)
	}
	// softib lnet ping through each node's lnetd, all pairs.
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			code, out, errs := run(t, "lnet", "ping", b.nid, "--socket", a.sock, "-c", "3", "-i", "20ms")
			if code != 0 || !strings.Contains(out, "3 pings sent, 3 replies, 0% loss") ||
				!strings.Contains(out, "nids="+b.nid) || !strings.Contains(out, "rtt min/avg/max = ") {
				t.Errorf("lnet ping %s→%s: %d\n%s%s", a.name, b.name, code, out, errs)
			}
		}
	}
	// lnetctl ping prints lnetctl's YAML.
	out := nodes[0].ctl("ping", nodes[1].nid, nodes[2].nid)
	for _, n := range nodes[1:] {
		if !strings.Contains(out, "    - primary nid: "+n.nid+"\n      Multi-Rail: True\n      peer ni:\n        - nid: "+n.nid+"\n") {
			t.Errorf("lnetctl ping output:\n%s", out)
		}
	}
	// A standalone lnet ping (its own short-lived LNet node); no lnetd
	// answers on the default socket of this environment.
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	src := testIP()
	code, sout, serrs := run(t, "lnet", "ping", nodes[2].nid, "--socket", "", "--port", fmt.Sprint(port), "--source", src+"@tcp", "-c", "2", "-i", "10ms")
	if code != 0 || !strings.Contains(sout, "from "+src+"@tcp") || !strings.Contains(sout, "2 replies") {
		t.Errorf("standalone lnet ping: %d\n%s%s", code, sout, serrs)
	}
	// PUT/GET 0 B .. 1 MiB around the ring, verified at both ends.
	sizes := []int{0, 1, 1023, 1024, 4096, 16384, 65537, 1 << 20}
	for i, size := range sizes {
		a, b := nodes[i%3], nodes[(i+1)%3]
		putGet(t, a, b, size, i%4, i+1)
	}
	// The peer table after traffic.
	p := nodes[0].doc("peer", "show", "-v")
	peers, _ := p.Get("peer").(List)
	seen := map[string]bool{}
	for _, e := range peers {
		ni := e.(Map).Path("peer ni", 0).(Map)
		seen[ni.Get("nid").(string)] = true
		if ni.Get("state") != "up" || ni.Get("max_ni_tx_credits") != int64(8) ||
			ni.Get("available_tx_credits") != int64(8) || ni.Get("min_tx_credits") == nil || ni.Get("refcount") == nil {
			t.Errorf("peer entry:\n%s", YAML(e.(Map)))
		}
	}
	if !seen[nodes[1].nid] || !seen[nodes[2].nid] {
		t.Errorf("peer show -v on node0:\n%s", YAML(p))
	}
	st := nodes[1].doc("stats", "show").Get("statistics").(Map)
	if st.Get("recv_count").(int64) < 3 || st.Get("recv_length").(int64) < 1<<20 || st.Get("errors") != int64(0) {
		t.Errorf("node1 stats:\n%s", YAML(st))
	}
	v := nodes[1].doc("net", "show", "-v", "--net", "tcp").Path("net", 0, "local NI(s)", 0).(Map)
	if v.Path("statistics", "recv_count").(int64) < 3 || v.Path("lnd statistics", "conns_active").(int64) < 1 {
		t.Errorf("node1 net show -v:\n%s", YAML(v))
	}
	// Graceful shutdown on SIGTERM.
	nodes[2].cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nodes[2].exited:
	case <-time.After(hangGuard):
		t.Fatal("lnetd ignored SIGTERM")
	}
	if nodes[2].cmd.ProcessState.ExitCode() != 0 || !strings.Contains(nodes[2].log.String(), "shutting down") {
		t.Errorf("SIGTERM exit %d:\n%s", nodes[2].cmd.ProcessState.ExitCode(), nodes[2].log)
	}
	if _, err := os.Stat(nodes[2].sock); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}

// TestE2EBadConfig: lnetd refuses a bad file with its line and key and
// exits non-zero without serving.
func TestE2EBadConfig(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ yaml, want string }{
		{"net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              0: 127.0.0.2\n          tunables:\n              peer_credit: 8\n",
			":7: net[0].local NI(s)[0].tunables.peer_credit: unknown key"},
		{"global:\n    accept_port: 99999\n", ":2: global.accept_port: 99999 is out of range"},
		{"net:\n    - net type: o2ib\n      local NI(s):\n        - interfaces: {0: no-such-ib9}\n", "net[0].local NI(s)[0]: interface \"no-such-ib9\""},
		{"net:\n    - net type: tcp\n      local NI(s):\n        - interfaces: {0: no-such-if9}\n", "net[0].local NI(s)[0]: "},
	}
	for i, c := range cases {
		f := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
		os.WriteFile(f, []byte(c.yaml), 0o644)
		code, _, errs := run(t, "lnetd", "--config", f, "--socket", filepath.Join(dir, fmt.Sprintf("s%d", i)))
		if code != 2 || !strings.Contains(errs, c.want) || !strings.Contains(errs, f) {
			t.Errorf("case %d: exit %d, stderr:\n%s\nwant %q", i, code, errs, c.want)
		}
	}
	if code, _, errs := run(t, "lnetd", "--config", filepath.Join(dir, "missing.yaml")); code != 2 || !strings.Contains(errs, "no such file") {
		t.Errorf("missing file: %d %s", code, errs)
	}
	if code, _, errs := run(t, "lnetctl", "--socket", filepath.Join(dir, "nobody.sock"), "net", "show"); code != 1 ||
		!strings.Contains(errs, "is `softib lnetd` running?") {
		t.Errorf("lnetctl without lnetd: %d %s", code, errs)
	}
}

// TestE2EPeerKilledAndRestarted: a peer SIGKILLed in the middle of a
// stream of 1 MiB PUTs makes the sender report a failure (never a
// success); restarted, it is seen as a new incarnation and a fresh
// connection carries verified data again.
func TestE2EPeerKilledAndRestarted(t *testing.T) {
	port := reservePort()
	ipA, ipB := testIP(), testIP()
	// Short reconnect backoff so the restarted peer is reached quickly.
	lt := "net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              0: %s\n" +
		"          lnd tunables:\n              min_reconnectms: 100\n              max_reconnectms: 500\n" +
		"              sock_timeout: 10\n"
	glob := fmt.Sprintf("global:\n    accept_port: %d\n    accept: all\n    transaction_timeout: 10\n", port)
	a := startProc(t, "A", ipA, fmt.Sprintf(lt, ipA)+glob)
	b := startProc(t, "B", ipB, fmt.Sprintf(lt, ipB)+glob)
	putGet(t, a, b, 1<<20, 0, 1)
	oldInc := b.doc("net", "show", "-v", "--net", "tcp").Path("net", 0, "local NI(s)", 0, "lnd statistics", "incarnation")

	// Stream PUTs from A to B, kill B in the middle.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	stream := exec.CommandContext(ctx, softibBin(t), "lnetctl", "--socket", a.sock, "--json", "test", "put",
		"--nid", b.nid, "--size", "1048576", "--count", "1000000", "--timeout", "15s", "--bits", "1")
	var sout, serr bytes.Buffer
	stream.Stdout, stream.Stderr = &sout, &serr
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hangGuard)
	for {
		sl := b.doc("test", "show").Path("test service", "slots", 1).(Map)
		if sl.Get("puts").(int64) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream never got going: %s %s", sout.String(), serr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.kill()
	err := stream.Wait()
	if ctx.Err() != nil {
		t.Fatal("the sender hung after its peer died")
	}
	if err == nil {
		t.Fatalf("stream to a killed peer reported success:\n%s", sout.String())
	}
	var res Map
	if jerr := res.UnmarshalJSON(sout.Bytes()); jerr != nil {
		t.Fatalf("stream output: %v\n%s\n%s", jerr, sout.String(), serr.String())
	}
	r := res.Get("test put").(Map)
	// PUTs go one at a time: with 5 landed at B, A completed at least 4.
	if r.Get("error") == nil || r.Get("ok").(int64) < 4 {
		t.Errorf("stream result:\n%s", YAML(res))
	}
	t.Logf("stream stopped after %v ACKed PUTs: %v", r.Get("ok"), r.Get("error"))
	// While B is down every PUT fails.
	code, out, errs := run(t, "lnetctl", "--socket", a.sock, "test", "put", "--nid", b.nid, "--size", "4096", "--timeout", "3s")
	if code == 0 || !strings.Contains(out, "ok: 0") {
		t.Errorf("put to a dead peer: %d\n%s%s", code, out, errs)
	}

	// Restart B: same NID, new incarnation.
	b.start()
	var lastErr string
	deadline = time.Now().Add(hangGuard)
	for {
		code, out, errs := run(t, "lnetctl", "--socket", a.sock, "test", "put", "--nid", b.nid, "--size", "1048576",
			"--bits", "2", "--seed", "77", "--timeout", "5s")
		if code == 0 {
			break
		}
		lastErr = out + errs
		if time.Now().After(deadline) {
			t.Fatalf("no PUT to the restarted peer succeeded: %s", lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	putGet(t, a, b, 1<<20, 3, 78)
	newInc := b.doc("net", "show", "-v", "--net", "tcp").Path("net", 0, "local NI(s)", 0, "lnd statistics", "incarnation")
	if newInc == oldInc {
		t.Errorf("restarted B kept incarnation %v", oldInc)
	}
	ls := a.doc("net", "show", "-v", "--net", "tcp").Path("net", 0, "local NI(s)", 0, "lnd statistics").(Map)
	if ls.Get("peer_reboots").(int64) < 1 {
		t.Errorf("A did not see B's incarnation change:\n%s", YAML(ls))
	}
}

// TestE2ENetemNamespaces runs two lnetd processes in network namespaces
// joined by a veth link with packet loss (and delay where the kernel has
// netem): TCP recovers and every transfer still completes verified.
func TestE2ENetemNamespaces(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	nw := netns.New(t, netns.Config{N: 2, NoIPv6: true})
	port := 988
	var nodes []*procNode
	for i, nn := range nw.Nodes {
		ip := nn.Addr.String()
		yaml := fmt.Sprintf("net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              0: %s\n"+
			"global:\n    accept_port: %d\n    accept: all\n    transaction_timeout: 30\n", nn.Dev, port)
		n := startProc(t, fmt.Sprintf("ns%d", i), ip, yaml, "ip", "netns", "exec", nn.Name)
		nodes = append(nodes, n)
	}
	// The NID comes from the interface's address.
	if got := nodes[0].doc("net", "show").Path("net", 1, "local NI(s)", 0, "nid"); got != nodes[0].nid {
		t.Fatalf("NID from interface %s = %v, want %s", nw.Nodes[0].Dev, got, nodes[0].nid)
	}
	putGet(t, nodes[0], nodes[1], 4096, 0, 1)
	imp := netns.Netem{Loss: 5, Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond}
	for i, nn := range nw.Nodes {
		err := nn.SetNetem(imp)
		if errors.Is(err, netns.ErrNetemUnsupported) {
			// No sch_netem in this kernel: loss only (nftables).
			imp = netns.Netem{Loss: 5}
			err = nn.SetNetem(imp)
		}
		if err != nil {
			t.Fatalf("node %d netem: %v", i, err)
		}
	}
	t.Logf("impairment on both directions: %+v", imp)
	code, out, errs := run(t, "lnet", "ping", nodes[1].nid, "--socket", nodes[0].sock, "-c", "5", "-i", "10ms", "--timeout", "20s")
	if code != 0 || !strings.Contains(out, "5 replies") {
		t.Errorf("ping over lossy link: %d\n%s%s", code, out, errs)
	}
	for i, size := range []int{0, 100, 8192, 300000, 1 << 20} {
		putGet(t, nodes[i%2], nodes[(i+1)%2], size, i%4, 10+i)
	}
	st := nodes[0].doc("stats", "show").Get("statistics").(Map)
	if st.Get("errors") != int64(0) {
		t.Errorf("errors over a lossy link TCP should hide:\n%s", YAML(st))
	}
}

// TestE2EMDAndLazyPortal: MD threshold and auto-unlink, and a PUT held
// on a lazy portal, between two lnetd processes.
func TestE2EMDAndLazyPortal(t *testing.T) {
	port := reservePort()
	ipA, ipB := testIP(), testIP()
	a := startProc(t, "A", ipA, nodeYAML(ipA, port, ""))
	b := startProc(t, "B", ipB, nodeYAML(ipB, port, ""))
	b.ctl("test", "md", "add", "--portal", "30", "--bits", "5", "--size", "4096", "--threshold", "2", "--options", "put,get,manage_remote")
	a.ctl("test", "put", "--nid", b.nid, "--portal", "30", "--bits", "5", "--size", "4096", "--seed", "3")
	g := a.doc("test", "get", "--nid", b.nid, "--portal", "30", "--bits", "5", "--size", "4096")
	md := b.doc("test", "show").Path("test service", "mds", 0).(Map)
	if g.Path("test get", "crc32") != md.Get("crc32") || md.Get("unlinked") != true {
		t.Errorf("threshold-2 MD after PUT+GET: get %s md %s", YAML(g), YAML(md))
	}
	if code, out, _ := run(t, "lnetctl", "--socket", a.sock, "test", "get", "--nid", b.nid, "--portal", "30",
		"--bits", "5", "--size", "4096", "--timeout", "2s"); code == 0 || !strings.Contains(out, "ok: 0") {
		t.Errorf("GET after the MD was unlinked succeeded:\n%s", out)
	}

	b.ctl("test", "lazy", "--portal", "31")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	put := exec.CommandContext(ctx, softibBin(t), "lnetctl", "--socket", a.sock, "test", "put", "--nid", b.nid,
		"--portal", "31", "--bits", "1", "--size", "70000", "--timeout", "40s")
	var pout bytes.Buffer
	put.Stdout, put.Stderr = &pout, &pout
	if err := put.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hangGuard)
	for b.doc("test", "show").Path("test service", "delayed_puts").(int64) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("PUT never held on the lazy portal")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.ctl("test", "md", "add", "--portal", "31", "--bits", "1", "--size", "70000", "--threshold", "1")
	if err := put.Wait(); err != nil || !strings.Contains(pout.String(), "ok: 1") {
		t.Fatalf("lazy PUT: %v\n%s", err, pout.String())
	}
}
