package lnetwire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"softib/wire/lnetwire"
)

var (
	kibSrc = lnetwire.MustParseNID("192.168.77.1@o2ib")
	kibDst = lnetwire.MustParseNID("192.168.77.2@o2ib")
)

func kibHdr(typ lnetwire.KibMsgType, credits uint8) lnetwire.KibMsgHdr {
	return lnetwire.KibMsgHdr{Version: lnetwire.KibVersion2, Type: typ, Credits: credits,
		SrcNID: kibSrc, SrcStamp: 0x0005F00DCAFE0001, DstNID: kibDst, DstStamp: 0x0005F00DCAFE0002}
}

// goldenHdr is the 48-byte header of lnet-wire.md §6.1 written field by
// field: magic 0x0BE91B91, version 0x12, type, credits 3, nob, cksum 0,
// srcnid 192.168.77.1@o2ib (0x00050000C0A84D01), srcstamp, dstnid
// 192.168.77.2@o2ib, dststamp, all little-endian.
func goldenHdr(typ byte, nob uint32) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], nob)
	return "911be90b 1200" + hex.EncodeToString([]byte{typ}) + "03" + hex.EncodeToString(b[:]) + "00000000" +
		"014da8c000000500 0100feca0df00500 024da8c000000500 0200feca0df00500"
}

func TestKibGolden(t *testing.T) {
	get := lnetwire.Header{Type: lnetwire.MsgGET, DestNID: kibDst, SrcNID: kibSrc, DestPID: 12345, SrcPID: 12345,
		WMD: lnetwire.WireHandle{InterfaceCookie: 1, ObjectCookie: 2}, MatchBits: 7, Portal: 4, SinkLength: 8192}
	getHdr := hex.EncodeToString(get.Append(nil))
	tests := []struct {
		name string
		f    lnetwire.KibMsgFields
		want string
	}{
		{"CONNREQ", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibCONNREQ, 3),
			ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096}},
			goldenHdr(0xc0, 56) + "0800 0101 00100000"},
		{"CONNACK", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibCONNACK, 3),
			ConnParams: lnetwire.KibConnParams{QueueDepth: 32, MaxFrags: 256, MaxMsgSize: 4096}},
			goldenHdr(0xc1, 56) + "2000 0001 00100000"},
		{"NOOP", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibNOOP, 3)}, goldenHdr(0xd0, 48)},
		{"IMMEDIATE", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibIMMEDIATE, 3), LNet: get, Payload: []byte("abc")},
			goldenHdr(0xd1, 123) + getHdr + "616263"},
		{"PUT_REQ", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibPUTREQ, 3), LNet: get, Cookie: 0x1122334455667788},
			goldenHdr(0xd2, 128) + getHdr + "8877665544332211"},
		{"PUT_NAK", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibPUTNAK, 3), Cookie: 9, Status: -61},
			goldenHdr(0xd3, 60) + "0900000000000000 c3ffffff"},
		{"PUT_ACK", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibPUTACK, 3), SrcCookie: 5, Cookie: 6, RDKey: 0xABCD,
			Frags: []lnetwire.KibRDMAFrag{{Nob: 4096, Addr: 0x7f0000001000}, {Nob: 100, Addr: 0x7f0000003000}}},
			goldenHdr(0xd4, 96) + "0500000000000000 0600000000000000 cdab0000 02000000" +
				"00100000 00100000007f0000 64000000 00300000007f0000"},
		{"PUT_DONE", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibPUTDONE, 3), Cookie: 6, Status: 4196},
			goldenHdr(0xd5, 60) + "0600000000000000 64100000"},
		{"GET_REQ", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibGETREQ, 3), LNet: get, Cookie: 10, RDKey: 0x1234,
			Frags: []lnetwire.KibRDMAFrag{{Nob: 8192, Addr: 0x10}}},
			goldenHdr(0xd6, 148) + getHdr + "0a00000000000000 34120000 01000000 00200000 1000000000000000"},
		{"GET_DONE", lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibGETDONE, 3), Cookie: 10, Status: 8192},
			goldenHdr(0xd7, 60) + "0a00000000000000 00200000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.want)
			got := tc.f.Append(nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded\n%x\nwant\n%x", got, want)
			}
			if tc.f.Len() != len(got) {
				t.Fatalf("Len %d, encoded %d", tc.f.Len(), len(got))
			}
			m, err := lnetwire.UnpackKibMsg(append([]byte(nil), want...))
			if err != nil {
				t.Fatal(err)
			}
			var back lnetwire.KibMsgFields
			if err := back.Decode(m); err != nil {
				t.Fatal(err)
			}
			exp := tc.f
			exp.Nob = uint32(len(want))
			if len(exp.Payload) == 0 {
				exp.Payload = nil
			}
			if len(back.Payload) == 0 {
				back.Payload = nil
			}
			if !reflect.DeepEqual(back, exp) {
				t.Fatalf("decoded %+v\nwant %+v", back, exp)
			}
			// A big-endian sender's bytes decode to the same fields.
			sw := append([]byte(nil), want...)
			lnetwire.SwapKibMsg(sw)
			if tc.f.Type != lnetwire.KibNOOP && bytes.Equal(sw, want) {
				t.Fatal("swap changed nothing")
			}
			m2, err := lnetwire.UnpackKibMsg(sw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m2, want) {
				t.Fatalf("unswapped\n%x\nwant\n%x", []byte(m2), want)
			}
		})
	}
}

