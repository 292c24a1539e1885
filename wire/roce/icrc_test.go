package roce_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"net/netip"
	"strings"
	"testing"

	"softib/wire/roce"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The worked example of roce-wire.md §5.3: an RC ACK from 127.0.0.1 to
// 127.0.0.1, IPv4 ID 0 with DF, UDP source port 0xC789.
const (
	goldenIPv4     = "45 00 00 30 00 00 40 00 40 11 00 00 7F 00 00 01 7F 00 00 01"
	goldenUDP      = "C7 89 12 B7 00 1C 00 00"
	goldenBTH      = "11 00 FF FF 00 00 00 11 00 00 00 05"
	goldenCRCInput = `FF FF FF FF FF FF FF FF
45 FF 00 30 00 00 40 00 FF 11 FF FF 7F 00 00 01 7F 00 00 01
C7 89 12 B7 00 1C FF FF
11 00 FF FF FF 00 00 11 00 00 00 05
1F 00 00 01`
)

func goldenEncap(t testing.TB) roce.Encap {
	e, err := roce.NewEncap(roce.EncapConfig{
		Src: netip.MustParseAddrPort("127.0.0.1:51081"),
		Dst: netip.MustParseAddrPort("127.0.0.1:4791"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestICRCGolden(t *testing.T) {
	if got := crc32.ChecksumIEEE(unhex(t, goldenCRCInput)); got != 0xF936B217 {
		t.Fatalf("reference CRC input gives %#x", got)
	}
	tests := []struct {
		name     string
		syndrome string
		ipID     uint16
		want     uint32
		wire     string
	}{
		{"ack", "1F", 0, 0xF936B217, "17 B2 36 F9"},
		{"rnr nak timer 14", "2E", 0, 0xB1A12DD3, "D3 2D A1 B1"},
		{"ip id 1", "1F", 1, 0xB7BFB9BE, "BE B9 BF B7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Build the packet with the builder.
			var h roce.Headers
			h.BTH = roce.BTHFields{Opcode: roce.RCAck, PKey: 0xFFFF, DestQP: 0x11, PSN: 5}
			h.AETH.Syndrome = roce.Syndrome(unhex(t, tt.syndrome)[0])
			h.AETH.MSN = 1
			pkt := make([]byte, 64)
			n, err := roce.Build(pkt, &h, nil)
			if err != nil {
				t.Fatal(err)
			}
			pkt = pkt[:n]
			wantPkt := unhex(t, goldenBTH+tt.syndrome+"000001"+tt.wire)
			e := goldenEncap(t)
			e.SetIPv4ID(tt.ipID)
			if got := e.ICRC(pkt); got != tt.want {
				t.Errorf("Encap.ICRC = %#x, want %#x", got, tt.want)
			}
			e.SetICRC(pkt)
			if !bytes.Equal(pkt, wantPkt) {
				t.Errorf("packet\n got %x\nwant %x", pkt, wantPkt)
			}
			if err := e.VerifyICRC(pkt); err != nil {
				t.Errorf("VerifyICRC: %v", err)
			}
			// Same result from the real headers, with unmasked values in
			// the masked fields (TOS, TTL, checksum, UDP checksum, FECN).
			ip := unhex(t, goldenIPv4)
			binary.BigEndian.PutUint16(ip[4:], tt.ipID)
			ip[1], ip[8], ip[10] = 0xB8, 7, 0x12
			udp := append(unhex(t, goldenUDP), pkt...)
			udp[6], udp[7] = 0xAB, 0xCD
			udp[8+4] = 0x80 // FECN
			if got := roce.ICRCv4(ip, udp); got != tt.want {
				t.Errorf("ICRCv4 = %#x, want %#x", got, tt.want)
			}
			// And from a frame built by AppendFrame and parsed back.
			frame := e.AppendFrame(nil, pkt)
			f, err := roce.ParseFrame(frame)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.VerifyICRC(); err != nil {
				t.Errorf("frame VerifyICRC: %v", err)
			}
		})
	}
}

func TestICRCBadDetected(t *testing.T) {
	e := goldenEncap(t)
	pkt := unhex(t, goldenBTH+"1F000001 17B236F9")
	if err := e.VerifyICRC(pkt); err != nil {
		t.Fatal(err)
	}
	// Masked fields do not change the ICRC.
	pkt[4] = 0xC0
	if err := e.VerifyICRC(pkt); err != nil {
		t.Errorf("FECN/BECN changed the ICRC: %v", err)
	}
	for i := 0; i < len(pkt)-4; i++ {
		if i == 4 {
			continue
		}
		q := bytes.Clone(pkt)
		q[i] ^= 0x01
		if err := e.VerifyICRC(q); err != roce.ErrBadICRC {
			t.Errorf("flip in byte %d: got %v, want ErrBadICRC", i, err)
		}
	}
	if err := e.VerifyICRC(pkt[:10]); err != roce.ErrTruncated {
		t.Errorf("short packet: %v", err)
	}
	if got := roce.ICRCv4(nil, nil); got != 0 {
		t.Errorf("ICRCv4 on empty input = %#x", got)
	}
	if got := roce.ICRCv6(make([]byte, 40), make([]byte, 10)); got != 0 {
		t.Errorf("ICRCv6 on short input = %#x", got)
	}
}

// TestICRCv6 checks that the precomputed IPv6 template agrees with the
// header-based computation, and that the masked fields (traffic class,
// flow label, hop limit) do not matter.
func TestICRCv6(t *testing.T) {
	for _, tc := range []roce.EncapConfig{
		{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")},
		{Src: netip.MustParseAddrPort("[::1]:50000"), Dst: netip.MustParseAddrPort("[::1]:4791"), TTL: 3, TOS: 0x2E, FlowLabel: 0xABCDE},
	} {
		e, err := roce.NewEncap(tc)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range allOpcodes() {
			pkt := samplePacket(t, op, 37)
			e.SetICRC(pkt)
			frame := e.AppendFrame(nil, pkt)
			f, err := roce.ParseFrame(frame)
			if err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			if !f.IPv6 {
				t.Fatal("not IPv6")
			}
			if err := f.VerifyICRC(); err != nil {
				t.Errorf("%v: %v", op, err)
			}
			frame[1] ^= 0xFF // traffic class + flow label
			frame[7] = 1     // hop limit
			if err := f.VerifyICRC(); err != nil {
				t.Errorf("%v: masked field changed ICRC: %v", op, err)
			}
			if err := e.VerifyICRC(pkt); err != nil {
				t.Errorf("%v: %v", op, err)
			}
		}
	}
}

func TestEncapAddresses(t *testing.T) {
	_, err := roce.NewEncap(roce.EncapConfig{
		Src: netip.MustParseAddrPort("127.0.0.1:1"),
		Dst: netip.MustParseAddrPort("[::1]:4791"),
	})
	if err != roce.ErrBadAddress {
		t.Errorf("mixed families: %v", err)
	}
	if _, err := roce.NewEncap(roce.EncapConfig{}); err != roce.ErrBadAddress {
		t.Errorf("zero config: %v", err)
	}
	// IPv4-mapped addresses are IPv4, and a zero destination port is 4791.
	e, err := roce.NewEncap(roce.EncapConfig{
		Src: netip.MustParseAddrPort("[::ffff:127.0.0.1]:51081"),
		Dst: netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.IsIPv6() || e.Config().Dst.Port() != roce.UDPPort || e.HeaderLen() != 28 {
		t.Errorf("mapped encap: v6=%v cfg=%+v", e.IsIPv6(), e.Config())
	}
	pkt := unhex(t, goldenBTH+"1F000001 00000000")
	if got := e.ICRC(pkt); got != 0xF936B217 {
		t.Errorf("mapped ICRC = %#x", got)
	}
	src, dst := netip.MustParseAddrPort("127.0.0.1:51081"), netip.MustParseAddrPort("127.0.0.1:4791")
	if got := roce.ICRCFor(src, dst, pkt); got != 0xF936B217 {
		t.Errorf("ICRCFor = %#x", got)
	}
	if got := roce.ICRCFor(src, netip.MustParseAddrPort("[::1]:4791"), pkt); got != 0 {
		t.Errorf("ICRCFor mixed families = %#x", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = roce.ICRCFor(src, dst, pkt) }); n != 0 {
		t.Errorf("ICRCFor allocates %v", n)
	}
}

func TestICRCAllocs(t *testing.T) {
	e4 := goldenEncap(t)
	e6, _ := roce.NewEncap(roce.EncapConfig{
		Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791"),
	})
	pkt := samplePacket(t, roce.RCSendOnly, 1024)
	ip := make([]byte, 20)
	udp := make([]byte, 8+len(pkt))
	copy(udp[8:], pkt)
	if n := testing.AllocsPerRun(100, func() {
		e4.SetICRC(pkt)
		e6.SetICRC(pkt)
		_ = roce.ICRCv4(ip, udp)
		_ = roce.ICRCv6(make([]byte, 40), udp)
	}); n != 0 {
		t.Errorf("ICRC allocates %v times per run", n)
	}
}

func BenchmarkICRC4096(b *testing.B) {
	e := goldenEncap(b)
	pkt := samplePacket(b, roce.RCWriteOnly, 4096)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		e.SetICRC(pkt)
	}
}

func BenchmarkICRC64(b *testing.B) {
	e := goldenEncap(b)
	pkt := samplePacket(b, roce.RCAck, 0)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		e.SetICRC(pkt)
	}
}

func TestCRCSlicing(t *testing.T) {
	b := make([]byte, 300)
	for i := range b {
		b[i] = byte(i * 31)
	}
	for n := 0; n <= len(b); n++ {
		if got, want := roce.CRCSlicing8(0, b[:n]), crc32.ChecksumIEEE(b[:n]); got != want {
			t.Fatalf("len %d: %#x want %#x", n, got, want)
		}
	}
}
