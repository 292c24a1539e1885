// Package lustre runs softib's LNet against a real Lustre 2.17 kernel LNet:
// the interop guest (interop/image.sh) carries Lustre's modules (libcfs,
// lnet, ksocklnd, ko2iblnd over the guest's rdma_rxe, lnet_selftest) and
// its utilities (lnetctl, lst), built from the Lustre source by
// ../shared/lustre/build-lnet.sh. The host side is the real `softib lnetd`
// binary running in the VM's network namespace.
//
// A test boots a guest, brings the kernel's LNet up, starts lnetd and
// drives both sides:
//
//	func TestInteropSomething(t *testing.T) {
//		g := lustre.Boot(t) // nil: no image configured, the test passes over
//		if g == nil {
//			return
//		}
//		g.LNetUp()                                       // tcp and o2ib on eth0
//		d := lustre.StartLnetd(t, g, lustre.LnetdConfig{}) // tcp and o2ib on the tap address
//		if _, err := g.Ping(g.Context(), d.NID("tcp")); err != nil { // kernel -> softib
//			t.Fatal(err)
//		}
//		if _, err := d.Ping(g.NID("o2ib")); err != nil { // softib -> kernel
//			t.Fatal(err)
//		}
//	}
//
// Every guest is checked when its test ends: a kernel log line with
// "LNetError" (or a kernel BUG, Oops or WARNING) fails the test unless a
// pattern given to [Guest.AllowLNetError] matches it; the whole kernel log
// is then written to the test log.
//
// Tests run only when SOFTIB_INTEROP_IMAGE names an image made by
// interop/image.sh (scripts/interop.sh sets it); otherwise [Boot] returns
// nil, so the unit-test run passes over them. They need root, qemu, ip and
// tcpdump; tshark for [CheckDecode].
package lustre

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/interop/vm"
	"softib/interop/vmtest"
)

// Nets are the LNet networks both sides bring up by default: socklnd over
// TCP and o2iblnd over RoCEv2 (the guest's rdma_rxe, softib's rxe).
var Nets = []string{"tcp", "o2ib"}

// DefaultJobTimeout bounds a guest job run by [Guest.Run].
const DefaultJobTimeout = 2 * time.Minute

// bootTimeout bounds a whole test that boots a guest.
const bootTimeout = 20 * time.Minute

// Guest is a booted interop guest with Lustre's LNet installed (not yet
// loaded: see [Guest.LNetUp]).
type Guest struct {
	// VM is the guest itself: its namespace, tap, addresses, share and
	// captures (VM.Capture).
	VM *vm.VM

	t   testing.TB
	ctx context.Context

	mu      sync.Mutex
	allowed []*regexp.Regexp
}

