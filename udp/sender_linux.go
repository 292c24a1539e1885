//go:build linux

package udp

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// senderReadBuffer is the SO_RCVBUF a send-only socket asks for: the
// kernel rounds it up to its minimum (a few KiB), so datagrams that
// somebody sends to the port cost almost nothing before they are dropped.
const senderReadBuffer = 1

// OpenSender opens a send-only Socket bound to laddr with SO_REUSEADDR,
// for sending datagrams from a chosen source port (such as the per-QP
// source port of RoCEv2) while another socket receives. Sockets of one
// process or of cooperating processes that all set SO_REUSEADDR may bind
// the same laddr; a socket bound without it (a foreign receiver) makes
// OpenSender fail with EADDRINUSE.
//
// The socket sends exactly as a Listen socket with the same Config does
// (IPv4 DF with IP ID 0, GSO, TOS/TTL, IPV6_V6ONLY), so the IPv4 header
// is predictable and RoCEv2 ICRCs stay valid. It is never meant to be
// read: its receive buffer is the kernel minimum, GRO is off and its
// receive vector is only allocated by a first ReadBatch, so it costs
// about BatchSize × 150 bytes of Go heap (the sendmmsg vector) plus the
// file descriptor. ReadBatch
// works but sees only datagrams addressed to the port, which then
// compete with every other socket bound to it.
func OpenSender(laddr netip.AddrPort, cfg *Config) (*Socket, error) {
	c := cfg.withDefaults()
	c.DisableGRO = true
	c.BusyPoll = false
	c.ReadBuffer = senderReadBuffer
	ip := laddr.Addr()
	if !ip.IsValid() || ip.IsUnspecified() {
		return nil, fmt.Errorf("udp: open sender %v: %w", laddr, unix.EADDRNOTAVAIL)
	}
	return open(laddr, c, true, "open sender")
}

// Sender opens a send-only socket (OpenSender) bound to laddr,
// configured as s is (batch size, send buffer, GSO, TOS, TTL). An
// invalid or unspecified laddr address means s's own address.
//
// The socket is created in s's network namespace, which may not be the
// calling thread's: a program that opened s on a thread switched into
// another namespace gets its senders there too. Finding s's namespace
// (SIOCGSKNS) and entering it need CAP_NET_ADMIN and CAP_SYS_ADMIN;
// without them the sender is opened in the calling thread's namespace.
func (s *Socket) Sender(laddr netip.AddrPort) (*Socket, error) {
	c := s.cfg
	addr := senderAddr(s.laddr, laddr)
	open := func() (*Socket, error) { return OpenSender(addr, &c) }
	var nsfd int
	var err error
	if cerr := s.rc.Control(func(fd uintptr) { nsfd, err = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS) }); cerr != nil {
		return nil, s.wrapErr("ioctl SIOCGSKNS", cerr)
	}
	if err != nil {
		// Not permitted (unprivileged) or an old kernel: the
		// calling thread's namespace is all that can be used.
		return open()
	}
	defer unix.Close(nsfd)
	var want, cur unix.Stat_t
	if err := unix.Fstat(nsfd, &want); err != nil {
		return nil, os.NewSyscallError("fstat", err)
	}
	runtime.LockOSThread()
	if err := unix.Stat("/proc/thread-self/ns/net", &cur); err == nil && cur.Dev == want.Dev && cur.Ino == want.Ino {
		defer runtime.UnlockOSThread()
		return open()
	}
	runtime.UnlockOSThread()
	return inNetns(nsfd, open)
}

// inNetns runs open on a thread switched into the network namespace
// nsfd. The thread goes back to its namespace afterwards and is reused
// only if that works; otherwise it exits with its goroutine.
func inNetns(nsfd int, open func() (*Socket, error)) (*Socket, error) {
	type result struct {
		s   *Socket
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, os.NewSyscallError("open netns", err)}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, os.NewSyscallError("setns", err)}
			return
		}
		s, err := open()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{s, err}
	}()
	r := <-ch
	return r.s, r.err
}
