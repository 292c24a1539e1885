package mad_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softib/wire/mad"
)

// The expected bytes in this file are written by hand from the MAD byte
// offsets of ib-cm.md §2–§4 (CM offset + 24), independently of the
// package's field tables.

func be16(b []byte, off int, v uint16) { binary.BigEndian.PutUint16(b[off:], v) }
func be32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
func be64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }
func be24(b []byte, off int, v uint32) {
	b[off], b[off+1], b[off+2] = byte(v>>16), byte(v>>8), byte(v)
}

// cmHeader writes the Linux CM header: base 1, class 7, version 2, Send.
func cmHeader(tid uint64, attr uint16) []byte {
	b := make([]byte, 256)
	b[0], b[1], b[2], b[3] = 1, 0x07, 2, 0x03
	be64(b, 8, tid)
	be16(b, 16, attr)
	return b
}

func seq(n int, start byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = start + byte(i)
	}
	return p
}

func gid(last byte) mad.GID {
	var g mad.GID
	for i := range g {
		g[i] = 0xA0 + byte(i)
	}
	g[15] = last
	return g
}

func diffBytes(t *testing.T, name string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", name, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: MAD byte %d = %#02x, want %#02x", name, i, got[i], want[i])
		}
	}
}

func goldenREQ() (*mad.REQ, []byte) {
	m := &mad.REQ{
		LocalCommID: 0x11223344, VendorID: 0x0002C9, ServiceID: 0x0000000001061C06,
		LocalCAGUID: 0x0102030405060708, LocalQKey: 0x0A0B0C0D, LocalQPN: 0x123456,
		ResponderResources: 4, LocalEECN: 0x00ABCD, InitiatorDepth: 5, RemoteEECN: 0x00DCBA,
		RemoteCMResponseTimeout: 20, TransportType: mad.TransportUC, E2EFlowControl: true,
		StartingPSN: 0xABCDEF, LocalCMResponseTimeout: 19, RetryCount: 7, PKey: 0xFFFF,
		PathMTU: mad.MTU1024, RDCExists: true, RNRRetryCount: 6, MaxCMRetries: 15, SRQ: true,
		ExtTransportType: 1,
		Primary: mad.Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFE, LocalGID: gid(1), RemoteGID: gid(2),
			FlowLabel: 0xABCDE, PacketRate: 0x2A, TrafficClass: 0x88, HopLimit: 64, SL: 0xA,
			SubnetLocal: true, LocalAckTimeout: 17},
		Alternate: mad.Path{LocalLID: 0x0102, RemoteLID: 0x0304, LocalGID: gid(3), RemoteGID: gid(4),
			FlowLabel: 0x12345, PacketRate: 0x15, TrafficClass: 0x44, HopLimit: 2, SL: 0x5,
			LocalAckTimeout: 31},
		SAPSupported: true,
		PrivateData:  seq(92, 0x40),
	}
	w := cmHeader(0xDEADBEEF11223344, 0x0010)
	be32(w, 24, 0x11223344)
	be24(w, 29, 0x0002C9)
	be64(w, 32, 0x0000000001061C06)
	be64(w, 40, 0x0102030405060708)
	be32(w, 52, 0x0A0B0C0D)
	be24(w, 56, 0x123456)
	w[59] = 4
	be24(w, 60, 0x00ABCD)
	w[63] = 5
	be24(w, 64, 0x00DCBA)
	w[67] = 20<<3 | 1<<1 | 1 // resp timeout · UC · E2E
	be24(w, 68, 0xABCDEF)
	w[71] = 19<<3 | 7
	be16(w, 72, 0xFFFF)
	w[74] = 3<<4 | 1<<3 | 6 // MTU 1024 · RDC · RNR 6
	w[75] = 15<<4 | 1<<3 | 1
	path := func(base int, p mad.Path) {
		be16(w, base, p.LocalLID)
		be16(w, base+2, p.RemoteLID)
		copy(w[base+4:], p.LocalGID[:])
		copy(w[base+20:], p.RemoteGID[:])
		be32(w, base+36, p.FlowLabel<<12|uint32(p.PacketRate)) // FL top 20 bits, rate [5:0] of byte 39
		w[base+40] = p.TrafficClass
		w[base+41] = p.HopLimit
		w[base+42] = p.SL << 4
		if p.SubnetLocal {
			w[base+42] |= 1 << 3
		}
		w[base+43] = uint8(p.LocalAckTimeout) << 3
	}
	path(76, m.Primary)
	path(120, m.Alternate)
	w[163] |= 1 << 2 // SAP supported, bit 5 from the MSB of CM byte 139
	copy(w[164:], m.PrivateData)
	return m, w
}

