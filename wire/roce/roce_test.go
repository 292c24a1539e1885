package roce_test

import (
	"bytes"
	"errors"
	"testing"

	"softib/wire/roce"
)

// allOpcodes returns every opcode in the table.
func allOpcodes() []roce.Opcode {
	var ops []roce.Opcode
	for i := 0; i < 256; i++ {
		if op := roce.Opcode(i); op.Valid() {
			ops = append(ops, op)
		}
	}
	return ops
}

// sampleHeaders returns realistic, distinct header values for op.
func sampleHeaders(op roce.Opcode) *roce.Headers {
	h := &roce.Headers{
		BTH: roce.BTHFields{
			Opcode: op, PKey: roce.DefaultPKey, DestQP: 0x000123, PSN: 0xFFFFFE,
			SE: op.Is(roce.MaskEnd) && op.Is(roce.MaskSend), AckReq: op.Is(roce.MaskReq | roce.MaskEnd),
		},
		EEContext:     0x00ABCD,
		DETH:          roce.DETHFields{QKey: roce.GSIQKey, SrcQP: 0x11},
		RETH:          roce.RETHFields{VA: 0x00007F0012345000, RKey: 0x1234ABCD, DMALen: 8192},
		AtomicETH:     roce.AtomicETHFields{VA: 0x7F0000001000, RKey: 0x55AA, SwapAdd: 0x1111222233334444, Compare: 0x5555666677778888},
		AETH:          roce.AETHFields{Syndrome: roce.SyndromeACKUnlimited, MSN: 42},
		AtomicAckData: 0x0102030405060708,
		ImmDt:         0xDEADBEEF,
		IETHRKey:      0xCAFE0001,
	}
	if op.Transport() == roce.TransportUD {
		h.BTH.DestQP = roce.GSIQPN
	}
	return h
}

// samplePacket builds a packet of op with payloadLen bytes of payload (0
// if op carries none) and a zero ICRC.
func samplePacket(t testing.TB, op roce.Opcode, payloadLen int) []byte {
	t.Helper()
	if !op.Is(roce.MaskPayload) {
		payloadLen = 0
	}
	payload := make([]byte, payloadLen)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	buf := make([]byte, roce.PacketLen(op, payloadLen))
	n, err := roce.Build(buf, sampleHeaders(op), payload)
	if err != nil {
		t.Fatalf("Build(%v): %v", op, err)
	}
	if n != len(buf) {
		t.Fatalf("Build(%v) = %d, PacketLen %d", op, n, len(buf))
	}
	return buf
}

// wantExt lists, per operation (low 5 bits), the extension headers after
// the BTH in RC/UC, from roce-wire.md §3.
var wantExt = map[roce.Opcode][]roce.HeaderKind{
	0x00: nil, 0x01: nil, 0x02: nil,
	0x03: {roce.HdrImmDt},
	0x04: nil,
	0x05: {roce.HdrImmDt},
	0x06: {roce.HdrRETH}, 0x07: nil, 0x08: nil,
	0x09: {roce.HdrImmDt},
	0x0A: {roce.HdrRETH},
	0x0B: {roce.HdrRETH, roce.HdrImmDt},
	0x0C: {roce.HdrRETH},
	0x0D: {roce.HdrAETH}, 0x0E: nil,
	0x0F: {roce.HdrAETH}, 0x10: {roce.HdrAETH}, 0x11: {roce.HdrAETH},
	0x12: {roce.HdrAETH, roce.HdrAtomicAckETH},
	0x13: {roce.HdrAtomicETH}, 0x14: {roce.HdrAtomicETH},
	0x16: {roce.HdrIETH}, 0x17: {roce.HdrIETH},
}

var hdrSize = map[roce.HeaderKind]int{
	roce.HdrRDETH: 4, roce.HdrDETH: 8, roce.HdrRETH: 16, roce.HdrAtomicETH: 28,
	roce.HdrAETH: 4, roce.HdrAtomicAckETH: 8, roce.HdrImmDt: 4, roce.HdrIETH: 4,
}

