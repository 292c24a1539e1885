package iser

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"

	"softib/internal/verbstest"
	"softib/rdmacm"
	"softib/storage/internal/targettest"
	"softib/storage/scsi"
)

type env struct {
	m    *rdmacm.Manager
	tgt  *Target
	st   *scsi.Target
	a, b netip.Addr
	iqn  string
}

const testIQN = "iqn.2026-11.org.softib:test"

func newEnv(t testing.TB, size int64, window int) *env {
	t.Helper()
	e := &env{iqn: testIQN}
	e.m, e.a, e.b = targettest.Net(t, verbstest.Loopback().Open)
	e.st = scsi.NewTarget()
	if _, err := e.st.AddLUN(0, scsi.NewMemBackend(size), scsi.LUNConfig{MaxTransfer: maxBurst}); err != nil {
		t.Fatal(err)
	}
	tgt, err := NewTarget(Config{IQN: testIQN, Addr: netip.AddrPortFrom(e.a, 3260),
		DiscoveryAddr: netip.AddrPortFrom(e.a, 0), Window: window, Logf: t.Logf}, e.m, e.st)
	if err != nil {
		t.Fatal(err)
	}
	targettest.Serve(t, tgt)
	e.tgt = tgt
	return e
}

// rw10 is the tests' READ(10)/WRITE(10) CDB.
var rw10 = targettest.RW10

func TestLoginAndIO(t *testing.T) {
	e := newEnv(t, 8<<20, 16)
	in := dialInitiator(t, e.m, e.b, e.tgt.Addr(), 8, maxBurst)
	st, keys := in.login(testIQN)
	if st != 0 {
		t.Fatalf("login status %#x", st)
	}
	for k, want := range map[string]string{"RDMAExtensions": "Yes", "InitialR2T": "Yes", "ImmediateData": "Yes",
		"TargetRecvDataSegmentLength": "8192", "InitiatorRecvDataSegmentLength": "128", "MaxBurstLength": "524288",
		"HeaderDigest": "", "ErrorRecoveryLevel": "0"} {
		if keys[k] != want {
			t.Errorf("%s=%q, want %q (all: %v)", k, keys[k], want, keys)
		}
	}
	// Writes: 4 KiB all immediate, 128 KiB with 8 KiB immediate and the
	// rest by RDMA READ, 512 KiB without immediate data.
	pat := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31) ^ seed
		}
		return b
	}
	w1, w2, w3 := pat(4096, 1), pat(128<<10, 2), pat(512<<10, 3)
	cmds := []*cmd{
		{cdb: rw10(scsi.OpWrite10, 0, 8), write: w1, imm: 8192},
		{cdb: rw10(scsi.OpWrite10, 8, 256), write: w2, imm: 8192},
		{cdb: rw10(scsi.OpWrite10, 1000, 1024), write: w3},
	}
	in.do(0, cmds)
	for _, c := range cmds {
		if c.status != scsi.StatusGood {
			t.Fatalf("write: %v", c)
		}
	}
	rd := []*cmd{
		{cdb: rw10(scsi.OpRead10, 0, 8), read: 4096},
		{cdb: rw10(scsi.OpRead10, 8, 256), read: 128 << 10},
		{cdb: rw10(scsi.OpRead10, 1000, 1024), read: 512 << 10},
	}
	in.do(0, rd)
	for i, want := range [][]byte{w1, w2, w3} {
		if rd[i].status != scsi.StatusGood || !bytes.Equal(rd[i].in, want) {
			t.Fatalf("read %d: %v, data equal %v", i, rd[i], bytes.Equal(rd[i].in, want))
		}
	}
	// Errors come back as CHECK CONDITION with sense; short data-in as
	// underflow.
	bad := []*cmd{
		{cdb: rw10(scsi.OpRead10, 16383, 2), read: 1024},
		{cdb: []byte{0xc5, 0, 0, 0, 0, 0}, read: 0},
		{cdb: []byte{scsi.OpInquiry, 0, 0, 0, 255, 0}, read: 255},
	}
	in.do(0, bad)
	if bad[0].status != scsi.StatusCheckCondition || bad[0].sense != scsi.SenseLBAOutOfRange {
		t.Fatalf("out of range: %v", bad[0])
	}
	if bad[1].sense != scsi.SenseInvalidOpcode {
		t.Fatalf("bad opcode: %v", bad[1])
	}
	if bad[2].status != scsi.StatusGood || bad[2].flags&flagUnderflow == 0 || bad[2].residual != 255-66 {
		t.Fatalf("inquiry: %v flags %#x residual %d", bad[2], bad[2].flags, bad[2].residual)
	}
	// Queue depth beyond the window: the initiator waits for MaxCmdSN.
	var many []*cmd
	for i := range 64 {
		many = append(many, &cmd{cdb: rw10(scsi.OpRead10, uint32(i*8), 8), read: 4096})
	}
	in.do(0, many)
	for _, c := range many {
		if c.status != scsi.StatusGood {
			t.Fatal(c)
		}
	}
	if got := e.st.Stats.BytesWritten.Load(); got != 4096+128<<10+512<<10 {
		t.Fatalf("bytes written %d", got)
	}
}

