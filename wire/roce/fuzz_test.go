package roce_test

import (
	"bytes"
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
