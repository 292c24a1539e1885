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

// kernelPings pings softib from the kernel on every net. With afterCrash,
// the first o2ib ping may fail with EIO, once (see TestInteropLnetdRestart).
func kernelPings(t *testing.T, g *lustre.Guest, d *lustre.Lnetd, what string, afterCrash bool) {
	t.Helper()
	for _, net := range lustre.Nets {
		start := time.Now()
		_, err := g.Ping(g.Context(), d.NID(net))
		if err != nil && afterCrash && net == "o2ib" && strings.Contains(err.Error(), "Input/output error") {
			t.Logf("%s: kernel -> softib on o2ib: first ping failed after %v (the old RC connection ran out of retries), as expected: %v",
				what, time.Since(start).Round(time.Millisecond), err)
			_, err = g.Ping(g.Context(), d.NID(net))
		}
		if err != nil {
			t.Fatalf("%s: kernel -> softib on %s: %v", what, net, err)
		}
		t.Logf("%s: kernel -> softib on %s: ok after %v", what, net, time.Since(start).Round(time.Millisecond))
	}
}

// softibPings pings the kernel from softib on every net.
func softibPings(t *testing.T, g *lustre.Guest, d *lustre.Lnetd, what string) {
	t.Helper()
	for _, net := range lustre.Nets {
		start := time.Now()
		if _, err := d.Ping(g.NID(net)); err != nil {
			t.Fatalf("%s: softib -> kernel on %s: %v", what, net, err)
		}
		t.Logf("%s: softib -> kernel on %s: ok after %v", what, net, time.Since(start).Round(time.Millisecond))
	}
}

// TestInteropLnetdRestart: softib lnetd is killed (SIGKILL, so no
// connection closes cleanly) and restarted while the kernel holds
// connections to it on both nets, twice: after the first crash the kernel
// pings first, after the second softib does. Both must reconnect on both
// nets, to and from the new lnetd (a new incarnation).
//
// tcp: the host kernel closes the dead process's sockets (FIN), ksocklnd
// drops those connections at once and its next ping connects anew.
//
// o2ib, kernel first: the dead process's QPs vanish without a DREQ, and
// RoCE frames for a QP that no longer exists are dropped silently (as by
// an HCA), so ko2iblnd learns of the crash only when its next send on the
// old connection runs out of RC transport retries (retry_count 5, ~13 s
// in the emulated guest). That message fails (lnetctl ping: "Input/output
// error"), the connection closes (DREQ) and the next message connects
// with a new CONNREQ. So the kernel's first o2ib ping after the crash may
// fail with EIO, once; any other failure, or a second one, fails the test.
//
// o2ib, softib first: the new lnetd's first QPN is the one the kernel's
// old connection holds, so the kernel's IB CM refuses the REQ (REJ 10,
// STALE_CONN) and disconnects the old connection (DREQ); softib connects
// again at once, and the kernel's own pings then work at once.
func TestInteropLnetdRestart(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	g.LNetUp()
	d := lustre.StartLnetd(t, g, lustre.LnetdConfig{})
	pingBoth(t, g, d, "before the restarts")

	d.Kill()
	d.Restart()
	kernelPings(t, g, d, "after restart 1 (kernel first)", true)
	softibPings(t, g, d, "after restart 1 (kernel first)")

	d.Kill()
	d.Restart()
	softibPings(t, g, d, "after restart 2 (softib first)")
	kernelPings(t, g, d, "after restart 2 (softib first)", false)

	pingBoth(t, g, d, "after the restarts")
	checkCapture(t, g, c)
}

// TestInteropModuleReload: the kernel's LNet is unconfigured and every
// Lustre module unloaded, then loaded and brought up again (a new
// incarnation) while softib lnetd keeps running with connections to the
// old one, twice: after the first reload softib pings first, after the
// second the kernel does. Both must reconnect on both nets.
//
// The kernel's unconfigure closes its o2ib connections (DREQ); softib
// keeps the kernel's old incarnation as the peer's last seen one (Lustre
// unlinks a peer whose last connection closed and forgets it), so:
//
// o2ib, softib first: softib's CONNREQ names the kernel's old incarnation
// (dststamp), the kernel REJects it as stale (kib_rej reason 5; dmesg
// "Stale connection request") with its new incarnation, and softib
// connects again at once with that one.
//
// o2ib, kernel first: the kernel's CONNREQ carries its new incarnation
// (srcstamp); softib REJects it as stale (kib_rej 5, as
// kiblnd_passive_connect does for a known peer of another incarnation),
// forgets the old one, and the kernel connects again at once.
func TestInteropModuleReload(t *testing.T) {
	g := lustre.Boot(t)
	if g == nil {
		return
	}
	c := g.Capture(t)
	g.LNetUp()
	d := lustre.StartLnetd(t, g, lustre.LnetdConfig{})
	pingBoth(t, g, d, "before the reloads")

	g.ReloadModules()
	softibPings(t, g, d, "after reload 1 (softib first)")
	kernelPings(t, g, d, "after reload 1 (softib first)", false)

	g.ReloadModules()
	kernelPings(t, g, d, "after reload 2 (kernel first)", false)
	softibPings(t, g, d, "after reload 2 (kernel first)")

	pingBoth(t, g, d, "after the reloads")
	checkCapture(t, g, c)
}
