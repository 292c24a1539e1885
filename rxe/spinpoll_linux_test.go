package rxe_test

import (
	"testing"

	"softib/rxe"
	"softib/verbs"
)

// TestSpinPollReceives: without busy-poll mode, on a default device (UDP
// GRO on) and on one without receive coalescing (NoRxCoalescing), an
// application that spins on Poll receives from the socket itself (after
// PollRxAfter empty polls), while one that polls, arms and sleeps never
// does: its completions come from the receive goroutine.
//
// Whether a spinning poller or the receive goroutine reads a given
// datagram first is up to the scheduler (under load the receive
// goroutine can win every round), so the spinning side's receive
// goroutine is parked (parkedConn): the spinner's completions can only
// come from its own reads, and a poller that never read the socket
// would hang instead of passing.
func TestSpinPollReceives(t *testing.T) {
	for _, c := range []struct {
		noGRO, spin bool
	}{{false, true}, {false, false}, {true, true}, {true, false}} {
		cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NoRxCoalescing: c.noGRO}}
		var dx *rxe.Device
		if c.spin {
			dx = openParked(t, cfg)
		} else {
			dx = openDev(t, cfg)
		}
		x, y := newEnd(t, dx, verbs.QPTypeRC, 4096), newEnd(t, openDev(t, cfg), verbs.QPTypeRC, 4096)
		o := connOpts{timeout: lossTimeout}
		connect(t, x, y, o)
		connect(t, y, x, o)
		wcx := make([]verbs.WC, 1)
		for i := range 200 {
			postRecv(t, y, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
			post(t, x, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("spin")})
			var wc verbs.WC
			if c.spin {
				wc = spinOnly(t, x, wcx)
			} else {
				wc = waitArm(t, x, wcx)
			}
			wantOK(t, wc, verbs.WCSend)
			wantOK(t, waitWC(t, y.cq, 1)[0], verbs.WCRecv)
		}
		got := rxe.CQDeviceStats(x.cq)["PollRxBatches"]
		if c.spin && got == 0 {
			t.Errorf("NoRxCoalescing %v: spinning poller never received from the socket", c.noGRO)
		}
		if !c.spin && got != 0 {
			t.Errorf("NoRxCoalescing %v: poll-arm-sleep waiter received %d batches from the socket", c.noGRO, got)
		}
		wantClean(t, x.cq)
		wantClean(t, y.cq)
	}
}
