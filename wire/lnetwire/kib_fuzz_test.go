package lnetwire_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softib/wire/lnetwire"
)

// kibSamples encodes one message of every type (plus a checksummed and a
// byte-swapped variant) to seed the fuzzers.
func kibSamples() [][]byte {
	lh := lnetwire.Header{Type: lnetwire.MsgPUT, DestNID: kibDst, SrcNID: kibSrc, PayloadLength: 3}
	frags := []lnetwire.KibRDMAFrag{{Nob: 4096, Addr: 0x1000}, {Nob: 1, Addr: 0x9000}}
	fs := []lnetwire.KibMsgFields{
		{KibMsgHdr: kibHdr(lnetwire.KibCONNREQ, 0), ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096}},
		{KibMsgHdr: kibHdr(lnetwire.KibCONNACK, 0), ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096}},
		{KibMsgHdr: kibHdr(lnetwire.KibNOOP, 4)},
		{KibMsgHdr: kibHdr(lnetwire.KibIMMEDIATE, 1), LNet: lh, Payload: []byte("xyz")},
		{KibMsgHdr: kibHdr(lnetwire.KibPUTREQ, 0), LNet: lh, Cookie: 1},
		{KibMsgHdr: kibHdr(lnetwire.KibPUTNAK, 0), Cookie: 1, Status: -61},
		{KibMsgHdr: kibHdr(lnetwire.KibPUTACK, 0), SrcCookie: 1, Cookie: 2, RDKey: 3, Frags: frags},
		{KibMsgHdr: kibHdr(lnetwire.KibPUTDONE, 2), Cookie: 2, Status: 4097},
		{KibMsgHdr: kibHdr(lnetwire.KibGETREQ, 0), LNet: lh, Cookie: 4, RDKey: 5, Frags: frags[:1]},
		{KibMsgHdr: kibHdr(lnetwire.KibGETDONE, 0), Cookie: 4, Status: 4096},
	}
	var out [][]byte
	for i := range fs {
		b := fs[i].Append(nil)
		out = append(out, b)
		c := append([]byte(nil), b...)
		lnetwire.SetKibCksum(c)
		out = append(out, c)
		s := append([]byte(nil), b...)
		lnetwire.SwapKibMsg(s)
		out = append(out, s)
	}
	return out
}

func FuzzKibMsg(f *testing.F) {
	for _, b := range kibSamples() {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		// A byte-swapped message's checksum is of the bytes as sent,
		// before UnpackKibMsg flips them in place.
		swapped := len(b) >= 4 && binary.LittleEndian.Uint32(b) != lnetwire.KibMagic
		m, err := lnetwire.UnpackKibMsg(b)
		if err != nil {
			return
		}
		var fs lnetwire.KibMsgFields
		if err := fs.Decode(m); err != nil {
			return // an IMMEDIATE/REQ with an unknown lnet_hdr type
		}
		_ = fs.Type.String()
		enc := fs.Append(nil)
		if len(enc) != fs.Len() {
			t.Fatalf("Len %d, encoded %d", fs.Len(), len(enc))
		}
		// Append writes Cksum as given (a sender calls SetKibCksum). The
		// checksum is of the bytes, so where the re-encoding drops or
		// zeroes bytes the type does not define (trailing bytes, lnet_hdr
		// union padding), the received one no longer fits: recompute it,
		// and it must equal the received one whenever the bytes are the
		// same.
		if fs.Cksum != 0 {
			lnetwire.SetKibCksum(enc)
			same := !swapped && len(enc) == len(m) && bytes.Equal(enc[:12], m[:12]) && bytes.Equal(enc[16:], m[16:])
			if same && lnetwire.KibMsg(enc).Cksum() != fs.Cksum {
				t.Fatalf("checksum %#x of an identical re-encoding, received %#x", lnetwire.KibMsg(enc).Cksum(), fs.Cksum)
			}
		}
		m2, err := lnetwire.UnpackKibMsg(append([]byte(nil), enc...))
		if err != nil {
			t.Fatalf("re-unpack: %v", err)
		}
		var fs2 lnetwire.KibMsgFields
		if err := fs2.Decode(m2); err != nil {
			t.Fatal(err)
		}
		enc2 := fs2.Append(nil)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("not stable:\n%x\n%x", enc, enc2)
		}
		// The header survives, except ibm_nob and ibm_cksum for messages
		// with trailing bytes the type does not define.
		if !bytes.Equal(enc[:8], m[:8]) || !bytes.Equal(enc[16:lnetwire.KibHdrLen], m[16:lnetwire.KibHdrLen]) {
			t.Fatalf("header changed:\n%x\n%x", enc[:48], []byte(m[:48]))
		}
	})
}

func FuzzKibRej(f *testing.F) {
	for why := lnetwire.KibRejConnRace; why <= lnetwire.KibRejEarly; why++ {
		r := lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: lnetwire.KibVersion2, Why: why, Incarnation: 7,
			ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096}, HasParams: true}
		f.Add(r.Append(nil))
		f.Add(append(r.Append(nil), make([]byte, 124)...))
	}
	f.Add((&lnetwire.KibRej{Magic: lnetwire.ProtoMagic, Version: lnetwire.KibVersion1, Why: 3}).Append(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := lnetwire.ParseKibRej(b)
		if err != nil {
			return
		}
		_ = r.Why.String()
		enc := r.Append(nil)
		if len(enc) != r.Len() {
			t.Fatalf("Len %d, encoded %d", r.Len(), len(enc))
		}
		r2, err := lnetwire.ParseKibRej(enc)
		if err != nil {
			t.Fatal(err)
		}
		if r.HasParams && r2 != r {
			t.Fatalf("round trip %+v -> %+v", r, r2)
		}
		if r2.Why != r.Why || r2.Version != r.Version || r2.Magic != r.Magic {
			t.Fatalf("round trip %+v -> %+v", r, r2)
		}
	})
}
