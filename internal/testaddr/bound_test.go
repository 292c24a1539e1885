//go:build linux

package testaddr_test

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"softib/internal/testaddr"
)

func bound(t *testing.T, network string, ap netip.AddrPort) bool {
	t.Helper()
	ok, err := testaddr.Bound(network, ap)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestBound: a listening TCP socket and a bound UDP socket are seen on
// their address (and a wildcard one on every address) while open, and
// not once closed, nor on another address or port.
func TestBound(t *testing.T) {
	a, other := testaddr.Next(), testaddr.Next()
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	tp := ln.Addr().(*net.TCPAddr).AddrPort()
	uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	up := uc.LocalAddr().(*net.UDPAddr).AddrPort()
	if !bound(t, "tcp", tp) || !bound(t, "udp", up) {
		t.Fatalf("open sockets %v %v not seen", tp, up)
	}
	if bound(t, "tcp", netip.AddrPortFrom(other, tp.Port())) || bound(t, "udp", netip.AddrPortFrom(other, up.Port())) {
		t.Fatal("seen on another address")
	}
	// An accepted connection on the port (local address tp, state
	// ESTABLISHED) is not a listener.
	c, err := net.Dial("tcp4", tp.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	ln.Close()
	uc.Close()
	if bound(t, "tcp", tp) || bound(t, "udp", up) {
		t.Fatalf("closed sockets %v %v still seen", tp, up)
	}

	w, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !bound(t, "tcp", netip.AddrPortFrom(a, uint16(w.Addr().(*net.TCPAddr).Port))) {
		t.Fatal("wildcard listener not seen on a specific address")
	}
	if _, err := testaddr.Bound("sctp", tp); err == nil {
		t.Fatal("sctp accepted")
	}
}

// TestBoundThreadNamespace: Bound reads the calling thread's network
// namespace, not the thread group leader's (/proc/net), which a test
// binary's main thread may have left for good: from a thread in a fresh
// namespace, a listener of the process's own namespace is not seen.
func TestBoundThreadNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (unshare CLONE_NEWNET)")
	}
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(testaddr.Next(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	type result struct {
		seen bool
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, in another namespace, ends with
		// this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		seen, err := testaddr.Bound("tcp", ap)
		ch <- result{seen, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.seen {
		t.Fatalf("%v seen from another network namespace", ap)
	}
	if !bound(t, "tcp", ap) {
		t.Fatalf("%v not seen from the process's own namespace", ap)
	}
}
