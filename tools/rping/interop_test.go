package rping_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softib/interop/vmtest"
	"softib/rdmacm"
	"softib/tools/rping"
)

// TestInteropLinux runs softib rping against rdma-core's rping on Linux
// 6.1 rxe in a QEMU guest, both directions, with -v -V, and compares the
// printed ping data. It runs when SOFTIB_INTEROP_IMAGE names an image made
// by interop/image.sh.
func TestInteropLinux(t *testing.T) {
	ctx, v := vmtest.Boot(t, "rping interop", "sibrp", 10*time.Minute)
	if v == nil {
		return
	}
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	const count, size = 10, 100

	t.Run("linux server", func(t *testing.T) {
		job, err := v.Go("rping_server", fmt.Sprintf("rping -s -v -a %s -p 7174 -S %d", guest, size), 120*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var c run
		// rdma_cm listens without a socket to wait for: retry while the
		// kernel CM rejects with "invalid service ID".
		for try := 0; ; try++ {
			c = client(ctx, m, rping.Config{Addr: guest, Count: count, Size: size, Verbose: true, Validate: true})
			if c.err == nil || try > 60 || job.Done() || !strings.Contains(c.err2.String(), "REJECTED, error 8") {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		r, werr := job.Wait(ctx)
		t.Logf("guest rping rc %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		if c.err != nil || c.res.Pings != count {
			t.Fatalf("softib client: %+v %v\n%s", c.res, c.err, c.err2)
		}
		if werr != nil || r.Code != 0 {
			t.Fatalf("guest rping: %v rc %d", werr, r.Code)
		}
		for i := range count {
			if w := "server ping data: " + want(i, size) + "\n"; !strings.Contains(string(r.Stdout), w) {
				t.Errorf("guest output lacks %q", w)
			}
			if w := "ping data: " + want(i, size) + "\n"; !strings.Contains(c.out.String(), w) {
				t.Errorf("softib output lacks %q", w)
			}
		}
	})

	t.Run("softib server", func(t *testing.T) {
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		sdone, _ := startServer(t, sctx, m, rping.Config{Addr: host, Port: 7175, Size: size, Verbose: true})
		r, err := v.Run(ctx, "rping_client", fmt.Sprintf("rping -c -v -V -a %s -p 7175 -C %d -S %d", host, count, size), 120*time.Second)
		t.Logf("guest rping rc %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
		if err != nil || r.Code != 0 {
			t.Fatalf("guest rping: %v rc %d", err, r.Code)
		}
		var s run
		select {
		case s = <-sdone:
		case <-time.After(30 * time.Second):
			stop()
			s = <-sdone
		}
		if s.err != nil || s.res.Pings != count {
			t.Fatalf("softib server: %+v %v\n%s", s.res, s.err, s.err2)
		}
		for i := range count {
			if w := "ping data: " + want(i, size) + "\n"; !strings.Contains(string(r.Stdout), w) {
				t.Errorf("guest output lacks %q", w)
			}
			if w := "server ping data: " + want(i, size) + "\n"; !strings.Contains(s.out.String(), w) {
				t.Errorf("softib output lacks %q", w)
			}
		}
	})
}
