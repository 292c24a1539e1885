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

// unhex decodes a hex string with spaces and newlines for readability.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Golden HELLO V3 built from the §7.2 field table: 192.168.1.1@tcp →
// 192.168.1.2@tcp, pid 12345 → 12345, incarnations 0x1122334455667788 /
// 0, ctype BULK_OUT, no IPs. All little-endian.
const goldenHelloV3 = `
63 69 72 45  03 00 00 00
01 01 a8 c0 00 00 02 00
02 01 a8 c0 00 00 02 00
39 30 00 00  39 30 00 00
88 77 66 55 44 33 22 11
00 00 00 00 00 00 00 00
03 00 00 00  00 00 00 00`

// Golden HELLO V1 (§7.2): an lnet_hdr whose dest_nid slot is
// {0xEEBC0DED, 1, 0}, type HELLO (4), one IP 10.0.0.1, incarnation 5,
// ctype CONTROL.
const goldenHelloV1 = `
ed 0d bc ee 01 00 00 00
01 01 a8 c0 00 00 02 00
00 00 00 00  39 30 00 00
04 00 00 00  04 00 00 00
05 00 00 00 00 00 00 00
01 00 00 00  00 00 00 00
00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00
01 00 00 0a`

func TestSockHelloGolden(t *testing.T) {
	cases := []struct {
		name  string
		hello lnetwire.SockHello
		hex   string
	}{
		{"V3", lnetwire.SockHello{
			Version: lnetwire.SockProtoV3, SrcNID: 0x00020000C0A80101, DstNID: 0x00020000C0A80102,
			SrcPID: 12345, DstPID: 12345, SrcIncarnation: 0x1122334455667788,
			ConnType: lnetwire.SockConnBulkOut}, goldenHelloV3},
		{"V1", lnetwire.SockHello{
			Version: lnetwire.SockProtoV1, SrcNID: 0x00020000C0A80101, SrcPID: 12345,
			SrcIncarnation: 5, ConnType: lnetwire.SockConnControl, IPs: []uint32{0x0a000001}}, goldenHelloV1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := unhex(t, c.hex)
			got := c.hello.Append(nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("Append:\n got %x\nwant %x", got, want)
			}
			if c.hello.Len() != len(want) {
				t.Fatalf("Len %d, want %d", c.hello.Len(), len(want))
			}
			h, n, err := lnetwire.ParseSockHello(want)
			if err != nil || n != len(want) {
				t.Fatalf("Parse: n=%d err=%v", n, err)
			}
			if !reflect.DeepEqual(h, c.hello) {
				t.Fatalf("Parse: got %+v want %+v", h, c.hello)
			}
		})
	}
}

func TestSockHelloSwapped(t *testing.T) {
	// A V2 HELLO from a big-endian sender.
	b := make([]byte, lnetwire.SockHelloV2Len+4)
	be := binary.BigEndian
	be.PutUint32(b[0:], lnetwire.ProtoMagic)
	be.PutUint32(b[4:], 2)
	be.PutUint64(b[8:], 0x00020000C0A80101)
	be.PutUint64(b[16:], 0x00020000C0A80102)
	be.PutUint32(b[24:], 7)
	be.PutUint32(b[28:], 8)
	be.PutUint64(b[32:], 9)
	be.PutUint64(b[40:], 10)
	be.PutUint32(b[48:], 2)
	be.PutUint32(b[52:], 1)
	be.PutUint32(b[56:], 0x0a000001)
	h, n, err := lnetwire.ParseSockHello(b)
	if err != nil || n != len(b) {
		t.Fatalf("n=%d err=%v", n, err)
	}
	want := lnetwire.SockHello{Version: 2, SrcNID: 0x00020000C0A80101, DstNID: 0x00020000C0A80102,
		SrcPID: 7, DstPID: 8, SrcIncarnation: 9, DstIncarnation: 10, ConnType: lnetwire.SockConnBulkIn,
		IPs: []uint32{0x0a000001}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %+v want %+v", h, want)
	}
	p, _ := lnetwire.ParseSockHelloPrefix(b)
	if !p.Swapped {
		t.Fatal("prefix not marked swapped")
	}
}

