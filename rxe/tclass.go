package rxe

import "softib/verbs"

// Traffic class and hop limit. Linux rxe builds each packet's IP header
// from the address vector's GRH (rxe_net.c, prepare_ipv4_hdr and
// prepare_ipv6_hdr: TOS / traffic class from grh.traffic_class, TTL /
// hop limit from grh.hop_limit), for requests, ACKs, NAKs and read
// responses alike; the ICRC masks both fields (roce-wire.md §5.1), so
// they change nothing else. A connected QP's packets take the QP's path
// (QPAttr.AH), a UD request the AH of its work request. QPs share the
// device's sockets, so the class travels with each datagram
// (udp.Message.TOS/TTL, sent as IP_TOS/IPV6_TCLASS and IP_TTL/
// IPV6_HOPLIMIT control messages) rather than as a socket option.
//
// One difference from rxe: a hop limit of 0 leaves the kernel's default
// TTL (64) instead of sending TTL 0, which routers drop; every path the
// RDMA CM or the CM builds has a non-zero hop limit.

// ipClass is the traffic class (IPv4 TOS or IPv6 traffic class, ECN
// bits included) and hop limit a packet is sent with; 0 leaves the
// socket's default.
type ipClass struct {
	tos, ttl uint8
}

// routeClass returns the class of packets sent on the route g.
func routeClass(g *verbs.GlobalRoute) ipClass {
	return ipClass{tos: g.TrafficClass, ttl: g.HopLimit}
}
