package roce_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"softib/wire/roce"
)

// canonical returns b with the bits Build always writes as zero cleared:
// BTH reserved bits, RDETH/DETH reserved bytes, pad contents, and the ICRC.
func canonical(p roce.Packet) []byte {
	b := bytes.Clone(p.Bytes())
	b[4] &= 0xC0 // FECN, BECN kept; reserved cleared
	b[8] &= 0x80 // AckReq kept
	info := p.Info()
	if o := info.Offset(roce.HdrRDETH); o >= 0 {
		b[o] = 0
	}
	if o := info.Offset(roce.HdrDETH); o >= 0 {
		b[o+4] = 0
	}
	clear(b[len(b)-roce.ICRCSize-p.PadCnt():])
	return b
}

func FuzzParse(f *testing.F) {
	for _, op := range allOpcodes() {
		for _, n := range []int{0, 1, 7, 64} {
			f.Add(samplePacket(f, op, n))
		}
	}
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := roce.Parse(b)
		if err != nil {
			if _, ok := err.(roce.ParseError); !ok {
				t.Fatalf("error %v is not a ParseError", err)
			}
			return
		}
		op := p.Opcode()
		if roce.PacketLen(op, p.PayloadLen()) != len(b) {
			t.Fatalf("PacketLen(%v, %d) = %d, len %d", op, p.PayloadLen(), roce.PacketLen(op, p.PayloadLen()), len(b))
		}
		var h roce.Headers
		p.Headers(&h)
		out := make([]byte, len(b))
		n, err := roce.Build(out, &h, p.Payload())
		if err != nil {
			t.Fatalf("Build(%v): %v", op, err)
		}
		if want := canonical(p); !bytes.Equal(out[:n], want) {
			t.Fatalf("%v: rebuild\n got %x\nwant %x", op, out[:n], want)
		}
		q, err := roce.Parse(out[:n])
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		var h2 roce.Headers
		q.Headers(&h2)
		h.BTH.PadCnt = h2.BTH.PadCnt
		if h != h2 {
			t.Fatalf("reparse headers differ:\n%+v\n%+v", h, h2)
		}
	})
}

