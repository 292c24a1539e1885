package iser

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"

	"softib/internal/verbstest"
	"softib/rdmacm"
	"softib/rxe"
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
	n := verbstest.Loopback()
	e := &env{m: rdmacm.NewManager(rdmacm.Config{}), iqn: testIQN}
	t.Cleanup(func() { e.m.Close() })
	for _, p := range []*netip.Addr{&e.a, &e.b} {
		d := n.Open(t, rxe.Config{})
		if err := e.m.AddDevice(d); err != nil {
			t.Fatal(err)
		}
		*p = d.Addr().Addr()
	}
	e.st = scsi.NewTarget()
	if _, err := e.st.AddLUN(0, scsi.NewMemBackend(size), scsi.LUNConfig{MaxTransfer: maxBurst}); err != nil {
		t.Fatal(err)
	}
	tgt, err := NewTarget(Config{IQN: testIQN, Addr: netip.AddrPortFrom(e.a, 3260),
		DiscoveryAddr: netip.AddrPortFrom(e.a, 0), Window: window, Logf: t.Logf}, e.m, e.st)
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tgt.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); tgt.Close(); <-done })
	e.tgt = tgt
	return e
}

func rw10(op byte, lba uint32, n uint16) []byte {
	c := make([]byte, 16)
	c[0] = op
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], n)
	return c
}

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
