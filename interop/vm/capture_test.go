package vm

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"softib/internal/pcap"
	"softib/wire/roce"
)

// frame builds an IPv4/UDP/RoCEv2 packet with BTH opcode op (an RC ACK
// gets an AETH with syndrome syn, anything else 16 payload bytes) and a
// correct ICRC.
func frame(src, dst [4]byte, op, syn byte) []byte {
	body := make([]byte, roce.BTHSize)
	body[0] = op
	binary.BigEndian.PutUint16(body[2:], 0xFFFF)
	if op == 0x11 {
		body = append(body, syn, 0, 0, 1)
	} else {
		body = append(body, make([]byte, 16)...)
	}
	udpLen := roce.UDPHeaderLen + len(body) + roce.ICRCSize
	pkt := make([]byte, roce.IPv4HeaderLen+udpLen)
	ip := pkt[:roce.IPv4HeaderLen]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(pkt)))
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	udp := pkt[roce.IPv4HeaderLen:]
	binary.BigEndian.PutUint16(udp[0:], 0xC000)
	binary.BigEndian.PutUint16(udp[2:], roce.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	copy(udp[roce.UDPHeaderLen:], body)
	binary.LittleEndian.PutUint32(udp[udpLen-roce.ICRCSize:], roce.ICRCv4(ip, udp))
	return pkt
}

func TestRoCECapture(t *testing.T) {
	a, b := [4]byte{192, 168, 77, 1}, [4]byte{192, 168, 77, 2}
	bad := frame(a, b, 0x04, 0)
	bad[len(bad)-1] ^= 1
	short := frame(a, b, 0x04, 0)[:roce.IPv4HeaderLen+roce.UDPHeaderLen+4]
	binary.BigEndian.PutUint16(short[2:], uint16(len(short)))
	binary.BigEndian.PutUint16(short[roce.IPv4HeaderLen+4:], roce.UDPHeaderLen+4)
	notRoCE := frame(a, b, 0x04, 0)
	lowSport := frame(a, b, 0x04, 0) // from the device port 4791
	binary.BigEndian.PutUint16(lowSport[roce.IPv4HeaderLen:], roce.UDPPort)
	binary.LittleEndian.PutUint32(lowSport[len(lowSport)-roce.ICRCSize:], roce.ICRCv4(lowSport[:roce.IPv4HeaderLen], lowSport[roce.IPv4HeaderLen:]))
	binary.BigEndian.PutUint16(notRoCE[roce.IPv4HeaderLen+2:], 53)

	p := filepath.Join(t.TempDir(), "c.pcap")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f, pcap.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, pk := range [][]byte{
		frame(a, b, 0x04, 0), bad, short, notRoCE, lowSport,
		frame(b, a, 0x11, 0x1F), // ACK
		frame(b, a, 0x11, 0x60), // NAK: PSN sequence error
		frame(b, a, 0x11, 0x2E), // RNR NAK
	} {
		if err := w.WritePacket(time.Unix(0, 0), pcap.AppendEthernet(nil, [6]byte{2}, [6]byte{4}, pcap.EtherTypeIPv4, pk)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	st, err := RoCECapture(p)
	if err != nil {
		t.Fatal(err)
	}
	sa, sb := st[netip.AddrFrom4(a)], st[netip.AddrFrom4(b)]
	if sa == nil || sb == nil {
		t.Fatalf("sides missing: %v", st)
	}
	if *sa != (RoCEStats{Frames: 3, BadICRC: 1, Unparsed: 1, LowSport: 1}) {
		t.Errorf("sender a: %+v", *sa)
	}
	if *sb != (RoCEStats{Frames: 3, NAKs: 1, RNRNAKs: 1}) {
		t.Errorf("sender b: %+v", *sb)
	}
	if _, err := RoCECapture(filepath.Join(t.TempDir(), "missing.pcap")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestParseCounters(t *testing.T) {
	m := ParseCounters("sent_pkts 12\nrcvd_pkts 7\ngarbage\nx y\nlink_downed 0\n")
	if len(m) != 3 || m["sent_pkts"] != 12 || m["rcvd_pkts"] != 7 || m["link_downed"] != 0 {
		t.Fatalf("%v", m)
	}
}