func FuzzParseFrame(f *testing.F) {
	for _, c := range []roce.EncapConfig{
		{Src: netip.MustParseAddrPort("10.200.0.1:49152"), Dst: netip.MustParseAddrPort("10.200.0.2:4791")},
		{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")},
	} {
		e, err := roce.NewEncap(c)
		if err != nil {
			f.Fatal(err)
		}
		for _, op := range []roce.Opcode{roce.RCSendOnly, roce.RCAck, roce.UDSendOnlyImm, roce.RCCompareSwap} {
			pkt := samplePacket(f, op, 9)
			e.SetICRC(pkt)
			f.Add(e.AppendFrame(nil, pkt))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := roce.ParseFrame(b)
		if err != nil {
			return
		}
		frameRoundTrip(t, &fr)
		// Recomputing the ICRC and verifying never panics and agrees.
		ok := fr.VerifyICRC() == nil
		if ok != (fr.ICRC() == fr.Packet.ICRC()) {
			t.Fatal("VerifyICRC disagrees with ICRC")
		}
		if ok {
			// A frame whose ICRC verifies also verifies through an Encap
			// built from its addresses, provided the masked-out and
			// Encap-modelled fields match (IPv6 payload length == UDP length).
			if fr.IPv6 && len(fr.UDP) == int(fr.IP[4])<<8|int(fr.IP[5]) {
				e, err := roce.NewEncap(roce.EncapConfig{Src: fr.Src, Dst: fr.Dst})
				if err == nil && fr.Dst.Port() != 0 {
					if err := e.VerifyICRC(fr.Packet.Bytes()); err != nil {
						t.Fatalf("Encap disagrees: %v", err)
					}
				}
			}
		}
	})
}

// frameRoundTrip re-encodes a parsed frame with an Encap configured from
// its headers: AppendFrame must not panic, the result must parse to the
// same addresses and packet, its ICRC must verify when the original's did
// (and the fields the Encap models match), and an IPv4 ICRC checked
// without the ID must recover it.
func frameRoundTrip(t *testing.T, fr *roce.Frame) {
	t.Helper()
	c := roce.EncapConfig{Src: fr.Src, Dst: fr.Dst}
	modelled := true
	if fr.IPv6 {
		v := binary.BigEndian.Uint32(fr.IP[0:])
		c.TOS, c.FlowLabel, c.TTL = uint8(v>>20), v&0xFFFFF, fr.IP[7]
		modelled = len(fr.UDP) == int(binary.BigEndian.Uint16(fr.IP[4:]))
	} else {
		c.TOS, c.TTL, c.IPv4ID = fr.IP[1], fr.IP[8], binary.BigEndian.Uint16(fr.IP[4:])
		fl := binary.BigEndian.Uint16(fr.IP[6:])
		c.NoDF = fl&0x4000 == 0
		modelled = fl&^0x4000 == 0 && int(binary.BigEndian.Uint16(fr.IP[2:])) == len(fr.IP)+len(fr.UDP)
	}
	if fr.Dst.Port() == 0 || c.TTL == 0 {
		modelled = false // NewEncap fills in 4791 and 64
	}
	e, err := roce.NewEncap(c)
	if err != nil {
		t.Fatalf("NewEncap(%v → %v) of a parsed frame: %v", fr.Src, fr.Dst, err)
	}
	pkt := fr.Packet.Bytes()
	enc := e.AppendFrame(nil, pkt)
	fr2, err := roce.ParseFrame(enc)
	if err != nil {
		t.Fatalf("re-parse: %v", err)
	}
	if fr2.IPv6 != fr.IPv6 || fr2.Src != fr.Src || (fr.Dst.Port() != 0 && fr2.Dst != fr.Dst) || !bytes.Equal(fr2.Packet.Bytes(), pkt) {
		t.Fatalf("round trip: %v→%v v6 %v, got %v→%v v6 %v", fr.Src, fr.Dst, fr.IPv6, fr2.Src, fr2.Dst, fr2.IPv6)
	}
	if !modelled || fr.VerifyICRC() != nil {
		return
	}
	if err := fr2.VerifyICRC(); err != nil {
		t.Fatal("re-encoded frame's ICRC does not verify")
	}
	if fr.IPv6 {
		return
	}
	c.IPv4ID = 0
	e0, _ := roce.NewEncap(c)
	if id, err := e0.VerifyICRCAnyID(pkt); err != nil || id != binary.BigEndian.Uint16(fr.IP[4:]) {
		t.Fatalf("VerifyICRCAnyID: %#x %v, want %#x", id, err, binary.BigEndian.Uint16(fr.IP[4:]))
	}
}

// TestParseFrameMappedIPv6: an IPv6 header with an IPv4-mapped address has
// no re-encoding (an Encap treats the address as IPv4) and is refused.
func TestParseFrameMappedIPv6(t *testing.T) {
	e, err := roce.NewEncap(roce.EncapConfig{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")})
	if err != nil {
		t.Fatal(err)
	}
	pkt := samplePacket(t, roce.RCSendOnly, 9)
	e.SetICRC(pkt)
	good := e.AppendFrame(nil, pkt)
	if _, err := roce.ParseFrame(good); err != nil {
		t.Fatal(err)
	}
	m := netip.MustParseAddr("::ffff:10.0.0.1").As16()
	for _, off := range []int{8, 24} {
		b := bytes.Clone(good)
		copy(b[off:], m[:])
		if _, err := roce.ParseFrame(b); err != roce.ErrNotRoCE {
			t.Errorf("mapped address at %d: %v, want ErrNotRoCE", off, err)
		}
	}
}
