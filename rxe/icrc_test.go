package rxe

import (
	"net/netip"
	"testing"
)

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
