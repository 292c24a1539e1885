package pingpong

import (
	"testing"

	"softib/verbs"
)

type fakeQP struct{ verbs.QP }

func (fakeQP) PostSend(wrs []verbs.SendWR) (int, error) { return len(wrs), nil }
func (fakeQP) PostRecv(wrs []verbs.RecvWR) (int, error) { return len(wrs), nil }

type fakeMR struct{ verbs.MR }

func (fakeMR) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: uint64(off), Length: uint32(n), LKey: 1}
}

func TestPostingAllocatesNothing(t *testing.T) {
	for _, k := range []Kind{RC, UD} {
		c := Config{Kind: k}
		c.setDefaults()
		r := &runner{cfg: &c, qp: fakeQP{}, sendMR: fakeMR{}, recvMR: fakeMR{}, slots: 1, slotLen: c.Size, freeSlot: []int{0}}
		allocs := testing.AllocsPerRun(1000, func() {
			if err := r.postSend(); err != nil {
				t.Fatal(err)
			}
			if r.postRecv(1) != 1 {
				t.Fatal("postRecv")
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per exchange", k, allocs)
		}
		if k == UD && (r.swr[0].RemoteQKey != QKey || r.ssge[0].Addr != GRHLen) {
			t.Errorf("UD send %+v", r.swr[0])
		}
	}
}
