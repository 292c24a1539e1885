package rxe

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"softib/wire/roce"
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
	if roce.IPv4Checksum(b[20:40]) != 0 {
		t.Fatalf("IPv4 header checksum does not verify: % x", b[20:])
	}
}

// TestICRCAnyIPv4ID: IPv4 packets whose ICRC was computed for any IP ID
// (as kernel rxe sends them) are accepted and the non-zero IDs counted;
// corrupted ones are dropped and counted in ICRCErr.
func TestICRCAnyIPv4ID(t *testing.T) {
	r := newFuzzRig(t)
	la := fuzzLocal
	qpn := r.rc.QPN()
	rnd := rand.New(rand.NewPCG(1, 2))
	const n = 200
	nonzero := uint64(0)
	for i := range n {
		b := seedPacket(roce.RCSendOnly, qpn, 0, 16+i, nil)
		id := uint16(rnd.Uint32())
		if i == 0 {
			id = 0
		}
		if id != 0 {
			nonzero++
		}
		e, err := roce.NewEncap(roce.EncapConfig{Src: r.peer, Dst: la, IPv4ID: id})
		if err != nil {
			t.Fatal(err)
		}
		e.SetICRC(b)
		r.feed(b)
	}
	st := r.dev.Stats()
	if st["ICRCErr"] != 0 || st["ICRCIPv4ID"] != nonzero {
		t.Fatalf("ICRCErr %d, ICRCIPv4ID %d; want 0, %d", st["ICRCErr"], st["ICRCIPv4ID"], nonzero)
	}
	// Corrupt a payload byte, a header byte, the ICRC: all dropped.
	for i, off := range []int{roce.BTHSize + 3, 9, -1} {
		e, _ := roce.NewEncap(roce.EncapConfig{Src: r.peer, Dst: la, IPv4ID: 0x1234})
		b := seedPacket(roce.RCSendOnly, qpn, 0, 64, nil)
		e.SetICRC(b)
		if off < 0 {
			off = len(b) - 1
		}
		b[off] ^= 0x10
		r.feed(b)
		if got := r.dev.Stats()["ICRCErr"]; got != uint64(i+1) {
			t.Fatalf("corruption at %d: ICRCErr %d, want %d", off, got, i+1)
		}
	}
}
