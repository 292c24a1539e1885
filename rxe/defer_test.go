package rxe_test

import (
	"testing"

	"softib/rxe"
	"softib/verbs"
)

// TestDeferredAckIdleReader: a completion wakes a channel reader, which
// then never calls rxe (no post, no poll). The receive round yields to
// the reader and keeps its ACK for the reader's post, so the ACK must
// still leave when the receive goroutine runs again: the sender's
// signaled SEND completes without a retransmission (ACK timeout 4.3 s).
func TestDeferredAckIdleReader(t *testing.T) {
	x, y := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{timeout: 20}, 4096)
	for i := range 20 {
		postRecv(t, y, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
		if err := y.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		woke := make(chan struct{})
		go func() {
			<-y.ch.C() // wake, and do nothing else
			close(woke)
		}()
		post(t, x, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("idle")})
		wantOK(t, waitWC(t, x.cq, 1)[0], verbs.WCSend)
		<-woke
		wantOK(t, waitWC(t, y.cq, 1)[0], verbs.WCRecv)
	}
	wantClean(t, x.cq)
	wantClean(t, y.cq)
}
