package mad_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"softib/wire/mad"
)

// TestLayoutTables checks every field table: fields inside the structure,
// no two fields sharing a bit, private data ending the CM area with the
// documented size.
func TestLayoutTables(t *testing.T) {
	pd := map[mad.AttrID]int{
		mad.AttrREQ: 92, mad.AttrMRA: 222, mad.AttrREJ: 148, mad.AttrREP: 196, mad.AttrRTU: 224,
		mad.AttrDREQ: 220, mad.AttrDREP: 224, mad.AttrSIDRREQ: 216, mad.AttrSIDRREP: 136,
		mad.AttrLAP: 168, mad.AttrAPR: 148,
	}
	layouts := []mad.Layout{mad.HeaderLayout(), mad.CMAHdrLayout()}
	for _, a := range mad.Attrs() {
		l, ok := mad.LayoutOf(a)
		if !ok {
			t.Fatalf("no layout for %v", a)
		}
		layouts = append(layouts, l)
		if want, ok := pd[a]; ok {
			f, ok := l.Field("PrivateData")
			if !ok || f.Size() != want || f.End() != mad.CMDataSize {
				t.Errorf("%s private data %+v, want %d bytes ending at 232", l.Name, f, want)
			}
		}
	}
	if len(layouts) != 2+12 {
		t.Errorf("%d layouts", len(layouts))
	}
	for _, l := range layouts {
		used := make([]string, l.Size*8)
		for _, f := range l.Fields {
			if f.Bits <= 0 || f.Bit < 0 || f.Bit > 7 || f.End() > l.Size {
				t.Errorf("%s.%s out of range: %+v", l.Name, f.Name, f)
				continue
			}
			if f.IsBytes() && (f.Bit != 0 || f.Bits%8 != 0) {
				t.Errorf("%s.%s wide field not byte aligned", l.Name, f.Name)
			}
			if !f.IsBytes() && f.Bit+f.Bits > 64 {
				t.Errorf("%s.%s integer field spans too many bytes", l.Name, f.Name)
			}
			for i := f.Byte*8 + f.Bit; i < f.Byte*8+f.Bit+f.Bits; i++ {
				if used[i] != "" {
					t.Errorf("%s: %s overlaps %s at bit %d", l.Name, f.Name, used[i], i)
				}
				used[i] = f.Name
			}
		}
	}
}

