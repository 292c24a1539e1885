package rxe

import (
	"net/netip"

	"softib/verbs"
)

// McastInject hands datagram b, received from src, to the device's
// multicast group mgid as the group's socket would, and reports whether
// the device has the group.
func McastInject(d *Device, mgid verbs.GID, b []byte, src netip.AddrPort) bool {
	d.mcast.mu.Lock()
	g := d.mcast.groups[mgid]
	d.mcast.mu.Unlock()
	if g == nil {
		return false
	}
	p := d.getPacket()
	defer d.putPacket(p)
	p.n, p.addr = copy(p.buf[:], b), src
	var enc encapCache
	d.mcastInput(g, p, &enc)
	return true
}