func TestGoldenREQ(t *testing.T) {
	m, want := goldenREQ()
	got := mad.AppendCM(nil, 0xDEADBEEF11223344, m)
	diffBytes(t, "REQ", got, want)
}

func goldenREP() (*mad.REP, []byte) {
	m := &mad.REP{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, LocalQKey: 0x11111111,
		LocalQPN: 0x000123, VendorID: 0xABCDEF, LocalEECN: 0x000456, StartingPSN: 0x789ABC,
		ResponderResources: 16, InitiatorDepth: 8, TargetAckDelay: 15, FailoverAccepted: 2,
		E2EFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x1122334455667788,
		PrivateData: seq(196, 1)}
	w := cmHeader(7, 0x0013)
	be32(w, 24, 0x01020304)
	be32(w, 28, 0x05060708)
	be32(w, 32, 0x11111111)
	be24(w, 36, 0x000123)
	w[39] = 0xAB
	be24(w, 40, 0x000456)
	w[43] = 0xCD
	be24(w, 44, 0x789ABC)
	w[47] = 0xEF
	w[48], w[49] = 16, 8
	w[50] = 15<<3 | 2<<1 | 1
	w[51] = 7<<5 | 1<<4
	be64(w, 52, 0x1122334455667788)
	copy(w[60:], m.PrivateData)
	return m, w
}

func goldenREJ() (*mad.REJ, []byte) {
	m := &mad.REJ{LocalCommID: 1, RemoteCommID: 2, MessageRejected: mad.MsgREP,
		Reason: mad.RejConsumerDefined, ARI: seq(10, 0x70), PrivateData: seq(148, 0x10)}
	w := cmHeader(8, 0x0012)
	be32(w, 24, 1)
	be32(w, 28, 2)
	w[32] = 1 << 6
	w[33] = 10 << 1
	be16(w, 34, 28)
	copy(w[36:], m.ARI)
	copy(w[108:], m.PrivateData)
	return m, w
}

func goldenMRA() (*mad.MRA, []byte) {
	m := &mad.MRA{LocalCommID: 9, RemoteCommID: 10, MessageMRAed: mad.MsgOther,
		ServiceTimeout: 23, PrivateData: seq(222, 3)}
	w := cmHeader(9, 0x0011)
	be32(w, 24, 9)
	be32(w, 28, 10)
	w[32] = 2 << 6
	w[33] = 23 << 3
	copy(w[34:], m.PrivateData)
	return m, w
}

func goldenRTU() (*mad.RTU, []byte) {
	m := &mad.RTU{LocalCommID: 0xAAAA5555, RemoteCommID: 0x5555AAAA, PrivateData: seq(224, 0)}
	w := cmHeader(10, 0x0014)
	be32(w, 24, 0xAAAA5555)
	be32(w, 28, 0x5555AAAA)
	copy(w[32:], m.PrivateData)
	return m, w
}

func goldenDREQ() (*mad.DREQ, []byte) {
	m := &mad.DREQ{LocalCommID: 3, RemoteCommID: 4, RemoteQPN: 0xFEDCBA, PrivateData: seq(220, 9)}
	w := cmHeader(11, 0x0015)
	be32(w, 24, 3)
	be32(w, 28, 4)
	be24(w, 32, 0xFEDCBA)
	copy(w[36:], m.PrivateData)
	return m, w
}

