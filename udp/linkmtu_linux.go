package udp

import (
	"fmt"
	"net"
	"net/netip"
)

// LinkMTU returns the MTU of the network interface that holds the
// socket's bound address, looked up in the socket's network namespace:
// the interface with that address assigned, or for a loopback address
// (127/8, ::1) the loopback interface. It fails for an unspecified
// address or one no interface holds. rxe derives its port's active MTU
// from it, as rdma_rxe does from its netdev.
func (s *Socket) LinkMTU() (int, error) {
	return inSocketNetns(s, func() (int, error) { return linkMTU(s.laddr.Addr()) })
}

// linkMTU is LinkMTU in the calling thread's namespace.
func linkMTU(a netip.Addr) (int, error) {
	a = a.Unmap().WithZone("")
	if !a.IsValid() || a.IsUnspecified() {
		return 0, fmt.Errorf("udp: link MTU of %v: no single interface", a)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, fmt.Errorf("udp: link MTU of %v: %w", a, err)
	}
	lo := -1
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 && lo < 0 {
			lo = ifc.MTU
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, ia := range addrs {
			if n, ok := ia.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return ifc.MTU, nil
				}
			}
		}
	}
	if a.IsLoopback() && lo > 0 {
		return lo, nil
	}
	return 0, fmt.Errorf("udp: link MTU of %v: no interface holds the address", a)
}
