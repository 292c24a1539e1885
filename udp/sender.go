package udp

import "net/netip"

// senderAddr is the address Socket.Sender binds: laddr, with the
// socket's own address (local) if laddr has none.
func senderAddr(local, laddr netip.AddrPort) netip.AddrPort {
	if ip := laddr.Addr(); !ip.IsValid() || ip.IsUnspecified() {
		return netip.AddrPortFrom(local.Addr(), laddr.Port())
	}
	return laddr
}
