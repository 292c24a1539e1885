//go:build linux

package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket is a batched UDP socket (Linux: recvmmsg/sendmmsg with GSO/GRO).
// It integrates with Go's netpoller through syscall.RawConn, so blocked
// readers and writers park like any net.Conn user and Close wakes them.
type Socket struct {
	conn  *net.UDPConn
	rc    syscall.RawConn
	laddr netip.AddrPort
	is6   bool
	cfg   Config

	gso    atomic.Bool                      // GSO currently in use
	gsoErr atomic.Pointer[GSODisabledError] // why GSO was switched off
	gro    bool                             // UDP_GRO enabled on the socket

	closed atomic.Bool

	rd reader
	wr writer
	ns sockNS // the socket's network namespace, for Sender

	// Stats counts socket events.
	Stats Stats
}

// Listen opens a UDP socket bound to addr. An IPv4 (or IPv4-mapped)
// address gives an IPv4 socket with DF set on every datagram; an IPv6
// address gives an IPV6_V6ONLY socket. An invalid (zero) addr means
// 0.0.0.0:0. cfg may be nil.
func Listen(addr netip.AddrPort, cfg *Config) (*Socket, error) {
	c := cfg.withDefaults()
	if !addr.IsValid() {
		addr = netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port())
	}
	return open(addr, c, reuseNone, "listen")
}

// reuseMode selects the address-sharing option open sets before bind.
type reuseMode int

const (
	reuseNone reuseMode = iota
	reuseAddr           // SO_REUSEADDR: send-only sockets on a port others hold (OpenSender)
	reusePort           // SO_REUSEPORT: receive shards on one address (ListenShards)
)

// open binds a socket to addr with c's options (and the reuse option)
// and sets up its send and receive state; Listen, ListenShards and
// OpenSender share it. what names the operation in errors.
func open(addr netip.AddrPort, c Config, reuse reuseMode, what string) (*Socket, error) {
	ip := addr.Addr()
	is6 := ip.Is6() && !ip.Is4In6()
	network := "udp4"
	if is6 {
		network = "udp6"
	} else {
		addr = netip.AddrPortFrom(ip.Unmap(), addr.Port())
	}
	var optErr error
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		err := rc.Control(func(fd uintptr) {
			switch reuse {
			case reuseAddr:
				if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); e != nil {
					optErr = os.NewSyscallError("setsockopt SO_REUSEADDR", e)
					return
				}
			case reusePort:
				if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); e != nil {
					optErr = os.NewSyscallError("setsockopt SO_REUSEPORT", e)
					return
				}
			}
			optErr = setOptions(int(fd), is6, &c)
		})
		if err != nil {
			return err
		}
		return optErr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("udp: %s %v: %w", what, addr, err)
	}
	uc := pc.(*net.UDPConn)
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("udp: %s %v: %w", what, addr, err)
	}
	s := &Socket{conn: uc, rc: rc, is6: is6, cfg: c}
	s.laddr = uc.LocalAddr().(*net.UDPAddr).AddrPort()
	if !is6 {
		s.laddr = netip.AddrPortFrom(s.laddr.Addr().Unmap(), s.laddr.Port())
	}
	gso, gro := false, false
	rc.Control(func(fd uintptr) {
		gso, gro = probeOffloads(int(fd), &c)
	})
	s.gso.Store(gso)
	s.gro = gro
	s.rd.init(s)
	s.wr.init(s)
	return s, nil
}

// setOptions sets the socket options that must precede bind.
func setOptions(fd int, is6 bool, c *Config) error {
	setBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, c.ReadBuffer)
	setBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, c.WriteBuffer)
	if is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
		// No fragmentation on IPv6 either: oversize sends fail loudly.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return os.NewSyscallError("setsockopt IPV6_MTU_DISCOVER", err)
		}
		if c.TOS != 0 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, c.TOS); err != nil {
				return os.NewSyscallError("setsockopt IPV6_TCLASS", err)
			}
		}
		if c.TTL != 0 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, c.TTL); err != nil {
				return os.NewSyscallError("setsockopt IPV6_UNICAST_HOPS", err)
			}
		}
		if c.RecvTOS {
			return setRecvTOS(fd, true)
		}
		return nil
	}
	// DF on an unconnected socket makes the kernel send IP ID 0, which
	// the RoCEv2 ICRC depends on (roce-wire.md §1.2).
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return os.NewSyscallError("setsockopt IP_MTU_DISCOVER", err)
	}
	if c.TOS != 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, c.TOS); err != nil {
			return os.NewSyscallError("setsockopt IP_TOS", err)
		}
	}
	if c.TTL != 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, c.TTL); err != nil {
			return os.NewSyscallError("setsockopt IP_TTL", err)
		}
	}
	if c.RecvTOS {
		return setRecvTOS(fd, false)
	}
	return nil
}

// setBuf asks for a socket buffer of size bytes, first with the FORCE
// option (root only, ignores the sysctl maximum), then the normal one.
// Failure is not fatal: the kernel default still works, only slower.
func setBuf(fd, force, normal, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, normal, size)
}

