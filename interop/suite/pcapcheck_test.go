package main

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

// rocev4 builds an IPv4/UDP/RoCEv2 packet: BTH with opcode op, an AETH
// with syndrome aeth when op is an RC ACK, a correct ICRC for IP ID id.
func rocev4(src, dst [4]byte, id uint16, op byte, aeth byte) []byte {
	body := make([]byte, roce.BTHSize)
	body[0] = op
	binary.BigEndian.PutUint16(body[2:], 0xFFFF)
	if op == 0x11 {
		body = append(body, aeth, 0, 0, 1)
	} else {
		body = append(body, make([]byte, 16)...)
	}
	udpLen := roce.UDPHeaderLen + len(body) + roce.ICRCSize
	pkt := make([]byte, roce.IPv4HeaderLen+udpLen)
	ip := pkt[:roce.IPv4HeaderLen]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(ip[4:], id)
	ip[6] = 0x40 // DF
	ip[8] = 64
	ip[9] = 17
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

func writePcap(t *testing.T, pkts ...[]byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.pcap")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := pcap.NewWriter(f, pcap.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, pk := range pkts {
		fr := pcap.AppendEthernet(nil, [6]byte{2}, [6]byte{4}, pcap.EtherTypeIPv4, pk)
		if err := w.WritePacket(time.Unix(0, 0), fr); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestCaptureVerdict(t *testing.T) {
	sib, rxe := [4]byte{192, 168, 77, 1}, [4]byte{192, 168, 77, 2}
	good := rocev4(sib, rxe, 0, 0x04, 0)
	// What UDP GSO does: the kernel gives the next segment IP ID 1 after
	// the ICRC was computed for ID 0.
	gso := rocev4(sib, rxe, 0, 0x04, 0)
	binary.BigEndian.PutUint16(gso[4:], 1)
	nak := rocev4(rxe, sib, 77, 0x11, 0x60)
	ack := rocev4(rxe, sib, 78, 0x11, 0x1F)

	sibIP, rxeIP := netip.AddrFrom4(sib), netip.AddrFrom4(rxe)
	st, err := analyzeCapture(writePcap(t, good, ack, nak))
	if err != nil {
		t.Fatal(err)
	}
	if note, err := st.verdict(sibIP, rxeIP); err != nil {
		t.Fatalf("clean capture failed: %v (%s)", err, note)
	}
	if s := st.side(rxeIP); s.Frames != 2 || s.NAKs != 1 || s.BadICRC != 0 {
		t.Fatalf("rxe side %+v", *s)
	}

	st, err = analyzeCapture(writePcap(t, good, gso, ack))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.verdict(sibIP, rxeIP); err == nil {
		t.Fatal("bad softib ICRC not reported")
	}

	// A frame from the device port (a QP that fell back) is reported.
	low := rocev4(sib, rxe, 0, 0x04, 0)
	binary.BigEndian.PutUint16(low[roce.IPv4HeaderLen:], roce.UDPPort)
	binary.LittleEndian.PutUint32(low[len(low)-roce.ICRCSize:], roce.ICRCv4(low[:roce.IPv4HeaderLen], low[roce.IPv4HeaderLen:]))
	if st, err = analyzeCapture(writePcap(t, good, low, ack)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.verdict(sibIP, rxeIP); err == nil || st.side(sibIP).BadICRC != 0 {
		t.Fatalf("softib frame from port %d not reported (%v, %+v)", roce.UDPPort, err, *st.side(sibIP))
	}

	// A bad rxe frame means the checker is wrong: no verdict.
	badRxe := rocev4(rxe, sib, 5, 0x11, 0x1F)
	badRxe[len(badRxe)-1] ^= 1
	st, err = analyzeCapture(writePcap(t, gso, badRxe))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.verdict(sibIP, rxeIP); err != nil {
		t.Fatalf("verdict given although rxe frames fail the checker: %v", err)
	}

	// Garbage and non-RoCE frames are ignored without panicking.
	st, err = analyzeCapture(writePcap(t, []byte{0x45}, good[:30], []byte("not an ip packet at all, really")))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.bySrc); n != 0 {
		t.Fatalf("garbage counted: %d sources", n)
	}
}