func TestSockHelloErrors(t *testing.T) {
	v3 := unhex(t, goldenHelloV3)
	bad := func(mut func(b []byte)) []byte {
		b := append([]byte(nil), v3...)
		mut(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", v3[:7], lnetwire.ErrSockShort},
		{"short fixed", v3[:40], lnetwire.ErrSockShort},
		{"magic", bad(func(b []byte) { b[0] = 0 }), lnetwire.ErrSockMagic},
		{"acceptor magic", bad(func(b []byte) { binary.LittleEndian.PutUint32(b, 0xACCE7100) }), lnetwire.ErrSockMagic},
		{"version 4", bad(func(b []byte) { b[4] = 4 }), lnetwire.ErrSockVersion},
		{"version 1 with proto magic", bad(func(b []byte) { b[4] = 1 }), lnetwire.ErrSockVersion},
		{"too many ips", bad(func(b []byte) { b[52] = 17 }), lnetwire.ErrSockHello},
		{"ips missing", bad(func(b []byte) { b[52] = 1 }), lnetwire.ErrSockShort},
		{"v1 bad minor", bad(func(b []byte) {
			copy(b, unhex(t, goldenHelloV1))
			b[6] = 1
		}), lnetwire.ErrSockVersion},
		{"v1 not hello", func() []byte {
			b := unhex(t, goldenHelloV1)
			b[24] = 1
			return b
		}(), lnetwire.ErrSockHello},
		{"v1 odd payload", func() []byte {
			b := unhex(t, goldenHelloV1)
			b[28] = 3
			return b
		}(), lnetwire.ErrSockHello},
	}
	for _, c := range cases {
		_, _, err := lnetwire.ParseSockHello(c.b)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	var ve *lnetwire.SockVersionError
	_, err := lnetwire.ParseSockHelloPrefix(bad(func(b []byte) { b[4] = 4 }))
	if !errors.As(err, &ve) || ve.Version != 4 {
		t.Fatalf("want *SockVersionError{4}, got %v", err)
	}
}

func TestSockConnTypeInvert(t *testing.T) {
	for in, want := range map[lnetwire.SockConnType]lnetwire.SockConnType{
		lnetwire.SockConnAny: lnetwire.SockConnAny, lnetwire.SockConnControl: lnetwire.SockConnControl,
		lnetwire.SockConnBulkIn: lnetwire.SockConnBulkOut, lnetwire.SockConnBulkOut: lnetwire.SockConnBulkIn,
		lnetwire.SockConnNone: lnetwire.SockConnNone, 7: lnetwire.SockConnNone,
	} {
		if got := in.Invert(); got != want {
			t.Errorf("%v.Invert() = %v, want %v", in, got, want)
		}
	}
	if lnetwire.SockConnAck != lnetwire.SockConnBulkIn {
		t.Fatal("ACK must alias BULK_IN")
	}
}

// Golden ksock_msg_hdr from the §7.3 table: LNET, csum 0xdeadbeef,
// cookies 2 and 3.
const goldenMsgHdr = `c1 00 00 00 ef be ad de 02 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00`

func TestSockMsgGolden(t *testing.T) {
	want := unhex(t, goldenMsgHdr)
	m := lnetwire.SockMsg{Type: lnetwire.SockMsgLNet, Csum: 0xdeadbeef, ZCReq: 2, ZCAck: 3}
	got := m.Append(nil)
	if !bytes.Equal(got, want) || m.Len() != len(got) {
		t.Fatalf("Append %x, want %x", got, want)
	}
	h, err := lnetwire.ParseSockMsgHdr(want)
	if err != nil {
		t.Fatal(err)
	}
	var d lnetwire.SockMsg
	d.Decode(h)
	if d != m {
		t.Fatalf("Decode %+v want %+v", d, m)
	}
	sw := append([]byte(nil), want...)
	lnetwire.SwapSockMsgHdr(sw)
	lnetwire.SwapSockMsgHdr(sw)
	if !bytes.Equal(sw, want) {
		t.Fatal("double swap not identity")
	}
	if _, err := lnetwire.ParseSockMsgHdr(want[:23]); !errors.Is(err, lnetwire.ErrSockShort) {
		t.Fatal(err)
	}
	bad := append([]byte(nil), want...)
	bad[0] = 0xc2
	if _, err := lnetwire.ParseSockMsgHdr(bad); !errors.Is(err, lnetwire.ErrSockMsgType) {
		t.Fatal(err)
	}
}

// crc32leRaw is a bit-at-a-time crc32_le with the given seed and no final
// inversion, written from the polynomial definition to check SockCsum.
func crc32leRaw(seed uint32, p []byte) uint32 {
	c := seed
	for _, b := range p {
		c ^= uint32(b)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xEDB88320
			} else {
				c >>= 1
			}
		}
	}
	return c
}

func TestSockCsum(t *testing.T) {
	hdr := unhex(t, goldenMsgHdr)
	lh := bytes.Repeat([]byte{0x5a}, 72)
	payload := []byte("hello, lustre")
	c := lnetwire.SockCsum(0).UpdateHdr(hdr).Update(lh).Update(payload)
	all := append(append(append([]byte(nil), hdr...), lh...), payload...)
	all[4], all[5], all[6], all[7] = 0, 0, 0, 0
	if want := crc32leRaw(^uint32(0), all); c.Sum() != want {
		t.Fatalf("Sum %#x, want %#x", c.Sum(), want)
	}
	// Splitting the input does not change the result.
	c2 := lnetwire.SockCsum(0).Update(all[:10]).Update(all[10:50]).Update(all[50:])
	if c2.Sum() != c.Sum() {
		t.Fatal("split checksum differs")
	}
	// crc32_le over "123456789" seeded ~0 without inversion is the
	// complement of the standard CRC-32 check value 0xCBF43926.
	if got := lnetwire.SockCsum(0).Update([]byte("123456789")).Sum(); got != ^uint32(0xCBF43926) {
		t.Fatalf("check value %#x", got)
	}
}