// probeOffloads reports whether UDP GSO is available and enables UDP GRO,
// honouring the Config switches.
func probeOffloads(fd int, c *Config) (gso, gro bool) {
	if !c.DisableGSO {
		// Kernels with UDP_SEGMENT (4.18+) answer the getsockopt.
		_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		gso = err == nil
	}
	if !c.DisableGRO {
		gro = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
	}
	return gso, gro
}

// LocalAddr returns the bound address.
func (s *Socket) LocalAddr() netip.AddrPort { return s.laddr }

// BatchSize returns Config.BatchSize after defaults.
func (s *Socket) BatchSize() int { return s.cfg.BatchSize }

// Close closes the socket; blocked ReadBatch and WriteBatch calls return
// errors wrapping net.ErrClosed.
func (s *Socket) Close() error {
	if s.closed.Swap(true) {
		return errClosed
	}
	s.ns.close()
	return s.conn.Close()
}

// Offloads reports whether UDP GSO (send) and GRO (receive) are in use.
func (s *Socket) Offloads() (gso, gro bool) { return s.gso.Load(), s.gro }

// GSODisabled returns the *GSODisabledError that explains why GSO was
// switched off after a failed send, or nil.
func (s *Socket) GSODisabled() error {
	if e := s.gsoErr.Load(); e != nil {
		return e
	}
	return nil
}

// UDPConn returns the underlying *net.UDPConn, e.g. for SetReadBuffer.
// Reading or writing through it bypasses the batching.
func (s *Socket) UDPConn() *net.UDPConn { return s.conn }

// wrapErr turns a RawConn or syscall error into the error returned to
// callers; closed sockets give an error wrapping net.ErrClosed.
func (s *Socket) wrapErr(op string, err error) error {
	if s.closed.Load() || errors.Is(err, net.ErrClosed) {
		return errClosed
	}
	if errno, ok := err.(syscall.Errno); ok {
		return os.NewSyscallError(op, errno)
	}
	return fmt.Errorf("udp: %s: %w", op, err)
}

// ---- addresses ----

// sockaddr is room for a sockaddr_in or sockaddr_in6.
type sockaddr = unix.RawSockaddrInet6

// putSockaddr encodes ap into sa and returns its length, or 0 if the
// address family does not match the socket.
func putSockaddr(sa *sockaddr, ap netip.AddrPort, is6 bool) uint32 {
	ip := ap.Addr()
	port := ap.Port()
	if !is6 {
		if !ip.Is4() && !ip.Is4In6() {
			return 0
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		sa4.Addr = ip.Unmap().As4()
		sa4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4
	}
	if !ip.Is6() || ip.Is4In6() {
		return 0
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	sa.Flowinfo = 0
	sa.Addr = ip.As16()
	sa.Scope_id = 0
	if z := ip.Zone(); z != "" {
		sa.Scope_id = zoneIndex(z)
	}
	return unix.SizeofSockaddrInet6
}

// getSockaddr decodes a sockaddr filled in by the kernel.
func getSockaddr(sa *sockaddr) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		ip := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			ip = ip.WithZone(zoneName(sa.Scope_id))
		}
		return netip.AddrPortFrom(ip, uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// zoneIndex maps an IPv6 zone (interface name or number) to an index.
func zoneIndex(z string) uint32 {
	if ifi, err := net.InterfaceByName(z); err == nil {
		return uint32(ifi.Index)
	}
	var n uint32
	for _, c := range []byte(z) {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint32(c-'0')
	}
	return n
}

// zoneName maps an interface index to a zone name (link-local sources
// only, so the allocation is off the RoCE data path).
func zoneName(idx uint32) string {
	if ifi, err := net.InterfaceByIndex(int(idx)); err == nil {
		return ifi.Name
	}
	return fmt.Sprint(idx)
}

// ---- control messages ----

var (
	cmsgHdrLen  = unix.CmsgLen(0)
	gsoCmsgSize = unix.CmsgSpace(2) // UDP_SEGMENT carries a uint16
	groCmsgSize = unix.CmsgSpace(4) // UDP_GRO carries an int
)

// putGSOCmsg writes a UDP_SEGMENT control message into b.
func putGSOCmsg(b []byte, segSize uint16) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[cmsgHdrLen])) = segSize
}

// groSize returns the UDP_GRO segment size in control data b, or 0.
func groSize(b []byte) int {
	if d := cmsgData(b, unix.IPPROTO_UDP, unix.UDP_GRO); len(d) >= 4 {
		return int(*(*int32)(unsafe.Pointer(&d[0])))
	}
	return 0
}

// cmsgData returns the data of the first control message of the given
// level and type in control data b, or nil. It walks the cmsgs in place
// (unix.ParseSocketControlMessage allocates) and stops at a malformed one.
func cmsgData(b []byte, level, typ int32) []byte {
	for len(b) >= cmsgHdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < cmsgHdrLen || l > len(b) {
			return nil
		}
		if h.Level == level && h.Type == typ {
			return b[cmsgHdrLen:l]
		}
		l = cmsgAlign(l)
		if l > len(b) {
			return nil
		}
		b = b[l:]
	}
	return nil
}

func cmsgAlign(n int) int {
	const a = int(unsafe.Sizeof(uintptr(0)))
	return (n + a - 1) &^ (a - 1)
}
