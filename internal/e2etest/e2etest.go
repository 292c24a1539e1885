// Package e2etest holds what the end-to-end tests of the LNDs and LNet
// (o2iblnd, socklnd, lnet) each used to write out: a packet capture
// whose start and end are known rather than waited for, kernel SNMP
// counters read inside a network namespace, and a UDP socket opened
// inside one. Addresses come from internal/testaddr (unique to the test
// binary, held by live claims); namespaces and impairment from
// internal/netns and internal/netemu, whose Do methods the helpers here
// take as a plain function so that they serve both.
//
// Only tests import it (internal/layers gives it no production user).
package e2etest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/testenv"
	"softib/udp"
)

// HangGuard bounds every wait here; reaching it is a failure, not a
// measurement.
const HangGuard = 30 * time.Second

// Do runs f inside a network namespace: netns.Node.Do, netemu.Host.Do.
// nil means this process's namespace.
type Do func(f func() error) error

func (do Do) run(f func() error) error {
	if do == nil {
		return f()
	}
	return do(f)
}

// Capture is a dumpcap capture into a pcap file in the test's temp dir.
//
// Its start and end are marked, not waited for: StartCapture sends probe
// datagrams (from and to a live socket on the test binary's own loopback
// block, matched by a clause Capture adds to the filter) until one is in
// the file, so the filter is live; Stop sends a final probe with a fresh
// token and stops dumpcap once that token is in the file, so every packet
// sent before Stop (queued to the same packet socket earlier) is too. The
// probes decode as plain UDP.
type Capture struct {
	// Path is the pcap file.
	Path string

	t       testing.TB
	cmd     *exec.Cmd
	logged  chan struct{} // closed when dumpcap's stderr is drained
	probe   *net.UDPConn
	stopped bool
}

// StartCapture runs dumpcap on iface (e.g. "lo") with the BPF filter
// filter. It requires root, dumpcap and tshark (a test skips without
// them on a developer machine and fails in CI, see testenv). The capture
// stops when the test ends if Stop was not called.
func StartCapture(t testing.TB, iface, filter string) *Capture {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tshark")
	dumpcap := testenv.RequireTool(t, "dumpcap")
	// The probe socket sends to itself on the block's .0 address, which
	// no test binds (testaddr holds it for its claim, on another port).
	probe, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(testaddr.Block(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	pa := probe.LocalAddr().(*net.UDPAddr).AddrPort()
	c := &Capture{Path: filepath.Join(t.TempDir(), "capture.pcap"), t: t, probe: probe}
	expr := fmt.Sprintf("(%s) or (udp and host %s and port %d)", filter, pa.Addr(), pa.Port())
	c.cmd = exec.Command(dumpcap, "-q", "-i", iface, "-P", "-B", "64", "-f", expr, "-w", c.Path)
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.logged = make(chan struct{})
	go func() { // keep dumpcap's stderr drained; shown if the capture fails
		defer close(c.logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Logf("dumpcap: %s", sc.Text())
		}
	}()
	t.Cleanup(c.Stop)
	if !c.mark("start") {
		c.kill()
		t.Fatal("hang guard: dumpcap captured no probe")
	}
	return c
}

// mark sends probes carrying a fresh token until the token is in the
// capture file, and reports whether it got there within HangGuard.
func (c *Capture) mark(what string) bool {
	var rnd [8]byte
	rand.Read(rnd[:])
	token := []byte("e2etest capture " + what + " " + hex.EncodeToString(rnd[:]))
	to := c.probe.LocalAddr().(*net.UDPAddr)
	deadline := time.Now().Add(HangGuard)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if _, err := c.probe.WriteToUDP(token, to); err != nil {
			c.t.Errorf("capture probe: %v", err)
			return false
		}
		<-tick.C
		if b, err := os.ReadFile(c.Path); err == nil && bytes.Contains(b, token) {
			return true
		}
	}
	return false
}

func (c *Capture) kill() {
	c.cmd.Process.Kill()
	<-c.logged // before Wait, which closes the pipe
	c.cmd.Wait()
	c.probe.Close()
	c.stopped = true
}

// Stop marks the end of the capture, waits until the mark is in the file
// and ends dumpcap. It may be called more than once.
func (c *Capture) Stop() {
	if c.stopped {
		return
	}
	if !c.mark("end") {
		c.t.Error("hang guard: the capture's end mark never reached the file")
	}
	c.stopped = true
	c.cmd.Process.Signal(syscall.SIGINT)
	<-c.logged // before Wait, which closes the pipe
	c.cmd.Wait()
	c.probe.Close()
}

// SNMP returns the counter field of proto ("Udp", "Tcp", "Ip", …) from
// /proc/net/snmp of the namespace do runs in.
func SNMP(t testing.TB, do Do, proto, field string) uint64 {
	t.Helper()
	var b []byte
	if err := do.run(func() (err error) {
		// thread-self: Do runs f on a thread inside the namespace,
		// while /proc/self/net follows the process's main thread.
		b, err = os.ReadFile("/proc/thread-self/net/snmp")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == field && i < len(f) {
				v, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					t.Fatalf("%s %s: %v", proto, field, err)
				}
				return v
			}
		}
	}
	t.Fatalf("no %s %s in /proc/net/snmp", proto, field)
	return 0
}

// ListenUDP opens a udp.Socket on addr in the default configuration
// (GSO and GRO as the kernel offers them) inside the namespace do runs
// in. The caller owns it (an rxe device given it as Config.Conn closes
// it).
func ListenUDP(t testing.TB, do Do, addr netip.AddrPort) *udp.Socket {
	t.Helper()
	var s *udp.Socket
	if err := do.run(func() (err error) {
		s, err = udp.Listen(addr, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}
