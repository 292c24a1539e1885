package rxe_test

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/udp"
	"softib/verbs"
)

// parkedConn is a udp.Socket whose device receive goroutine stays parked
// (its Reader's Wait blocks until Close without reading), so that CQ
// pollers are the socket's only readers. Every other method is the
// socket's own: the pollers' reads go through the real non-blocking
// reader, GRO splitting included.
type parkedConn struct {
	*udp.Socket
	once   sync.Once
	closed chan struct{}
}

func (c *parkedConn) NewReader(batch int) udp.Reader {
	r := c.Socket.NewReader(batch)
	if r == nil {
		return nil
	}
	return parkedReader{r, c.closed}
}

func (c *parkedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Socket.Close()
}

// parkedReader is parkedConn's Reader: TryRead, ReadNow and Pending are
// the socket's; Wait never calls ready and returns when the Conn closes,
// as the socket's Wait does.
type parkedReader struct {
	udp.Reader
	closed chan struct{}
}

func (r parkedReader) Wait(func() bool) error {
	<-r.closed
	return fmt.Errorf("parked reader: %w", net.ErrClosed)
}

// openParked opens a device on a fresh loopback address whose receive
// goroutine never reads (parkedConn).
func openParked(t *testing.T, noGRO bool) *rxe.Device {
	t.Helper()
	a := testaddr.Next()
	s, err := udp.Listen(netip.AddrPortFrom(a, rxe.RoCEv2Port), &udp.Config{DisableGRO: noGRO})
	if err != nil {
		t.Fatal(err)
	}
	return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a}, Conn: &parkedConn{Socket: s, closed: make(chan struct{})}})
}

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
			dx = openParked(t, c.noGRO)
		} else {
			dx = openDev(t, cfg)
		}
		x, y := newEnd(t, dx, verbs.QPTypeRC, 4096), newEnd(t, openDev(t, cfg), verbs.QPTypeRC, 4096)
		o := connOpts{timeout: 20}
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

// spinOnly waits for one completion on e's CQ by spinning on Poll alone
// (yielding between empty polls), never sleeping on the channel: on a
// parked device (parkedConn) nothing else would read the socket. Hang
// guard: 20 s.
func spinOnly(t *testing.T, e *end, wc []verbs.WC) verbs.WC {
	t.Helper()
	return spinPoll(t, e, wc, -1)
}
