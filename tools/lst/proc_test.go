package lst

// Multi-process tests: softib is built once, lnetd processes run on
// loopback addresses of this test binary (internal/testaddr) sharing one
// reserved port, and `softib lst` drives them as a user would.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/testenv"
	"softib/lnet/selftest"
)

// hangGuard bounds waits; it is a guard against hangs, not a timing check.
const hangGuard = 90 * time.Second

// addrs returns n loopback addresses of this test binary.
func addrs(n int) []string {
	var out []string
	for range n {
		out = append(out, testaddr.Next().String())
	}
	return out
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// softibBin builds softib/cmd/softib once per test binary.
func softibBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "selftest-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "softib")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, "softib/cmd/softib").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

type procNode struct {
	nid    string
	sock   string // control socket
	cmd    *exec.Cmd
	log    *testenv.Buffer
	exited chan struct{}
}

// kill SIGKILLs the node and waits for it.
func (n *procNode) kill() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// reservePort returns a TCP port for the nodes' accept_port: each binds
// it on its own address (addrs'), never on the wildcard, which the
// reservation would refuse. This test binary holds it with a live
// listener on a testaddr block's .0 address until it exits
// (testaddr.Port), which keeps every other process's wildcard socket off
// it: a port found free and closed again could be taken meanwhile.
func reservePort() int {
	return testaddr.Port(0)
}

// startNodes starts lnetd on each address with the shared port.
func startNodes(t *testing.T, port int, ips ...string) []*procNode {
	t.Helper()
	return startNodesSock(t, port, nil, ips...)
}

// startNodesSock is startNodes with given control sockets (nil or ""
// entries: a private one).
func startNodesSock(t *testing.T, port int, socks []string, ips ...string) []*procNode {
	t.Helper()
	bin := softibBin(t)
	var nodes []*procNode
	for i, ip := range ips {
		dir := t.TempDir()
		sock := filepath.Join(dir, "run", "lnetd.sock")
		if i < len(socks) && socks[i] != "" {
			sock = socks[i]
		}
		cfg := filepath.Join(dir, "lnet.yaml")
		yaml := fmt.Sprintf("net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              0: %s\n"+
			"global:\n    accept_port: %d\n    accept: all\n    transaction_timeout: 20\n", ip, port)
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		n := &procNode{nid: ip + "@tcp", sock: sock, log: &testenv.Buffer{}, exited: make(chan struct{})}
		n.cmd = exec.Command(bin, "lnetd", "--config", cfg, "--socket", sock)
		n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { n.cmd.Wait(); close(n.exited) }()
		t.Cleanup(func() {
			n.kill()
			if t.Failed() {
				t.Logf("%s log:\n%s", n.nid, n.log)
			}
		})
		nodes = append(nodes, n)
	}
	deadline := time.Now().Add(hangGuard)
	for _, n := range nodes {
		for !strings.Contains(n.log.String(), "lnetd: ready") {
			select {
			case <-n.exited:
				t.Fatalf("%s exited at start:\n%s", n.nid, n.log)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready:\n%s", n.nid, n.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nodes
}

// lstRun runs softib lst with a hang guard; it returns exit code and
// outputs.
func lstRun(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, softibBin(t), append([]string{"lst"}, args...)...)
	// A runtime directory of the test's own unless the test gives one:
	// lst uses an lnetd it finds at the default control socket, and
	// one may run on the host beside the tests.
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("lst %v hung:\n%s%s", args, out.String(), errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func TestProcQuick(t *testing.T) {
	port := reservePort()
	ip := addrs(3)
	startNodes(t, port, ip...)
	p := strconv.Itoa(port)
	for _, test := range [][]string{
		{"brw", "write", "size=4K", "check=full"},
		{"brw", "write", "size=1M", "check=full"},
		{"brw", "read", "size=4K", "check=full"},
		{"brw", "read", "size=1M", "check=full"},
		{"ping"},
	} {
		t.Run(strings.Join(test, "_"), func(t *testing.T) {
			args := append([]string{"quick", "--from", ip[0] + "@tcp", "--to", ip[1] + "@tcp," + ip[2] + "@tcp", "--port", p,
				"--seconds", "1", "--delay", "0.5", "--concurrency", "4", "--distribute", "1:N", "--json"}, test...)
			code, out, errs := lstRun(t, nil, args...)
			var res QuickResult
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("exit %d, bad JSON %v:\n%s\n%s", code, err, out, errs)
			}
			if code != 0 || !res.OK || res.Errors != 0 || res.RPCs == 0 {
				t.Fatalf("exit %d: %+v\n%s", code, res, errs)
			}
			if test[0] == "brw" && res.MiBRate <= 0 {
				t.Fatalf("no bandwidth: %+v", res)
			}
			t.Logf("%v: %d RPCs, %.0f RPC/s, %.2f MiB/s", test, res.RPCs, res.RPCRate, res.MiBRate)
		})
	}
	// The table form prints lst's blocks.
	code, out, errs := lstRun(t, nil, "quick", "--from", ip[0]+"@tcp", "--to", ip[1]+"@tcp", "--port", p,
		"--seconds", "0.5", "--delay", "0.5", "ping")
	if code != 0 || !strings.Contains(out, "[LNet Rates of servers]") || !strings.Contains(out, "[LNet Bandwidth of clients]") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errs)
	}
}

// TestProcSession drives a session across separate lst invocations.
func TestProcSession(t *testing.T) {
	port := reservePort()
	ip := addrs(2)
	startNodes(t, port, ip...)
	env := []string{"LST_SESSION_FILE=" + filepath.Join(t.TempDir(), "lst.json")}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errs := lstRun(t, env, args...)
		if code != 0 {
			t.Fatalf("lst %v: exit %d\n%s%s", args, code, out, errs)
		}
		return out
	}
	ok("new_session", "s1", "--port", strconv.Itoa(port), "--timeout", "60")
	if code, _, errs := lstRun(t, env, "new_session", "s2"); code == 0 || !strings.Contains(errs, "end_session first") {
		t.Fatalf("second session: exit %d %s", code, errs)
	}
	ok("add_group", "clients", ip[0]+"@tcp")
	ok("add_group", "servers", ip[1]+"@tcp")
	ok("add_batch", "b")
	ok("add_test", "--batch", "b", "--from", "clients", "--to", "servers", "--concurrency", "2", "--loop", "200",
		"brw", "write", "size=64K", "check=full")
	if out := ok("list_batch", "b"); !strings.Contains(out, "brw write size=64K check=full") {
		t.Fatalf("list_batch:\n%s", out)
	}
	ok("run", "b")
	deadline := time.Now().Add(hangGuard)
	for !strings.Contains(ok("query", "b"), "is idle") {
		if time.Now().After(deadline) {
			t.Fatal("batch never finished its 2×200 RPCs")
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := ok("stat", "--count", "1", "--delay", "0.2", "--json", "clients", "servers")
	var sample struct{ Groups []selftest.GroupStats }
	if err := json.Unmarshal([]byte(out), &sample); err != nil || len(sample.Groups) != 2 {
		t.Fatalf("stat JSON %v:\n%s", err, out)
	}
	// Concurrency 2: two units of 200 RPCs each.
	if k := sample.Groups[0].Nodes[0].Counters; k.RPC.RPCsSent != 400 || k.FW.BRWErrors != 0 || k.RPC.Errors != 0 {
		t.Fatalf("client counters %+v", k)
	}
	if k := sample.Groups[1].Nodes[0].Counters; k.RPC.BulkGet != 400*64<<10 || k.RPC.RPCsRcvd < 400 {
		t.Fatalf("server counters %+v", k)
	}
	// --json of the listing commands: snake_case, states as strings.
	var q struct {
		Batch, State string
		Nodes        []struct {
			NID    string `json:"nid"`
			Active int    `json:"active_tests"`
		}
	}
	if out := ok("query", "b", "--json"); json.Unmarshal([]byte(out), &q) != nil || q.State != "IDLE" || len(q.Nodes) != 2 {
		t.Fatalf("query --json:\n%s", out)
	}
	var lg struct {
		Groups []struct {
			Name   string
			Active int
			Nodes  []struct{ NID, State string }
		}
	}
	if out := ok("list_group", "servers", "--json"); json.Unmarshal([]byte(out), &lg) != nil || len(lg.Groups) != 1 ||
		lg.Groups[0].Active != 1 || lg.Groups[0].Nodes[0].State != "ACTIVE" {
		t.Fatalf("list_group --json:\n%s", out)
	}
	// The table form is lst's.
	out = ok("stat", "--count", "1", "--delay", "0.2", "servers")
	if !strings.Contains(out, "[LNet Rates of servers]\n[R] Avg: ") || !strings.Contains(out, "MiB/s Min: ") {
		t.Fatalf("stat:\n%s", out)
	}
	// Another console cannot take the nodes without --force.
	env2 := []string{"LST_SESSION_FILE=" + filepath.Join(t.TempDir(), "other.json")}
	if code, _, _ := lstRun(t, env2, "quick", "--from", ip[0]+"@tcp", "--to", ip[1]+"@tcp", "--port", strconv.Itoa(port),
		"--seconds", "0.2", "--delay", "0.2", "ping"); code == 0 {
		t.Fatal("quick took nodes that are in another session")
	}
	ok("stop", "b")
	ok("end_session")
	if _, err := os.Stat(strings.TrimPrefix(env[0], "LST_SESSION_FILE=")); !os.IsNotExist(err) {
		t.Fatalf("session file left behind: %v", err)
	}
}

var recvLength = regexp.MustCompile(`(?m)^\s*recv_length: (\d+)$`)

// killAfterRecv SIGKILLs n once its LNet has received at least bytes (its
// stats' recv_length, polled with lnetctl through its control socket).
// It runs on its own goroutine: it returns an error rather than failing
// the test.
func killAfterRecv(bin string, n *procNode, bytes int64) error {
	deadline := time.Now().Add(hangGuard)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		out, err := exec.CommandContext(ctx, bin, "lnetctl", "--socket", n.sock, "stats", "show").Output()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: lnetctl stats show: %v", n.nid, err)
		}
		m := recvLength.FindSubmatch(out)
		if m == nil {
			return fmt.Errorf("%s: no recv_length in:\n%s", n.nid, out)
		}
		if v, _ := strconv.ParseInt(string(m[1]), 10, 64); v >= bytes {
			n.kill()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s received %s B, never %d: not killed", n.nid, m[1], bytes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProcKillServer kills a server during a quick run: the run must end
// on time, report errors and exit non-zero.
func TestProcKillServer(t *testing.T) {
	port := reservePort()
	ip := addrs(3)
	nodes := startNodes(t, port, ip...)
	// Kill the second server once the run's bulk data reaches it, not
	// after a guessed delay, which a busy machine could let pass before
	// the run starts.
	bin := softibBin(t)
	killed := make(chan error, 1)
	go func() { killed <- killAfterRecv(bin, nodes[2], 1<<20) }()
	start := time.Now()
	code, out, errs := lstRun(t, nil, "quick", "--from", ip[0]+"@tcp", "--to", ip[1]+"@tcp,"+ip[2]+"@tcp", "--port", strconv.Itoa(port),
		"--seconds", "3", "--concurrency", "4", "--distribute", "1:N", "--json", "brw", "write", "size=1M", "check=full")
	var res QuickResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("exit %d, bad JSON %v:\n%s\n%s", code, err, out, errs)
	}
	if err := <-killed; err != nil {
		t.Fatalf("%v (lst exit %d: %+v)", err, code, res)
	}
	if code != 1 || res.OK || (res.Errors == 0 && len(res.Down) == 0) {
		t.Fatalf("exit %d after a server died: %+v", code, res)
	}
	t.Logf("exit %d after %v: %d errors, unreachable %v, problems %q", code, time.Since(start).Round(time.Millisecond), res.Errors, res.Down, res.Problems)
}

// TestProcDefaultNode is the README's example: a node runs at the default
// control socket with its own accept_port, and lst quick, given no --port
// and its flags after the test spec, goes through that node (which knows
// the port) instead of dialling 988.
func TestProcDefaultNode(t *testing.T) {
	port := reservePort()
	xdg := t.TempDir()
	ip := addrs(2)
	startNodesSock(t, port, []string{filepath.Join(xdg, "softib", "lnetd.sock")}, ip...)
	env := []string{"XDG_RUNTIME_DIR=" + xdg}
	code, out, errs := lstRun(t, env, "quick", "--from", ip[0]+"@tcp", "--to", ip[1]+"@tcp",
		"brw", "write", "size=64K", "check=full", "--seconds", "0.6", "--delay", "0.3", "--json")
	var res QuickResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || !res.OK || res.RPCs == 0 {
		t.Fatalf("exit %d, %+v (%v)\n%s%s", code, res, err, out, errs)
	}
}

// TestProcOnNode runs lst on a node: the console's address (--if) is
// that node's NID, so lst goes through the node's lnetd at the default
// socket, and the node itself takes part (its own TEST destination list
// is a bulk the node GETs from itself).
func TestProcOnNode(t *testing.T) {
	port := reservePort()
	xdg := t.TempDir()
	ip := addrs(2)
	startNodesSock(t, port, []string{filepath.Join(xdg, "softib", "lnetd.sock")}, ip...)
	env := []string{"XDG_RUNTIME_DIR=" + xdg}
	code, out, errs := lstRun(t, env, "quick", "--if", ip[0], "--from", ip[0]+"@tcp", "--to", ip[1]+"@tcp", "--port", strconv.Itoa(port),
		"--seconds", "0.6", "--delay", "0.3", "--concurrency", "4", "--json", "brw", "read", "size=64K", "check=full")
	var res QuickResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || !res.OK || res.RPCs == 0 {
		t.Fatalf("exit %d %v: %+v\n%s", code, err, res, errs)
	}
	// A session file made there remembers the socket.
	env = append(env, "LST_SESSION_FILE="+filepath.Join(xdg, "s.json"))
	for _, args := range [][]string{
		{"new_session", "n", "--port", strconv.Itoa(port), "--if", ip[0]},
		{"add_group", "all", ip[0] + "@tcp", ip[1] + "@tcp"},
		{"list_group", "all"},
		{"end_session"},
	} {
		if code, out, errs := lstRun(t, env, args...); code != 0 {
			t.Fatalf("lst %v: exit %d\n%s%s", args, code, out, errs)
		}
	}
}

// TestProcSocketSessionNID: a session made with an explicit --socket is
// named after lnetd's NID (the local address towards the nodes, or --if),
// as the kernel's lst names its session after its node's NID, not 0@lo
// (found against the Lustre 2.17 kernel: its node recorded the softib
// console's session as 0@<0:0>).
func TestProcSocketSessionNID(t *testing.T) {
	port := reservePort()
	ip := addrs(2)
	sock := filepath.Join(t.TempDir(), "run", "lnetd.sock")
	startNodesSock(t, port, []string{sock}, ip...)
	env := []string{"LST_SESSION_FILE=" + filepath.Join(t.TempDir(), "s.json")}
	for _, args := range [][]string{
		{"new_session", "n", "--port", strconv.Itoa(port), "--if", ip[0], "--socket", sock},
		{"add_group", "all", ip[0] + "@tcp", ip[1] + "@tcp"},
	} {
		if code, out, errs := lstRun(t, env, args...); code != 0 {
			t.Fatalf("lst %v: exit %d\n%s%s", args, code, out, errs)
		}
	}
	code, out, errs := lstRun(t, env, "show_session")
	if code != 0 || !strings.Contains(out, "@"+ip[0]+"@tcp,") {
		t.Fatalf("show_session: exit %d, want the session named after %s@tcp:\n%s%s", code, ip[0], out, errs)
	}
	if code, out, errs := lstRun(t, env, "end_session"); code != 0 {
		t.Fatalf("end_session: exit %d\n%s%s", code, out, errs)
	}
}
