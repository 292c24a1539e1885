package vm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"softib/internal/pcap"
	"softib/wire/roce"
)

// RoCEStats counts the RoCEv2 frames (UDP port 4791) one address sent in
// a capture.
type RoCEStats struct {
	Frames   int // RoCEv2 frames
	BadICRC  int // frames whose ICRC trailer is wrong (rxe drops them silently)
	Unparsed int // frames to port 4791 that do not parse as RoCEv2
	NAKs     int // ACKs with a NAK syndrome (PSN sequence error and worse)
	RNRNAKs  int // ACKs with an RNR NAK: the receiver had no buffer posted
	LowSport int // frames from a UDP source port below 0xC000 (rxe's per-QP ports are 0xC000..0xFFFF)
}

// RoCECapture reads an Ethernet pcap (a tap capture) and checks every IPv4
// RoCEv2 frame: its ICRC, recomputed from the real IP and UDP headers,
// whether it is a NAK or RNR NAK, and its UDP source port. The result is keyed by source address. Wireshark
// never checks the ICRC and rxe drops a bad one without a counter, so a
// framing bug otherwise shows only as retransmissions.
func RoCECapture(path string) (map[netip.Addr]*RoCEStats, error) {
	lt, recs, err := pcap.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if lt != pcap.LinkTypeEthernet {
		return nil, fmt.Errorf("vm: %s: link type %d, want Ethernet", path, lt)
	}
	out := map[netip.Addr]*RoCEStats{}
	side := func(a netip.Addr) *RoCEStats {
		s := out[a]
		if s == nil {
			s = &RoCEStats{}
			out[a] = s
		}
		return s
	}
	const ethLen = 14
	for _, r := range recs {
		f := r.Data
		if len(f) < ethLen+roce.IPv4HeaderLen+roce.UDPHeaderLen || binary.BigEndian.Uint16(f[12:]) != pcap.EtherTypeIPv4 {
			continue
		}
		ip := f[ethLen:]
		if ip[0]>>4 != 4 || ip[9] != 17 {
			continue
		}
		ihl := int(ip[0]&0x0F) * 4
		if len(ip) < ihl+roce.UDPHeaderLen || binary.BigEndian.Uint16(ip[ihl+2:]) != roce.UDPPort {
			continue
		}
		s := side(netip.AddrFrom4([4]byte(ip[12:16])))
		fr, err := roce.ParseFrame(ip)
		if err != nil {
			s.Unparsed++
			continue
		}
		s.Frames++
		if binary.BigEndian.Uint16(ip[ihl:]) < roce.SrcPortBase {
			s.LowSport++
		}
		if fr.VerifyICRC() != nil {
			s.BadICRC++
		}
		p := fr.Packet
		if p.Has(roce.MaskAETH) {
			switch syn := p.AETH().Syndrome(); {
			case syn.IsNAK():
				s.NAKs++
			case syn.IsRNRNAK():
				s.RNRNAKs++
			}
		}
	}
	return out, nil
}

// ParseCounters parses "name value" lines (as printed for the files of
// /sys/class/infiniband/DEV/ports/N/hw_counters) into a map; other lines
// are ignored.
func ParseCounters(s string) map[string]uint64 {
	m := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			m[f[0]] = v
		}
	}
	return m
}

// CountersScript is a guest shell snippet that prints the rxe0 port
// counters as "PREFIX name value" lines.
func CountersScript(prefix string) string {
	return `for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do read -r v <"$f"; echo "` + prefix + ` ${f##*/} $v"; done`
}
