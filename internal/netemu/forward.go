package netemu

import (
	"bytes"
	"net"
	"net/netip"
)

// forwarder takes the frames of one direction off the ingress link and
// hands them, rewritten for the egress link, to the direction's lane.
// It is used by one goroutine only (the ingress reader).
type forwarder struct {
	lane *lane
	c    *counters

	inMAC   net.HardwareAddr // the router's MAC on the ingress link
	outMAC  net.HardwareAddr // the router's MAC on the egress link
	peerMAC net.HardwareAddr // the far host's MAC on the egress link
	dst4    netip.Prefix     // destinations routed out the egress link
	dst6    netip.Prefix     // (invalid: none)
	mtu     int              // egress MTU (largest IP packet)
}

func newForwarder(l *lane, inMAC, outMAC, peerMAC net.HardwareAddr, dst4, dst6 netip.Prefix, mtu int) *forwarder {
	return &forwarder{lane: l, c: &l.c, inMAC: inMAC, outMAC: outMAC, peerMAC: peerMAC, dst4: dst4, dst6: dst6, mtu: mtu}
}

// handle routes one frame as read from the ingress packet socket
// (virtio header, then Ethernet frame) and sends what is due at once.
// b is only borrowed.
func (fw *forwarder) handle(b []byte) {
	fw.route(b)
	fw.lane.pushLocked()
}

// route is handle without the push: the packets due at once wait on
// the lane's out list for the next push.
func (fw *forwarder) route(b []byte) {
	if len(b) < vnetLen+ethLen {
		fw.c.Malformed.Inc()
		return
	}
	h, f := parseVnet(b), b[vnetLen:]
	if !bytes.Equal(f[:6], fw.inMAC) {
		fw.c.Ignored.Inc() // broadcast, multicast, or for someone else
		return
	}
	if t := uint16(f[12])<<8 | uint16(f[13]); t != etherTypeIPv4 && t != etherTypeIPv6 {
		fw.c.Ignored.Inc()
		return
	}
	p, ok := parseIP(f)
	if !ok {
		fw.c.Malformed.Inc()
		return
	}
	if !(p.v6 && fw.dst6.IsValid() && fw.dst6.Contains(p.dst)) && !(!p.v6 && fw.dst4.Contains(p.dst)) {
		fw.c.NoRoute.Inc()
		return
	}
	if h.gsoType != gsoNone {
		plan, ok := planGSO(f, &p, h)
		if !ok || plan.hdr+plan.mss-ethLen > fw.mtu {
			fw.c.Malformed.Inc()
			return
		}
		fw.c.Segmented.Inc()
		for i := range plan.segs {
			pk := fw.lane.pool.get()
			n := segment(pk.buf[vnetLen:], f, &p, plan, i)
			fw.emit(pk, n, &p)
		}
		return
	}
	if p.end-ethLen > fw.mtu {
		fw.c.Malformed.Inc()
		return
	}
	if h.flags&vnetNeedsCsum != 0 {
		completeCsum(f, &p, h)
	}
	pk := fw.lane.pool.get()
	n := copy(pk.buf[vnetLen:], f[:p.end]) // Ethernet padding dropped
	fw.emit(pk, n, &p)
}

// emit finishes the n-byte frame in pk (TTL, MACs) and passes it to the
// lane.
func (fw *forwarder) emit(pk *packet, n int, p *ipPacket) {
	clear(pk.buf[:vnetLen])
	f := pk.buf[vnetLen : vnetLen+n]
	if !decTTL(f, p) {
		fw.c.TTLExpired.Inc()
		fw.lane.pool.put(pk)
		return
	}
	copy(f[0:6], fw.peerMAC)
	copy(f[6:12], fw.outMAC)
	pk.n = vnetLen + n
	fl := flow{proto: p.proto}
	fl.src, fl.dst, fl.ports = p.ports(f)
	fw.lane.input(pk, fl, vnetLen+p.l4, vnetLen+n)
}

// flow is what a Filter looks at.
type flow struct {
	proto    uint8
	src, dst uint16
	ports    bool // src and dst are valid
}

// matches reports whether f selects packets of flow fl.
func (f Filter) matches(fl flow) bool {
	if f.Proto != 0 && f.Proto != fl.proto {
		return false
	}
	return f.Port == 0 || fl.ports && (fl.src == f.Port || fl.dst == f.Port)
}
