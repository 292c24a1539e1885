//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"softib/internal/testaddr"
)

// lockedBuf is a goroutine-safe output buffer for a child process.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProc starts `bin args...`, killed at the test's end.
func startProc(t *testing.T, bin string, args ...string) (*exec.Cmd, *lockedBuf, *lockedBuf) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), netnsGuard)
	cmd := exec.CommandContext(ctx, bin, args...)
	out, errb := &lockedBuf{}, &lockedBuf{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	return cmd, out, errb
}

// waitFor waits (hang guard only) until buf holds want.
func waitFor(t *testing.T, what string, buf *lockedBuf, want string) {
	t.Helper()
	deadline := time.Now().Add(netnsGuard)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q in:\n%s", what, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exitCode waits for cmd and returns its exit code.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestCLIPerfInterrupt: Ctrl-C during a perf client run prints the
// partial result and exits 130.
func TestCLIPerfInterrupt(t *testing.T) {
	bin := buildSoftib(t)
	port := reservePort()
	srv := testaddr.Next().String()
	_, sout, _ := startProc(t, bin, "write_bw", "--addr", srv, "-p", port, "-n", "100000000", "-s", "4096")
	waitFor(t, "server", sout, "Waiting for client")
	cli, cout, cerr := startProc(t, bin, "write_bw", "--addr", testaddr.Next().String(), "-p", port, "-n", "100000000", "-s", "4096", srv)
	waitFor(t, "client", cout, "#bytes")
	time.Sleep(300 * time.Millisecond) // let some messages complete: not asserted on
	if err := cli.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cli); code != exitInterrupted || !strings.Contains(cout.String(), "partial result") || !strings.Contains(cerr.String(), "interrupted") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, cout, cerr)
	}
}

// startLnetd starts an lnetd on ip (tcp, acceptor on port) with a control
// socket of its own and waits until it is ready.
func startLnetd(t *testing.T, bin, ip, port string) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	cfg, sock := dir+"/lnet.yaml", dir+"/lnetd.sock"
	yaml := "net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              0: " + ip +
		"\nglobal:\n    accept_port: " + port + "\n    accept: all\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, out, errb := startProc(t, bin, "lnetd", "--config", cfg, "--socket", sock)
	deadline := time.Now().Add(netnsGuard)
	for !strings.Contains(out.String()+errb.String(), "lnetd: ready") {
		if time.Now().After(deadline) {
			t.Fatalf("lnetd on %s not ready:\n%s%s", ip, out, errb)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, sock
}

// TestCLILstInterrupt: Ctrl-C during lst quick stops the test, prints the
// totals so far and exits 130.
func TestCLILstInterrupt(t *testing.T) {
	bin := buildSoftib(t)
	port := reservePort()
	a, b := testaddr.Next().String(), testaddr.Next().String()
	startLnetd(t, bin, a, port)
	startLnetd(t, bin, b, port)
	lst, out, errb := startProc(t, bin, "lst", "quick", "--if", testaddr.Next().String(), "--port", port,
		"--from", a+"@tcp", "--to", b+"@tcp", "--seconds", "60", "--delay", "0.2", "brw", "write", "size=64K")
	waitFor(t, "lst", out, "[LNet Rates of clients]")
	if err := lst.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, lst); code != exitInterrupted || !strings.Contains(out.String(), "[Total]") || !strings.Contains(errb.String(), "interrupted") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
}

