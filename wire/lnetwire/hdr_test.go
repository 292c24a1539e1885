package lnetwire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"softib/wire/lnetwire"
)

// sampleHeaders has one header of every message type with all its union
// fields set.
func sampleHeaders() []lnetwire.Header {
	src := lnetwire.MustParseNID("192.168.1.1@tcp")
	dst := lnetwire.MustParseNID("192.168.1.2@tcp")
	wmd := lnetwire.WireHandle{InterfaceCookie: 0x1122334455667788, ObjectCookie: 0x99AABBCCDDEEFF00}
	base := lnetwire.Header{DestNID: dst, SrcNID: src, DestPID: 12345, SrcPID: 12345 | lnetwire.PIDUserFlag}
	var out []lnetwire.Header
	h := base
	h.Type, h.WMD, h.MatchBits, h.MLength = lnetwire.MsgACK, wmd, 0xABCDEF, 4096
	out = append(out, h)
	h = base
	h.Type, h.PayloadLength, h.WMD, h.MatchBits, h.HdrData, h.Portal, h.Offset = lnetwire.MsgPUT, 1<<20, lnetwire.WireHandleNone, 0x8000000000000001, 0xDEADBEEF, 10, 4096
	out = append(out, h)
	h = base
	h.Type, h.WMD, h.MatchBits, h.Portal, h.Offset, h.SinkLength = lnetwire.MsgGET, wmd, lnetwire.PingMatchBits, 0, 8, 4112
	out = append(out, h)
	h = base
	h.Type, h.PayloadLength, h.WMD = lnetwire.MsgREPLY, 77, wmd
	out = append(out, h)
	h = base
	h.Type, h.Incarnation, h.HelloType = lnetwire.MsgHELLO, 0x1234567812345678, 3
	out = append(out, h)
	return out
}