func goldenDREP() (*mad.DREP, []byte) {
	m := &mad.DREP{LocalCommID: 5, RemoteCommID: 6, PrivateData: seq(224, 0x80)}
	w := cmHeader(12, 0x0016)
	be32(w, 24, 5)
	be32(w, 28, 6)
	copy(w[32:], m.PrivateData)
	return m, w
}

func goldenLAP() (*mad.LAP, []byte) {
	m := &mad.LAP{LocalCommID: 7, RemoteCommID: 8, RemoteQPN: 0x0ABCDE, RemoteCMResponseTimeout: 21,
		Alternate: mad.Path{LocalLID: 0x1111, RemoteLID: 0x2222, LocalGID: gid(5), RemoteGID: gid(6),
			FlowLabel: 0xFFFFF, TrafficClass: 0x12, HopLimit: 0x34, PacketRate: 0x3F, SL: 0xF,
			SubnetLocal: true, LocalAckTimeout: 0x1F},
		PrivateData: seq(168, 0x20)}
	w := cmHeader(13, 0x0019)
	be32(w, 24, 7)
	be32(w, 28, 8)
	be24(w, 36, 0x0ABCDE)
	w[39] = 21 << 3
	be16(w, 44, 0x1111)
	be16(w, 46, 0x2222)
	copy(w[48:], m.Alternate.LocalGID[:])
	copy(w[64:], m.Alternate.RemoteGID[:])
	be24(w, 80, 0xFFFFF<<4) // flow label: top 20 bits of bytes 56–58
	w[83] = 0x12
	w[84] = 0x34
	w[85] = 0x3F
	w[86] = 0xF<<4 | 1<<3
	w[87] = 0x1F << 3
	copy(w[88:], m.PrivateData)
	return m, w
}

func goldenAPR() (*mad.APR, []byte) {
	m := &mad.APR{LocalCommID: 1, RemoteCommID: 2, Status: mad.APRInvalidGID, Info: seq(72, 0),
		PrivateData: seq(148, 0x33)}
	w := cmHeader(14, 0x001A)
	be32(w, 24, 1)
	be32(w, 28, 2)
	w[32] = 72
	w[33] = 8
	copy(w[36:], m.Info)
	copy(w[108:], m.PrivateData)
	return m, w
}

func goldenSIDRREQ() (*mad.SIDRREQ, []byte) {
	m := &mad.SIDRREQ{RequestID: 0x01020304, PKey: 0xFFFF, ServiceID: 0x0000000001110000 | 4791,
		PrivateData: seq(216, 0x50)}
	w := cmHeader(15, 0x0017)
	be32(w, 24, 0x01020304)
	be16(w, 28, 0xFFFF)
	be64(w, 32, 0x0000000001110000|4791)
	copy(w[40:], m.PrivateData)
	return m, w
}

func goldenSIDRREP() (*mad.SIDRREP, []byte) {
	m := &mad.SIDRREP{RequestID: 0x0A0B0C0D, Status: mad.SIDRNoQP, VendorID: 0x123456, QPN: 0x000042,
		ServiceID: 0x0000000001110000 | 99, QKey: 0x01234567, Info: seq(5, 0xE0),
		PrivateData: seq(136, 0x60)}
	w := cmHeader(16, 0x0018)
	be32(w, 24, 0x0A0B0C0D)
	w[28] = 3
	w[29] = 5
	be16(w, 30, 0x1234)
	be24(w, 32, 0x000042)
	w[35] = 0x56
	be64(w, 36, 0x0000000001110000|99)
	be32(w, 44, 0x01234567)
	copy(w[48:], m.Info)
	copy(w[120:], m.PrivateData)
	return m, w
}

