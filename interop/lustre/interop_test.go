package lustre_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"softib/interop/lustre"
	"softib/interop/vm"
)

func TestMain(m *testing.M) { lustre.Main(m) }

// pingBoth pings across every net in both directions: the kernel pings
// softib's NID with lnetctl, softib pings the kernel's with softib lnetctl.
func pingBoth(t *testing.T, g *lustre.Guest, d *lustre.Lnetd, what string) {
	t.Helper()
	for _, net := range lustre.Nets {
		if _, err := g.Ping(g.Context(), d.NID(net)); err != nil {
			t.Fatalf("%s: kernel -> softib on %s: %v", what, net, err)
		}
		if _, err := d.Ping(g.NID(net)); err != nil {
			t.Fatalf("%s: softib -> kernel on %s: %v", what, net, err)
		}
	}
	t.Logf("%s: lnetctl ping both ways on %v: ok", what, lustre.Nets)
}

// checkCapture stops the capture and checks it: tshark decodes every
// frame without a malformed one or an error, it decoded socklnd and
// o2iblnd traffic (LNet messages; CONNREQ, CONNACK, IMMEDIATE) and
// GET/REPLY pairs (Wireshark does not decode the kernel's HELLOs, which
// it sends in two segments), and every RoCE frame of both sides has a correct
// ICRC.
func checkCapture(t *testing.T, g *lustre.Guest, c *vm.Capture) {
	t.Helper()
	lustre.StopCapture(t, c)
	d := lustre.CheckDecode(t, c.Path)
	for what, n := range map[string]int{
		"socklnd LNet message": d.Sock["0x000000c1"],
		"o2iblnd CONNREQ":      d.IB["0xc0"],
		"o2iblnd CONNACK":      d.IB["0xc1"],
		"o2iblnd IMMEDIATE":    d.IB["0xd1"],
		"LNet GET":             d.LNet["2"],
		"LNet REPLY":           d.LNet["3"],
	} {
		if n == 0 {
			t.Errorf("tshark decoded no %s", what)
		}
	}
	cs, err := vm.RoCECapture(c.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{g.VM.HostIP(), g.VM.GuestIP()} {
		s := cs[netip.MustParseAddr(ip)]
		if s == nil || s.Frames == 0 {
			t.Errorf("capture: no RoCE frame from %s", ip)
			continue
		}
		t.Logf("capture: RoCE from %s: %+v", ip, *s)
		if s.BadICRC+s.Unparsed != 0 {
			t.Errorf("capture: %s sent %d RoCE frames with a bad ICRC, %d unparsable", ip, s.BadICRC, s.Unparsed)
		}
	}
}

// TestInteropLNetPing: lnetctl ping both ways between the Lustre 2.17
// kernel LNet and softib lnetd, on tcp (ksocklnd / socklnd) and on o2ib
// (ko2iblnd over the guest's rdma_rxe / softib o2iblnd over softib's rxe),
// with the capture decoded by tshark.
func TestInteropLNetPing(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	g.LNetUp()
	d := lustre.StartLnetd(t, g, lustre.LnetdConfig{})
	pingBoth(t, g, d, "first contact")
	pingBoth(t, g, d, "connected")
	out, err := d.Ctl("peer", "show", "-v")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("softib peer show:\n%s", out)
	out, err = g.Lnetctl(g.Context(), "peer", "show")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel peer show:\n%s", out)
	checkCapture(t, g, c)
}

// TestInteropLnetdRestart: softib lnetd is killed (SIGKILL, so no
// connection closes cleanly) and restarted while the kernel holds
// connections to it on both nets. The kernel must reconnect: its pings to
// the new lnetd (a new incarnation) work on both nets, and so do softib's.
//
// tcp: the host kernel closes the dead process's sockets (FIN), ksocklnd
// drops those connections at once and its next ping connects anew.
//
// o2ib: the dead process's QPs vanish without a DREQ, and RoCE frames
// for a QP that no longer exists are dropped silently (as by an HCA), so
// ko2iblnd learns of the crash only when its next send on the old
// connection runs out of RC transport retries (retry_count 5, ~13 s in
// the emulated guest). That message fails (lnetctl ping: "Input/output
// error"), the connection closes (DREQ) and the next message connects
// with a new CONNREQ. So the kernel's first o2ib ping after the crash may
// fail with EIO, once; any other failure, or a second one, fails the test.
func TestInteropLnetdRestart(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	g.LNetUp()
	d := lustre.StartLnetd(t, g, lustre.LnetdConfig{})
	pingBoth(t, g, d, "before the restart")
	d.Kill()
	d.Restart()
	for _, net := range lustre.Nets {
		start := time.Now()
		_, err := g.Ping(g.Context(), d.NID(net))
		if err != nil && net == "o2ib" && strings.Contains(err.Error(), "Input/output error") {
			t.Logf("after the restart: kernel -> softib on o2ib: first ping failed after %v (the old RC connection timed out), as expected: %v",
				time.Since(start).Round(time.Millisecond), err)
			_, err = g.Ping(g.Context(), d.NID(net))
		}
		if err != nil {
			t.Fatalf("after the restart: kernel -> softib on %s: %v", net, err)
		}
		t.Logf("after the restart: kernel -> softib on %s: ok after %v", net, time.Since(start).Round(time.Millisecond))
	}
	pingBoth(t, g, d, "after the restart")
	checkCapture(t, g, c)
}

// TestInteropModuleReload: the kernel's LNet is unconfigured and every
// Lustre module unloaded, then loaded and brought up again (a new
// incarnation) while softib lnetd keeps running with connections to the
// old one. softib must reconnect: its pings to the kernel work on both
// nets, and so do the kernel's.
func TestInteropModuleReload(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	g.LNetUp()
	d := lustre.StartLnetd(t, g, lustre.LnetdConfig{})
	pingBoth(t, g, d, "before the reload")
	g.ReloadModules()
	for _, net := range lustre.Nets {
		if _, err := d.Ping(g.NID(net)); err != nil {
			t.Fatalf("after the reload: softib -> kernel on %s: %v", net, err)
		}
	}
	pingBoth(t, g, d, "after the reload")
	checkCapture(t, g, c)
}
