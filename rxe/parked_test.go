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
	"softib/udp/udptest"
	"softib/verbs"
)

// parkedConn is a udp.Socket whose device receive goroutine stays parked
// (its Reader's Wait blocks until Close without reading), so that CQ
// pollers are the socket's only readers: a test that spins on Poll then
// knows every datagram was received by a poller, instead of asserting
// which of the two readers won a scheduling race. Every other method is
// the socket's own: the pollers' reads go through the real non-blocking
// reader, GRO splitting included. (The device's QPs send from its port,
// counted in SportFallback: per-QP source-port sockets need the Conn to
// be a *udp.Socket itself. Source ports are ignored on receive.)
type parkedConn struct {
	*udp.Socket
	park
}

// NewReader wraps the socket's own non-blocking reader, where the
// platform has one (udp.PollConn: Linux).
func (c *parkedConn) NewReader(batch int) udp.Reader {
	pc, ok := any(c.Socket).(udp.PollConn)
	if !ok {
		return nil
	}
	return c.reader(pc.NewReader(batch))
}

func (c *parkedConn) Close() error {
	c.close()
	return c.Socket.Close()
}

// UDPSocket is the wrapped socket, whose counters rxe.SockStats reports.
func (c *parkedConn) UDPSocket() *udp.Socket { return c.Socket }

// parkedSim is parkedConn on a udptest endpoint, for synctest bubbles.
type parkedSim struct {
	*udptest.Endpoint
	park
}

func newParkedSim(ep *udptest.Endpoint) *parkedSim {
	return &parkedSim{Endpoint: ep, park: park{closed: make(chan struct{})}}
}

// NewReader wraps the endpoint's own reader.
func (c *parkedSim) NewReader(batch int) udp.Reader { return c.reader(c.Endpoint.NewReader(batch)) }

func (c *parkedSim) Close() error {
	c.close()
	return c.Endpoint.Close()
}

// park is the parked Conns' Close signal for their readers' Wait.
type park struct {
	once   sync.Once
	closed chan struct{}
}

// reader returns r with its Wait parked (nil for nil).
func (p *park) reader(r udp.Reader) udp.Reader {
	if r == nil {
		return nil
	}
	return parkedReader{r, p.closed}
}

func (p *park) close() { p.once.Do(func() { close(p.closed) }) }

// parkedReader is a parked Conn's Reader: TryRead, ReadNow and Pending
// are the wrapped reader's; Wait never calls ready and returns when the
// Conn closes, as the wrapped Wait does.
type parkedReader struct {
	udp.Reader
	closed chan struct{}
}

func (r parkedReader) Wait(func() bool) error {
	<-r.closed
	return fmt.Errorf("parked reader: %w", net.ErrClosed)
}

// openParked opens a device with cfg on a fresh loopback address whose
// receive goroutine never reads (parkedConn); its socket is configured
// as Open configures the one it creates (BusyPoll, NoRxCoalescing). The
// receive token exists only where sockets offer a non-blocking reader
// (Linux); elsewhere the test is skipped, as nothing but the receive
// goroutine could read.
func openParked(t testing.TB, cfg rxe.Config) *rxe.Device {
	t.Helper()
	a := testaddr.Next()
	s, err := udp.Listen(netip.AddrPortFrom(a, rxe.RoCEv2Port), &udp.Config{BusyPoll: cfg.BusyPoll, DisableGRO: cfg.NoRxCoalescing})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(s).(udp.PollConn); !ok {
		s.Close()
		t.Skip("no non-blocking socket reader (udp.PollConn) on this platform: CQ pollers never read the socket")
	}
	cfg.Addr, cfg.Conn = a, &parkedConn{Socket: s, park: park{closed: make(chan struct{})}}
	return openDev(t, cfg)
}

// parking names the devices of a pair whose receive goroutines are
// parked (openParked).
type parking uint8

const (
	parkNone parking = 0
	parkX    parking = 1
	parkY    parking = 2
	parkBoth         = parkX | parkY
)

// parkedPair is pair for RC with the devices named by park opened by
// openParked.
func parkedPair(t testing.TB, cfg rxe.Config, o connOpts, bufSize int, park parking) (x, y *end) {
	t.Helper()
	open := func(p parking) *rxe.Device {
		if park&p != 0 {
			return openParked(t, cfg)
		}
		return openDev(t, cfg)
	}
	x = newEnd(t, open(parkX), verbs.QPTypeRC, bufSize)
	y = newEnd(t, open(parkY), verbs.QPTypeRC, bufSize)
	connect(t, x, y, o)
	connect(t, y, x, o)
	return x, y
}
