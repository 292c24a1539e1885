//go:build linux

package rxe_test

import (
	"slices"
	"strconv"
	"testing"

	"softib/internal/e2etest"
	"softib/internal/tsharktest"
	"softib/rxe"
	"softib/verbs"
)

// TestTrafficClassCapture checks on the wire (the kernel path, captured
// on lo and decoded by tshark) that every RoCE frame of a connection
// carries its sender's path traffic class and hop limit: a's WRITE,
// READ request and SEND, b's ACKs and read responses. Each side's path
// has its own class, ECN bits included.
func TestTrafficClassCapture(t *testing.T) {
	da, db := openDev(t, rxe.Config{}), openDev(t, rxe.Config{})
	a, b := newEnd(t, da, verbs.QPTypeRC, 1<<20), newEnd(t, db, verbs.QPTypeRC, 1<<20)
	connectPath(t, a, b, 0x60, 9) // TOS 0x60 (DSCP 24), as ib_write_bw --tclass=96
	connectPath(t, b, a, 0x8A, 17)
	aa, ba := da.Addr().Addr().String(), db.Addr().Addr().String()
	c := e2etest.StartCapture(t, "lo", "udp and host "+aa+" and host "+ba)
	postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(512<<10, 4096)}})
	post(t, a,
		verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(128<<10, 64<<10)}, RemoteAddr: b.mr.Addr() + 256<<10, RKey: b.mr.RKey()},
		verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 100)}})
	for _, wc := range waitWC(t, a.cq, 3) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	waitWC(t, b.cq, 1)
	c.Stop()
	rows := tsharktest.Fields(t, c.Path, []string{"ip.src", "ip.dsfield", "ip.ttl", "infiniband.bth.opcode"}, "-Y", "infiniband")
	if len(rows) == 0 {
		t.Fatal("no RoCE frames captured")
	}
	want := map[string][2]int{aa: {0x60, 9}, ba: {0x8A, 17}}
	ops := map[string][]int{}
	for _, r := range rows {
		ds, _ := strconv.ParseInt(r[1], 0, 32)
		ttl, _ := strconv.Atoi(r[2])
		op, _ := strconv.ParseInt(r[3], 0, 32)
		w, ok := want[r[0]]
		if !ok {
			t.Fatalf("frame from %s", r[0])
		}
		if int(ds) != w[0] || ttl != w[1] {
			t.Errorf("frame from %s opcode %#x: TOS %#x TTL %d, want %#x %d", r[0], op, ds, ttl, w[0], w[1])
		}
		ops[r[0]] = append(ops[r[0]], int(op))
	}
	// WRITE_FIRST or _ONLY (GSO may hide the rest), READ_REQUEST,
	// SEND_ONLY from a; ACK and READ_RESPONSE_FIRST from b.
	for _, c := range []struct {
		src string
		op  []int
	}{{aa, []int{0x06, 0x0A}}, {aa, []int{0x0C}}, {aa, []int{0x04}}, {ba, []int{0x11}}, {ba, []int{0x0D, 0x10}}} {
		if !slices.ContainsFunc(ops[c.src], func(op int) bool { return slices.Contains(c.op, op) }) {
			t.Errorf("no opcode %#x from %s among %v", c.op, c.src, ops[c.src])
		}
	}
	t.Logf("%d RoCE frames, each with its sender's TOS and TTL", len(rows))
}
