package lnetwire_test

import (
	"bytes"
	"testing"

	"softib/wire/lnetwire"
)

func FuzzLNetHdr(f *testing.F) {
	for _, h := range sampleHeaders() {
		f.Add(h.Append(nil))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := lnetwire.ParseHeader(b)
		if err != nil {
			return
		}
		enc := h.Append(nil)
		if len(enc) != h.Len() {
			t.Fatalf("Len %d, encoded %d", h.Len(), len(enc))
		}
		h2, err := lnetwire.ParseHeader(enc)
		if err != nil || h2 != h {
			t.Fatalf("re-parse %+v %v, want %+v", h2, err, h)
		}
		// Bytes the type defines survive; only padding may differ.
		if !bytes.Equal(enc[:32], b[:32]) {
			t.Fatalf("common part changed")
		}
		_ = h.String()
	})
}

func FuzzParseNID(f *testing.F) {
	for _, s := range []string{"192.168.1.1@tcp", "10.0.0.1@o2ib1", "0@lo", "12@gni3", "<?>", "1.2.3.4@efa9", "bad", "1.1.1.1@tcp01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := lnetwire.ParseNID(s)
		if err != nil {
			return
		}
		n2, err := lnetwire.ParseNID(n.String())
		if err != nil || n2 != n {
			t.Fatalf("%q -> %v -> %v, %v", s, n, n2, err)
		}
		if p, err := lnetwire.ParseProcessID("7-" + s); err != nil || p.NID != n {
			t.Fatalf("process id: %v %v", p, err)
		}
	})
}

func FuzzPingInfo(f *testing.F) {
	p := lnetwire.PingInfo{Features: 3, PID: 12345, NIs: []lnetwire.PingNI{{NID: lnetwire.NIDLo0, Status: 1}, {NID: 0x20000C0A80101, Status: lnetwire.PingStatusUp}}}
	f.Add(p.Append(nil))
	f.Add((&lnetwire.PingInfo{}).Append(nil))
	f.Add(kernelPush)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := lnetwire.ParsePingInfo(b)
		if err != nil {
			return
		}
		enc := got.Append(nil)
		if len(enc) != got.Len() {
			t.Fatal("Len mismatch")
		}
		again, err := lnetwire.ParsePingInfo(enc)
		if err != nil || !samePing(again, got) {
			t.Fatalf("round trip %+v %v", again, err)
		}
		if b[0] == enc[0] && !bytes.Equal(enc, b[:len(enc)]) {
			t.Fatalf("native-order buffer did not re-encode identically")
		}
		if again.Seq() != got.Seq() || again.Primary() != got.Primary() {
			t.Fatalf("seq/primary changed")
		}
	})
}

func FuzzAcceptorRequest(f *testing.F) {
	for _, r := range []lnetwire.AcceptorRequest{
		{Version: 1, Target: 0x20000C0A80102},
		{Version: 2, TargetLarge: lnetwire.LargeFromNID(0x500010A000001)},
	} {
		f.Add(r.Append(nil))
	}
	f.Add(lnetwire.AppendAcceptorMagic(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := lnetwire.ParseAcceptorRequest(b)
		if err != nil {
			return
		}
		enc := r.Append(nil)
		if len(enc) != r.Len() {
			t.Fatal("Len mismatch")
		}
		r2, err := lnetwire.ParseAcceptorRequest(enc)
		if err != nil || r2 != r {
			t.Fatalf("round trip %+v %v want %+v", r2, err, r)
		}
		if l, err := lnetwire.ParseLargeNID(r.TargetLarge.Append(nil)); err != nil || l != r.TargetLarge {
			t.Fatalf("large nid round trip")
		}
	})
}