// goldens returns every CM message with its hand-built expected MAD.
func goldens() []struct {
	name string
	tid  uint64
	msg  mad.Message
	want []byte
} {
	type g = struct {
		name string
		tid  uint64
		msg  mad.Message
		want []byte
	}
	var out []g
	add := func(name string, tid uint64, m mad.Message, w []byte) { out = append(out, g{name, tid, m, w}) }
	m1, w1 := goldenREQ()
	add("REQ", 0xDEADBEEF11223344, m1, w1)
	m2, w2 := goldenREP()
	add("REP", 7, m2, w2)
	m3, w3 := goldenREJ()
	add("REJ", 8, m3, w3)
	m4, w4 := goldenMRA()
	add("MRA", 9, m4, w4)
	m5, w5 := goldenRTU()
	add("RTU", 10, m5, w5)
	m6, w6 := goldenDREQ()
	add("DREQ", 11, m6, w6)
	m7, w7 := goldenDREP()
	add("DREP", 12, m7, w7)
	m8, w8 := goldenLAP()
	add("LAP", 13, m8, w8)
	m9, w9 := goldenAPR()
	add("APR", 14, m9, w9)
	m10, w10 := goldenSIDRREQ()
	add("SIDR_REQ", 15, m10, w10)
	m11, w11 := goldenSIDRREP()
	add("SIDR_REP", 16, m11, w11)
	return out
}

func TestGoldenAll(t *testing.T) {
	for _, g := range goldens() {
		t.Run(g.name, func(t *testing.T) {
			if err := g.msg.Validate(); err != nil {
				t.Fatal(err)
			}
			got := mad.AppendCM(nil, g.tid, g.msg)
			diffBytes(t, g.name, got, g.want)
			if g.msg.Len() != len(got)-mad.HeaderSize {
				t.Errorf("Len %d, encoded body %d", g.msg.Len(), len(got)-mad.HeaderSize)
			}
			if g.msg.AttrID().String() != g.name {
				t.Errorf("AttrID name %q", g.msg.AttrID())
			}
		})
	}
}

// TestRoundTrip decodes each golden MAD and re-encodes it.
func TestRoundTrip(t *testing.T) {
	var s mad.Scratch
	for _, g := range goldens() {
		t.Run(g.name, func(t *testing.T) {
			h, m, err := s.Decode(g.want)
			if err != nil {
				t.Fatal(err)
			}
			if h.TID() != g.tid || h.AttrID() != g.msg.AttrID() || h.Method() != mad.MethodSend {
				t.Errorf("header %+v", h.Fields())
			}
			again := mad.AppendCM(nil, h.TID(), m)
			if !bytes.Equal(again, g.want) {
				t.Errorf("re-encode differs")
			}
			fresh := mad.NewMessage(g.msg.AttrID())
			if err := fresh.Decode(g.want[mad.HeaderSize:]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fresh.Append(nil), g.msg.Append(nil)) {
				t.Errorf("NewMessage decode differs")
			}
		})
	}
}

func TestDecodedFields(t *testing.T) {
	m, w := goldenREQ()
	var got mad.REQ
	if err := got.Decode(w[24:]); err != nil {
		t.Fatal(err)
	}
	if got.Primary != m.Primary || got.Alternate != m.Alternate || got.ServiceID != m.ServiceID ||
		got.StartingPSN != m.StartingPSN || got.TransportType != mad.TransportUC || !got.SRQ ||
		got.VendorID != m.VendorID || !got.SAPSupported || got.MaxCMRetries != 15 {
		t.Errorf("decoded REQ %+v", got)
	}
	if !bytes.Equal(got.PrivateData, m.PrivateData) {
		t.Errorf("private data")
	}
	rm, rw := goldenREJ()
	var rej mad.REJ
	if err := rej.Decode(rw[24:]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rej.ARI, rm.ARI) || rej.Reason != mad.RejConsumerDefined || rej.MessageRejected != mad.MsgREP {
		t.Errorf("decoded REJ %+v", rej)
	}
	sm, sw := goldenSIDRREP()
	var sr mad.SIDRREP
	if err := sr.Decode(sw[24:]); err != nil {
		t.Fatal(err)
	}
	if sr.VendorID != sm.VendorID || sr.QKey != sm.QKey || !bytes.Equal(sr.Info, sm.Info) {
		t.Errorf("decoded SIDR_REP %+v", sr)
	}
}
