package selftest

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"softib/wire/lnetwire"
)

// goldenSID is the sid of the golden messages.
var goldenSID = SID{NID: lnetwire.NID(0x20000c0a84d01), Stamp: 0x1122334455667788}

// goldenMsgs builds, with this package's views, the messages of
// testdata/golden-srpc.txt. That file was printed by a C program,
// compiled with gcc, that filled each struct srpc_msg through the
// member names of Lustre 2.17.0's lnet/selftest/rpc.h (the structs of
// lnetst.h and lnet-idl.h included) with these same values.
func goldenMsgs() map[string]Msg {
	out := map[string]Msg{}
	m := NewMsg(MsgMakeSessReq, FeatBulkLen)
	m.SetRpyID(0x0102030405060708)
	m.SetReqSID(goldenSID)
	m.MksnReq().SetForce(true)
	m.MksnReq().SetName("golden")
	out["mksn_reqst"] = m

	m = NewMsg(MsgMakeSessRep, FeatBulkLen)
	m.SetStatus(16)
	m.SetReplySID(goldenSID)
	m.MksnRep().SetTimeout(100)
	m.MksnRep().SetName("other")
	out["mksn_reply"] = m

	m = NewMsg(MsgBatchReq, FeatBulkLen)
	m.SetRpyID(9)
	m.SetReqSID(goldenSID)
	br := m.BatchReq()
	br.SetBID(3)
	br.SetOpc(BatchQuery)
	br.SetTestIdx(2)
	br.SetArg(1)
	out["batch_reqst"] = m

	m = NewMsg(MsgBatchRep, FeatBulkLen)
	m.SetReplySID(goldenSID)
	m.BatchRep().SetActive(5)
	out["batch_reply"] = m

	m = NewMsg(MsgStatRep, FeatBulkLen)
	m.SetReplySID(goldenSID)
	m.StatRep().SetCounters(goldenCounters())
	out["stat_reply"] = m

	m = NewMsg(MsgTestReq, FeatBulkLen)
	m.SetRpyID(0x11)
	tr := m.TestReq()
	tr.SetBulkID(0x12)
	m.SetReqSID(goldenSID)
	tr.SetBID(4)
	tr.SetService(ServiceBRW)
	tr.SetLoop(-1)
	tr.SetConcur(8)
	tr.SetIsClient(true)
	tr.SetStopOnErr(true)
	tr.SetNDest(2)
	tr.SetBulkV1(BRWWrite, CheckFull, 1<<20, 512)
	out["test_reqst"] = m

	m = NewMsg(MsgBRWReq, FeatBulkLen)
	m.SetRpyID(0x21)
	m.BRWReq().SetBulkID(0x22)
	m.BRWReq().Set(BRWRead, 4096, CheckSimple)
	out["brw_reqst"] = m

	m = NewMsg(MsgPingReq, FeatBulkLen)
	m.SetRpyID(0x31)
	m.PingReq().Set(PingMagic, 7, 1700000000, 123456789)
	out["ping_reqst"] = m

	m = NewMsg(MsgPingRep, FeatBulkLen)
	m.PingRep().Set(PingMagic, 7)
	out["ping_reply"] = m

	m = NewMsg(MsgDebugRep, FeatBulkLen)
	m.SetReplySID(goldenSID)
	m.DebugRep().SetTimeout(100)
	m.DebugRep().SetNBatch(1)
	m.DebugRep().SetName("golden")
	out["debug_reply"] = m
	return out
}

func goldenCounters() *Counters {
	return &Counters{
		FW:  FwCounters{0x100, 0x101, 0x102, 0x103, 0x104},
		RPC: RPCCounters{0x200, 0x201, 0x202, 0x203, 0x204, 0x2050000000, 0x2060000000},
		LNet: LNetCounters{0x300, 0x301, 0x302, 0x303, 0x304, 0x305, 0x306,
			0x3070000000, 0x3080000000, 0x3090000000, 0x30a0000000},
	}
}

func readGolden(t *testing.T) map[string][]byte {
	t.Helper()
	f, err := os.Open("testdata/golden-srpc.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, hx, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		b, err := hex.DecodeString(hx)
		if err != nil || len(b) != MsgSize {
			t.Fatalf("golden %s: %d bytes, %v", name, len(b), err)
		}
		out[name] = b
	}
	return out
}