// Boot boots the interop guest for test t, or returns nil (the test then
// returns) when SOFTIB_INTEROP_IMAGE is unset or -short is given. It fails
// the test when the image has no Lustre in it. The guest is stopped when
// the test ends, after the kernel log check (see [Guest.CheckNoLNetError]).
// It builds softib first (see [Softib]).
func Boot(t testing.TB) *Guest {
	t.Helper()
	if os.Getenv("SOFTIB_INTEROP_IMAGE") != "" && !testing.Short() {
		// Before the boot: the build must not compete with the guest.
		Softib(t)
	}
	ctx, v := vmtest.Boot(t, "Lustre LNet interop", "siblu", bootTimeout)
	if v == nil {
		return nil
	}
	g := &Guest{VM: v, t: t, ctx: ctx}
	// Cleanups run last-in first-out: this one runs before vmtest's Stop.
	t.Cleanup(func() { g.CheckNoLNetError(t) })
	r, err := g.Run(ctx, `command -v lnetctl lst && modinfo -F filename lnet ko2iblnd ksocklnd lnet_selftest && uname -r`)
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != 0 {
		t.Fatalf("the interop image has no Lustre LNet (rebuild it with interop/image.sh and SOFTIB_LUSTRE_DIR set): exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	t.Logf("guest Lustre:\n%s", strings.TrimSpace(r.Stdout))
	return g
}

// Context is the test's context: it ends when the test's time budget does.
func (g *Guest) Context() context.Context { return g.ctx }

// IP is the guest's eth0 address.
func (g *Guest) IP() string { return g.VM.GuestIP() }

// NID is the guest's NID on net ("tcp", "o2ib"): its eth0 address.
func (g *Guest) NID(net string) string { return g.VM.GuestIP() + "@" + net }

// Run runs script (bash, with vm.Prelude's helpers) in the guest, bounded
// by DefaultJobTimeout. A non-zero exit is not an error: see Result.Code.
func (g *Guest) Run(ctx context.Context, script string) (vm.Result, error) {
	return g.RunTimeout(ctx, script, DefaultJobTimeout)
}

// RunTimeout is Run with its own guest-side timeout.
func (g *Guest) RunTimeout(ctx context.Context, script string, timeout time.Duration) (vm.Result, error) {
	return g.VM.Run(ctx, label(script), script, timeout)
}

// label names a job's files after its first command.
func label(script string) string {
	f := strings.Fields(script)
	if len(f) == 0 {
		return "job"
	}
	if len(f) > 1 && (f[0] == "lnetctl" || f[0] == "lst") {
		return f[0] + "-" + f[1]
	}
	return f[0]
}

// MustRun runs script and fails the test unless it exits 0; it returns
// the script's standard output.
func (g *Guest) MustRun(script string) string {
	g.t.Helper()
	r, err := g.Run(g.ctx, script)
	if err != nil {
		g.t.Fatalf("guest: %v\nscript:\n%s", err, script)
	}
	if r.Code != 0 {
		g.t.Fatalf("guest: exit %d\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", r.Code, script, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@._-=/:,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// Lnetctl runs the guest's lnetctl with args and returns its standard
// output. It fails when lnetctl exits non-zero or prints an error block
// (lnetctl reports some failures with exit status 0).
func (g *Guest) Lnetctl(ctx context.Context, args ...string) (string, error) {
	cmd := "lnetctl " + shellJoin(args)
	r, err := g.Run(ctx, cmd)
	if err != nil {
		return r.Stdout, fmt.Errorf("guest %s: %w", cmd, err)
	}
	if r.Code != 0 || strings.Contains(r.Stdout+r.Stderr, "errno:") {
		return r.Stdout, fmt.Errorf("guest %s: exit %d\n%s%s", cmd, r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout, nil
}

// PingTimeout is how long a ping waits for its reply (either side): the
// first ping of a net also connects (three TCP connections with HELLOs,
// or the RDMA CM exchange) in an emulated guest.
const PingTimeout = 30 * time.Second

// Ping pings nid from the kernel (`lnetctl ping --timeout`) and returns
// lnetctl's YAML. It fails unless the reply names nid as a peer NI.
func (g *Guest) Ping(ctx context.Context, nid string) (string, error) {
	out, err := g.Lnetctl(ctx, "ping", "--timeout", fmt.Sprint(int(PingTimeout.Seconds())), nid)
	if err != nil {
		return out, err
	}
	if !strings.Contains(out, "nid: "+nid) {
		return out, fmt.Errorf("guest lnetctl ping %s: no reply naming %s:\n%s", nid, nid, out)
	}
	return out, nil
}

// upScript brings up the kernel's LNet on nets, as Lustre's documentation
// and ../shared/lustre/README.md say: the LNDs before `lnet configure`,
// and lnet_selftest last (its init brings up the default network when
// LNet is not configured, after which `net add --net tcp` fails with
// EEXIST). --skip-mr-route-setup skips ksocklnd-config, which the build
// does not install.
func upScript(ip string, nets []string) string {
	var b strings.Builder
	b.WriteString("set -e\nfor m in libcfs lnet ksocklnd ko2iblnd; do modprobe $m; done\nlnetctl lnet configure\n")
	for _, n := range nets {
		fmt.Fprintf(&b, "lnetctl net add --net %s --if eth0 --skip-mr-route-setup\n", shellQuote(n))
	}
	b.WriteString("modprobe lnet_selftest\nlnetctl net show\n")
	for _, n := range nets {
		fmt.Fprintf(&b, "lnetctl net show --net %s | grep -q 'nid: %s@%s' || { echo 'no NI on %s' >&2; exit 1; }\n", shellQuote(n), ip, n, n)
	}
	return b.String()
}

// downScript takes the kernel's LNet down and unloads every Lustre
// module. lnet_selftest goes first: it holds an LNetNIInit reference, so
// with it loaded `lnet unconfigure` would leave the NIs up.
const downScript = `set -e
rmmod lnet_selftest 2>/dev/null || true
lnetctl lnet unconfigure
for m in ko2iblnd ksocklnd lnet libcfs; do
	if grep -q "^$m " /proc/modules; then rmmod $m; fi
done
if grep -E '^(libcfs|lnet|ksocklnd|ko2iblnd|lnet_selftest) ' /proc/modules; then
	echo "Lustre modules still loaded" >&2
	exit 1
fi
`

// LNetUp loads the Lustre modules and brings the kernel's LNet up with one
// NI on eth0 per net (default: [Nets]), then loads lnet_selftest. It fails
// the test on error and logs `lnetctl net show`.
func (g *Guest) LNetUp(nets ...string) {
	g.t.Helper()
	if len(nets) == 0 {
		nets = Nets
	}
	start := time.Now()
	out := g.MustRun(upScript(g.IP(), nets))
	g.t.Logf("guest LNet up on %v in %v:\n%s", nets, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
}

// LNetDown unconfigures the kernel's LNet and unloads all Lustre modules
// (rmmod lnet_selftest, lnetctl lnet unconfigure, rmmod ko2iblnd ksocklnd
// lnet libcfs). It fails the test on error.
//
// The kernel logs "LNetError: ... lnet_acceptor_remove_socket()) Interface
// eth0 not found" on every unconfigure of a tcp NI, softib or not: LNet
// stops its acceptor (releasing the listening sockets) before ksocklnd's
// shutdown asks to remove its socket. LNetDown allows that line.
func (g *Guest) LNetDown() {
	g.t.Helper()
	g.AllowLNetError(`acceptor\.c:\d+:lnet_acceptor_remove_socket\(\)\) Interface \S+ not found`)
	start := time.Now()
	g.MustRun(downScript)
	g.t.Logf("guest LNet down, modules unloaded in %v", time.Since(start).Round(time.Millisecond))
}

// ReloadModules is LNetDown then LNetUp(nets...): the kernel node comes
// back with a new incarnation and no connections.
func (g *Guest) ReloadModules(nets ...string) {
	g.t.Helper()
	g.LNetDown()
	g.LNetUp(nets...)
}

// Dmesg returns the guest's kernel log.
func (g *Guest) Dmesg() (string, error) {
	// The test's context may be over when the check runs at cleanup.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := g.VM.Run(ctx, "dmesg", "dmesg", 30*time.Second)
	if err != nil {
		return "", err
	}
	if r.Code != 0 {
		return r.Stdout, fmt.Errorf("guest dmesg: exit %d: %s", r.Code, r.Stderr)
	}
	return r.Stdout, nil
}

// AllowLNetError declares kernel log lines matching the regular
// expression pattern expected: [Guest.CheckNoLNetError] passes over them.
// Tests that inject a fault allow the errors the fault must cause, and
// document why.
func (g *Guest) AllowLNetError(pattern string) {
	re := regexp.MustCompile(pattern)
	g.mu.Lock()
	g.allowed = append(g.allowed, re)
	g.mu.Unlock()
}

// badKernelLine matches the kernel log lines that fail a test: Lustre's
// LNet error messages and kernel bugs.
var badKernelLine = regexp.MustCompile(`LNetError|LustreError|\bBUG:|\bOops\b|WARNING: CPU|general protection fault|Call Trace`)

// BadLines returns the lines of the kernel log dmesg that fail a test
// (badKernelLine) and that no pattern in allowed matches.
func BadLines(dmesg string, allowed []*regexp.Regexp) []string {
	var bad []string
lines:
	for _, l := range strings.Split(dmesg, "\n") {
		if !badKernelLine.MatchString(l) {
			continue
		}
		for _, re := range allowed {
			if re.MatchString(l) {
				continue lines
			}
		}
		bad = append(bad, l)
	}
	return bad
}

// LNetErrors returns the kernel log lines with LNetError (or a kernel
// bug) that no AllowLNetError pattern covers.
func (g *Guest) LNetErrors() ([]string, error) {
	d, err := g.Dmesg()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return BadLines(d, g.allowed), nil
}

// CheckNoLNetError fails t for every kernel log line with LNetError (or a
// kernel BUG, Oops, WARNING) that no AllowLNetError pattern covers, and
// then logs the whole kernel log. Boot runs it when the test ends; call it
// earlier to check a step.
func (g *Guest) CheckNoLNetError(t testing.TB) {
	t.Helper()
	select {
	case <-g.VM.Exited():
		t.Errorf("guest: QEMU exited; console tail:\n%s", g.VM.ConsoleTail(40))
		return
	default:
	}
	d, err := g.Dmesg()
	if err != nil {
		t.Errorf("guest dmesg: %v", err)
		return
	}
	g.mu.Lock()
	bad := BadLines(d, g.allowed)
	g.mu.Unlock()
	for _, l := range bad {
		t.Errorf("guest kernel: %s", l)
	}
	if len(bad) > 0 || t.Failed() || testing.Verbose() {
		t.Logf("guest kernel log (Lustre lines):\n%s", lustreLines(d))
	}
}

// lustreLines keeps the kernel log lines of LNet, its LNDs, Lustre and
// kernel bugs.
func lustreLines(d string) string {
	var b strings.Builder
	for _, l := range strings.Split(d, "\n") {
		if badKernelLine.MatchString(l) || strings.Contains(l, "LNet") || strings.Contains(l, "Lustre") ||
			strings.Contains(l, "libcfs") || strings.Contains(l, "lnet") || strings.Contains(l, "o2ib") {
			b.WriteString(l + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// keepPcap copies the capture to $SOFTIB_INTEROP_PCAP_DIR when set.
func keepPcap(t testing.TB, path string) {
	dir := os.Getenv("SOFTIB_INTEROP_PCAP_DIR")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".pcap"
	_ = os.MkdirAll(dir, 0o755)
	_ = os.WriteFile(dir+"/"+name, b, 0o644)
}
