//go:build linux

package mckey_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softib/interop/vmtest"
	"softib/rdmacm"
	"softib/tools/mckey"
)

// TestInteropMckeyKernelRxe runs rdma-core's mckey on Linux 6.1 rdma_rxe
// in the QEMU guest against softib's mckey, IPv4, both ways in one boot:
// the guest receives what softib sends to the group, and softib receives
// what the guest sends. The kernel's rdma_cm joins the IP group on the
// guest (IGMP) and softib's device joins it on the host side of the
// link. In the same boot, ib_write_bw --tclass=96 runs between the
// guest and softib's perftest both ways, and every RoCE frame on the
// link carries TOS 0x60 (tclassInterop). It runs when SOFTIB_INTEROP_IMAGE names an image made by
// interop/image.sh (scripts/interop.sh).
func TestInteropMckeyKernelRxe(t *testing.T) {
	ctx, v := vmtest.Boot(t, "mckey and traffic class interop with kernel rxe", "sibmc", 10*time.Minute)
	if v == nil {
		return
	}
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	m := rdmacm.NewManager(rdmacm.Config{})
	t.Cleanup(func() { m.Close() })
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	const count = 10

	t.Run("guest receives", func(t *testing.T) {
		group := netip.MustParseAddr("239.11.0.1")
		job, err := v.Go("mckey_rx", "mckey -m "+group.String()+" -b "+guest.String()+" -C 10", 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// Ready once the guest's rdma_cm has joined the IP group (it
		// joins before the QP attaches and mckey starts polling).
		for {
			r, err := v.Run(ctx, "maddr", "ip maddr show | grep -c "+group.String()+" || true", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(r.Stdout) != "0" {
				break
			}
			if job.Done() {
				r, _ := job.Wait(ctx)
				t.Fatalf("guest mckey ended before joining: rc %d\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
		}
		var out strings.Builder
		res, err := mckey.Run(ctx, m, mckey.Config{Group: group, Bind: host, Sender: true, Count: count, Out: &out})
		t.Logf("softib sender:\n%s", out.String())
		if err != nil || res.Sent != count {
			t.Fatalf("softib sender: %+v %v", res, err)
		}
		r, err := job.Wait(ctx)
		t.Logf("guest mckey rc %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
		if err != nil || r.Code != 0 || !strings.Contains(r.Stdout, "data transfers complete") {
			t.Fatalf("guest receiver did not get the %d datagrams (rc %d, %v)", count, r.Code, err)
		}
	})

	t.Run("ib_write_bw --tclass=96", func(t *testing.T) { tclassInterop(t, ctx, v, dev) })

	t.Run("guest sends", func(t *testing.T) {
		group := netip.MustParseAddr("239.11.0.2")
		rout := &lineWriter{want: "receiving data transfers", seen: make(chan struct{})}
		seen := rout.seen
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		type result struct {
			r   mckey.Result
			err error
		}
		rc := make(chan result, 1)
		go func() {
			r, err := mckey.Run(rctx, m, mckey.Config{Group: group, Bind: host, Count: count, Pause: -1, Out: rout})
			rc <- result{r, err}
		}()
		select {
		case <-seen:
		case r := <-rc:
			t.Fatalf("softib receiver ended early: %+v %v\n%s", r.r, r.err, rout)
		}
		g, err := v.Run(ctx, "mckey_tx", "mckey -m "+group.String()+" -b "+guest.String()+" -s -C 10", 2*time.Minute)
		t.Logf("guest mckey rc %d:\n%s%s", g.Code, g.Stdout, g.Stderr)
		if err != nil || g.Code != 0 {
			cancel()
			t.Fatalf("guest sender: rc %d %v", g.Code, err)
		}
		r := <-rc
		t.Logf("softib receiver:\n%s", rout)
		if r.err != nil || r.r.Received != count {
			t.Fatalf("softib receiver: %+v %v", r.r, r.err)
		}
	})
}