// TestGolden compares every view's encoding with the bytes of the C
// structs, and decodes them back.
func TestGolden(t *testing.T) {
	golden := readGolden(t)
	msgs := goldenMsgs()
	if len(golden) != len(msgs) {
		t.Fatalf("%d golden messages, %d built", len(golden), len(msgs))
	}
	for name, want := range golden {
		got := msgs[name]
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", name, []byte(got), want)
		}
		m, swapped, err := Parse(append([]byte(nil), want...))
		if err != nil || swapped {
			t.Fatalf("%s: parse: %v (swapped %v)", name, err, swapped)
		}
		if m.Feats() != FeatBulkLen || m.Version() != Version {
			t.Errorf("%s: header %x", name, []byte(m[:HdrSize]))
		}
	}
	m, _, _ := Parse(golden["stat_reply"])
	if c := m.StatRep().Counters(); c != *goldenCounters() || m.ReplySID() != goldenSID {
		t.Errorf("stat reply decodes to %+v sid %v", c, m.ReplySID())
	}
	m, _, _ = Parse(golden["test_reqst"])
	tr := m.TestReq()
	opc, flags, length, off := tr.BulkV1()
	if m.ReqSID() != goldenSID || tr.BulkID() != 0x12 || tr.Loop() != -1 || !tr.IsClient() || tr.NDest() != 2 ||
		opc != BRWWrite || flags != CheckFull || length != 1<<20 || off != 512 {
		t.Errorf("test request decodes wrong: sid %v %x", m.ReqSID(), []byte(tr))
	}
	m, _, _ = Parse(golden["mksn_reqst"])
	if mk := m.MksnReq(); m.ReqSID() != goldenSID || !mk.Force() || mk.Name() != "golden" || m.RpyID() != 0x0102030405060708 {
		t.Errorf("mksn request decodes wrong")
	}
}

// TestSwab: a message written by a peer of the other byte order (every
// field swapped, as Lustre's unpack functions undo it) parses to the
// same message, and is recognised as swapped.
func TestSwab(t *testing.T) {
	for name, m := range goldenMsgs() {
		f := append(Msg(nil), m...)
		f.Swab()
		if bytes.Equal(f, m) {
			t.Fatalf("%s: swab changed nothing", name)
		}
		if be := f[:4]; !bytes.Equal(be, []byte{0xee, 0xb0, 0xf0, 0x0d}) {
			t.Fatalf("%s: swapped magic %x", name, be)
		}
		got, swapped, err := Parse(f)
		if err != nil || !swapped || !bytes.Equal(got, m) {
			t.Errorf("%s: parse of swapped: %v swapped=%v\n got %x\nwant %x", name, err, swapped, []byte(got), []byte(m))
		}
	}
	// A swapped destination list.
	bulk := make([]byte, DestListLen(2))
	id := lnetwire.ProcessID{NID: goldenSID.NID, PID: lnetwire.PIDLustre}
	PutDest(bulk, 1, id)
	for i := 0; i < len(bulk); i += ProcessIDSize {
		swabField(bulk[i:], 8)
		swabField(bulk[i+8:], 4)
	}
	if got, ok := Dest(bulk, 1, true); !ok || got != id {
		t.Fatalf("swapped dest %v %v", got, ok)
	}
}

func TestParseErrors(t *testing.T) {
	good := goldenMsgs()["ping_reqst"]
	for _, tc := range []struct {
		name string
		mod  func(b []byte) []byte
		want error
	}{
		{"short", func(b []byte) []byte { return b[:MsgSize-1] }, ErrShort},
		{"long", func(b []byte) []byte { return append(b, 0) }, ErrShort},
		{"magic", func(b []byte) []byte { b[0] ^= 1; return b }, ErrBadMagic},
		{"type", func(b []byte) []byte { b[8] = 99; return b }, ErrBadType},
		{"version", func(b []byte) []byte { b[4] = 2; return b }, ErrBadVersion},
	} {
		b := tc.mod(append([]byte(nil), good...))
		m, _, err := Parse(b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if (m != nil) != (tc.want == ErrBadVersion) {
			t.Errorf("%s: message %v with the error", tc.name, m != nil)
		}
	}
	if got := MsgType(7).String(); got != "STAT_REPLY" {
		t.Errorf("String %q", got)
	}
}

// FuzzParse: Parse never panics; a parsed message is in native order
// (parsing it again changes nothing); a swapped one swabs back to the
// input; the views read any parsed message without panicking.
func FuzzParse(f *testing.F) {
	for _, m := range goldenMsgs() {
		f.Add([]byte(m))
		s := append(Msg(nil), m...)
		s.Swab()
		f.Add([]byte(s))
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		m, swapped, err := Parse(b)
		if err != nil && !errors.Is(err, ErrBadVersion) {
			return
		}
		again := append([]byte(nil), m...)
		if _, sw, _ := Parse(again); sw || !bytes.Equal(again, m) {
			t.Fatalf("second parse changed the message (swapped %v)", sw)
		}
		back := append(Msg(nil), m...)
		if swapped {
			back.Swab()
		}
		if !bytes.Equal(back, in) {
			t.Fatalf("round trip:\n in %x\nout %x", in, []byte(back))
		}
		_ = m.ReqSID()
		_ = m.ReplySID()
		_ = m.StatRep().Counters()
		_, _, _, _ = m.TestReq().BulkV1()
		_ = m.MksnReq().Name()
		_ = m.DebugRep().Name()
		for i := 0; i < 400; i++ {
			_, _ = Dest(b, i, swapped)
		}
	})
}
