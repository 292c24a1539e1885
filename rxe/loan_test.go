package rxe

import (
	"softib/udp"
	"sync"
	"testing"
)

// TestRxLoan walks a receive slot's packet through the loan states
// (device.go: loanOut, loanBack, loanAbandoned): given back before the
// batch ends, the slot keeps it; still out, the slot takes a new packet
// and the QP's release pools the old one; never lent, nothing changes.
func TestRxLoan(t *testing.T) {
	d := &Device{}
	b := &rxBatch{msgs: make([]udp.Message, 3), pkts: make([]*packet, 3)}
	for i := range b.pkts {
		b.pkts[i] = d.getPacket()
		b.msgs[i].Buf = b.pkts[i].buf[:]
	}
	back, out, never := b.pkts[0], b.pkts[1], b.pkts[2]
	back.loan.Store(loanOut)
	out.loan.Store(loanOut)
	d.releaseRx(back) // the QP's round ran inline
	d.reclaim(b, 3)
	if b.pkts[0] != back || back.loan.Load() != loanNone {
		t.Errorf("returned packet: slot has %p (want %p), loan %d", b.pkts[0], back, back.loan.Load())
	}
	if b.pkts[1] == out || &b.msgs[1].Buf[0] != &b.pkts[1].buf[0] || out.loan.Load() != loanAbandoned {
		t.Errorf("packet still out: slot kept it or its buffer is stale (loan %d)", out.loan.Load())
	}
	if b.pkts[2] != never || never.loan.Load() != loanNone {
		t.Errorf("packet never lent changed")
	}
	d.releaseRx(out) // the QP's late round: pools it
	if out.loan.Load() != loanNone {
		t.Errorf("abandoned packet after release: loan %d", out.loan.Load())
	}
}

// TestRxLoanRace runs a QP's release against the batch's reclaim at the
// same moment, many times: exactly one side keeps each packet (run with
// -race: the buffer writes on either side must be ordered).
func TestRxLoanRace(t *testing.T) {
	d := &Device{}
	b := &rxBatch{msgs: make([]udp.Message, 1), pkts: make([]*packet, 1)}
	b.pkts[0] = d.getPacket()
	b.msgs[0].Buf = b.pkts[0].buf[:]
	kept, replaced := 0, 0
	for i := range 2000 {
		p := b.pkts[0]
		p.buf[0] = 1 // the socket read
		p.loan.Store(loanOut)
		var wg sync.WaitGroup
		wg.Add(1)
		started := make(chan struct{})
		go func() {
			defer wg.Done()
			close(started)
			_ = p.buf[0] // the QP's round reads the packet
			d.releaseRx(p)
		}()
		if i%2 == 0 {
			<-started // the QP's round is running: mostly it wins
		}
		d.reclaim(b, 1)
		wg.Wait()
		if b.pkts[0] == p {
			kept++
		} else {
			replaced++
		}
		if p.loan.Load() != loanNone {
			t.Fatalf("loan %d after both sides", p.loan.Load())
		}
	}
	t.Logf("slot kept its packet %d times, took a new one %d times", kept, replaced)
}
