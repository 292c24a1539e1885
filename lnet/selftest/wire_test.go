package selftest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"softib/wire/lnetwire"
)

// sampleMsgs has one message of every type with every field set.
func sampleMsgs() []Msg {
	sid := SID{NID: lnetwire.MustParseNID("192.168.1.1@tcp"), Stamp: 0x1122334455667788}
	srv := []lnetwire.ProcessID{
		{NID: lnetwire.MustParseNID("10.0.0.2@tcp"), PID: lnetwire.PIDLustre},
		{NID: lnetwire.MustParseNID("10.0.0.3@o2ib1"), PID: 7},
	}
	k := Counters{}
	for i, p := range k.fields() {
		*p = uint64(i+1) * 1000003
	}
	return []Msg{
		{Type: MsgMakeSessReq, RpyID: 1, SID: sid, Name: "sess", Timeout: 300, Force: true, Feats: 1},
		{Type: MsgMakeSessRep, Status: 16, SID: sid, Name: "other", Timeout: 30},
		{Type: MsgRemoveSesReq, RpyID: 2, SID: sid},
		{Type: MsgRemoveSesRep, SID: sid},
		{Type: MsgBatchReq, RpyID: 3, SID: sid, BID: 9, Opc: BatchRun, TestIdx: 2},
		{Type: MsgBatchRep, SID: sid, Active: 4},
		{Type: MsgStatReq, RpyID: 4, SID: sid},
		{Type: MsgStatRep, SID: sid, Counters: k},
		{Type: MsgTestReq, RpyID: 5, SID: sid, BID: 1, Test: TestBody{Index: 1, Service: ServiceBRW, Client: true,
			Concurrency: 8, Loop: -1, BRWOp: BRWWrite, Size: 1 << 20, Check: CheckFull, Servers: srv}},
		{Type: MsgTestRep, Status: 22, SID: sid},
		{Type: MsgBRWReq, RpyID: 6, BulkID: 7, SID: sid, BRWOp: BRWRead, BulkLen: 4096, Check: CheckSimple},
		{Type: MsgBRWRep, Status: 74, SID: sid},
		{Type: MsgPingReq, RpyID: 8, SID: sid, PingSeq: 99, PingTime: 123456789},
		{Type: MsgPingRep, SID: sid, PingSeq: 99},
	}
}

func TestMsgRoundTrip(t *testing.T) {
	for _, m := range sampleMsgs() {
		b := m.Append(nil)
		if len(b) != m.Len() {
			t.Errorf("%v: Append wrote %d bytes, Len says %d", m.Type, len(b), m.Len())
		}
		var got Msg
		if err := ParseMsg(b, &got); err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%v: round trip\n got %+v\nwant %+v", m.Type, got, m)
		}
		// Truncations are typed errors, never panics.
		for n := range len(b) {
			if err := ParseMsg(b[:n], &got); !errors.Is(err, ErrShort) {
				t.Fatalf("%v cut to %d bytes: err %v, want ErrShort", m.Type, n, err)
			}
		}
	}
}

func TestMsgHeaderLayout(t *testing.T) {
	m := Msg{Type: MsgBRWReq, RpyID: 0x0102030405060708, BulkID: 0x1112131415161718, Feats: 5,
		SID: SID{NID: 0x2122232425262728, Stamp: 0x3132333435363738}, BRWOp: BRWWrite, BulkLen: 4096, Check: CheckFull}
	b := m.Append(nil)
	want := []byte{0x0D, 0xF0, 0xB0, 0xEE, 1, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11}
	if !bytes.Equal(b[:len(want)], want) {
		t.Fatalf("header\n got % x\nwant % x", b[:len(want)], want)
	}
}

func TestParseErrors(t *testing.T) {
	good := (&Msg{Type: MsgPingReq, PingSeq: 1}).Append(nil)
	for _, tc := range []struct {
		name string
		mut  func(b []byte)
		want error
	}{
		{"magic", func(b []byte) { b[0] ^= 1 }, ErrBadMagic},
		{"version", func(b []byte) { b[4] = 9 }, ErrBadVersion},
		{"type", func(b []byte) { b[8] = 10 }, ErrBadType},
		{"ping magic", func(b []byte) { b[HdrSize+reqPrefix] ^= 1 }, ErrBadMagic},
	} {
		b := bytes.Clone(good)
		tc.mut(b)
		var m Msg
		if err := ParseMsg(b, &m); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	// A TEST request claiming more servers than it carries.
	m := Msg{Type: MsgTestReq, Test: TestBody{Servers: make([]lnetwire.ProcessID, 2)}}
	b := m.Append(nil)
	le.PutUint32(b[HdrSize+reqPrefix+40:], 3)
	if err := ParseMsg(b, &m); !errors.Is(err, ErrShort) {
		t.Errorf("server count overflow: err %v", err)
	}
}

func FuzzParseMsg(f *testing.F) {
	for _, m := range sampleMsgs() {
		f.Add(m.Append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Msg
		if ParseMsg(b, &m) != nil {
			return
		}
		enc := m.Append(nil)
		var again Msg
		if err := ParseMsg(enc, &again); err != nil {
			t.Fatalf("re-parse of %v: %v", m.Type, err)
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("round trip\n got %+v\nwant %+v", again, m)
		}
		if !bytes.Equal(again.Append(nil), enc) {
			t.Fatal("encoding not stable")
		}
	})
}
