//go:build linux

package udp

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"

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
	return open(laddr, c, reuseAddr, "open sender")
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
	return inSocketNetns(s, open)
}

// inSocketNetns runs f in s's network namespace: on the calling thread
// when that is where s lives or the kernel does not tell (SIOCGSKNS and
// setns need CAP_NET_ADMIN and CAP_SYS_ADMIN; without them the calling
// thread's namespace is all that can be used), else on a thread switched
// into it (inNetns).
func inSocketNetns[T any](s *Socket, f func() (T, error)) (T, error) {
	// Holding the cache's lock keeps Close from closing nsfd under us.
	s.ns.mu.Lock()
	defer s.ns.mu.Unlock()
	nsfd, dev, ino := s.ns.get(s)
	if nsfd < 0 {
		return f()
	}
	runtime.LockOSThread()
	var cur unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &cur); err == nil && cur.Dev == dev && cur.Ino == ino {
		defer runtime.UnlockOSThread()
		return f()
	}
	runtime.UnlockOSThread()
	return inNetns(nsfd, f)
}

// sockNS caches a socket's network namespace (a descriptor from
// SIOCGSKNS and its identity), looked up at the first Sender: a device
// opens a sender per connection, and the lookup would cost three system
// calls each time.
type sockNS struct {
	mu       sync.Mutex // held by Sender throughout
	done     bool
	fd       int // -1: not available
	dev, ino uint64
}

// get returns the namespace descriptor and identity, fd -1 if the
// kernel does not tell (or the socket is closed); n.mu held.
func (n *sockNS) get(s *Socket) (fd int, dev, ino uint64) {
	if !n.done {
		n.done, n.fd = true, -1
		var nsfd int
		var err error
		if cerr := s.rc.Control(func(fd uintptr) { nsfd, err = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS) }); cerr == nil && err == nil {
			var st unix.Stat_t
			if unix.Fstat(nsfd, &st) == nil {
				n.fd, n.dev, n.ino = nsfd, st.Dev, st.Ino
			} else {
				unix.Close(nsfd)
			}
		}
	}
	return n.fd, n.dev, n.ino
}

// close releases the cached descriptor (Socket.Close).
func (n *sockNS) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd >= 0 && n.done {
		unix.Close(n.fd)
	}
	n.done, n.fd = true, -1
}

// inNetns runs open on a thread switched into the network namespace
// nsfd. The thread goes back to its namespace afterwards and is reused
// only if that works; otherwise it exits with its goroutine.
func inNetns[T any](nsfd int, open func() (T, error)) (T, error) {
	type result struct {
		s   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: os.NewSyscallError("open netns", err)}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: os.NewSyscallError("setns", err)}
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