func TestSockZCAcks(t *testing.T) {
	mk := func(typ lnetwire.SockMsgType, c0, c1 uint64) lnetwire.SockMsgHdr {
		m := lnetwire.SockMsg{Type: typ, ZCReq: c0, ZCAck: c1}
		return lnetwire.SockMsgHdr(m.Append(nil))
	}
	cases := []struct {
		h     lnetwire.SockMsgHdr
		ok    bool
		count uint64
		in    []uint64
		out   []uint64
	}{
		{mk(lnetwire.SockMsgNOOP, 0, 0), false, 0, nil, nil},
		{mk(lnetwire.SockMsgNOOP, 0, 5), true, 1, []uint64{5}, []uint64{4, 6}},
		{mk(lnetwire.SockMsgNOOP, 7, 5), true, 2, []uint64{5, 7}, []uint64{6}},
		{mk(lnetwire.SockMsgNOOP, 5, 9), true, 5, []uint64{5, 6, 9}, []uint64{4, 10}},
		{mk(lnetwire.SockMsgLNet, 100, 9), true, 1, []uint64{9}, []uint64{100, 10}},
	}
	for i, c := range cases {
		a, ok := c.h.ZCAcks()
		if ok != c.ok {
			t.Fatalf("%d: ok %v", i, ok)
		}
		if !ok {
			continue
		}
		if a.Count() != c.count {
			t.Errorf("%d: count %d want %d", i, a.Count(), c.count)
		}
		for _, v := range c.in {
			if !a.Contains(v) {
				t.Errorf("%d: %d not contained in %+v", i, v, a)
			}
		}
		for _, v := range c.out {
			if a.Contains(v) {
				t.Errorf("%d: %d contained in %+v", i, v, a)
			}
		}
	}
	if !mk(lnetwire.SockMsgNOOP, 0, 1).IsKeepalive() || mk(lnetwire.SockMsgNOOP, 0, 2).IsKeepalive() {
		t.Fatal("keepalive detection")
	}
}

func FuzzSockHello(f *testing.F) {
	for _, h := range []lnetwire.SockHello{
		{Version: 1, SrcNID: 1, SrcPID: 2, SrcIncarnation: 3, ConnType: 1},
		{Version: 1, IPs: []uint32{1, 2}},
		{Version: 2, SrcNID: 1, DstNID: 2, ConnType: 3},
		{Version: 3, SrcNID: 1, DstNID: 2, SrcPID: 3, DstPID: 4, SrcIncarnation: 5, DstIncarnation: 6, ConnType: -1},
		{Version: 3, IPs: []uint32{7}},
	} {
		f.Add(h.Append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := lnetwire.ParseSockHello(b)
		if err != nil {
			return
		}
		if n != h.Len() {
			t.Fatalf("n %d != Len %d", n, h.Len())
		}
		enc := h.Append(nil)
		if len(enc) != h.Len() {
			t.Fatalf("len(Append) %d != Len %d", len(enc), h.Len())
		}
		h2, n2, err := lnetwire.ParseSockHello(enc)
		if err != nil || n2 != n || !reflect.DeepEqual(h, h2) {
			t.Fatalf("round trip: %+v vs %+v (%v)", h, h2, err)
		}
		p, _ := lnetwire.ParseSockHelloPrefix(b)
		if p.Version != lnetwire.SockProtoV1 && !p.Swapped && !bytes.Equal(enc, b[:n]) {
			t.Fatalf("V2+ little-endian HELLO did not re-encode byte-exact:\n%x\n%x", enc, b[:n])
		}
	})
}

func FuzzSockMsgHdr(f *testing.F) {
	for _, m := range []lnetwire.SockMsg{
		{Type: lnetwire.SockMsgNOOP},
		{Type: lnetwire.SockMsgNOOP, ZCAck: 1},
		{Type: lnetwire.SockMsgNOOP, ZCReq: 9, ZCAck: 4},
		{Type: lnetwire.SockMsgLNet, Csum: 77, ZCReq: 2, ZCAck: 3},
	} {
		f.Add(m.Append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := lnetwire.ParseSockMsgHdr(b)
		if err != nil {
			return
		}
		var m lnetwire.SockMsg
		m.Decode(h)
		if enc := m.Append(nil); !bytes.Equal(enc, b[:lnetwire.SockMsgHdrLen]) || len(enc) != m.Len() {
			t.Fatalf("round trip %x vs %x", enc, b[:lnetwire.SockMsgHdrLen])
		}
		if a, ok := h.ZCAcks(); ok {
			if !a.Contains(h.ZCAck()) || a.Count() == 0 {
				t.Fatalf("acks %+v miss ZCAck %d", a, h.ZCAck())
			}
		}
		_ = lnetwire.SockCsum(0).UpdateHdr(h).Sum()
	})
}