func TestKibTypeTable(t *testing.T) {
	want := map[lnetwire.KibMsgType]string{0xc0: "CONNREQ", 0xc1: "CONNACK", 0xd0: "NOOP", 0xd1: "IMMEDIATE",
		0xd2: "PUT_REQ", 0xd3: "PUT_NAK", 0xd4: "PUT_ACK", 0xd5: "PUT_DONE", 0xd6: "GET_REQ", 0xd7: "GET_DONE"}
	for ty, name := range want {
		if ty.String() != name || !ty.Valid() || ty.MinLen() < lnetwire.KibHdrLen {
			t.Errorf("%#x: %q valid %v min %d", uint8(ty), ty.String(), ty.Valid(), ty.MinLen())
		}
	}
	if lnetwire.KibMsgType(0xd8).Valid() || lnetwire.KibMsgType(0xd8).String() != "KibMsgType(0xd8)" {
		t.Error("0xd8 is not a type")
	}
	if lnetwire.KibMaxImmediatePayload != 3976 || lnetwire.KibConnMsgLen != 56 {
		t.Errorf("derived sizes %d %d", lnetwire.KibMaxImmediatePayload, lnetwire.KibConnMsgLen)
	}
}

// TestKibCksum checks kiblnd_cksum against values worked by hand from the
// §6.4 rule (rotate left 1, add the byte as a signed char).
func TestKibCksum(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want uint32
	}{
		{nil, 1},                         // zero becomes 1
		{[]byte{0}, 1},                   // still zero
		{[]byte{1}, 1},                   // 0<<1 + 1
		{[]byte{1, 2}, 4},                // (1<<1)+2
		{[]byte{1, 2, 3}, 11},            // (4<<1)+3
		{[]byte{0xFF}, 0xFFFFFFFF},       // -1
		{[]byte{0xFF, 0x01}, 0},          // rotl(0xFFFFFFFF)=0xFFFFFFFF, +1 = 0 → 1 below
		{[]byte{0x80}, 0xFFFFFF80},       // -128
		{[]byte{0x80, 0x00}, 0xFFFFFF01}, // rotl(0xFFFFFF80,1)
	} {
		want := tc.want
		if want == 0 {
			want = 1
		}
		if got := lnetwire.KibCksum(tc.in); got != want {
			t.Errorf("KibCksum(%x) = %#x, want %#x", tc.in, got, want)
		}
	}
	// Round trip with a checksummed message in both byte orders.
	f := lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibPUTDONE, 1), Cookie: 3, Status: 1}
	b := f.Append(nil)
	lnetwire.SetKibCksum(b)
	if lnetwire.KibMsg(b).Cksum() == 0 {
		t.Fatal("no checksum set")
	}
	if _, err := lnetwire.UnpackKibMsg(append([]byte(nil), b...)); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), b...)
	bad[50] ^= 1
	if _, err := lnetwire.UnpackKibMsg(bad); !errors.Is(err, lnetwire.ErrKibCksum) || !errors.Is(err, lnetwire.ErrKibProto) {
		t.Fatalf("corrupted: %v", err)
	}
	// A big-endian sender checksums its own bytes.
	be := f.Append(nil)
	lnetwire.SwapKibMsg(be)
	binary.BigEndian.PutUint32(be[12:], lnetwire.KibCksum(be))
	m, err := lnetwire.UnpackKibMsg(be)
	if err != nil {
		t.Fatal(err)
	}
	if m.CompletionCookie() != 3 || m.SrcNID() != kibSrc {
		t.Fatalf("swapped checksummed message decoded as %+v", m.Hdr())
	}
}

