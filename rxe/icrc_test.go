package rxe

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestICRCWorkedExample checks the worked example of roce-wire.md §5.3.
func TestICRCWorkedExample(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	src := netip.AddrPortFrom(lo, 0xC789)
	dst := netip.AddrPortFrom(lo, 4791)
	pkt := []byte{0x11, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x05, 0x1F, 0x00, 0x00, 0x01}
	if got := icrc(src, dst, pkt); got != 0xF936B217 {
		t.Fatalf("ICRC %#x, want 0xF936B217", got)
	}
	pkt[12] = 0x2E
	if got := icrc(src, dst, pkt); got != 0xB1A12DD3 {
		t.Fatalf("RNR NAK ICRC %#x, want 0xB1A12DD3", got)
	}
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], icrc(src, dst, pkt))
	if tail != [4]byte{0xD3, 0x2D, 0xA1, 0xB1} {
		t.Fatalf("wire bytes % x", tail)
	}
}

func TestSourcePort(t *testing.T) {
	for _, c := range []struct {
		l, r uint32
		want uint16
	}{{1, 0, 55410}, {0x11, 0, 57236}, {0x12, 0, 63494}, {0x11, 0xC1, 52433}} {
		if got := SourcePort(c.l, c.r); got != c.want {
			t.Errorf("SourcePort(%#x, %#x) = %d, want %d", c.l, c.r, got, c.want)
		}
	}
}

func TestGRHAreaChecksum(t *testing.T) {
	var b [40]byte
	grhArea(b[:], netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 100)
	if ipv4Checksum(b[20:40]) != 0 {
		t.Fatalf("IPv4 header checksum does not verify: % x", b[20:])
	}
}
