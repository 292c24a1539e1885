package iser

import (
	"bytes"
	"testing"
)

func loginPDU(csg, nsg int, final bool, text []byte) []byte {
	b := make([]byte, HeadersLen, HeadersLen+len(text))
	Hdr(b).PutCtrl(0, 0, 0, 0)
	h := BHS(b[HdrLen:])
	h[0] = OpLoginReq | opImmediate
	h[1] = byte(csg)<<2 | byte(nsg)
	if final {
		h[1] |= flagFinal
	}
	h.SetDataLen(len(text))
	return append(b, text...)
}

// FuzzParseMessage checks the iSER message parser: every accepted
// message's parts lie inside the input, and parsing never panics.
func FuzzParseMessage(f *testing.F) {
	f.Add(loginPDU(1, 3, true, AppendText(nil, KV{"InitiatorName", "iqn.x"}, KV{"TargetName", testIQN})))
	cmd := make([]byte, HeadersLen+512)
	Hdr(cmd).PutCtrl(0x1234, 0x1000, 0, 0)
	BHS(cmd[HdrLen:])[0] = OpSCSICmd
	BHS(cmd[HdrLen:]).SetDataLen(512)
	f.Add(cmd)
	f.Add(make([]byte, HeadersLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMessage(b)
		if err != nil {
			return
		}
		if len(m.Hdr) != HdrLen || len(m.BHS) != BHSLen || len(m.Data) != m.BHS.DataLen() {
			t.Fatalf("parts %d %d %d", len(m.Hdr), len(m.BHS), len(m.Data))
		}
		m.Hdr.WriteSTag()
		m.Hdr.ReadSTag()
		_ = m.BHS.CDB()
	})
}

// FuzzParseText checks the text parser's round trip.
func FuzzParseText(f *testing.F) {
	f.Add(AppendText(nil, KV{"HeaderDigest", "None,CRC32C"}, KV{"MaxBurstLength", "262144"}))
	f.Add([]byte("a=b\x00\x00c="))
	f.Fuzz(func(t *testing.T, b []byte) {
		kvs, err := ParseText(b)
		if err != nil {
			return
		}
		again, err := ParseText(AppendText(nil, kvs...))
		if err != nil || len(again) != len(kvs) {
			t.Fatalf("round trip: %v %v", again, err)
		}
	})
}

// FuzzLogin drives the login state machine with arbitrary requests: it
// never panics, and a success that enters full feature phase names this
// target (or is a discovery session) with an initiator name.
func FuzzLogin(f *testing.F) {
	f.Add(byte(0x87), AppendText(nil, KV{"InitiatorName", "iqn.i"}, KV{"TargetName", testIQN}, KV{"AuthMethod", "None"}))
	f.Add(byte(0x83), AppendText(nil, KV{"InitiatorName", "iqn.i"}, KV{"SessionType", "Discovery"}))
	tgt := &Target{cfg: Config{IQN: testIQN}}
	f.Fuzz(func(t *testing.T, flags byte, text []byte) {
		var ls loginState
		ls.p.rdma = true
		h := BHS(make([]byte, BHSLen))
		h[0], h[1] = OpLoginReq, flags
		r := ls.login(h, text, tgt)
		if r.status == statusSuccess && r.done {
			if ls.p.initiatorName == "" || (!ls.p.discovery && ls.p.targetName != testIQN) || ls.tsih == 0 {
				t.Fatalf("full feature with %+v", ls.p)
			}
		}
		if r.status != statusSuccess && len(r.text) != 0 {
			t.Fatal("failure with text")
		}
		if bytes.IndexByte(r.text, '=') < 0 && len(r.text) > 0 {
			t.Fatal("text without pairs")
		}
	})
}
