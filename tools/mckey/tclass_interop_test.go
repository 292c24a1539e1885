//go:build linux

package mckey_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/tsharktest"
	"softib/interop/vm"
	"softib/interop/vmtest"
	"softib/tools/perftest"
	"softib/verbs"
)

// tcpListening reports whether a TCP socket listens on port in ns.
func tcpListening(ns string, port int) bool {
	found := false
	netns.Run(ns, func() error {
		for _, name := range []string{"tcp", "tcp6"} { // a Go listener on ":port" is dual-stack tcp6
			f, err := os.Open("/proc/thread-self/net/" + name)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			want := fmt.Sprintf(":%04X", port)
			for sc.Scan() {
				fs := strings.Fields(sc.Text())
				if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
					found = true
				}
			}
			f.Close()
		}
		return nil
	})
	return found
}

// tclassInterop runs ib_write_bw --tclass=96 between the guest's Linux
// rxe and softib's perftest (TCP exchange), both ways, with tcpdump on
// the host side of the guest's link: every RoCE frame, from either side,
// carries TOS 0x60 (the guest's tcpdump would see the same frames).
func tclassInterop(t *testing.T, ctx context.Context, v *vm.VM, dev verbs.Device) {
	const tc = 96
	guest := v.GuestIP()
	capt, err := v.Capture(ctx, filepath.Join(t.TempDir(), "tclass.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Stop()
	args := fmt.Sprintf("--tclass=%d -x 1 -n 200 -s 4096", tc)

	// softib client, guest server. A run whose guest perftest failed its
	// clock calibration is made again (vmtest.RetryPerftestClock); its
	// frames stay in the capture and are judged with the others.
	const p1 = 18601
	var out strings.Builder
	cfg := perftest.Config{Test: perftest.WriteBW, Host: guest, TCPPort: p1, Iters: 200, Size: 4096, TClass: tc, GIDIndex: -1, Out: &out}
	r, werr := vmtest.RetryPerftestClock(t, func() (vm.Result, error) {
		out.Reset()
		job, err := v.Go("bw_server", fmt.Sprintf("ib_write_bw %s -p %d", args, p1), 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for !job.Done() {
			r, err := v.Run(ctx, "ss", fmt.Sprintf("ss -ltn | grep -c ':%d ' || true", p1), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(r.Stdout) != "0" {
				break
			}
		}
		var rows []perftest.Row
		err = netns.Run(v.Namespace(), func() (err error) { rows, err = perftest.Run(ctx, dev, cfg); return err })
		r, werr := job.Wait(ctx)
		t.Logf("softib client:\n%s\nguest server rc %d:\n%s%s", out.String(), r.Code, r.Stdout, r.Stderr)
		if vmtest.PerftestClockFailed(r) {
			return r, werr
		}
		if err != nil || len(rows) == 0 {
			t.Fatalf("ib_write_bw, guest server: softib %v, guest rc %d %v", err, r.Code, werr)
		}
		return r, werr
	})
	if werr != nil || r.Code != 0 {
		t.Fatalf("ib_write_bw, guest server: guest rc %d %v", r.Code, werr)
	}

	// softib server, guest client. When the guest's client fails its
	// clock calibration it exits before perftest's closing exchange, so
	// the softib server's error in that run says nothing.
	const p2 = 18602
	scfg := cfg
	scfg.Host, scfg.TCPPort = "", p2
	r, err = vmtest.RetryPerftestClock(t, func() (vm.Result, error) {
		out.Reset()
		done := make(chan error, 1)
		go func() {
			done <- netns.Run(v.Namespace(), func() error { _, err := perftest.Run(ctx, dev, scfg); return err })
		}()
		for !tcpListening(v.Namespace(), p2) {
			select {
			case err := <-done:
				t.Fatalf("softib server ended before listening: %v\n%s", err, out.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
		r, err := v.Run(ctx, "bw_client", fmt.Sprintf("ib_write_bw %s -p %d %s", args, p2, v.HostIP()), 2*time.Minute)
		serr := <-done
		t.Logf("softib server:\n%s\nguest client rc %d:\n%s%s", out.String(), r.Code, r.Stdout, r.Stderr)
		if vmtest.PerftestClockFailed(r) {
			return r, err
		}
		if serr != nil {
			t.Fatalf("ib_write_bw, guest client: guest rc %d %v, softib %v", r.Code, err, serr)
		}
		return r, err
	})
	if err != nil || r.Code != 0 {
		t.Fatalf("ib_write_bw, guest client: guest rc %d %v", r.Code, err)
	}

	if n, ok := capt.Dropped(); !ok || n != 0 {
		t.Fatalf("tcpdump dropped %d frames (count reported: %v): not every frame can be checked", n, ok)
	}
	rows2 := tsharktest.Fields(t, capt.Path, []string{"ip.src", "ip.dsfield"}, "-Y", "udp.dstport == 4791")
	seen := map[string]map[string]int{}
	for _, r := range rows2 {
		if seen[r[0]] == nil {
			seen[r[0]] = map[string]int{}
		}
		seen[r[0]][r[1]]++
	}
	t.Logf("RoCE frames by source and IP DS field: %v", seen)
	for _, src := range []string{guest, v.HostIP()} {
		if len(seen[src]) != 1 || seen[src]["0x60"] < 100 {
			t.Errorf("frames from %s: DS fields %v; want every one 0x60 (TOS 96)", src, seen[src])
		}
	}
}
