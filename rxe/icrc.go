package rxe

import (
	"net/netip"

	"softib/wire/roce"
)

// encapCache holds the ICRC template (roce.Encap) for the last peer
// address used, so that a stream of packets to (or from) one peer computes
// no template per packet.
type encapCache struct {
	local, peer netip.AddrPort
	e           roce.Encap
	ok          bool
}

// get returns the encapsulation for packets from src to dst.
func (c *encapCache) get(src, dst netip.AddrPort) *roce.Encap {
	if !c.ok || c.local != src || c.peer != dst {
		e, err := roce.NewEncap(roce.EncapConfig{Src: src, Dst: dst})
		c.e, c.ok, c.local, c.peer = e, err == nil, src, dst
	}
	return &c.e
}

// grhArea writes the 40-byte area rxe puts in front of every UD/GSI
// receive (roce-wire.md §12): for IPv4, 20 zero bytes and the IPv4 header
// as it was on the wire (ID 0, DF, TTL 64 since a UDP socket hides the
// real values); for IPv6, the IPv6 header. udpPayload is the UDP payload
// length (BTH through ICRC).
func grhArea(b []byte, src, dst netip.Addr, udpPayload int) {
	_ = b[39]
	clear(b[:40])
	f := roce.IPFields{Src: src, Dst: dst, TTL: 64, Payload: roce.UDPHeaderLen + udpPayload}
	if src.Unmap().Is4() {
		roce.PutIPHeader(b[40-roce.IPv4HeaderLen:40], &f)
		return
	}
	roce.PutIPHeader(b[:40], &f)
}

// SourcePort returns the UDP source port Linux rxe uses for a QP
// (roce-wire.md §1.1): 0xC000 + hash_32(lqpn, 14) when the remote QPN is
// not known (rqpn 0: UD, GSI, any QP before RTR), else the flow-label
// form rdma_get_udp_sport gives for flow label 0 (RC/UC from RTR on, Linux
// 6.x). A device sends each QP's packets from this port (or from the one
// of the flow label its address vector carries).
func SourcePort(lqpn, rqpn uint32) uint16 {
	if rqpn == 0 {
		return roce.SrcPortForQPN(lqpn)
	}
	return roce.SrcPortForFlow(lqpn, rqpn)
}