func TestKibUnpackErrors(t *testing.T) {
	good := (&lnetwire.KibMsgFields{KibMsgHdr: kibHdr(lnetwire.KibGETREQ, 0), LNet: lnetwire.Header{Type: lnetwire.MsgGET},
		RDKey: 1, Frags: []lnetwire.KibRDMAFrag{{Nob: 1, Addr: 2}}}).Append(nil)
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		b    []byte
		kind error
	}{
		{"empty", nil, lnetwire.ErrShort},
		{"magic", mut(func(b []byte) []byte { b[0] = 0; return b }), lnetwire.ErrBadMagic},
		{"version", mut(func(b []byte) []byte { b[4] = 0x13; return b }), lnetwire.ErrBadVersion},
		{"short header", good[:40], lnetwire.ErrShort},
		{"nob beyond", mut(func(b []byte) []byte { return b[:len(b)-1] }), lnetwire.ErrShort},
		{"nob below header", mut(func(b []byte) []byte { b[8] = 40; return b }), lnetwire.ErrShort},
		{"type", mut(func(b []byte) []byte { b[6] = 0xd8; return b }), lnetwire.ErrBadType},
		{"short body", mut(func(b []byte) []byte { b[6] = byte(lnetwire.KibPUTREQ); b[8] = 100; return b }), lnetwire.ErrShort},
		{"any srcnid", mut(func(b []byte) []byte { copy(b[16:], bytes.Repeat([]byte{0xff}, 8)); return b }), lnetwire.ErrBadNID},
		{"zero frags", mut(func(b []byte) []byte { b[132] = 0; return b }), lnetwire.ErrKibProto},
		{"too many frags", mut(func(b []byte) []byte { b[132], b[133] = 2, 1; return b }), lnetwire.ErrKibProto},
		{"frags beyond nob", mut(func(b []byte) []byte { b[132] = 2; return b }), lnetwire.ErrShort},
	} {
		_, err := lnetwire.UnpackKibMsg(tc.b)
		if !errors.Is(err, tc.kind) || !errors.Is(err, lnetwire.ErrKibProto) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.kind)
		}
	}
	// V1 messages are accepted (the driver applies V1 rules).
	v1 := mut(func(b []byte) []byte { b[4] = 0x11; return b })
	if m, err := lnetwire.UnpackKibMsg(v1); err != nil || m.Version() != lnetwire.KibVersion1 {
		t.Errorf("V1: %v", err)
	}
	// Trailing bytes beyond ibm_nob (a full 4 KiB receive) are ignored.
	long := append(append([]byte(nil), good...), make([]byte, 100)...)
	if m, err := lnetwire.UnpackKibMsg(long); err != nil || len(m) != len(good) {
		t.Errorf("long buffer: %v len %d", err, len(m))
	}
}

