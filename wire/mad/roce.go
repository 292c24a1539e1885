package mad

import "net/netip"

// PermissiveLID is the LID the Linux CM puts into RoCEv2 REQ paths.
const PermissiveLID uint16 = 0xFFFF

// RxeCAAckDelay is the local CA ACK delay rdma_rxe reports
// (RXE_LOCAL_CA_ACK_DELAY), an input of [AckTimeout].
const RxeCAAckDelay Timeout = 15

// DefaultHopLimit is the hop limit used when the route gives none (the
// IPv4 default TTL / IPv6 default hop limit).
const DefaultHopLimit = 64

// GIDFromIP returns the RoCEv2 GID of an IP address: the IPv6 address
// itself, or ::ffff:a.b.c.d for IPv4 (roce-wire.md §11).
func GIDFromIP(a netip.Addr) GID {
	if a.Is4() {
		return GID(netip.AddrFrom16(a.As16()).As16())
	}
	return GID(a.As16())
}

// IP returns the address a RoCEv2 GID stands for, unmapping IPv4-mapped
// GIDs.
func (g GID) IP() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String prints the GID as an IPv6 address.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// RoCEv2PathParams are the route facts a RoCEv2 REQ path is built from.
type RoCEv2PathParams struct {
	Src, Dst       netip.Addr // local and remote IP
	HopLimit       uint8      // 0 means DefaultHopLimit
	TrafficClass   uint8
	FlowLabel      uint32
	SL             uint8
	PacketRate     uint8
	PacketLifeTime Timeout // 0 means CMAIBoEPacketLifeTime
	CAAckDelay     Timeout // 0 means RxeCAAckDelay
}

// RoCEv2Path returns the REQ path the Linux CM sends on RoCEv2
// (cm_format_req, ib-cm.md §6): permissive LIDs and SubnetLocal 0 since
// the hop limit exceeds 1, the IP GIDs (IPv4-mapped for IPv4), and the
// local ACK timeout from [AckTimeout].
func RoCEv2Path(p RoCEv2PathParams) Path {
	hl := p.HopLimit
	if hl == 0 {
		hl = DefaultHopLimit
	}
	plt := p.PacketLifeTime
	if plt == 0 {
		plt = CMAIBoEPacketLifeTime
	}
	ad := p.CAAckDelay
	if ad == 0 {
		ad = RxeCAAckDelay
	}
	path := Path{
		LocalGID:        GIDFromIP(p.Src),
		RemoteGID:       GIDFromIP(p.Dst),
		FlowLabel:       p.FlowLabel,
		PacketRate:      p.PacketRate,
		TrafficClass:    p.TrafficClass,
		HopLimit:        hl,
		SL:              p.SL,
		LocalAckTimeout: AckTimeout(ad, plt),
	}
	if hl > 1 {
		path.LocalLID, path.RemoteLID = PermissiveLID, PermissiveLID
	} else {
		path.SubnetLocal = true
	}
	return path
}
