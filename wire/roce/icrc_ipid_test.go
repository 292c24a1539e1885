package roce_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"

	"softib/wire/roce"
)

var (
	idSrc = netip.MustParseAddrPort("10.1.2.3:49152")
	idDst = netip.MustParseAddrPort("10.1.2.4:4791")
)

// encapID returns the Encap of idSrc→idDst assuming IPv4 ID id.
func encapID(t testing.TB, id uint16) *roce.Encap {
	t.Helper()
	e, err := roce.NewEncap(roce.EncapConfig{Src: idSrc, Dst: idDst, IPv4ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return &e
}

// randPacket returns an RC SEND_ONLY packet with n random payload bytes
// and its ICRC computed for IP ID id.
func randPacket(t testing.TB, r *rand.Rand, n int, id uint16) []byte {
	t.Helper()
	pkt := samplePacket(t, roce.RCSendOnly, n)
	for i := roce.BTHSize; i < len(pkt)-roce.ICRCSize; i++ {
		pkt[i] = byte(r.Uint32())
	}
	encapID(t, id).SetICRC(pkt)
	return pkt
}

func TestCRCXInv(t *testing.T) {
	const x, one = 1 << 30, 1 << 31
	if got := roce.MulModP(roce.CRCXInv, x); got != one {
		t.Fatalf("x · x^-1 = %#x, want %#x", got, uint32(one))
	}
}

func TestMulModPFast(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := range 100000 {
		a, b := r.Uint32(), r.Uint32()
		if i < 64 {
			a = 1 << (i & 31)
		}
		if got, want := roce.MulModPFast(a, b), roce.MulModP(a, b); got != want {
			t.Fatalf("%#x·%#x: got %#x, want %#x", a, b, got, want)
		}
	}
}

// TestVerifyICRCAnyID: a packet sent with any IPv4 ID verifies against
// the ID-0 template and the ID comes back; IPv6 is unchanged.
func TestVerifyICRCAnyID(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	e0 := encapID(t, 0)
	for _, n := range []int{0, 1, 3, 4, 255, 1024, 4096, 9000, 10000} {
		for range 64 {
			id := uint16(r.Uint32())
			pkt := randPacket(t, r, n, id)
			got, err := e0.VerifyICRCAnyID(pkt)
			if err != nil || got != id {
				t.Fatalf("n %d: id %#x: got %#x, %v", n, id, got, err)
			}
			if err := e0.VerifyICRC(pkt); (err == nil) != (id == 0) {
				t.Fatalf("n %d: fixed-ID VerifyICRC with id %#x: %v", n, id, err)
			}
			// A template with another ID recovers the same ID.
			if got, err := encapID(t, 0x1234).VerifyICRCAnyID(pkt); err != nil || got != id {
				t.Fatalf("n %d: id %#x via 0x1234 template: got %#x, %v", n, id, got, err)
			}
		}
	}
	// IPv6: only the exact ICRC verifies.
	e6, err := roce.NewEncap(roce.EncapConfig{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")})
	if err != nil {
		t.Fatal(err)
	}
	pkt := randPacket(t, r, 100, 0)
	e6.SetICRC(pkt)
	if id, err := e6.VerifyICRCAnyID(pkt); err != nil || id != 0 {
		t.Fatalf("IPv6: %#x %v", id, err)
	}
	tr := pkt[len(pkt)-roce.ICRCSize:]
	binary.LittleEndian.PutUint32(tr, binary.LittleEndian.Uint32(tr)^roce.IPv4IDDiff(7, len(pkt)))
	if _, err := e6.VerifyICRCAnyID(pkt); !errors.Is(err, roce.ErrBadICRC) {
		t.Fatalf("IPv6 with an ID-shaped difference: %v", err)
	}
	if _, err := e0.VerifyICRCAnyID(pkt[:roce.MinPacketLen-1]); !errors.Is(err, roce.ErrTruncated) {
		t.Fatalf("short: %v", err)
	}
}

// TestVerifyICRCAnyIDCorruption: flipping any single bit of the BTH,
// extension headers, payload or trailer is caught at these lengths. (Not
// a general guarantee: a flip at distance s from the ID passes when
// x^s mod P happens to have degree < 16, for about 2^-16 of distances.)
func TestVerifyICRCAnyIDCorruption(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	e0 := encapID(t, 0)
	for _, n := range []int{0, 17, 256, 4096} {
		pkt := randPacket(t, r, n, uint16(r.Uint32()))
		for i := range pkt {
			if i == 4 { // BTH resv8a (FECN/BECN) is masked out of the ICRC
				continue
			}
			for b := range 8 {
				pkt[i] ^= 1 << b
				if _, err := e0.VerifyICRCAnyID(pkt); err == nil {
					t.Fatalf("n %d: flip byte %d bit %d accepted", n, i, b)
				}
				pkt[i] ^= 1 << b
			}
		}
		if _, err := e0.VerifyICRCAnyID(pkt); err != nil {
			t.Fatalf("n %d: restored packet: %v", n, err)
		}
	}
}

// TestVerifyICRCAnyIDResidual shows that the corruptions that pass are
// exactly the ID-shaped ones: for one packet, the trailer XOR masks that
// verify are the 2^16 values L(id), each recovered as its id, and a random
// mask verifies only when it is one of them (about 2^-16 of masks).
func TestVerifyICRCAnyIDResidual(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	e0 := encapID(t, 0)
	pkt := randPacket(t, r, 333, 0)
	tr := pkt[len(pkt)-roce.ICRCSize:]
	base := binary.LittleEndian.Uint32(tr)
	shaped := make(map[uint32]uint16, 1<<16)
	for id := range 1 << 16 {
		m := roce.IPv4IDDiff(uint16(id), len(pkt))
		if _, dup := shaped[m]; dup {
			t.Fatalf("L(%#x) collides", id)
		}
		shaped[m] = uint16(id)
		binary.LittleEndian.PutUint32(tr, base^m)
		got, err := e0.VerifyICRCAnyID(pkt)
		if err != nil || got != uint16(id) {
			t.Fatalf("mask L(%#x): got %#x, %v", id, got, err)
		}
		// The same difference is what a real ID change gives.
		if id == 0x2BAD {
			real := randPacketCopy(t, pkt, uint16(id))
			if binary.LittleEndian.Uint32(real[len(real)-roce.ICRCSize:]) != base^m {
				t.Fatal("L(id) is not the ICRC change of an ID change")
			}
		}
	}
	passed := 0
	const tries = 1 << 18
	for range tries {
		m := r.Uint32()
		binary.LittleEndian.PutUint32(tr, base^m)
		_, err := e0.VerifyICRCAnyID(pkt)
		id, isShaped := shaped[m]
		if (err == nil) != isShaped {
			t.Fatalf("mask %#x: err %v, ID-shaped %v (id %#x)", m, err, isShaped, id)
		}
		if err == nil {
			passed++
		}
	}
	// Expect tries/2^16 = 4 (the seed is fixed).
	if passed > 32 {
		t.Fatalf("%d of %d random masks passed, want about 16", passed, tries)
	}
	t.Logf("%d of %d random ICRC corruptions passed (expected %d)", passed, tries, tries>>16)
	// Random single-byte corruption of the payload: whatever passes is
	// indistinguishable from an ID change. Errors of one byte are not
	// uniformly spread over the CRC space: they pass only at the few
	// positions whose distance to the ID field makes some byte values
	// ID-shaped (here one position, 15 of its 255 values).
	binary.LittleEndian.PutUint32(tr, base)
	passed = 0
	for range 1 << 16 {
		i := roce.BTHSize + r.IntN(len(pkt)-roce.BTHSize-roce.ICRCSize)
		v := byte(r.Uint32()) | 1
		pkt[i] ^= v
		id, err := e0.VerifyICRCAnyID(pkt)
		if err == nil {
			// Indistinguishable from an ID change: the corrupted packet's
			// ICRC is exactly the one it would have under that ID.
			if encapID(t, id).VerifyICRC(pkt) != nil {
				t.Fatalf("accepted corruption with id %#x does not verify under it", id)
			}
			passed++
		}
		pkt[i] ^= v
	}
	t.Logf("%d of %d random single-byte payload corruptions passed", passed, 1<<16)
}

// randPacketCopy returns a copy of pkt with its ICRC set for IPv4 ID id.
func randPacketCopy(t testing.TB, pkt []byte, id uint16) []byte {
	c := append([]byte(nil), pkt...)
	encapID(t, id).SetICRC(c)
	return c
}

func TestVerifyICRCAnyIDAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	e0 := encapID(t, 0)
	pkt := randPacket(t, r, 4096, 0xBEEF)
	long := randPacket(t, r, 12000, 0xBEEF)
	if a := testing.AllocsPerRun(100, func() {
		if _, err := e0.VerifyICRCAnyID(pkt); err != nil {
			t.Fatal(err)
		}
		if _, err := e0.VerifyICRCAnyID(long); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%v allocations per call", a)
	}
}

// BenchmarkICRCVerify compares the fixed-ID check with the any-ID one
// (which adds one carry-less multiply mod P when the ID is not the
// template's).
func BenchmarkICRCVerify(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	e0 := encapID(b, 0)
	for _, n := range []int{0, 256, 4096} {
		pkt0 := randPacket(b, r, n, 0)
		pktID := randPacket(b, r, n, 0x4242)
		b.Run("fixedID/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt0)))
			for b.Loop() {
				if e0.VerifyICRC(pkt0) != nil {
					b.Fatal("bad")
				}
			}
		})
		b.Run("anyID-id0/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt0)))
			for b.Loop() {
				if _, err := e0.VerifyICRCAnyID(pkt0); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("anyID-id/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(pktID)))
			for b.Loop() {
				if _, err := e0.VerifyICRCAnyID(pktID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("recoverOnly", func(b *testing.B) {
		d := roce.IPv4IDDiff(0x4242, 4124)
		for b.Loop() {
			if _, ok := roce.IPv4IDFromDiff(d, 4124); !ok {
				b.Fatal("no id")
			}
		}
	})
}
