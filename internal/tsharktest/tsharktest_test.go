package tsharktest_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/pcap"
	"softib/internal/tsharktest"
)

// udpFrame returns a raw IPv4/UDP packet (checksums 0: IPv4 header checksum
// is filled in, UDP checksum 0 means none).
func udpFrame(dport uint16, payload []byte) []byte {
	b := make([]byte, 28+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8] = 64
	b[9] = 17
	copy(b[12:], []byte{127, 0, 0, 1, 127, 0, 0, 1})
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xFFFF {
		s = s&0xFFFF + s>>16
	}
	binary.BigEndian.PutUint16(b[10:], ^uint16(s))
	binary.BigEndian.PutUint16(b[20:], 50000)
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload)
	return b
}

func writePcap(t *testing.T, frames ...[]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f, pcap.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range frames {
		if err := w.WritePacket(time.Unix(1700000000, 0), fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// An RC ACK (BTH + AETH + ICRC), bytes from roce-wire.md §5.3.
var rcAck = []byte{0x11, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 5, 0x1F, 0, 0, 1, 0x17, 0xB2, 0x36, 0xF9}

func TestDecodeAndFields(t *testing.T) {
	path := writePcap(t, udpFrame(4791, rcAck), udpFrame(4791, rcAck[:14]))
	text := tsharktest.Decode(t, path)
	if !strings.Contains(text, "Acknowledge") {
		t.Errorf("decode lacks the ACK:\n%s", text)
	}
	rows := tsharktest.Fields(t, path, []string{"infiniband.bth.opcode", "infiniband.aeth.msn", "infiniband.invariant.crc"})
	if len(rows) != 2 || rows[0][0] != "17" || rows[0][1] != "1" || rows[0][2] != "0x17b236f9" {
		t.Errorf("fields: %q", rows)
	}
	// The truncated second frame is malformed.
	probs := tsharktest.Problems(t, path)
	if len(probs) != 1 || !strings.HasPrefix(probs[0], "frame 2:") {
		t.Errorf("problems: %q", probs)
	}
}

func TestNonDefaultPort(t *testing.T) {
	path := writePcap(t, udpFrame(9999, rcAck))
	rows := tsharktest.Fields(t, path, []string{"infiniband.bth.opcode"}, "-d", "udp.port==9999,infiniband")
	if len(rows) != 1 || rows[0][0] != "17" {
		t.Errorf("rows %q", rows)
	}
	tsharktest.CheckNoMalformed(t, path, "-d", "udp.port==9999,infiniband")
}

// TestTCPResentOverlap: the frame a loaded CI run's capture had (a tail
// loss probe's copy of the last segment) is a TCP resend, not a decoding
// error; a conflicting overlap, or an overlap on a frame TCP does not
// call resent, still is.
func TestTCPResentOverlap(t *testing.T) {
	const ciInfo = "[TCP Out-Of-Order] 1021 → 988 [ACK] Seq=976322 Ack=25 Win=64 Len=65483 TSval=2744029323 TSecr=2503831504" +
		"[Reassembly error, protocol TCP: New fragment overlaps old data (retransmission?)]"
	const overlap = "New fragment overlaps old data (retransmission?)"
	for _, c := range []struct {
		info, msg string
		want      bool
	}{
		{ciInfo, overlap, true},
		{"[TCP Retransmission] 988 → 1021 [PSH, ACK] Seq=1 Ack=1 Len=200", overlap, true},
		{ciInfo, overlap + " and data is different", false},
		{"988 → 1021 [PSH, ACK] Seq=1 Ack=1 Len=200", overlap, false},
		{ciInfo, "Malformed Packet (Exception occurred)", false},
	} {
		if got := tsharktest.TCPResentOverlap(c.info, c.msg); got != c.want {
			t.Errorf("TCPResentOverlap(%q, %q) = %v, want %v", c.info, c.msg, got, c.want)
		}
	}
}
