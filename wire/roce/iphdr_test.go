package roce_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"softib/wire/roce"
)

func TestPutIPHeader(t *testing.T) {
	var b [roce.IPv6HeaderLen]byte
	f := roce.IPFields{Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), TOS: 0x62, TTL: 64, IPv4ID: 7, Payload: 8 + 28}
	if n := roce.PutIPHeader(b[:], &f); n != roce.IPv4HeaderLen {
		t.Fatalf("IPv4 header length %d", n)
	}
	h := b[:roce.IPv4HeaderLen]
	if roce.IPv4Checksum(h) != 0 || h[0] != 0x45 || h[1] != 0x62 || binary.BigEndian.Uint16(h[2:]) != 56 ||
		binary.BigEndian.Uint16(h[4:]) != 7 || h[6] != 0x40 || h[8] != 64 || h[9] != 17 || h[12] != 10 || h[19] != 2 {
		t.Fatalf("IPv4 header % x", h)
	}
	f.NoDF = true
	roce.PutIPHeader(b[:], &f)
	if h[6] != 0 || roce.IPv4Checksum(h) != 0 {
		t.Fatalf("IPv4 header without DF % x", h)
	}
	f = roce.IPFields{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), TOS: 0x62, TTL: 3, FlowLabel: 0xABCDE, Payload: 100}
	if n := roce.PutIPHeader(b[:], &f); n != roce.IPv6HeaderLen {
		t.Fatalf("IPv6 header length %d", n)
	}
	if v := binary.BigEndian.Uint32(b[:]); v != 6<<28|0x62<<20|0xABCDE || binary.BigEndian.Uint16(b[4:]) != 100 || b[6] != 17 || b[7] != 3 || b[23] != 1 || b[39] != 2 {
		t.Fatalf("IPv6 header % x", b)
	}
}
