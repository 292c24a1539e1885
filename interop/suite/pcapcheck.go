package main

import (
	"fmt"
	"net/netip"

	"softib/interop/vm"
)

// Wireshark never checks the ICRC and rxe drops a bad one silently, so a
// softib framing bug shows up only as retransmits and timeouts. The suite
// therefore recomputes the ICRC of every RoCEv2 frame on the tap. rxe's
// own frames double as the control: if any of them fails, the checker (not
// softib) is wrong and its verdict is ignored.

// capStats summarises a capture's RoCEv2 traffic by source address
// (vm.RoCECapture's counts).
type capStats struct {
	bySrc map[netip.Addr]*vm.RoCEStats
}

// side returns a's counts (zero when a sent no RoCEv2 frame).
func (c *capStats) side(a netip.Addr) *vm.RoCEStats {
	if s := c.bySrc[a]; s != nil {
		return s
	}
	return &vm.RoCEStats{}
}

// analyzeCapture reads an Ethernet pcap and checks every IPv4 RoCEv2
// frame. Sources that sent nothing parseable as RoCEv2 are left out: the
// verdict is about the frames the peers exchanged.
func analyzeCapture(path string) (*capStats, error) {
	m, err := vm.RoCECapture(path)
	if err != nil {
		return nil, err
	}
	for a, s := range m {
		if s.Frames == 0 {
			delete(m, a)
		}
	}
	return &capStats{bySrc: m}, nil
}

// verdict judges softib's frames. It returns an error when softib sent
// frames with a bad ICRC while every rxe frame checked out, and a note
// (for the case log) either way.
func (c *capStats) verdict(softibIP, rxeIP netip.Addr) (note string, err error) {
	sb, rx := c.side(softibIP), c.side(rxeIP)
	note = fmt.Sprintf("capture: softib %d RoCE frames (%d bad ICRC, %d NAKs, %d from a port below 0xC000); rxe %d frames (%d bad ICRC, %d NAKs)",
		sb.Frames, sb.BadICRC, sb.NAKs, sb.LowSport, rx.Frames, rx.BadICRC, rx.NAKs)
	if rx.BadICRC > 0 {
		// The checker disagrees with Linux itself: trust neither verdict.
		return note + " [checker disagrees with rxe; ignored]", nil
	}
	if sb.BadICRC > 0 {
		return note, fmt.Errorf("softib sent %d of %d RoCE frames with a bad ICRC (rxe drops them silently)", sb.BadICRC, sb.Frames)
	}
	if sb.LowSport > 0 {
		// rxe sends every packet from its QP's port in 0xC000..0xFFFF;
		// softib does too unless a QP had to fall back to the device
		// port (rxe Stats.SportFallback).
		return note, fmt.Errorf("softib sent %d of %d RoCE frames from a UDP source port below 0xC000", sb.LowSport, sb.Frames)
	}
	return note, nil
}
