//go:build linux

package perftestcm_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/interop/vm"
	"softib/interop/vmtest"
	"softib/tools/perftest"
	"softib/tools/perftestcm"
	"softib/verbs"
)

// TestInteropLinux runs softib's perf tools with -R against perftest 6.06
// (ib_*_bw/lat -R) on Linux 6.1 rxe in a QEMU guest, in both directions,
// and first the TCP-exchange modes -R does not carry: -b and -c UD.
// It runs when SOFTIB_INTEROP_IMAGE names an image made by
// interop/image.sh.
func TestInteropLinux(t *testing.T) {
	ctx, v := vmtest.Boot(t, "perftest interop (-b, -c UD, -R)", "sibpc", 16*time.Minute)
	if v == nil {
		return
	}
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	tests := []struct {
		test perftest.Test
		args string
	}{
		{perftest.WriteBW, "-n 200 -s 4096"},
		{perftest.ReadBW, "-n 200 -s 4096"},
		{perftest.SendBW, "-n 200 -s 4096"},
		{perftest.AtomicBW, "-n 100"},
		{perftest.WriteLat, "-n 100"},
		{perftest.ReadLat, "-n 100"},
		{perftest.SendLat, "-n 100"},
		{perftest.WriteBW, "-n 100 -q 2"},
	}
	runTCPInterop(ctx, t, v, dev, host, guest)
	for i, tc := range tests {
		cfg := perftest.Config{Test: tc.test, RDMACM: true, GIDIndex: -1, TCPPort: 18515 + i}
		f := strings.Fields(tc.args)
		for j := 0; j+1 < len(f); j += 2 {
			n := 0
			fmt.Sscan(f[j+1], &n)
			switch f[j] {
			case "-n":
				cfg.Iters = n
			case "-s":
				cfg.Size = n
			case "-q":
				cfg.QPs = n
			}
		}
		cmd := fmt.Sprintf("ib_%s -R -p %d %s", tc.test, cfg.TCPPort, tc.args)
		t.Run("linux server "+cmd, func(t *testing.T) {
			retryCalibration(t, func() (vm.Result, error) {
				job, err := v.Go("perf_server", cmd, 90*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				c := cfg
				c.Host, c.Out, c.CM = guest.String(), &out, &perftestcm.Hook{ConnectRetries: 100}
				rows, err := perftest.Run(ctx, dev, c)
				r, werr := job.Wait(ctx)
				t.Logf("guest rc %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
				if vmtest.PerftestClockFailed(r) {
					return r, nil
				}
				if err != nil || len(rows) == 0 {
					t.Fatalf("softib client: %v\n%s", err, out.String())
				}
				return r, werr
			})
		})
		t.Run("softib server "+cmd, func(t *testing.T) {
			retryCalibration(t, func() (vm.Result, error) {
				listening := make(chan struct{})
				var out bytes.Buffer
				c := cfg
				c.Out = &out
				c.CM = &perftestcm.Hook{OnListen: func(netip.AddrPort) { close(listening) }}
				type res struct {
					rows []perftest.Row
					err  error
				}
				done := make(chan res, 1)
				sctx, stop := context.WithTimeout(ctx, 90*time.Second)
				defer stop()
				go func() {
					rows, err := perftest.Run(sctx, dev, c)
					done <- res{rows, err}
				}()
				select {
				case <-listening:
				case r := <-done:
					t.Fatalf("softib server: %v", r.err)
				}
				r, err := v.Run(ctx, "perf_client", cmd+" "+host.String(), 90*time.Second)
				t.Logf("guest rc %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
				if err != nil || r.Code != 0 {
					// The client is gone: stop the server at once
					// rather than let it wait out its deadline.
					stop()
				}
				s := <-done
				if vmtest.PerftestClockFailed(r) {
					return r, nil
				}
				if s.err != nil {
					t.Errorf("softib server: %v\n%s", s.err, out.String())
				}
				if err == nil && !strings.Contains(r.Stdout, "#bytes") {
					r.Code = -1 // no result table
				}
				return r, err
			})
		})
	}
}

// interopTCPCases are perftest's TCP-exchange runs against the guest
// (no -R): bidirectional (-b) and UD (-c UD), which softib's RDMA CM mode
// does not carry. The guest side is ib_<test> -x 1 with the same flags.
var interopTCPCases = []struct {
	test perftest.Test
	args string
	cfg  perftest.Config
}{
	{perftest.WriteBW, "-b -n 200 -s 4096", perftest.Config{Duplex: true, Iters: 200, Size: 4096}},
	{perftest.SendBW, "-b -n 200 -s 4096", perftest.Config{Duplex: true, Iters: 200, Size: 4096}},
	{perftest.SendBW, "-c UD -n 200 -s 1024", perftest.Config{UD: true, Iters: 200, Size: 1024}},
	{perftest.SendLat, "-c UD -n 100 -s 64", perftest.Config{UD: true, Iters: 100, Size: 64}},
}

// runTCPInterop runs interopTCPCases in both pairings. Softib's exchange
// socket must live in the VM's namespace, as its device does: the server
// listens from there, the client runs on a thread switched into it.
func runTCPInterop(ctx context.Context, t *testing.T, v *vm.VM, dev verbs.Device, host, guest netip.Addr) {
	for i, tc := range interopTCPCases {
		cfg := tc.cfg
		cfg.Test, cfg.GIDIndex, cfg.TCPPort = tc.test, -1, 18600+i
		cmd := fmt.Sprintf("ib_%s -d rxe0 -F -x 1 -p %d %s", tc.test, cfg.TCPPort, tc.args)
		t.Run("linux server "+cmd, func(t *testing.T) {
			retryCalibration(t, func() (vm.Result, error) {
				job, err := v.Go("perf_server", cmd, 90*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				c := cfg
				c.Host, c.Out = guest.String(), &out
				var rows []perftest.Row
				// The guest's server needs a moment to listen.
				for try := 0; try < 50; try++ {
					inNamespace(t, v.Namespace(), func() { rows, err = perftest.Run(ctx, dev, c) })
					if err == nil || !strings.Contains(err.Error(), "couldn't connect") {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				r, werr := job.Wait(ctx)
				t.Logf("guest rc %d\n%s\n%s\nsoftib:\n%s", r.Code, r.Stdout, r.Stderr, out.String())
				if vmtest.PerftestClockFailed(r) {
					return r, nil
				}
				if err != nil || len(rows) == 0 || rows[0].Iters == 0 {
					t.Fatalf("softib client: %v rows %+v", err, rows)
				}
				return r, werr
			})
		})
		t.Run("softib server "+cmd, func(t *testing.T) {
			retryCalibration(t, func() (vm.Result, error) {
				var ln net.Listener
				var lerr error
				inNamespace(t, v.Namespace(), func() { ln, lerr = net.Listen("tcp", netip.AddrPortFrom(host, uint16(cfg.TCPPort)).String()) })
				if lerr != nil {
					t.Fatal(lerr)
				}
				defer ln.Close()
				var out bytes.Buffer
				c := cfg
				c.Out, c.Listener = &out, ln
				type res struct {
					rows []perftest.Row
					err  error
				}
				done := make(chan res, 1)
				sctx, stop := context.WithTimeout(ctx, 90*time.Second)
				defer stop()
				go func() {
					rows, err := perftest.Run(sctx, dev, c)
					done <- res{rows, err}
				}()
				r, err := v.Run(ctx, "perf_client", cmd+" "+host.String(), 90*time.Second)
				t.Logf("guest rc %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
				if err != nil || r.Code != 0 {
					stop()
				}
				s := <-done
				if vmtest.PerftestClockFailed(r) {
					return r, nil
				}
				if s.err != nil || len(s.rows) == 0 || s.rows[0].Iters == 0 {
					t.Errorf("softib server: %v rows %+v\n%s", s.err, s.rows, out.String())
				}
				if err == nil && !strings.Contains(r.Stdout, "#bytes") {
					r.Code = -1 // no result table
				}
				return r, err
			})
		})
	}
}

// inNamespace runs f on a thread switched into the named network
// namespace, so the sockets f creates live there (and work from any
// goroutine afterwards).
func inNamespace(t *testing.T, ns string, f func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		f()
		// A thread that cannot switch back dies with its goroutine.
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// retryCalibration runs one interop case, again while the guest's
// perftest fails its clock calibration (vmtest.RetryPerftestClock), and
// fails the test if the last run's guest side failed.
func retryCalibration(t *testing.T, run func() (vm.Result, error)) {
	t.Helper()
	if r, err := vmtest.RetryPerftestClock(t, run); err != nil || r.Code != 0 {
		t.Fatalf("guest side: %v rc %d", err, r.Code)
	}
}