// TestCLILnetdSignals: lnetd logs and ignores SIGHUP (it keeps serving)
// and removes its control socket when it ends.
func TestCLILnetdSignals(t *testing.T) {
	bin := buildSoftib(t)
	d, sock := startLnetd(t, bin, testaddr.Next().String(), reservePort())
	if err := d.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// A command answered after the SIGHUP: lnetd is still serving.
	if out, err := exec.Command(bin, "lnetctl", "--socket", sock, "net", "show").CombinedOutput(); err != nil {
		t.Fatalf("lnetctl after SIGHUP: %v\n%s", err, out)
	}
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, d); code != 0 {
		t.Fatalf("lnetd exit %d", code)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// TestCLIDemoInterrupt: Ctrl-C during the demo reports "interrupted", not
// FAILED, and exits 130.
func TestCLIDemoInterrupt(t *testing.T) {
	bin := buildSoftib(t)
	nodes := []string{testaddr.Next().String(), testaddr.Next().String(), testaddr.Next().String()}
	d, out, errb := startProc(t, bin, "demo", "--addrs", strings.Join(nodes, ","), "--port", "0",
		"--addr-a", testaddr.Next().String(), "--addr-b", testaddr.Next().String())
	deadline := time.Now().Add(netnsGuard)
	for errb.String() == "" && out.String() == "" { // the progress bar has started
		if time.Now().After(deadline) {
			t.Fatal("demo printed nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	all := func() string { return out.String() + errb.String() }
	if code := exitCode(t, d); code != exitInterrupted || !strings.Contains(all(), "interrupted") || strings.Contains(all(), "FAILED") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
}

// TestCLILnetctlLnet: lnetctl lnet configure (LNet is up while lnetd
// runs; --all is refused), ping --timeout in Lustre's seconds, and lnet
// unconfigure (every net but lo goes).
func TestCLILnetctlLnet(t *testing.T) {
	bin := buildSoftib(t)
	ip := testaddr.Next().String()
	_, sock := startLnetd(t, bin, ip, reservePort())
	ctl := func(args ...string) (int, string, string) {
		return runBin(t, bin, append([]string{"lnetctl", "--socket", sock}, args...)...)
	}
	if code, out, errs := ctl("ping", "--timeout", "5", ip+"@tcp"); code != 0 || !strings.Contains(out, "primary nid") {
		t.Fatalf("ping --timeout 5: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := ctl("lnet", "configure"); code != 0 {
		t.Fatalf("lnet configure: exit %d %s", code, errs)
	}
	if code, _, errs := ctl("lnet", "configure", "--all"); code != 1 || !strings.Contains(errs, "net add") {
		t.Fatalf("lnet configure --all: exit %d %s", code, errs)
	}
	if code, _, errs := ctl("lnet", "unconfigure"); code != 0 {
		t.Fatalf("lnet unconfigure: exit %d %s", code, errs)
	}
	if code, out, _ := ctl("net", "show"); code != 0 || strings.Contains(out, "@tcp") || !strings.Contains(out, "0@lo") {
		t.Fatalf("net show after unconfigure: exit %d\n%s", code, out)
	}
}

// TestCLILnetPingJSON: softib lnet ping --json through an lnetd.
func TestCLILnetPingJSON(t *testing.T) {
	bin := buildSoftib(t)
	ip := testaddr.Next().String()
	_, sock := startLnetd(t, bin, ip, reservePort())
	code, out, errs := runBin(t, bin, "lnet", "ping", ip+"@tcp", "-c", "2", "-i", "10ms", "--timeout", "5", "--socket", sock, "--json")
	var doc struct {
		Sent     int `json:"sent"`
		Received int `json:"received"`
		Replies  []struct {
			PrimaryNID string  `json:"primary_nid"`
			RTT        float64 `json:"rtt_ms"`
		} `json:"replies"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || doc.Sent != 2 || doc.Received != 2 || doc.Replies[0].PrimaryNID != ip+"@tcp" {
		t.Fatalf("exit %d (%v)\n%s%s", code, err, out, errs)
	}
}

// TestCLIPerfRunInfinitely: --run_infinitely -D 1 reports a row each
// second (with -q 2, each QP's too) until Ctrl-C, then exits 130.
func TestCLIPerfRunInfinitely(t *testing.T) {
	bin := buildSoftib(t)
	port := reservePort()
	srv := testaddr.Next().String()
	_, sout, _ := startProc(t, bin, "write_bw", "--addr", srv, "-p", port, "-q", "2", "--run_infinitely", "-D", "1")
	waitFor(t, "server", sout, "Waiting for client")
	cli, cout, cerr := startProc(t, bin, "write_bw", "--addr", testaddr.Next().String(), "-p", port, "-q", "2",
		"--run_infinitely", "-D", "1", srv)
	waitFor(t, "client", cout, "QP 2") // the first interval's per-QP rows
	if err := cli.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cli); code != exitInterrupted || !strings.Contains(cout.String(), "QP 1") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, cout, cerr)
	}
}

// TestCLILnetctlDebugRecovery: an NI whose health is set below 1000 is
// listed by debug recovery, in Lustre's shape.
func TestCLILnetctlDebugRecovery(t *testing.T) {
	bin := buildSoftib(t)
	ip, peer := testaddr.Next().String(), testaddr.Next().String()
	_, sock := startLnetd(t, bin, ip, reservePort())
	ctl := func(args ...string) string {
		t.Helper()
		code, out, errs := runBin(t, bin, append([]string{"lnetctl", "--socket", sock}, args...)...)
		if code != 0 {
			t.Fatalf("lnetctl %v: exit %d\n%s%s", args, code, out, errs)
		}
		return out
	}
	if out := ctl("debug", "recovery", "--local"); strings.Contains(out, "nid-0") {
		t.Fatalf("healthy NI in recovery:\n%s", out)
	}
	ctl("net", "set", "--nid", ip+"@tcp", "--health", "500")
	if out := ctl("debug", "recovery", "--local"); !strings.Contains(out, "local NI recovery:") || !strings.Contains(out, "nid-0: "+ip+"@tcp") {
		t.Fatalf("debug recovery --local:\n%s", out)
	}
	ctl("peer", "add", "--prim_nid", peer+"@tcp")
	ctl("peer", "set", "--nid", peer+"@tcp", "--health", "100")
	if out := ctl("debug", "recovery", "--peer"); !strings.Contains(out, "peer NI recovery:") || !strings.Contains(out, "nid-0: "+peer+"@tcp") {
		t.Fatalf("debug recovery --peer:\n%s", out)
	}
}
