package perftest

import (
	"testing"

	"softib/verbs"
)

// fakeQP and fakeMR accept work requests without doing anything, to
// measure the engine's own posting cost.
type fakeQP struct{ verbs.QP }

func (fakeQP) PostSend(wrs []verbs.SendWR) (int, error) { return len(wrs), nil }
func (fakeQP) PostRecv(wrs []verbs.RecvWR) (int, error) { return len(wrs), nil }

type fakeMR struct{ verbs.MR }

func (fakeMR) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: uint64(off), Length: uint32(n), LKey: 1}
}

func TestPostingAllocatesNothing(t *testing.T) {
	e := &Engine{QPs: []verbs.QP{fakeQP{}}, MR: fakeMR{}, Region: 8192, Remote: []Key{{VAddr: 1 << 20, RKey: 7}},
		Verb: VerbWrite, TxDepth: 16, CQMod: 4, RxDepth: 16}
	e.init()
	var wr [1]verbs.SendWR
	var sge [1]verbs.SGE
	k := 0
	allocs := testing.AllocsPerRun(1000, func() {
		e.fillWR(&wr[0], &sge, 0, 64, k, k%4 == 3)
		k++
		if _, err := e.QPs[0].PostSend(wr[:]); err != nil {
			t.Fatal(err)
		}
		if err := e.postRecv(0, 64); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post", allocs)
	}
	// The remote address walks the cycle buffer in cache-line steps.
	e.fillWR(&wr[0], &sge, 0, 64, 1, false)
	if wr[0].RemoteAddr != 1<<20+64 || wr[0].RKey != 7 || wr[0].Opcode != verbs.WRRDMAWrite {
		t.Fatalf("wr %+v", wr[0])
	}
	e.fillWR(&wr[0], &sge, 0, 64, 64, false)
	if wr[0].RemoteAddr != 1<<20+64*64%4096 {
		t.Fatalf("walk wraps at the cycle buffer: %#x", wr[0].RemoteAddr)
	}
}

func TestSizesAndDefaults(t *testing.T) {
	c := Config{Test: WriteBW, AllSizes: true}
	c.setDefaults()
	s := c.sizes()
	if len(s) != 23 || s[0] != 2 || s[22] != 1<<23 || c.maxSize() != MaxSize {
		t.Fatalf("sizes %v", s)
	}
	if c.Iters != DefaultItersWB || c.TxDepth != DefaultTxBW || c.CQMod != DefaultCQMod || c.TCPPort != DefaultTCPPort {
		t.Fatalf("write_bw defaults %+v", c)
	}
	l := Config{Test: ReadLat}
	l.setDefaults()
	if l.Size != DefaultSizeLat || l.Iters != DefaultIters || l.TxDepth != 1 || l.CQMod != 1 {
		t.Fatalf("read_lat defaults %+v", l)
	}
	a := Config{Test: AtomicBW}
	a.setDefaults()
	if a.Size != 8 || a.Atomic != FetchAndAdd || a.validate() != nil {
		t.Fatalf("atomic defaults %+v", a)
	}
}