func TestHeaderLayout(t *testing.T) {
	hs := sampleHeaders()
	put := hs[1]
	b := put.Append(nil)
	if len(b) != lnetwire.HdrSize || put.Len() != len(b) {
		t.Fatalf("len %d", len(b))
	}
	le := binary.LittleEndian
	checks := []struct {
		off  int
		size int
		want uint64
	}{
		{0, 8, uint64(put.DestNID)}, {8, 8, uint64(put.SrcNID)}, {16, 4, 12345}, {20, 4, uint64(12345 | lnetwire.PIDUserFlag)},
		{24, 4, 1}, {28, 4, 1 << 20}, {32, 8, ^uint64(0)}, {40, 8, ^uint64(0)}, {48, 8, 0x8000000000000001},
		{56, 8, 0xDEADBEEF}, {64, 4, 10}, {68, 4, 4096},
	}
	for _, c := range checks {
		var got uint64
		if c.size == 8 {
			got = le.Uint64(b[c.off:])
		} else {
			got = uint64(le.Uint32(b[c.off:]))
		}
		if got != c.want {
			t.Errorf("PUT @%d = %#x, want %#x", c.off, got, c.want)
		}
	}
	get := hs[2].Append(nil)
	if le.Uint32(get[56:]) != 0 || le.Uint32(get[60:]) != 8 || le.Uint32(get[64:]) != 4112 || le.Uint64(get[48:]) != lnetwire.PingMatchBits {
		t.Errorf("GET layout %x", get)
	}
	ack := hs[0].Append(nil)
	if le.Uint32(ack[56:]) != 4096 || le.Uint64(ack[48:]) != 0xABCDEF {
		t.Errorf("ACK layout %x", ack)
	}
	hello := hs[4].Append(nil)
	if le.Uint64(hello[32:]) != 0x1234567812345678 || le.Uint32(hello[40:]) != 3 {
		t.Errorf("HELLO layout %x", hello)
	}
	w := lnetwire.Hdr(make([]byte, lnetwire.HdrSize))
	w.SetDestNID(put.DestNID)
	w.SetSrcNID(put.SrcNID)
	w.SetDestPID(put.DestPID)
	w.SetSrcPID(put.SrcPID)
	w.SetType(put.Type)
	w.SetPayloadLength(put.PayloadLength)
	w.SetWMD(put.WMD)
	w.SetMatchBits(put.MatchBits)
	if !bytes.Equal(w[:56], b[:56]) {
		t.Errorf("setters wrote %x, want %x", w[:56], b[:56])
	}
	v := lnetwire.Hdr(b)
	if v.Type() != lnetwire.MsgPUT || v.DestNID() != put.DestNID || v.SrcPID() != put.SrcPID || !v.WMD().IsNone() || v.MatchBits() != put.MatchBits {
		t.Error("view accessors disagree")
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range sampleHeaders() {
		b := h.Append([]byte{0xEE})
		got, err := lnetwire.ParseHeader(b[1:])
		if err != nil || got != h {
			t.Errorf("%v: round trip %+v, %v", h.Type, got, err)
		}
	}
	if _, err := lnetwire.ParseHeader(make([]byte, 71)); !errors.Is(err, lnetwire.ErrShort) {
		t.Errorf("short: %v", err)
	}
	b := sampleHeaders()[0].Append(nil)
	binary.LittleEndian.PutUint32(b[24:], 5)
	if _, err := lnetwire.ParseHeader(b); !errors.Is(err, lnetwire.ErrBadType) {
		t.Errorf("bad type: %v", err)
	}
}

func TestPingInfo(t *testing.T) {
	p := lnetwire.PingInfo{Features: lnetwire.PingFeatBase | lnetwire.PingFeatNIStatus, PID: 12345, NIs: []lnetwire.PingNI{
		{NID: lnetwire.NIDLo0, Status: 7},
		{NID: lnetwire.MustParseNID("10.0.0.1@tcp"), Status: lnetwire.PingStatusUp},
		{NID: lnetwire.MustParseNID("10.0.0.1@o2ib"), Status: lnetwire.PingStatusDown, MsgSize: 4096},
	}}
	b := p.Append(nil)
	if len(b) != p.Len() || len(b) != 16+3*16 || binary.LittleEndian.Uint32(b) != lnetwire.PingMagic {
		t.Fatalf("encoding %x", b)
	}
	got, err := lnetwire.ParsePingInfo(b)
	if err != nil || !samePing(got, p) {
		t.Fatalf("round trip %+v %v", got, err)
	}
	// A big-endian sender: every u32/u64 byte-reversed.
	be := make([]byte, len(b))
	copy(be, b)
	for off := 0; off < 16; off += 4 {
		binary.BigEndian.PutUint32(be[off:], binary.LittleEndian.Uint32(b[off:]))
	}
	for off := 16; off < len(b); off += 16 {
		binary.BigEndian.PutUint64(be[off:], binary.LittleEndian.Uint64(b[off:]))
		binary.BigEndian.PutUint32(be[off+8:], binary.LittleEndian.Uint32(b[off+8:]))
		binary.BigEndian.PutUint32(be[off+12:], binary.LittleEndian.Uint32(b[off+12:]))
	}
	got, err = lnetwire.ParsePingInfo(be)
	if err != nil || !samePing(got, p) {
		t.Fatalf("swapped %+v %v", got, err)
	}
	if _, err := lnetwire.ParsePingInfo(b[:40]); !errors.Is(err, lnetwire.ErrShort) {
		t.Errorf("truncated: %v", err)
	}
	bad := append([]byte(nil), b...)
	bad[0] ^= 1
	if _, err := lnetwire.ParsePingInfo(bad); !errors.Is(err, lnetwire.ErrBadMagic) {
		t.Errorf("bad magic: %v", err)
	}
}

func samePing(a, b lnetwire.PingInfo) bool {
	if a.Features != b.Features || a.PID != b.PID || len(a.NIs) != len(b.NIs) {
		return false
	}
	for i := range a.NIs {
		if a.NIs[i] != b.NIs[i] {
			return false
		}
	}
	return true
}

func TestAcceptorRequest(t *testing.T) {
	target := lnetwire.MustParseNID("192.168.1.2@tcp")
	r := lnetwire.AcceptorRequest{Version: lnetwire.AcceptorVersion1, Target: target}
	b := r.Append(nil)
	want := []byte{0x00, 0x71, 0xCE, 0xAC, 1, 0, 0, 0, 0x02, 0x01, 0xA8, 0xC0, 0, 0, 2, 0}
	if !bytes.Equal(b, want) || r.Len() != 16 {
		t.Fatalf("v1 = %x, want %x", b, want)
	}
	got, err := lnetwire.ParseAcceptorRequest(b)
	if err != nil || got.Target != target || got.Version != 1 {
		t.Fatalf("parse %+v %v", got, err)
	}
	// Big-endian sender.
	be := make([]byte, 16)
	binary.BigEndian.PutUint32(be, lnetwire.AcceptorMagic)
	binary.BigEndian.PutUint32(be[4:], 1)
	binary.BigEndian.PutUint64(be[8:], uint64(target))
	if got, err := lnetwire.ParseAcceptorRequest(be); err != nil || got.Target != target {
		t.Fatalf("swapped %+v %v", got, err)
	}
	// Version 2 with a large NID.
	r2 := lnetwire.AcceptorRequest{Version: lnetwire.AcceptorVersion2, TargetLarge: lnetwire.LargeFromNID(target)}
	b2 := r2.Append(nil)
	if len(b2) != 28 || r2.Len() != 28 || !bytes.Equal(b2[8:12], []byte{0, 2, 0, 0}) || !bytes.Equal(b2[12:16], []byte{192, 168, 1, 2}) {
		t.Fatalf("v2 = %x", b2)
	}
	if got, err := lnetwire.ParseAcceptorRequest(b2); err != nil || got.Target != target {
		t.Fatalf("v2 parse %+v %v", got, err)
	}
	// Unknown version: known magic, ErrBadVersion, version reported.
	b3 := append([]byte(nil), b...)
	b3[4] = 9
	if got, err := lnetwire.ParseAcceptorRequest(b3); !errors.Is(err, lnetwire.ErrBadVersion) || got.Version != 9 {
		t.Fatalf("v9: %+v %v", got, err)
	}
	// LNET_PROTO_MAGIC instead of a request.
	pm := binary.LittleEndian.AppendUint32(nil, lnetwire.ProtoMagic)
	pm = append(pm, 0, 0, 0, 0)
	if _, err := lnetwire.ParseAcceptorRequest(pm); !errors.Is(err, lnetwire.ErrBadMagic) {
		t.Fatalf("proto magic: %v", err)
	}
	if m, sw, _ := lnetwire.ClassifyMagic(binary.BigEndian.AppendUint32(nil, lnetwire.ProtoMagic)); m != lnetwire.ProtoMagic || !sw {
		t.Fatalf("classify %x %v", m, sw)
	}
	if got := lnetwire.AppendAcceptorMagic(nil); len(got) != lnetwire.AcceptorMagicSize || binary.LittleEndian.Uint32(got) != lnetwire.AcceptorMagic {
		t.Fatalf("magic reply %x", got)
	}
}
