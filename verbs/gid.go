package verbs

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// GID is a 128-bit global identifier. For RoCEv2 it is an IPv6 address, or
// the IPv4-mapped form ::ffff:a.b.c.d of an IPv4 address.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address (IPv4-mapped for
// IPv4).
func GIDFromAddr(a netip.Addr) GID {
	if a.Is4() {
		return GID(netip.AddrFrom16(a.As16()).As16())
	}
	return GID(a.As16())
}

// Addr returns the IP address the GID stands for: an IPv4 address for an
// IPv4-mapped GID, IPv6 otherwise.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsZero reports whether g is all zero.
func (g GID) IsZero() bool { return g == GID{} }

// IsIPv4 reports whether g is IPv4-mapped.
func (g GID) IsIPv4() bool { return netip.AddrFrom16(g).Is4In6() }

// SubnetPrefix returns the upper 64 bits.
func (g GID) SubnetPrefix() uint64 { return binary.BigEndian.Uint64(g[:8]) }

// InterfaceID returns the lower 64 bits.
func (g GID) InterfaceID() uint64 { return binary.BigEndian.Uint64(g[8:]) }

// String formats g as rdma-core prints GIDs: eight groups of four hex
// digits ("0000:0000:0000:0000:0000:ffff:7f00:0002").
func (g GID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x:%04x:%04x:%04x:%04x",
		binary.BigEndian.Uint16(g[0:]), binary.BigEndian.Uint16(g[2:]),
		binary.BigEndian.Uint16(g[4:]), binary.BigEndian.Uint16(g[6:]),
		binary.BigEndian.Uint16(g[8:]), binary.BigEndian.Uint16(g[10:]),
		binary.BigEndian.Uint16(g[12:]), binary.BigEndian.Uint16(g[14:]))
}

// ParseGID parses a GID in rdma-core's colon form or as an IP address.
func ParseGID(s string) (GID, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return GID(a.As16()), nil
	}
	var g GID
	var w [8]uint16
	n, err := fmt.Sscanf(s, "%x:%x:%x:%x:%x:%x:%x:%x", &w[0], &w[1], &w[2], &w[3], &w[4], &w[5], &w[6], &w[7])
	if err != nil || n != 8 {
		return GID{}, fmt.Errorf("verbs: bad GID %q: %w", s, ErrInvalidArgument)
	}
	for i, v := range w {
		binary.BigEndian.PutUint16(g[2*i:], v)
	}
	return g, nil
}

// LinkLocalGID returns the fe80::/64 GID whose interface ID is guid, the
// form of GID index 0 on a RoCE port.
func LinkLocalGID(guid uint64) GID {
	var g GID
	g[0], g[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(g[8:], guid)
	return g
}
