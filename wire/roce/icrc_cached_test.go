package roce_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"softib/wire/roce"
)

// straightICRC computes pkt's ICRC the straightforward way: a real IP +
// UDP frame as e describes it (with its TOS, TTL, flow label, ID, UDP
// checksum: values the ICRC masks or covers), then roce.ICRCv4/ICRCv6 over
// the masked copy of those headers, byte by byte.
func straightICRC(e *roce.Encap, pkt []byte) uint32 {
	frame := e.AppendFrame(nil, pkt)
	n := roce.IPv4HeaderLen
	if e.IsIPv6() {
		n = roce.IPv6HeaderLen
		return roce.ICRCv6(frame[:n], frame[n:])
	}
	return roce.ICRCv4(frame[:n], frame[n:])
}

// TestEncapICRCMatchesStraight checks Encap.ICRC, which continues from a
// cached CRC of the headers and adds the length fields' contributions
// (roce/icrc.go lenContrib), against the straightforward computation over
// many lengths, addresses, ports, IPv4 IDs and random contents (including
// BTH byte 4, which is masked).
func TestEncapICRCMatchesStraight(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 8))
	addr := func(v6 bool) netip.Addr {
		if v6 {
			var b [16]byte
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			b[0] = 0xfd
			return netip.AddrFrom16(b)
		}
		var b [4]byte
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return netip.AddrFrom4(b)
	}
	lens := []int{roce.MinPacketLen, roce.MinPacketLen + 1, 20, 36, 63, 64, 65, 255, 256, 257, 1024 + 32, 4096 + 28, 9000, 65000}
	for n := roce.MinPacketLen; n < roce.MinPacketLen+300; n++ {
		lens = append(lens, n) // every short length and 16-byte tail
	}
	for range 200 {
		lens = append(lens, roce.MinPacketLen+r.IntN(9000))
	}
	buf := make([]byte, 65000)
	for i, n := range lens {
		v6 := i%2 == 1
		e, err := roce.NewEncap(roce.EncapConfig{
			Src:       netip.AddrPortFrom(addr(v6), uint16(r.Uint32())),
			Dst:       netip.AddrPortFrom(addr(v6), uint16(r.Uint32())),
			IPv4ID:    uint16(r.Uint32()),
			NoDF:      r.IntN(2) == 0,
			TTL:       uint8(r.Uint32()),
			TOS:       uint8(r.Uint32()),
			FlowLabel: r.Uint32() & 0xFFFFF,
		})
		if err != nil {
			t.Fatal(err)
		}
		pkt := buf[:n]
		for j := range pkt {
			pkt[j] = byte(r.Uint32())
		}
		if got, want := e.ICRC(pkt), straightICRC(&e, pkt); got != want {
			t.Fatalf("len %d v6 %v: Encap.ICRC %#x, straightforward %#x", n, v6, got, want)
		}
		if !v6 {
			// SetIPv4ID must refresh the cached header CRC.
			e.SetIPv4ID(uint16(r.Uint32()))
			if got, want := e.ICRC(pkt), straightICRC(&e, pkt); got != want {
				t.Fatalf("len %d after SetIPv4ID: Encap.ICRC %#x, straightforward %#x", n, got, want)
			}
		}
	}
}

// FuzzEncapICRC compares Encap.ICRC with the straightforward computation
// for fuzzed packets and IPv4 IDs over both address families.
func FuzzEncapICRC(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), uint16(0), false)
	f.Add(make([]byte, 1100), uint16(0xBEEF), true)
	f.Add([]byte{0x11, 0, 0xFF, 0xFF, 0x80, 0, 0, 0x11, 0, 0, 0, 5, 0x1F, 0, 0, 1, 0, 0, 0, 0}, uint16(7), false)
	f.Fuzz(func(t *testing.T, pkt []byte, id uint16, v6 bool) {
		src, dst := netip.MustParseAddrPort("10.1.2.3:49152"), netip.MustParseAddrPort("10.3.2.1:4791")
		if v6 {
			src, dst = netip.MustParseAddrPort("[fd00::1]:51000"), netip.MustParseAddrPort("[fd00::2]:4791")
		}
		e, err := roce.NewEncap(roce.EncapConfig{Src: src, Dst: dst, IPv4ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(pkt) > 65000 {
			pkt = pkt[:65000]
		}
		if len(pkt) < roce.MinPacketLen {
			if e.ICRC(pkt) != 0 {
				t.Fatal("short packet: nonzero ICRC")
			}
			return
		}
		if got, want := e.ICRC(pkt), straightICRC(&e, pkt); got != want {
			t.Fatalf("Encap.ICRC %#x, straightforward %#x", got, want)
		}
	})
}

// BenchmarkICRCWrite8 is the ICRC of an 8-byte RDMA WRITE Only packet
// (BTH, RETH, 8 bytes of payload): the packet of the 8 B message-rate
// benchmarks, whose CRC input is mostly headers.
func BenchmarkICRCWrite8(b *testing.B) {
	e := goldenEncap(b)
	pkt := samplePacket(b, roce.RCWriteOnly, 8)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		e.SetICRC(pkt)
	}
}
