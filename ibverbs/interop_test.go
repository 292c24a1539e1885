//go:build linux

package ibverbs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"softib/internal/testenv"
	"softib/interop/vm"
	"softib/interop/vmtest"
)

// TestInteropIBVerbs proves the ibverbs provider on a kernel RDMA device:
// it builds this package's tests and the softib CLI with -tags ibverbs
// (cgo against the host's libibverbs-dev; the guest runs the same Debian
// release), and in the interop guest (Linux 6.1, rdma_rxe as rxe0) runs
// the verbs conformance suite that the rxe provider passes, then softib
// tools across providers: softib on the kernel's rxe0 in the guest
// against softib's pure-Go provider on the host, both directions. It runs
// when SOFTIB_INTEROP_IMAGE names an image (scripts/interop.sh).
func TestInteropIBVerbs(t *testing.T) {
	if os.Getenv("SOFTIB_INTEROP_IMAGE") == "" || testing.Short() {
		t.Log("SOFTIB_INTEROP_IMAGE not set: ibverbs provider interop not run")
		return
	}
	// Build first: a build failure should not cost a guest boot.
	bin := t.TempDir()
	build := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s\n(the ibverbs build needs rdma-core's headers: apt-get install libibverbs-dev librdmacm-dev)", strings.Join(args, " "), err, out)
		}
	}
	build("test", "-c", "-tags", "ibverbs", "-o", filepath.Join(bin, "ibverbs.test"), ".")
	build("build", "-tags", "ibverbs", "-o", filepath.Join(bin, "softib-ibverbs"), "../cmd/softib")
	hostBin := filepath.Join(bin, "softib")
	build("build", "-o", hostBin, "../cmd/softib")

	ctx, v := vmtest.Boot(t, "ibverbs provider interop", "sibibv", 12*time.Minute)
	if v == nil {
		return
	}
	for _, f := range []string{"ibverbs.test", "softib-ibverbs"} {
		b, err := os.ReadFile(filepath.Join(bin, f))
		if err == nil {
			err = os.WriteFile(filepath.Join(v.ShareDir(), f), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("conformance", func(t *testing.T) {
		r, err := v.Run(ctx, "ibverbs-conformance",
			"cd /tmp && SOFTIB_IBVERBS_DEVICE=rxe0 /mnt/jobs/ibverbs.test -test.v -test.count=1 -test.run 'TestConformanceKernel|TestDevices|TestPostPollAllocs' 2>&1", 6*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Stdout)
		if r.Code != 0 || !strings.Contains(r.Stdout, "--- PASS: TestConformanceKernel") {
			t.Fatalf("conformance suite on the guest's rxe0 failed (exit %d)", r.Code)
		}
		for _, sub := range []string{"RCSendRecv", "RCWriteRead", "RCAtomics", "RCRemoteAccessError", "RCSRQ", "MemoryWindowType2", "MemoryWindowType1", "UDSendRecv", "CompletionChannel", "Drain", "IllegalTransition", "ModifyAH", "SharedMR"} {
			if !strings.Contains(r.Stdout, "--- PASS: TestConformanceKernel/"+sub) {
				t.Errorf("subtest %s did not pass on the kernel device", sub)
			}
		}
	})

	// softib's tools across providers: the guest's softib drives the
	// kernel's rxe0 through libibverbs, the host's is pure Go.
	host, guest := v.HostIP(), v.GuestIP()
	const port = 18515
	t.Run("devinfo", func(t *testing.T) {
		r, err := v.Run(ctx, "devinfo-ibverbs", "/mnt/jobs/softib-ibverbs devinfo --provider ibverbs -v", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(r.Stdout + r.Stderr)
		if r.Code != 0 || !strings.Contains(r.Stdout, "hca_id:\trxe0") || !strings.Contains(r.Stdout, "PORT_ACTIVE") {
			t.Fatalf("devinfo --provider ibverbs did not list rxe0 with an active port (exit %d)", r.Code)
		}
	})
	t.Run("multicast", func(t *testing.T) { mcastInterop(ctx, t, v) })
	t.Run("overhead vs C perftest", func(t *testing.T) { overhead(ctx, t, v) })
	t.Run("lnet o2ib", func(t *testing.T) { lnetO2IB(ctx, t, v, hostBin) })
	t.Run("iser target", func(t *testing.T) { iserTarget(ctx, t, v) })

	for _, tc := range []struct {
		name, args string
		want       string
		// marker, when set, is the server output that says it listens
		// (RDMA CM servers have no TCP socket to watch).
		marker string
	}{
		{"rc_pingpong 4096 -c", "rc_pingpong -g 1 -n 200 -s 4096 -c", "200 iters", ""},
		{"ud_pingpong 1024 -c", "ud_pingpong -g 1 -n 200 -s 1024 -c", "200 iters", ""},
		{"perf write_bw", "perf write_bw -x 1 -s 65536 -n 200", "#bytes", ""},
		{"perf read_bw", "perf read_bw -x 1 -s 65536 -n 200", "#bytes", ""},
		{"perf send_lat", "perf send_lat -x 1 -s 64 -n 200", "#bytes", ""},
		// Connection management: the kernel's CM (librdmacm) on one side,
		// softib's IB CM on the other.
		{"rping -V", "rping -d -v -V -C 20 -S 100", "ping data", "rdma_listen"},
		{"perf write_bw -R", "perf write_bw -R -s 65536 -n 200", "#bytes", "Waiting for client"},
		{"perf read_lat -R", "perf read_lat -R -s 64 -n 200", "#bytes", "Waiting for client"},
	} {
		for _, guestServer := range []bool{true, false} {
			side := "srv=guest-ibverbs"
			if !guestServer {
				side = "srv=host-rxe"
			}
			t.Run(tc.name+" "+side, func(t *testing.T) {
				crossProvider(ctx, t, v, hostBin, strings.Fields(tc.args), guestServer, host, guest, port, tc.want, tc.marker)
			})
		}
	}
}

// crossProvider runs one softib tool as a pair: the guest's softib on the
// kernel's rxe0 (--provider ibverbs) and the host's on softib's rxe.
func crossProvider(ctx context.Context, t *testing.T, v *vm.VM, hostBin string, args []string, guestServer bool, host, guest string, port int, want, marker string) {
	rping := args[0] == "rping"
	guestCmd := "SOFTIB_PROVIDER=ibverbs /mnt/jobs/softib-ibverbs " + strings.Join(args, " ")
	hostArgs := append(append([]string{}, args...), "--addr", host)
	switch {
	case rping && guestServer:
		guestCmd += " -s -a " + guest
		hostArgs = append(hostArgs, "-c", "-a", guest)
	case rping:
		guestCmd += " -c -a " + host
		hostArgs = append(hostArgs, "-s", "-a", host)
	case !guestServer:
		guestCmd += " " + host
	}
	var out testenv.Buffer
	hc := v.Command(ctx, hostBin, hostArgs...)
	if guestServer {
		ready := fmt.Sprintf("wait_listen %d $pid", port)
		if marker != "" {
			ready = fmt.Sprintf("while kill -0 $pid 2>/dev/null && ! grep -q %q /tmp/srv.out; do nap 0.05; done; mark ready", marker)
		}
		job, err := v.Go("ibv-server", fmt.Sprintf("%s >/tmp/srv.out 2>&1 &\npid=$!\n%s\nwait $pid\nrc=$?\ncat /tmp/srv.out\nexit $rc\n", guestCmd, ready), 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := job.WaitMarker(ctx, "ready"); err != nil {
			r, _ := job.Wait(ctx)
			t.Fatalf("guest server did not start: %v\n%s%s", err, r.Stdout, r.Stderr)
		}
		if !rping {
			hc.Args = append(hc.Args, guest)
		}
		hc.Stdout, hc.Stderr = &out, &out
		herr := hc.Run()
		r, err := job.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(t, want, r, herr, out.String())
		return
	}
	hc.Stdout, hc.Stderr = &out, &out
	if err := hc.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- hc.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	listening := func() bool {
		if marker != "" {
			return strings.Contains(out.String(), marker)
		}
		return vm.TCPListening(hc.Process.Pid, port)
	}
	for !listening() {
		if time.Now().After(deadline) {
			_ = hc.Process.Kill()
			<-done
			t.Fatalf("host server did not listen on %d: %s", port, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := v.Run(ctx, "ibv-client", guestCmd, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var herr error
	select {
	case herr = <-done:
	case <-time.After(30 * time.Second):
		_ = hc.Process.Kill()
		herr = <-done
	}
	check(t, want, r, herr, out.String())
}

func check(t *testing.T, want string, r vm.Result, hostErr error, hostOut string) {
	t.Helper()
	t.Logf("guest (ibverbs on rxe0), exit %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	t.Logf("host (rxe): %v\n%s", hostErr, hostOut)
	if r.Code != 0 || hostErr != nil {
		t.Fatalf("guest exit %d, host %v", r.Code, hostErr)
	}
	if !strings.Contains(r.Stdout+hostOut, want) {
		t.Fatalf("no %q in the output", want)
	}
}

// lnetO2IB runs softib lnetd with an o2ib NI on both sides: in the guest on
// the kernel's rxe0 ($SOFTIB_PROVIDER=ibverbs: the kernel's RDMA CM and
// verbs), on the host on softib's pure-Go stack; lnetctl ping both ways,
// then lst brw write and read 1 MiB with check=full driven from each side.
func lnetO2IB(ctx context.Context, t *testing.T, v *vm.VM, hostBin string) {
	host, guest := v.HostIP(), v.GuestIP()
	cfg := func(ip string) string {
		return "net:\n    - net type: o2ib\n      local NI(s):\n        - interfaces:\n              0: " + ip + "\n"
	}
	dir := t.TempDir()
	hcfg, hsock := filepath.Join(dir, "lnet.yaml"), filepath.Join(dir, "lnetd.sock")
	if err := os.WriteFile(hcfg, []byte(cfg(host)), 0o644); err != nil {
		t.Fatal(err)
	}
	var hlog testenv.Buffer
	hd := v.Command(ctx, hostBin, "lnetd", "--config", hcfg, "--socket", hsock)
	hd.Stdout, hd.Stderr = &hlog, &hlog
	if err := hd.Start(); err != nil {
		t.Fatal(err)
	}
	hdone := make(chan struct{})
	go func() { _ = hd.Wait(); close(hdone) }()
	defer func() {
		_ = hd.Process.Kill()
		<-hdone
		t.Logf("host lnetd log:\n%s", hlog.String())
	}()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(hlog.String(), "lnetd: ready"); {
		if time.Now().After(deadline) {
			t.Fatalf("host lnetd not ready:\n%s", hlog.String())
		}
		select {
		case <-hdone:
			t.Fatalf("host lnetd exited:\n%s", hlog.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	gbin := "SOFTIB_PROVIDER=ibverbs /mnt/jobs/softib-ibverbs"
	gjob, err := v.Go("lnetd-ibverbs", fmt.Sprintf("printf %q >/tmp/lnet.yaml\n%s lnetd --config /tmp/lnet.yaml --socket /tmp/lnetd.sock >/tmp/lnetd.out 2>&1 &\npid=$!\n"+
		"while kill -0 $pid 2>/dev/null && ! grep -q 'lnetd: ready' /tmp/lnetd.out; do nap 0.05; done; mark ready\nwait $pid\ncat /tmp/lnetd.out\n", cfg(guest), gbin), 8*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		r, _ := v.Run(ctx, "lnetd-log", "cat /tmp/lnetd.out; rdma res show cm_id 2>&1", time.Minute)
		t.Logf("guest lnetd (ibverbs on rxe0) log and the kernel's cm_ids:\n%s%s", r.Stdout, r.Stderr)
		gjob.Kill()
		_, _ = gjob.Wait(ctx)
	}()
	if err := gjob.WaitMarker(ctx, "ready"); err != nil {
		t.Fatalf("guest lnetd not ready: %v", err)
	}
	hostCtl := func(args ...string) string {
		t.Helper()
		c := v.Command(ctx, hostBin, args...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("host softib %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	guestCtl := func(args string) string {
		t.Helper()
		r, err := v.Run(ctx, "lnetctl-ibverbs", gbin+" "+args, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != 0 {
			t.Fatalf("guest softib %s: exit %d\n%s%s", args, r.Code, r.Stdout, r.Stderr)
		}
		return r.Stdout
	}
	hnid, gnid := host+"@o2ib", guest+"@o2ib"
	if out := hostCtl("lnetctl", "--socket", hsock, "ping", "--timeout", "30", gnid); !strings.Contains(out, "nid: "+gnid) {
		t.Fatalf("host ping of %s:\n%s", gnid, out)
	}
	if out := guestCtl("lnetctl --socket /tmp/lnetd.sock ping --timeout 30 " + hnid); !strings.Contains(out, "nid: "+hnid) {
		t.Fatalf("guest ping of %s:\n%s", hnid, out)
	}
	for _, op := range []string{"write", "read"} {
		spec := fmt.Sprintf("brw %s size=1M check=full --seconds 5", op)
		out := hostCtl(append([]string{"lst", "quick", "--socket", hsock, "--from", hnid, "--to", gnid}, strings.Fields(spec)...)...)
		t.Logf("host console, %s:\n%s", spec, out)
		out = guestCtl("lst quick --socket /tmp/lnetd.sock --from " + gnid + " --to " + hnid + " " + spec)
		t.Logf("guest console, %s:\n%s", spec, out)
	}
}

// overhead measures what the Go side of the provider costs: perftest's C
// ib_write_bw and softib's perf write_bw, each as server and client on the
// guest's rxe0 (loopback through the kernel), back to back in one guest.
// The guest is emulated (TCG), so only the ratio means anything; the
// figures go to the log for BENCHMARKS.md.
func overhead(ctx context.Context, t *testing.T, v *vm.VM) {
	ip := v.GuestIP()
	bw := regexp.MustCompile(`(?m)^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)`)
	run := func(name, server, client string) float64 {
		t.Helper()
		script := fmt.Sprintf("%s >/tmp/bw.srv 2>&1 &\npid=$!\nwait_listen 18515 $pid\n%s\nrc=$?\nwait $pid\ncat /tmp/bw.srv >&2\nexit $rc\n", server, client)
		// A run whose C perftest failed its clock calibration measured
		// nothing, and is made again (vmtest.RetryPerftestClock).
		r, err := vmtest.RetryPerftestClock(t, func() (vm.Result, error) { return v.Run(ctx, name, script, 3*time.Minute) })
		if err != nil {
			t.Fatal(err)
		}
		m := bw.FindStringSubmatch(r.Stdout)
		if r.Code != 0 || m == nil {
			t.Fatalf("%s: exit %d, no result row:\n%s%s", name, r.Code, r.Stdout, r.Stderr)
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		t.Logf("%s: %s MB/s\n%s", name, m[1], r.Stdout)
		return f
	}
	const args = "-s 65536 -n 2000"
	c := run("C ib_write_bw", "ib_write_bw -d rxe0 -x 1 "+args, "ib_write_bw -d rxe0 -x 1 "+args+" "+ip)
	g := run("softib perf write_bw (ibverbs)", "SOFTIB_PROVIDER=ibverbs /mnt/jobs/softib-ibverbs perf write_bw -d rxe0 -x 1 "+args,
		"SOFTIB_PROVIDER=ibverbs /mnt/jobs/softib-ibverbs perf write_bw -d rxe0 -x 1 "+args+" "+ip)
	t.Logf("FIGURE ibverbs-overhead: rxe0 loopback write_bw 64 KiB: C perftest %.2f MB/s, softib over libibverbs %.2f MB/s, ratio %.2f", c, g, g/c)
}

// iserTarget runs softib's iSER target on the guest's kernel rxe0 (ibverbs
// provider, the kernel's RDMA CM) and logs Linux's iSER initiator in to it
// over the same device: 8 MiB written and read back with O_DIRECT.
func iserTarget(ctx context.Context, t *testing.T, v *vm.VM) {
	ip := v.GuestIP()
	const iqn = "iqn.2026-11.org.softib:ibverbs"
	node := fmt.Sprintf("iscsiadm -m node -T %s -p %s:3260", iqn, ip)
	script := fmt.Sprintf(`SOFTIB_PROVIDER=ibverbs /mnt/jobs/softib-ibverbs iser-target --addr %s --iqn %s --lun mem:67108864 -v >/tmp/iser.out 2>&1 &
tpid=$!
wait_listen 3260 $tpid || { cat /tmp/iser.out; exit 1; }
set -e
modprobe -a ib_iser sd_mod
mkdir -p /etc/iscsi /run/lock/iscsi /var/lib/iscsi
echo InitiatorName=iqn.2026-11.org.softib:guest >/etc/iscsi/initiatorname.iscsi
pgrep -x iscsid >/dev/null || iscsid
iscsiadm -m discovery -t st -p %s
%s -o update -n iface.transport_name -v iser
%s --login
d=
for i in $(seq 100); do for x in /sys/class/iscsi_session/session*/device/target*/*:0/block/*; do [ -e "$x" ] && d=/dev/${x##*/}; done; [ -n "$d" ] && break; nap 0.2; done
[ -n "$d" ] || { dmesg | tail -30; exit 1; }
echo "disk $d: $(cat /sys/block/${d#/dev/}/size) sectors"
head -c 8388608 /dev/urandom >/tmp/a
dd if=/tmp/a of=$d bs=1M oflag=direct status=none
dd if=$d of=/tmp/b bs=1M count=8 iflag=direct status=none
cmp /tmp/a /tmp/b && echo "8 MiB read back intact"
%s --logout
kill $tpid; wait $tpid || true
cat /tmp/iser.out
`, ip, iqn, ip, node, node, node)
	r, err := v.Run(ctx, "iser-ibverbs", script, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	if r.Code != 0 || !strings.Contains(r.Stdout, "8 MiB read back intact") {
		t.Fatal("Linux's iSER initiator did not read back what it wrote through softib's target on the kernel device")
	}
}
