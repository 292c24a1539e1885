package lustre

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"softib/internal/testenv"
)

// softib binary, built once per test binary.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Softib returns the path of a softib binary: $INTEROP_SOFTIB when set
// (as scripts/interop.sh's suite takes it), else ./cmd/softib built once
// per test binary into a temporary directory.
func Softib(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("INTEROP_SOFTIB"); p != "" {
			binPath = p
			return
		}
		dir, err := os.MkdirTemp("", "softib-lustre-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "softib")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, "softib/cmd/softib").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build softib/cmd/softib: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// Main runs the package's tests and then removes the softib binary that
// [Softib] built. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if binPath != "" && os.Getenv("INTEROP_SOFTIB") == "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// LnetdConfig configures the host's softib lnetd.
type LnetdConfig struct {
	// Nets lists the networks, each with one NI on the tap address
	// (192.168.77.1@NET); default [Nets]. An o2ib NI opens a softib
	// Soft-RoCE device on that address (UDP 4791 in the namespace).
	Nets []string
	// YAML replaces the generated configuration when set (lnetctl's
	// import shape; see package tools/lnetd).
	YAML string
	// Global is extra "global:" YAML lines (indented by four spaces), e.g.
	// "    transaction_timeout: 30".
	Global string
	// LogLevel is lnetd's --log-level; "info" by default.
	LogLevel string
}

// Config renders the YAML lnetd runs with for a host at ip.
func (c LnetdConfig) Config(ip string) string {
	if c.YAML != "" {
		return c.YAML
	}
	nets := c.Nets
	if len(nets) == 0 {
		nets = Nets
	}
	var b strings.Builder
	b.WriteString("net:\n")
	for _, n := range nets {
		fmt.Fprintf(&b, "    - net type: %s\n      local NI(s):\n        - interfaces:\n              0: %s\n", n, ip)
	}
	if c.Global != "" {
		b.WriteString("global:\n" + strings.TrimRight(c.Global, "\n") + "\n")
	}
	return b.String()
}

// Lnetd is the real `softib lnetd` running on the host inside the guest's
// network namespace, controlled with `softib lnetctl` over its socket.
type Lnetd struct {
	t      testing.TB
	g      *Guest
	bin    string
	dir    string
	config string
	sock   string
	level  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    testenv.Buffer
	starts int
}

// StartLnetd starts softib lnetd in g's network namespace with cfg and
// waits until it is ready. It is killed when the test ends; its log goes
// to the test log when the test failed.
func StartLnetd(t testing.TB, g *Guest, cfg LnetdConfig) *Lnetd {
	t.Helper()
	dir := t.TempDir()
	d := &Lnetd{t: t, g: g, bin: Softib(t), dir: dir,
		config: filepath.Join(dir, "lnet.yaml"), sock: filepath.Join(dir, "run", "lnetd.sock"), level: cfg.LogLevel}
	if d.level == "" {
		d.level = "info"
	}
	if err := os.WriteFile(d.config, []byte(cfg.Config(g.VM.HostIP())), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Kill()
		if t.Failed() || testing.Verbose() {
			t.Logf("softib lnetd log:\n%s", d.Log())
		}
	})
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	return d
}

// lnetdReady bounds the wait for "lnetd: ready".
const lnetdReady = time.Minute

func (d *Lnetd) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		select {
		case <-d.exited:
		default:
			return fmt.Errorf("lnetd: already running")
		}
	}
	d.starts++
	fmt.Fprintf(&d.log, "=== start %d\n", d.starts)
	from := len(d.log.String())
	cmd := d.g.VM.Command(context.Background(), d.bin, "lnetd", "--config", d.config, "--socket", d.sock, "--log-level", d.level)
	cmd.Stdout, cmd.Stderr = &d.log, &d.log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.cmd, d.exited = cmd, exited
	deadline := time.After(lnetdReady)
	for !strings.Contains(d.log.String()[from:], "lnetd: ready") {
		select {
		case <-exited:
			return fmt.Errorf("lnetd exited at start:\n%s", d.log.String()[from:])
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("lnetd not ready after %v:\n%s", lnetdReady, d.log.String()[from:])
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Kill SIGKILLs lnetd (as a crash would: no connection is closed
// cleanly) and waits for it to exit. It does nothing when lnetd is not
// running.
func (d *Lnetd) Kill() { d.signal(syscall.SIGKILL) }

// Stop ends lnetd with SIGTERM (an orderly shutdown) and waits for it.
func (d *Lnetd) Stop() { d.signal(syscall.SIGTERM) }

func (d *Lnetd) signal(sig syscall.Signal) {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart starts lnetd again with the same configuration and socket,
// after Kill or Stop (a new process, so a new LNet incarnation). It fails
// the test on error.
func (d *Lnetd) Restart() {
	d.t.Helper()
	if err := d.start(); err != nil {
		d.t.Fatal(err)
	}
}

// Reconfigure stops lnetd (SIGTERM) and starts it again with cfg (a new
// process and incarnation). It fails the test on error.
func (d *Lnetd) Reconfigure(cfg LnetdConfig) {
	d.t.Helper()
	d.Stop()
	if err := os.WriteFile(d.config, []byte(cfg.Config(d.g.VM.HostIP())), 0o644); err != nil {
		d.t.Fatal(err)
	}
	if err := d.start(); err != nil {
		d.t.Fatal(err)
	}
}

// PrimaryFirst returns [Nets] with net first: an lnetd with those nets
// has its NI on net as its primary NID (the first NID of its ping
// buffer).
//
// A kernel that discovered softib as a Multi-Rail peer knows it by that
// primary NID: it is the initiator of everything softib sends, and the
// kernel's unique portals (lnet_selftest's reply and bulk portal) look MEs
// up by the initiator's NID, so an ME posted for another NID of softib is
// not found (a lost reply, an RPC timeout, ENODATA for a bulk GET).
// lnet_selftest posts its MEs for the NID the console named: the lst tests
// name softib by its primary NID, as for a Multi-Rail kernel node.
func PrimaryFirst(net string) []string {
	out := []string{net}
	for _, n := range Nets {
		if n != net {
			out = append(out, n)
		}
	}
	return out
}

// Running reports whether the lnetd process is alive.
func (d *Lnetd) Running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// NID is lnetd's NID on net: the tap address.
func (d *Lnetd) NID(net string) string { return d.g.VM.HostIP() + "@" + net }

// Socket is lnetd's control socket.
func (d *Lnetd) Socket() string { return d.sock }

// Log returns everything lnetd printed, across restarts.
func (d *Lnetd) Log() string { return d.log.String() }

// ctlTimeout bounds one softib lnetctl command.
const ctlTimeout = 2 * time.Minute

// Ctl runs `softib lnetctl --socket SOCK args...` and returns its
// standard output; a non-zero exit is an error carrying both outputs.
func (d *Lnetd) Ctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(d.g.ctx, ctlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, append([]string{"lnetctl", "--socket", d.sock}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("softib lnetctl %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// Run runs `softib args...` inside the guest's network namespace (a
// command that opens its own LNet node or device binds there; pass
// "--socket", d.Socket() to go through this lnetd, e.g. for `softib lst`)
// and returns its standard output; a non-zero exit is an error carrying
// both outputs.
func (d *Lnetd) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(d.g.ctx, ctlTimeout)
	defer cancel()
	cmd := d.g.VM.Command(ctx, d.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("softib %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// Ping pings nid from softib (`softib lnetctl ping --timeout`) and returns
// the YAML reply; it fails unless the reply names nid.
func (d *Lnetd) Ping(nid string) (string, error) {
	out, err := d.Ctl("ping", "--timeout", PingTimeout.String(), nid)
	if err != nil {
		return out, err
	}
	if !strings.Contains(out, "nid: "+nid) {
		return out, fmt.Errorf("softib lnetctl ping %s: no reply naming %s:\n%s", nid, nid, out)
	}
	return out, nil
}