func TestLoginFailures(t *testing.T) {
	e := newEnv(t, 1<<20, 4)
	in := dialInitiator(t, e.m, e.b, e.tgt.Addr(), 1, 4096)
	if st, _ := in.login("iqn.2026-11.org.softib:nobody"); st != statusNotFound {
		t.Fatalf("status %#x, want target not found", st)
	}
}

// TestDiscoveryTCP runs open-iscsi's SendTargets exchange over TCP.
func TestDiscoveryTCP(t *testing.T) {
	e := newEnv(t, 1<<20, 4)
	nc, err := net.Dial("tcp", e.tgt.DiscoveryAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	xchg := func(h BHS, text []byte) (BHS, []KV) {
		h.SetDataLen(len(text))
		msg := append(append([]byte(h), text...), make([]byte, pad4(len(text))-len(text))...)
		if _, err := nc.Write(msg); err != nil {
			t.Fatal(err)
		}
		rh := BHS(make([]byte, BHSLen))
		if _, err := io.ReadFull(nc, rh); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, pad4(rh.DataLen()))
		if _, err := io.ReadFull(nc, data); err != nil {
			t.Fatal(err)
		}
		kvs, err := ParseText(data[:rh.DataLen()])
		if err != nil {
			t.Fatal(err)
		}
		return rh, kvs
	}
	h := BHS(make([]byte, BHSLen))
	h[0], h[1] = OpLoginReq|opImmediate, flagFinal|StageSecurity<<2|StageOperational
	h.PutU32(16, 1)
	rh, kvs := xchg(h, AppendText(nil, KV{"InitiatorName", "iqn.i"}, KV{"SessionType", "Discovery"}, KV{"AuthMethod", "None"}))
	if rh.Opcode() != OpLoginRsp || rh[36] != 0 || rh.NSG() != StageOperational || len(kvs) != 1 || kvs[0] != (KV{"AuthMethod", "None"}) {
		t.Fatalf("security: % x %v", rh[:4], kvs)
	}
	h[1] = flagFinal | StageOperational<<2 | StageFullFeature
	rh, kvs = xchg(h, AppendText(nil, KV{"HeaderDigest", "None"}, KV{"DataDigest", "None"},
		KV{"MaxRecvDataSegmentLength", "32768"}, KV{"X-com.example.Foo", "1"}))
	if rh[36] != 0 || rh.NSG() != StageFullFeature || rh.TSIH() == 0 {
		t.Fatalf("operational: % x %v", rh[:40], kvs)
	}
	if want := []KV{{"HeaderDigest", "None"}, {"DataDigest", "None"}, {"MaxRecvDataSegmentLength", "8192"},
		{"X-com.example.Foo", "NotUnderstood"}}; fmt.Sprint(kvs) != fmt.Sprint(want) {
		t.Fatalf("keys %v", kvs)
	}
	th := BHS(make([]byte, BHSLen))
	th[0], th[1] = OpTextReq, flagFinal
	th.PutU32(16, 2)
	th.PutU32(20, noTag)
	rh, kvs = xchg(th, AppendText(nil, KV{"SendTargets", "All"}))
	want := []KV{{"TargetName", testIQN}, {"TargetAddress", e.tgt.Addr().String() + ",1"}}
	if rh.Opcode() != OpTextRsp || fmt.Sprint(kvs) != fmt.Sprint(want) {
		t.Fatalf("SendTargets: %v", kvs)
	}
	lh := BHS(make([]byte, BHSLen))
	lh[0], lh[1] = OpLogoutReq|opImmediate, flagFinal
	lh.PutU32(16, 3)
	if rh, _ = xchg(lh, nil); rh.Opcode() != OpLogoutRsp || rh[2] != 0 {
		t.Fatalf("logout % x", rh[:4])
	}
	// A normal session over TCP is refused: data moves over RDMA.
	nc2, err := net.Dial("tcp", e.tgt.DiscoveryAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	nc = nc2
	h[1] = flagFinal | StageOperational<<2 | StageFullFeature
	if rh, _ = xchg(h, AppendText(nil, KV{"InitiatorName", "iqn.i"}, KV{"TargetName", testIQN})); rh[36] == 0 {
		t.Fatal("normal session over TCP accepted")
	}
}

// TestTaskManagementAndNOP sends a NOP-Out ping and an ABORT TASK for a
// finished task, and LUN RESET.
func TestTaskManagementAndNOP(t *testing.T) {
	e := newEnv(t, 1<<20, 4)
	in := dialInitiator(t, e.m, e.b, e.tgt.Addr(), 2, 4096)
	if st, _ := in.login(testIQN); st != 0 {
		t.Fatal(st)
	}
	h := BHS(make([]byte, BHSLen))
	h[0], h[1] = OpNOPOut|opImmediate, flagFinal
	in.itt++
	h.PutU32(16, in.itt)
	h.PutU32(20, noTag)
	h.PutU32(24, in.cmdSN)
	in.sendPDU(0, h, []byte("ping"), 0, 0, 0, 0)
	if r := in.wait(in.itt); BHS(r.bhs[:]).Opcode() != OpNOPIn || string(r.data) != "ping" {
		t.Fatalf("nop-in %x %q", r.bhs[0], r.data)
	}
	for _, tc := range []struct {
		fn   byte
		lun  uint64
		want byte
	}{{tmfAbortTask, 0, tmfRspNoTask}, {tmfLUNReset, 0, tmfRspComplete}, {tmfLUNReset, 9, tmfRspNoLUN}, {7, 0, tmfRspNotSupp}} {
		h := BHS(make([]byte, BHSLen))
		h[0], h[1] = OpTMFReq|opImmediate, flagFinal|tc.fn
		l := scsi.EncodeLUN(tc.lun)
		copy(h[8:16], l[:])
		in.itt++
		h.PutU32(16, in.itt)
		h.PutU32(20, 12345)
		h.PutU32(24, in.cmdSN)
		in.sendPDU(0, h, nil, 0, 0, 0, 0)
		if r := in.wait(in.itt); BHS(r.bhs[:]).Opcode() != OpTMFRsp || r.bhs[2] != tc.want {
			t.Fatalf("tmf %d: response %d, want %d", tc.fn, r.bhs[2], tc.want)
		}
	}
	c := []*cmd{{cdb: []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}}}
	in.do(0, c)
	if c[0].status != scsi.StatusGood {
		t.Fatal(c[0])
	}
}
