//go:build linux

package rxe

import (
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"softib/udp"
)

// mcastReadBuffer is the SO_RCVBUF of a group socket: groups carry
// datagrams one message each, so a burst of a few hundred fits.
const mcastReadBuffer = 1 << 20

// joinGroup opens the receive socket of the group at group (address and
// the device's port) on conn's network namespace and joins the IP group
// on the interface of the device address local. It returns nil, nil
// when conn is not a *udp.Socket (no IP network to join).
func joinGroup(conn udp.Conn, local netip.Addr, group netip.AddrPort) (udp.Conn, error) {
	s, ok := conn.(*udp.Socket)
	if !ok {
		return nil, nil
	}
	// A Sender is a socket bound with SO_REUSEADDR in s's namespace:
	// what a group socket needs, bar the receive buffer and the join.
	g, err := s.Sender(group)
	if err != nil {
		return nil, err
	}
	rc, err := g.UDPConn().SyscallConn()
	if err != nil {
		g.Close()
		return nil, err
	}
	var serr error
	if cerr := rc.Control(func(fd uintptr) {
		f := int(fd)
		if serr = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, mcastReadBuffer); serr != nil {
			serr = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUF, mcastReadBuffer)
		}
		if serr != nil {
			serr = os.NewSyscallError("setsockopt SO_RCVBUF", serr)
			return
		}
		if group.Addr().Is4() {
			// The interface is the one holding the device address
			// (ip_mc_find_dev looks it up by imr_address).
			m := unix.IPMreqn{Multiaddr: group.Addr().As4(), Address: local.As4()}
			if err := unix.SetsockoptIPMreqn(f, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &m); err != nil {
				serr = os.NewSyscallError("setsockopt IP_ADD_MEMBERSHIP", err)
			}
			return
		}
		// Interface 0: the kernel picks the one its route to the group
		// takes (the namespace's interfaces are not visible from here).
		m := unix.IPv6Mreq{Multiaddr: group.Addr().As16()}
		if err := unix.SetsockoptIPv6Mreq(f, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &m); err != nil {
			serr = os.NewSyscallError("setsockopt IPV6_JOIN_GROUP", err)
		}
	}); cerr != nil {
		serr = cerr
	}
	if serr != nil {
		g.Close()
		return nil, fmt.Errorf("join %v: %w", group.Addr(), serr)
	}
	return g, nil
}