func TestFieldGetSet(t *testing.T) {
	b := bytes.Repeat([]byte{0xFF}, 8)
	f := mad.Field{Name: "x", Byte: 1, Bit: 5, Bits: 7} // spans bytes 1–2
	f.Set(b, 0)
	if want := []byte{0xFF, 0xF8, 0x0F, 0xFF}; !bytes.Equal(b[:4], want) {
		t.Fatalf("Set 0: % x, want % x", b[:4], want)
	}
	f.Set(b, 0x55)
	if got := f.Get(b); got != 0x55 {
		t.Errorf("Get %#x", got)
	}
	f.Set(b, 0xFFF) // truncated to 7 bits
	if got := f.Get(b); got != 0x7F || b[0] != 0xFF || b[3] != 0xFF {
		t.Errorf("truncate: %#x % x", got, b)
	}
	// Short buffers neither panic nor write.
	short := []byte{1}
	f.Set(short, 3)
	if f.Get(short) != 0 || short[0] != 1 || f.Bytes(short) != nil {
		t.Errorf("short buffer touched")
	}
	l, _ := mad.LayoutOf(mad.AttrREQ)
	body := make([]byte, mad.CMDataSize)
	if err := l.Set(body, "RetryCount", 5); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Get(body, "RetryCount"); err != nil || v != 5 || body[47] != 5 {
		t.Errorf("layout Get %d %v, byte %#x", v, err, body[47])
	}
	if _, err := l.Get(body, "Nope"); !errors.Is(err, mad.ErrNoField) {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := l.Get(body, "PrivateData"); !errors.Is(err, mad.ErrFieldType) {
		t.Errorf("byte field as int: %v", err)
	}
	if err := l.Set(body, "PrimaryLocalGID", 1); !errors.Is(err, mad.ErrFieldType) {
		t.Errorf("int set on byte field: %v", err)
	}
	if _, err := l.Bytes(body[:10], "PrivateData"); !errors.Is(err, mad.ErrTooShort) {
		t.Errorf("short: %v", err)
	}
	if _, err := l.Bytes(body, "RetryCount"); !errors.Is(err, mad.ErrFieldType) {
		t.Errorf("bytes of bit field: %v", err)
	}
	if p, err := l.Bytes(body, "PrivateData"); err != nil || len(p) != 92 {
		t.Errorf("private data %d %v", len(p), err)
	}
}

// TestAppendReusesDirtyBuffer checks that short private data is zero
// padded even when Append reuses a buffer holding old bytes.
func TestAppendReusesDirtyBuffer(t *testing.T) {
	buf := bytes.Repeat([]byte{0xEE}, 512)[:0]
	m := &mad.RTU{LocalCommID: 1, RemoteCommID: 2, PrivateData: []byte{9}}
	out := mad.AppendCM(buf, 1, m)
	want := cmHeader(1, 0x0014)
	be32(want, 24, 1)
	be32(want, 28, 2)
	want[32] = 9
	diffBytes(t, "RTU", out, want)
}

func TestValidate(t *testing.T) {
	cases := []mad.Message{
		&mad.REQ{PrivateData: make([]byte, 93)},
		&mad.REP{PrivateData: make([]byte, 197)},
		&mad.REJ{PrivateData: make([]byte, 149)},
		&mad.REJ{ARI: make([]byte, 73)},
		&mad.MRA{PrivateData: make([]byte, 223)},
		&mad.RTU{PrivateData: make([]byte, 225)},
		&mad.DREQ{PrivateData: make([]byte, 221)},
		&mad.DREP{PrivateData: make([]byte, 225)},
		&mad.LAP{PrivateData: make([]byte, 169)},
		&mad.APR{PrivateData: make([]byte, 149)},
		&mad.APR{Info: make([]byte, 73)},
		&mad.SIDRREQ{PrivateData: make([]byte, 217)},
		&mad.SIDRREP{PrivateData: make([]byte, 137)},
		&mad.SIDRREP{Info: make([]byte, 73)},
	}
	for _, m := range cases {
		if err := m.Validate(); !errors.Is(err, mad.ErrTooLong) {
			t.Errorf("%v: %v", m.AttrID(), err)
		}
		if n := len(m.Append(nil)); n != mad.CMDataSize {
			t.Errorf("%v: truncating Append gave %d bytes", m.AttrID(), n)
		}
	}
}

func TestParseErrors(t *testing.T) {
	var s mad.Scratch
	_, w := goldenRTU()
	if _, _, err := s.Decode(w[:255]); !errors.Is(err, mad.ErrTooShort) {
		t.Errorf("short: %v", err)
	}
	bad := bytes.Clone(w)
	bad[0] = 2
	if _, _, err := s.Decode(bad); !errors.Is(err, mad.ErrBadVersion) {
		t.Errorf("base version: %v", err)
	}
	bad = bytes.Clone(w)
	bad[1] = 0x03
	if _, _, err := s.Decode(bad); !errors.Is(err, mad.ErrNotCM) {
		t.Errorf("class: %v", err)
	}
	bad = bytes.Clone(w)
	bad[2] = 1
	if _, _, err := s.Decode(bad); !errors.Is(err, mad.ErrBadVersion) {
		t.Errorf("class version: %v", err)
	}
	bad = bytes.Clone(w)
	bad[17] = 0x20
	if _, _, err := s.Decode(bad); !errors.Is(err, mad.ErrUnknownAttr) {
		t.Errorf("attr: %v", err)
	}
	for _, a := range mad.Attrs() {
		if err := mad.NewMessage(a).Decode(make([]byte, 10)); !errors.Is(err, mad.ErrTooShort) {
			t.Errorf("%v short body: %v", a, err)
		}
	}
	if mad.NewMessage(0x99) != nil || s.For(0x99) != nil {
		t.Error("unknown attribute has a message")
	}
}

func TestHeader(t *testing.T) {
	h := mad.HeaderFields{BaseVersion: 1, MgmtClass: mad.ClassSubnAdm, ClassVersion: 2,
		Method: mad.MethodGetResp, Status: mad.StatusUnsupportedMethodAttr, ClassSpecific: 0x1234,
		TID: 0x0102030405060708, AttrID: mad.AttrClassPortInfo, AttrMod: 0xCAFEBABE}
	b := h.Append(nil)
	want := []byte{1, 3, 2, 0x81, 0, 0x0C, 0x12, 0x34, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 0, 0xCA, 0xFE, 0xBA, 0xBE}
	if !bytes.Equal(b, want) || h.Len() != len(b) {
		t.Fatalf("header % x", b)
	}
	full := append(b, make([]byte, mad.CMDataSize)...)
	v, err := mad.ParseHeader(full)
	if err != nil || v.Fields() != h {
		t.Fatalf("parsed %+v %v", v.Fields(), err)
	}
	v.SetMethod(mad.MethodGet)
	v.SetStatus(4)
	v.SetTID(9)
	if v.Method() != mad.MethodGet || v.Status() != 4 || v.TID() != 9 || !mad.MethodGetResp.IsResponse() {
		t.Error("setters")
	}
	for _, s := range []string{mad.ClassCM.String(), mad.MgmtClass(0x42).String(), mad.MethodSend.String(),
		mad.Method(0x42).String(), mad.AttrID(0x4242).String()} {
		if s == "" {
			t.Error("empty name")
		}
	}
}

func TestClassPortInfo(t *testing.T) {
	c := &mad.ClassPortInfo{BaseVersion: 1, ClassVersion: 2, CapabilityMask: 0x0100,
		CapabilityMask2: 0x7FFFFFF, RespTimeValue: 18, RedirectGID: gid(7), RedirectTC: 3,
		RedirectSL: 4, RedirectFL: 0xABCDE, RedirectLID: 5, RedirectPKey: 0xFFFF,
		RedirectQP: 0x123456, RedirectQKey: 0x80010000, TrapGID: gid(8), TrapTC: 6, TrapSL: 7,
		TrapFL: 0x12345, TrapLID: 8, TrapPKey: 0x7FFF, TrapHL: 64, TrapQP: 0x654321, TrapQKey: 9}
	b := c.Append(nil)
	w := make([]byte, mad.CMDataSize)
	w[0], w[1] = 1, 2
	be16(w, 2, 0x0100)
	be32(w, 4, 0x7FFFFFF<<5|18)
	copy(w[8:], c.RedirectGID[:])
	be32(w, 24, 3<<24|4<<20|0xABCDE)
	be16(w, 28, 5)
	be16(w, 30, 0xFFFF)
	be24(w, 33, 0x123456)
	be32(w, 36, 0x80010000)
	copy(w[40:], c.TrapGID[:])
	be32(w, 56, 6<<24|7<<20|0x12345)
	be16(w, 60, 8)
	be16(w, 62, 0x7FFF)
	be32(w, 64, 64<<24|0x654321)
	be32(w, 68, 9)
	diffBytes(t, "ClassPortInfo", b, w)
	var d mad.ClassPortInfo
	if err := d.Decode(b); err != nil || d != *c || d.Validate() != nil {
		t.Errorf("decode %+v %v", d, err)
	}
}

func TestCMAHdr(t *testing.T) {
	h := mad.CMAHdr{SrcPort: 0xC350, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("192.168.1.20")}
	b := h.Append(nil)
	want := make([]byte, 36)
	want[1] = 0x40
	be16(want, 2, 0xC350)
	copy(want[16:], []byte{192, 168, 1, 10})
	copy(want[32:], []byte{192, 168, 1, 20})
	if !bytes.Equal(b, want) || h.Len() != 36 {
		t.Fatalf("IPv4 cma_hdr % x", b)
	}
	var d mad.CMAHdr
	if err := d.Decode(b); err != nil || d != h {
		t.Fatalf("decode %+v %v", d, err)
	}
	h6 := mad.CMAHdr{SrcPort: 1, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	b6 := h6.Append(nil)
	if b6[1] != 0x60 || b6[4] != 0xFD || b6[19] != 1 || b6[35] != 2 {
		t.Fatalf("IPv6 cma_hdr % x", b6)
	}
	if err := d.Decode(b6); err != nil || d != h6 {
		t.Fatalf("decode6 %+v %v", d, err)
	}
	// A mapped source still encodes as IPv4.
	hm := mad.CMAHdr{Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	if bm := hm.Append(nil); bm[1] != 0x40 || bm[19] != 1 || bm[4] != 0 {
		t.Fatalf("mapped % x", bm)
	}
	bad := bytes.Clone(b)
	bad[1] = 0x50
	if err := d.Decode(bad); !errors.Is(err, mad.ErrBadAddress) {
		t.Errorf("bad version: %v", err)
	}
	if err := d.Decode(b[:35]); !errors.Is(err, mad.ErrTooShort) {
		t.Errorf("short: %v", err)
	}
}

func TestServiceID(t *testing.T) {
	cases := []struct {
		ps   mad.PortSpace
		port uint16
		want uint64
	}{
		{mad.PSTCP, 7174, 0x0000000001061C06},
		{mad.PSTCP, 18515, 0x0000000001064853},
		{mad.PSTCP, 987, 0x00000000010603DB},
		{mad.PSUDP, 0, 0x0000000001110000},
		{mad.PSIB, 0xFFFF, 0x00000000013FFFFF},
	}
	for _, c := range cases {
		if got := mad.ServiceID(c.ps, c.port); got != c.want {
			t.Errorf("ServiceID(%v,%d) = %#x, want %#x", c.ps, c.port, got, c.want)
		}
		ps, port, ok := mad.ParseServiceID(c.want)
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("Parse %#x = %v %d %v", c.want, ps, port, ok)
		}
		if c.ps.String() == "" {
			t.Error("no name")
		}
	}
	if _, _, ok := mad.ParseServiceID(0x1000000000061C06); ok {
		t.Error("non-RDMA-CM service ID accepted")
	}
	if mad.ConnectPrivateDataMax != 56 || mad.AcceptPrivateDataMax != 196 ||
		mad.RejectPrivateDataMax != 148 || mad.UDResolvePrivateDataMax != 180 {
		t.Error("private-data limits")
	}
}

func TestTimeout(t *testing.T) {
	cases := []struct {
		t    mad.Timeout
		want time.Duration
	}{
		{0, 4096 * time.Nanosecond},
		{14, 67108864 * time.Nanosecond},
		{16, 268435456 * time.Nanosecond},
		{18, 1073741824 * time.Nanosecond},
		{20, 4294967296 * time.Nanosecond},
		{31, 4096 * time.Nanosecond << 31},
		{40, 4096 * time.Nanosecond << 31},
	}
	for _, c := range cases {
		if got := c.t.Duration(); got != c.want {
			t.Errorf("%d: %v, want %v", c.t, got, c.want)
		}
	}
	for tt := mad.Timeout(0); tt <= 31; tt++ {
		if got := mad.TimeoutFor(tt.Duration()); got != tt {
			t.Errorf("TimeoutFor(%v) = %d, want %d", tt.Duration(), got, tt)
		}
		if tt > 0 {
			if got := mad.TimeoutFor(tt.Duration() - 1); got != tt {
				t.Errorf("TimeoutFor(%v-1) = %d, want %d", tt.Duration(), got, tt)
			}
		}
	}
	if mad.TimeoutFor(0) != 0 || mad.TimeoutFor(time.Duration(1<<62)) != 31 {
		t.Error("TimeoutFor bounds")
	}
	// AckTimeout against the kernel's rule written as its two branches.
	ref := func(delay, plt int) int {
		a := plt + 1
		if a >= delay {
			if delay >= a-1 {
				a++
			}
		} else {
			if a >= delay-1 {
				a = delay + 1
			} else {
				a = delay
			}
		}
		return min(a, 31)
	}
	for d := 0; d < 32; d++ {
		for p := 0; p < 32; p++ {
			if got := mad.AckTimeout(mad.Timeout(d), mad.Timeout(p)); int(got) != ref(d, p) {
				t.Errorf("AckTimeout(%d,%d) = %d, want %d", d, p, got, ref(d, p))
			}
		}
	}
}

func TestNames(t *testing.T) {
	rs := mad.RejectReasons()
	if len(rs) != 34 || rs[0] != mad.RejNoQP || rs[len(rs)-1] != mad.RejVendorOptionNotSupported {
		t.Fatalf("reasons %v", rs)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		s := r.String()
		if seen[s] {
			t.Errorf("duplicate name %q", s)
		}
		seen[s] = true
	}
	if mad.RejInvalidServiceID.String() != "invalid service ID" || mad.RejectReason(34).String() != "RejectReason(34)" {
		t.Error("reason names")
	}
	for _, s := range []string{mad.APRInvalidSL.String(), mad.APStatus(99).String(), mad.SIDRNoQP.String(),
		mad.SIDRStatus(99).String(), mad.MsgREP.String(), mad.MsgType(3).String(), mad.TransportXRC.String(),
		mad.TransportType(7).String(), mad.MTU1024.String(), mad.MTU(9).String(), mad.PortSpace(1).String()} {
		if s == "" {
			t.Error("empty")
		}
	}
	if mad.MTUFor(1500) != mad.MTU1024 || mad.MTUFor(9000) != mad.MTU4096 || mad.MTUFor(100) != mad.MTU256 ||
		mad.MTU4096.Bytes() != 4096 {
		t.Error("MTU")
	}
}

func TestRoCEv2Path(t *testing.T) {
	p := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: netip.MustParseAddr("10.1.2.3"), Dst: netip.MustParseAddr("10.1.2.4")})
	wantL := mad.GID{10: 0xFF, 11: 0xFF, 12: 10, 13: 1, 14: 2, 15: 3}
	if p.LocalLID != 0xFFFF || p.RemoteLID != 0xFFFF || p.SubnetLocal || p.HopLimit != 64 ||
		p.LocalGID != wantL || p.RemoteGID.IP() != netip.MustParseAddr("10.1.2.4") ||
		p.LocalAckTimeout != 17 {
		t.Fatalf("path %+v", p)
	}
	if p.LocalGID.String() != "::ffff:10.1.2.3" {
		t.Errorf("GID string %s", p.LocalGID)
	}
	p6 := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"),
		HopLimit: 1, PacketLifeTime: 18, CAAckDelay: 15})
	if p6.LocalLID != 0 || !p6.SubnetLocal || p6.LocalGID.IP() != netip.MustParseAddr("fd00::1") || p6.LocalAckTimeout != 19 {
		t.Fatalf("path6 %+v", p6)
	}
	if (&mad.Path{}).IsZero() != true || p.IsZero() {
		t.Error("IsZero")
	}
}

func TestAllocs(t *testing.T) {
	var s mad.Scratch
	gs := goldens()
	buf := make([]byte, 0, mad.MADSize)
	n := testing.AllocsPerRun(100, func() {
		for _, g := range gs {
			if _, _, err := s.Decode(g.want); err != nil {
				t.Fatal(err)
			}
			buf = mad.AppendCM(buf[:0], g.tid, g.msg)
		}
	})
	if n != 0 {
		t.Errorf("%v allocs per decode+encode round", n)
	}
}

func BenchmarkDecodeREQ(b *testing.B) {
	_, w := goldenREQ()
	var s mad.Scratch
	b.ReportAllocs()
	b.SetBytes(mad.MADSize)
	for b.Loop() {
		if _, _, err := s.Decode(w); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendREQ(b *testing.B) {
	m, _ := goldenREQ()
	buf := make([]byte, 0, mad.MADSize)
	b.ReportAllocs()
	b.SetBytes(mad.MADSize)
	for b.Loop() {
		buf = mad.AppendCM(buf[:0], 1, m)
	}
}