func TestOpcodeTable(t *testing.T) {
	var rc, uc, ud int
	for i := 0; i < 256; i++ {
		op := roce.Opcode(i)
		want, isOp := wantExt[op&0x1F]
		tr := op.Transport()
		var known bool
		switch {
		case tr == roce.TransportRC:
			known = isOp
			rc += b2i(known)
		case tr == roce.TransportUC:
			known = op <= roce.UCWriteOnlyImm
			uc += b2i(known)
		case op == roce.UDSendOnly || op == roce.UDSendOnlyImm:
			known = true
			ud++
			want = append([]roce.HeaderKind{roce.HdrDETH}, want...)
		case tr == roce.TransportRD:
			known = (isOp && op&0x1F <= 0x14) || op == roce.RDResync
			if known {
				pre := []roce.HeaderKind{roce.HdrRDETH}
				if op.Is(roce.MaskReq) {
					pre = append(pre, roce.HdrDETH)
				}
				want = append(pre, want...)
			}
		case op == roce.CNP:
			known, want = true, nil
		}
		if op.Valid() != known {
			t.Errorf("%#x: Valid = %v, want %v", i, op.Valid(), known)
			continue
		}
		if !known {
			if op.HeaderLen() != 0 || op.Mask() != 0 || op.String() != "0x"+hex2(i) {
				t.Errorf("%#x: unknown opcode has info %+v / %q", i, *op.Info(), op.String())
			}
			continue
		}
		info := op.Info()
		off := roce.BTHSize
		for _, k := range want {
			if got := info.Offset(k); got != off {
				t.Errorf("%v: offset of header %d = %d, want %d", op, k, got, off)
			}
			off += hdrSize[k]
		}
		if op.HeaderLen() != off || info.Offset(roce.HdrPayload) != off {
			t.Errorf("%v: header length %d, want %d", op, op.HeaderLen(), off)
		}
		// Headers not listed are absent.
		var nhdr int
		for k := roce.HdrRDETH; k < roce.HdrPayload; k++ {
			if info.Offset(k) >= 0 {
				nhdr++
			}
		}
		if nhdr != len(want) {
			t.Errorf("%v: %d headers present, want %d", op, nhdr, len(want))
		}
		// Exactly one of REQ/ACK, except CNP.
		if op != roce.CNP && op.Is(roce.MaskReq) == op.Is(roce.MaskAck) {
			t.Errorf("%v: REQ=%v ACK=%v", op, op.Is(roce.MaskReq), op.Is(roce.MaskAck))
		}
	}
	if rc != 23 || uc != 12 || ud != 2 {
		t.Errorf("counts rc=%d uc=%d ud=%d", rc, uc, ud)
	}
	// Spot-check semantic bits.
	checks := []struct {
		op   roce.Opcode
		m    roce.Mask
		want bool
	}{
		{roce.RCSendFirst, roce.MaskReq | roce.MaskSend | roce.MaskStart | roce.MaskRWR | roce.MaskPayload, true},
		{roce.RCSendFirst, roce.MaskComp, false},
		{roce.RCSendOnly, roce.MaskOnly | roce.MaskComp, true},
		{roce.RCSendLastInv, roce.MaskInv | roce.MaskEnd | roce.MaskComp, true},
		{roce.RCWriteOnly, roce.MaskRWR, false},
		{roce.RCWriteOnlyImm, roce.MaskRWR | roce.MaskComp | roce.MaskImm | roce.MaskRETH, true},
		{roce.UCWriteLastImm, roce.MaskWrite | roce.MaskEnd | roce.MaskImm, true},
		{roce.RCReadRequest, roce.MaskRead | roce.MaskOnly | roce.MaskReq, true},
		{roce.RCReadRequest, roce.MaskPayload, false},
		{roce.RCReadResponseMiddle, roce.MaskResp | roce.MaskMiddle | roce.MaskPayload, true},
		{roce.RCReadResponseMiddle, roce.MaskAETH, false},
		{roce.RCAck, roce.MaskAck | roce.MaskAETH | roce.MaskOnly, true},
		{roce.RCAtomicAck, roce.MaskAtomicAckETH, true},
		{roce.RCFetchAdd, roce.MaskAtomic | roce.MaskAtomicETH, true},
		{roce.UDSendOnlyImm, roce.MaskDETH | roce.MaskImmDt | roce.MaskOnly, true},
	}
	for _, c := range checks {
		if got := c.op.Is(c.m); got != c.want {
			t.Errorf("%v.Is(%#x) = %v, want %v", c.op, c.m, got, c.want)
		}
	}
	names := map[roce.Opcode]string{
		roce.RCSendFirst: "RC_SEND_FIRST", roce.UCWriteOnlyImm: "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
		roce.UDSendOnly: "UD_SEND_ONLY", roce.RCAck: "RC_ACKNOWLEDGE", roce.RDResync: "RD_RESYNC",
		roce.CNP: "CNP", 0x1C: "0x1c", 0xFF: "0xff",
	}
	for op, n := range names {
		if op.String() != n {
			t.Errorf("%#x.String() = %q, want %q", uint8(op), op.String(), n)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func hex2(i int) string {
	const d = "0123456789abcdef"
	return string([]byte{d[i>>4], d[i&15]})
}

func TestBuildParseRoundTrip(t *testing.T) {
	for _, op := range allOpcodes() {
		for _, plen := range []int{0, 1, 2, 3, 4, 5, 255, 256, 1024} {
			pkt := samplePacket(t, op, plen)
			if !op.Is(roce.MaskPayload) {
				plen = 0
			}
			p, err := roce.Parse(pkt)
			if err != nil {
				t.Fatalf("%v/%d: %v", op, plen, err)
			}
			if p.Opcode() != op || p.PayloadLen() != plen || p.PadCnt() != roce.PadLen(plen) ||
				len(p.Pad()) != p.PadCnt() || p.HeaderLen() != op.HeaderLen() || p.Len() != len(pkt) {
				t.Errorf("%v/%d: parsed op %v payload %d pad %d", op, plen, p.Opcode(), p.PayloadLen(), p.PadCnt())
			}
			var h roce.Headers
			p.Headers(&h)
			want := sampleHeaders(op)
			want.BTH.PadCnt = uint8(roce.PadLen(plen))
			m := op.Mask()
			// Absent headers come back zero.
			if m&roce.MaskRDETH == 0 {
				want.EEContext = 0
			}
			if m&roce.MaskDETH == 0 {
				want.DETH = roce.DETHFields{}
			}
			if m&roce.MaskRETH == 0 {
				want.RETH = roce.RETHFields{}
			}
			if m&roce.MaskAtomicETH == 0 {
				want.AtomicETH = roce.AtomicETHFields{}
			}
			if m&roce.MaskAETH == 0 {
				want.AETH = roce.AETHFields{}
			}
			if m&roce.MaskAtomicAckETH == 0 {
				want.AtomicAckData = 0
			}
			if m&roce.MaskImmDt == 0 {
				want.ImmDt = 0
			}
			if m&roce.MaskIETH == 0 {
				want.IETHRKey = 0
			}
			if h != *want {
				t.Errorf("%v/%d: headers\n got %+v\nwant %+v", op, plen, h, *want)
			}
			// Accessors agree with the fields.
			if p.PSN() != h.BTH.PSN || p.DestQP() != h.BTH.DestQP || p.AckReq() != h.BTH.AckReq ||
				p.BTH().PKey() != roce.DefaultPKey {
				t.Errorf("%v: BTH accessors disagree", op)
			}
			if (p.RETH() != nil) != (m&roce.MaskRETH != 0) || (p.AETH() != nil) != (m&roce.MaskAETH != 0) ||
				(p.DETH() != nil) != (m&roce.MaskDETH != 0) || (p.ImmDt() != nil) != (m&roce.MaskImmDt != 0) ||
				(p.IETH() != nil) != (m&roce.MaskIETH != 0) || (p.RDETH() != nil) != (m&roce.MaskRDETH != 0) ||
				(p.AtomicETH() != nil) != (m&roce.MaskAtomicETH != 0) ||
				(p.AtomicAckETH() != nil) != (m&roce.MaskAtomicAckETH != 0) {
				t.Errorf("%v: header presence disagrees with mask", op)
			}
			for i, c := range p.Payload() {
				if c != byte(i*7+1) {
					t.Fatalf("%v: payload byte %d = %d", op, i, c)
				}
			}
			// Re-build from parsed fields reproduces the bytes.
			out := make([]byte, len(pkt))
			n, err := roce.Build(out, &h, p.Payload())
			if err != nil || !bytes.Equal(out[:n], pkt) {
				t.Errorf("%v/%d: rebuild differs (%v)\n got %x\nwant %x", op, plen, err, out[:n], pkt)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	ack := samplePacket(t, roce.RCAck, 0)
	send := samplePacket(t, roce.RCSendOnly, 5) // pad 3
	mod := func(b []byte, f func([]byte)) []byte {
		b = bytes.Clone(b)
		f(b)
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, roce.ErrTruncated},
		{"bth only", ack[:12], roce.ErrTruncated},
		{"truncated aeth", ack[:len(ack)-1], roce.ErrTruncated},
		{"tver", mod(ack, func(b []byte) { b[1] |= 1 }), roce.ErrBadVersion},
		{"unknown opcode", mod(ack, func(b []byte) { b[0] = 0x1C }), roce.ErrUnknownOpcode},
		{"reserved 0x15 rc", mod(ack, func(b []byte) { b[0] = 0x15 }), roce.ErrUnknownOpcode},
		{"uc read", mod(ack, func(b []byte) { b[0] = 0x2C }), roce.ErrUnknownOpcode},
		{"ack with payload", append(bytes.Clone(ack), 0, 0, 0, 0), roce.ErrUnexpectedPayload},
		{"ack with pad", mod(ack, func(b []byte) { b[1] |= 0x10 }), roce.ErrTruncated},
		{"unaligned length", append(bytes.Clone(send), 0), roce.ErrBadPad},
		{"pad longer than packet", mod(samplePacket(t, roce.RCSendOnly, 0), func(b []byte) { b[1] |= 0x30 }), roce.ErrTruncated},
	}
	for _, tt := range tests {
		_, err := roce.Parse(tt.b)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	// Every ParseError has a message and can index a counter array.
	var counts [roce.NumParseErrors]int
	for e := roce.ParseError(1); e < roce.NumParseErrors; e++ {
		if e.Error() == "" || e.Error() == "roce: parse error" {
			t.Errorf("ParseError %d has no text", e)
		}
		counts[e]++
	}
	if roce.ParseError(200).Error() != "roce: parse error" {
		t.Error("out-of-range ParseError text")
	}
}

func TestBuildErrors(t *testing.T) {
	var h roce.Headers
	h.BTH.Opcode = 0x1C
	if _, err := roce.Build(make([]byte, 100), &h, nil); err != roce.ErrUnknownOpcode {
		t.Errorf("unknown: %v", err)
	}
	h.BTH.Opcode = roce.RCAck
	if _, err := roce.Build(make([]byte, 100), &h, []byte{1}); err != roce.ErrUnexpectedPayload {
		t.Errorf("payload on ACK: %v", err)
	}
	if _, err := roce.Build(make([]byte, 19), &h, nil); err != roce.ErrShortBuffer {
		t.Errorf("short: %v", err)
	}
	h.BTH.Opcode = roce.RCSendOnly
	if _, err := roce.Build(make([]byte, 12+5+3+3), &h, make([]byte, 5)); err != roce.ErrShortBuffer {
		t.Errorf("short send: %v", err)
	}
	if _, err := roce.BuildInPlace(make([]byte, 100), &h, 200); err != roce.ErrShortBuffer {
		t.Errorf("in place short: %v", err)
	}
	if _, err := roce.WriteHeaders(make([]byte, 11), &h, 0); err != roce.ErrShortBuffer {
		t.Errorf("headers short: %v", err)
	}
	if roce.PacketLen(0x1C, 10) != 0 || roce.PacketLen(roce.RCSendOnly, 5) != 12+5+3+4 {
		t.Error("PacketLen")
	}
}

func TestBuildInPlace(t *testing.T) {
	h := sampleHeaders(roce.RCWriteFirst)
	buf := bytes.Repeat([]byte{0xEE}, 200)
	hl := roce.RCWriteFirst.HeaderLen()
	copy(buf[hl:], "hello")
	n, err := roce.BuildInPlace(buf, h, 5)
	if err != nil || n != hl+5+3+4 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	p, err := roce.Parse(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Payload()) != "hello" || !bytes.Equal(p.Pad(), []byte{0, 0, 0}) || p.ICRC() != 0 {
		t.Errorf("payload %q pad %x icrc %x", p.Payload(), p.Pad(), p.ICRC())
	}
	if p.RETH().RKey() != h.RETH.RKey || p.RETH().DMALen() != 8192 {
		t.Error("RETH")
	}
}

func TestSettersPreserveReserved(t *testing.T) {
	b := roce.BTH(bytes.Repeat([]byte{0xFF}, 12))
	b.SetDestQP(0x123456)
	b.SetPSN(0xABCDEF)
	if b[4] != 0xFF || b[8] != 0xFF || b.DestQP() != 0x123456 || b.PSN() != 0xABCDEF {
		t.Errorf("BTH setters clobbered reserved bits: %x", []byte(b))
	}
	b.SetFECN(false)
	b.SetAckReq(false)
	if b[4] != 0x7F || b[8] != 0x7F || b.FECN() || !b.BECN() || b.AckReq() {
		t.Errorf("flag setters: %x", []byte(b))
	}
	b.SetPadCnt(2)
	b.SetTVer(0)
	b.SetSE(false)
	if b.PadCnt() != 2 || b.TVer() != 0 || b.SE() || !b.MigReq() || b[1] != 0x60 {
		t.Errorf("flags byte %#x", b[1])
	}
	b.SetMigReq(false)
	b.SetBECN(false)
	b.SetSE(true)
	b.SetPKey(0x8001)
	b.SetOpcode(roce.RCAck)
	if !b.SE() || b.MigReq() || b.BECN() || b.PKey() != 0x8001 || b.Opcode() != roce.RCAck {
		t.Error("BTH setters")
	}
	d := roce.DETH(bytes.Repeat([]byte{0xFF}, 8))
	d.SetSrcQP(1)
	d.SetQKey(roce.GSIQKey)
	if d[4] != 0xFF || d.SrcQP() != 1 || d.QKey() != roce.GSIQKey {
		t.Errorf("DETH %x", []byte(d))
	}
	a := roce.AETH(make([]byte, 4))
	a.SetSyndrome(roce.NAKSyndrome(roce.NAKRemoteAccessError))
	a.SetMSN(0xFFFFFF)
	if a.Syndrome() != 0x62 || a.MSN() != 0xFFFFFF {
		t.Errorf("AETH %x", []byte(a))
	}
	a.SetMSN(3)
	if a.Syndrome() != 0x62 || a.MSN() != 3 {
		t.Errorf("AETH %x", []byte(a))
	}
	r := roce.RDETH(bytes.Repeat([]byte{0xFF}, 4))
	r.SetEEContext(5)
	if r[0] != 0xFF || r.EEContext() != 5 {
		t.Error("RDETH")
	}
	e := roce.RETH(make([]byte, 16))
	e.SetVA(1)
	e.SetRKey(2)
	e.SetDMALen(3)
	if e.Fields() != (roce.RETHFields{VA: 1, RKey: 2, DMALen: 3}) {
		t.Error("RETH")
	}
	at := roce.AtomicETH(make([]byte, 28))
	at.SetVA(8)
	at.SetRKey(9)
	at.SetSwapAdd(10)
	at.SetCompare(11)
	if at.Fields() != (roce.AtomicETHFields{VA: 8, RKey: 9, SwapAdd: 10, Compare: 11}) {
		t.Error("AtomicETH")
	}
	aa := roce.AtomicAckETH(make([]byte, 8))
	aa.SetOrigData(77)
	im := roce.ImmDt(make([]byte, 4))
	im.SetValue(0x01020304)
	ie := roce.IETH(make([]byte, 4))
	ie.SetRKey(99)
	if aa.OrigData() != 77 || im.Value() != 0x01020304 || im[0] != 1 || ie.RKey() != 99 {
		t.Error("small headers")
	}
}

func TestParseAllocs(t *testing.T) {
	pkt := samplePacket(t, roce.RCWriteOnlyImm, 512)
	out := make([]byte, len(pkt))
	var h roce.Headers
	if n := testing.AllocsPerRun(1000, func() {
		p, err := roce.Parse(pkt)
		if err != nil {
			t.Fatal(err)
		}
		p.Headers(&h)
		_ = p.RETH().RKey() + p.ImmDt().Value()
		if _, err := roce.Build(out, &h, p.Payload()); err != nil {
			t.Fatal(err)
		}
		if _, err := roce.Parse(pkt[:3]); err == nil {
			t.Fatal("no error")
		}
	}); n != 0 {
		t.Errorf("Parse/Build allocate %v times per run", n)
	}
}

func BenchmarkParse(b *testing.B) {
	pkt := samplePacket(b, roce.RCWriteOnlyImm, 1024)
	b.ReportAllocs()
	var sink uint32
	for b.Loop() {
		p, err := roce.Parse(pkt)
		if err != nil {
			b.Fatal(err)
		}
		sink += p.RETH().RKey() + uint32(p.PSN()) + uint32(p.PayloadLen())
	}
	_ = sink
}

func BenchmarkBuild(b *testing.B) {
	h := sampleHeaders(roce.RCSendOnly)
	payload := make([]byte, 1024)
	buf := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		h.BTH.PSN = h.BTH.PSN.Next()
		if _, err := roce.Build(buf, h, payload); err != nil {
			b.Fatal(err)
		}
	}
}
