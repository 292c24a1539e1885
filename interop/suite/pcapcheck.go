package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"softib/internal/pcap"
	"softib/wire/roce"
)

// Wireshark never checks the ICRC and rxe drops a bad one silently, so a
// softib framing bug shows up only as retransmits and timeouts. The suite
// therefore recomputes the ICRC of every RoCEv2 frame on the tap. rxe's
// own frames double as the control: if any of them fails, the checker (not
// softib) is wrong and its verdict is ignored.

// sideStats counts the RoCEv2 frames one address sent.
type sideStats struct {
	frames  int
	badICRC int
	naks    int // AETH NAKs (any code) sent
}

// capStats summarises a capture's RoCEv2 traffic by source address.
type capStats struct {
	bySrc map[netip.Addr]*sideStats
}

func (c *capStats) side(a netip.Addr) *sideStats {
	s := c.bySrc[a]
	if s == nil {
		s = &sideStats{}
		c.bySrc[a] = s
	}
	return s
}

// analyzeCapture reads an Ethernet pcap and checks every IPv4 RoCEv2
// frame. Frames that are not RoCEv2 over IPv4 are ignored.
func analyzeCapture(path string) (*capStats, error) {
	lt, recs, err := pcap.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if lt != pcap.LinkTypeEthernet {
		return nil, fmt.Errorf("link type %d, want Ethernet", lt)
	}
	st := &capStats{bySrc: map[netip.Addr]*sideStats{}}
	for _, r := range recs {
		checkFrame(st, r.Data)
	}
	return st, nil
}

// AETH syndrome classes (bits 6:5).
const aethNAK = 3

func checkFrame(st *capStats, f []byte) {
	const ethLen = 14
	if len(f) < ethLen+roce.IPv4HeaderLen || binary.BigEndian.Uint16(f[12:]) != pcap.EtherTypeIPv4 {
		return
	}
	ip := f[ethLen:]
	ihl := int(ip[0]&0x0F) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 != 4 || ihl != roce.IPv4HeaderLen || ip[9] != 17 || total > len(ip) || total < ihl+roce.UDPHeaderLen+roce.MinPacketLen {
		return
	}
	udp := ip[ihl:total]
	if binary.BigEndian.Uint16(udp[2:]) != roce.UDPPort {
		return
	}
	src := netip.AddrFrom4([4]byte(ip[12:16]))
	s := st.side(src)
	s.frames++
	want := roce.ICRCv4(ip[:ihl], udp)
	if binary.LittleEndian.Uint32(udp[len(udp)-roce.ICRCSize:]) != want {
		s.badICRC++
	}
	bth := udp[roce.UDPHeaderLen:]
	// RC ACKs (opcode 0x11) carry the AETH right after the BTH.
	if bth[0] == 0x11 && len(bth) >= roce.BTHSize+4+roce.ICRCSize && bth[roce.BTHSize]>>5 == aethNAK {
		s.naks++
	}
}

// verdict judges softib's frames. It returns an error when softib sent
// frames with a bad ICRC while every rxe frame checked out, and a note
// (for the case log) either way.
func (c *capStats) verdict(softibIP, rxeIP netip.Addr) (note string, err error) {
	sb, rx := c.side(softibIP), c.side(rxeIP)
	note = fmt.Sprintf("capture: softib %d RoCE frames (%d bad ICRC, %d NAKs); rxe %d frames (%d bad ICRC, %d NAKs)",
		sb.frames, sb.badICRC, sb.naks, rx.frames, rx.badICRC, rx.naks)
	if rx.badICRC > 0 {
		// The checker disagrees with Linux itself: trust neither verdict.
		return note + " [checker disagrees with rxe; ignored]", nil
	}
	if sb.badICRC > 0 {
		return note, fmt.Errorf("softib sent %d of %d RoCE frames with a bad ICRC (rxe drops them silently)", sb.badICRC, sb.frames)
	}
	return note, nil
}
