package mad_test

import (
	"bytes"
	"testing"

	"softib/wire/mad"
)

// FuzzCM decodes arbitrary MADs. Seeds are the encodings of every CM
// message type. Properties: no panic; a decoded message re-encodes to a
// canonical form that decodes and re-encodes to itself; Len matches.
func FuzzCM(f *testing.F) {
	for _, g := range goldens() {
		f.Add(g.want)
	}
	cpi := mad.AppendMAD(nil, mad.CMHeader(1, 0), &mad.ClassPortInfo{BaseVersion: 1, ClassVersion: 2})
	f.Add(cpi)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s mad.Scratch
		h, m, err := s.Decode(b)
		if err != nil {
			return
		}
		enc := mad.AppendCM(nil, h.TID(), m)
		if len(enc) != mad.HeaderSize+m.Len() {
			t.Fatalf("len %d, Len %d", len(enc), m.Len())
		}
		var s2 mad.Scratch
		h2, m2, err := s2.Decode(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if h2.TID() != h.TID() || h2.AttrID() != h.AttrID() {
			t.Fatal("header changed")
		}
		enc2 := mad.AppendCM(nil, h2.TID(), m2)
		if !bytes.Equal(enc, enc2) {
			t.Fatal("encoding not stable")
		}
	})
}

// FuzzCMAHdr decodes arbitrary cma_hdrs: no panic, stable re-encoding.
func FuzzCMAHdr(f *testing.F) {
	_, w := goldenREQ()
	f.Add(w[164:200])
	for _, g := range goldens() {
		f.Add(g.want[mad.HeaderSize : mad.HeaderSize+mad.CMAHdrSize])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var h mad.CMAHdr
		if err := h.Decode(b); err != nil {
			return
		}
		enc := h.Append(nil)
		var h2 mad.CMAHdr
		if err := h2.Decode(enc); err != nil || h2 != h || len(enc) != h.Len() {
			t.Fatalf("round trip %+v %+v %v", h, h2, err)
		}
	})
}

// FuzzField exercises the generic accessors with arbitrary positions.
func FuzzField(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 3, 17, uint64(0x1FFFF))
	f.Add([]byte{0xFF}, 0, 0, 8, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, off, bit, bits int, v uint64) {
		fl := mad.Field{Name: "f", Byte: off, Bit: bit & 7, Bits: bits}
		if bits <= 0 || bits > 64 || fl.Bit+bits > 64 {
			_ = fl.Get(b)
			return
		}
		before := bytes.Clone(b)
		fl.Set(b, v)
		if fl.End() > len(b) || off < 0 {
			if !bytes.Equal(before, b) {
				t.Fatal("out-of-range Set wrote")
			}
			return
		}
		mask := ^uint64(0)
		if bits < 64 {
			mask = 1<<uint(bits) - 1
		}
		if got := fl.Get(b); got != v&mask {
			t.Fatalf("Get %#x, want %#x", got, v&mask)
		}
		fl.Set(b, fl.Get(before))
		if !bytes.Equal(before, b) {
			t.Fatal("Set disturbed other bits")
		}
	})
}