func TestKibRej(t *testing.T) {
	for why := lnetwire.KibRejConnRace; why <= lnetwire.KibRejEarly; why++ {
		r := lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: lnetwire.KibVersion2, Why: why, Incarnation: 0x1122,
			ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096}, HasParams: true}
		b := r.Append(nil)
		want := unhex(t, "911be90b 1200"+hex.EncodeToString([]byte{byte(why)})+"00 2211000000000000 0800 0101 00100000")
		if !bytes.Equal(b, want) || r.Len() != len(b) {
			t.Fatalf("%v: %x want %x", why, b, want)
		}
		// IB CM pads REJ private data to 148 bytes.
		got, err := lnetwire.ParseKibRej(append(b, make([]byte, 124)...))
		if err != nil || got != r {
			t.Fatalf("%v: parsed %+v %v", why, got, err)
		}
		if why.String() == "" || strings.HasPrefix(why.String(), "KibRejReason") {
			t.Errorf("no name for %d", why)
		}
		wantRetry := why == lnetwire.KibRejConnRace || why == lnetwire.KibRejConnStale || why == lnetwire.KibRejConnUncompat ||
			why == lnetwire.KibRejMsgQueueSize || why == lnetwire.KibRejRDMAFrags
		if why.Retry() != wantRetry {
			t.Errorf("%v retry %v", why, why.Retry())
		}
		// Byte-swapped.
		be := binary.BigEndian.AppendUint32(nil, lnetwire.KibMagic)
		be = binary.BigEndian.AppendUint16(be, lnetwire.KibVersion2)
		be = append(be, byte(why), 0)
		be = binary.BigEndian.AppendUint64(be, 0x1122)
		be = binary.BigEndian.AppendUint16(be, 8)
		be = binary.BigEndian.AppendUint16(be, 257)
		be = binary.BigEndian.AppendUint32(be, 4096)
		if got, err := lnetwire.ParseKibRej(be); err != nil || got != r {
			t.Fatalf("%v swapped: %+v %v", why, got, err)
		}
	}
	// V1 rejects carry no parameters.
	v1 := (&lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: lnetwire.KibVersion1, Why: lnetwire.KibRejFatal, Incarnation: 5}).Append(nil)
	if r, err := lnetwire.ParseKibRej(v1); err != nil || r.HasParams || r.Incarnation != 0 || r.Why != lnetwire.KibRejFatal {
		t.Errorf("V1 reject %+v %v", r, err)
	}
	if r, err := lnetwire.ParseKibRej(v1[:7]); err != nil || r.HasParams {
		t.Errorf("7-byte reject %+v %v", r, err)
	}
	if _, err := lnetwire.ParseKibRej(v1[:6]); !errors.Is(err, lnetwire.ErrShort) {
		t.Errorf("6-byte reject: %v", err)
	}
	if _, err := lnetwire.ParseKibRej(make([]byte, 24)); !errors.Is(err, lnetwire.ErrBadMagic) {
		t.Errorf("zero reject: %v", err)
	}
}

func TestKibInPlace(t *testing.T) {
	// The data path builds messages with PackKibHdr and the Put helpers.
	var b [lnetwire.KibMsgSize]byte
	h := kibHdr(lnetwire.KibPUTACK, 2)
	h.Nob = lnetwire.KibPutAckBaseLen + lnetwire.KibRDMAFragLen
	lnetwire.PackKibHdr(b[:], &h)
	lnetwire.PutAckCookies(b[:], 1, 2)
	lnetwire.PutRDMADesc(b[64:], 77, []lnetwire.KibRDMAFrag{{Nob: 9, Addr: 10}})
	m, err := lnetwire.UnpackKibMsg(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if rd := m.RD(); rd.Key() != 77 || rd.NFrags() != 1 || rd.Frag(0) != (lnetwire.KibRDMAFrag{Nob: 9, Addr: 10}) || rd.Size() != 9 {
		t.Fatalf("rd %x", []byte(rd))
	}
	allocs := testing.AllocsPerRun(100, func() {
		lnetwire.PackKibHdr(b[:], &h)
		lnetwire.SetKibCksum(b[:h.Nob])
		if _, err := lnetwire.UnpackKibMsg(b[:]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocs per pack/unpack", allocs)
	}
}
