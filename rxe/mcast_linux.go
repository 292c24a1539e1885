//go:build linux

package rxe

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"softib/udp"
)

// mcastReadBuffer is the SO_RCVBUF of a group socket: groups carry
// datagrams one message each, so a burst of a few hundred fits.
const mcastReadBuffer = 1 << 20

// joinGroup opens the receive socket of the group at group (address and
// the device's port) in conn's network namespace and joins the IP group
// on the interface of the device address local. It returns nil, nil
// when conn is not a *udp.Socket (no IP network to join).
//
// The socket is made here rather than by package udp or net: Go's
// ListenPacket binds a multicast address as the wildcard (so that one
// socket can join several groups), which would take every datagram of
// the port and collide with the device socket's bind.
func joinGroup(conn udp.Conn, local netip.Addr, group netip.AddrPort) (udp.Conn, error) {
	s, ok := conn.(*udp.Socket)
	if !ok {
		return nil, nil
	}
	nsfd := -1
	if rc, err := s.UDPConn().SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if n, err := unix.IoctlRetInt(int(fd), unix.SIOCGSKNS); err == nil {
				nsfd = n
			}
		})
	}
	if nsfd >= 0 {
		defer unix.Close(nsfd)
	}
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	// A thread of its own: it may have to enter the device's namespace,
	// and is not reused if it cannot get back.
	go func() {
		runtime.LockOSThread()
		back := -1
		if nsfd >= 0 {
			var cur, dev unix.Stat_t
			if unix.Stat("/proc/thread-self/ns/net", &cur) == nil && unix.Fstat(nsfd, &dev) == nil &&
				(cur.Dev != dev.Dev || cur.Ino != dev.Ino) {
				orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err == nil {
					if err = unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
						unix.Close(orig)
						runtime.UnlockOSThread()
						ch <- result{-1, os.NewSyscallError("setns", err)}
						return
					}
					back = orig
				}
			}
		}
		fd, err := groupSocket(local, group)
		if back >= 0 {
			ok := unix.Setns(back, unix.CLONE_NEWNET) == nil
			unix.Close(back)
			if !ok {
				ch <- result{fd, err} // the thread exits with the goroutine
				return
			}
		}
		runtime.UnlockOSThread()
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("join %v: %w", group.Addr(), r.err)
	}
	f := os.NewFile(uintptr(r.fd), "mcast "+group.String())
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("join %v: %w", group.Addr(), err)
	}
	return &groupConn{c: pc.(*net.UDPConn), addr: group}, nil
}

// groupSocket creates a UDP socket bound to group with SO_REUSEADDR
// (other devices and processes may join the group on the host) and
// joins the group on local's interface.
func groupSocket(local netip.Addr, group netip.AddrPort) (int, error) {
	fam := unix.AF_INET
	if !group.Addr().Is4() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	fail := func(op string, err error) (int, error) {
		unix.Close(fd)
		return -1, os.NewSyscallError(op, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("setsockopt SO_REUSEADDR", err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, mcastReadBuffer) != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, mcastReadBuffer); err != nil {
			return fail("setsockopt SO_RCVBUF", err)
		}
	}
	if fam == unix.AF_INET {
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: group.Addr().As4(), Port: int(group.Port())}); err != nil {
			return fail("bind", err)
		}
		// The interface is the one holding the device address
		// (ip_mc_find_dev finds it by imr_address).
		m := unix.IPMreqn{Multiaddr: group.Addr().As4(), Address: local.As4()}
		if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &m); err != nil {
			return fail("setsockopt IP_ADD_MEMBERSHIP", err)
		}
		return fd, nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
		return fail("setsockopt IPV6_V6ONLY", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: group.Addr().As16(), Port: int(group.Port())}); err != nil {
		return fail("bind", err)
	}
	m := unix.IPv6Mreq{Multiaddr: group.Addr().As16(), Interface: uint32(ifIndexOf(local))}
	if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &m); err != nil {
		return fail("setsockopt IPV6_JOIN_GROUP", err)
	}
	return fd, nil
}

// ifIndexOf returns the index of the interface holding addr in the
// calling thread's namespace, or 0 (the kernel then picks the interface
// of its route to the group).
func ifIndexOf(addr netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	for _, ifi := range ifs {
		as, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
					return ifi.Index
				}
			}
		}
	}
	return 0
}

// groupConn is a group's receive socket as a udp.Conn that reads one
// datagram per call (groups carry little traffic).
type groupConn struct {
	c    *net.UDPConn
	addr netip.AddrPort
}

func (g *groupConn) ReadBatch(msgs []udp.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	m := &msgs[0]
	n, from, err := g.c.ReadFromUDPAddrPort(m.Buf[:cap(m.Buf)])
	if err != nil {
		return 0, err
	}
	m.N, m.Addr = n, from
	return 1, nil
}

func (g *groupConn) WriteBatch(msgs []udp.Message) (int, error) {
	return 0, fmt.Errorf("rxe: group socket %v is receive-only", g.addr)
}

func (g *groupConn) LocalAddr() netip.AddrPort { return g.addr }
func (g *groupConn) BatchSize() int            { return 1 }
func (g *groupConn) Close() error              { return g.c.Close() }
