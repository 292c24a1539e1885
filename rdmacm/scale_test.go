//go:build linux

package rdmacm_test

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/mad"
)

// Environment of the server process of TestConnectCycles: the address
// and port it serves on.
const scaleChildEnv = "SOFTIB_RDMACM_CYCLE_SERVER"

// scaleCfg gives fast CM timeouts (2 ms + 64 ms per try, 15 tries) so
// that a lost MAD costs ~66 ms, not 4.6 s.
var scaleCfg = rdmacm.Config{ResponseTimeout: 14, PacketLifeTime: 8}

// Private data byte 0 of a cycle's REQ: who disconnects.
const (
	clientDisconnects = 'c'
	serverDisconnects = 's'
)

// TestConnectCycles runs connect/disconnect cycles between this process
// and a second softib process in another network namespace over a lossy
// link: a veth pair dropping 10% of the packets each way (50 cycles, 20
// with -short), and a relay that also delays (2 ms ± 1 ms) and reorders
// 5% (20 cycles, 10 with -short). This is the real-socket tier:
// TestSimConnectCycles runs 200 cycles through the same loss, duplication
// and reordering on the simulated network, deterministically. Every cycle must end with an event
// (ESTABLISHED and DISCONNECTED, or a failure event) — nothing may hang —
// and either side initiates the disconnect in turn. A connect to a port
// nobody listens on must end REJECTED with "invalid service ID".
func TestConnectCycles(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ping")
	short := testing.Short()
	for _, v := range []struct {
		name    string
		relay   bool
		netem   netns.Netem
		cycles  int
		shortTo int
	}{
		{"veth 10% loss", false, netns.Netem{Loss: 10}, 50, 20},
		{"relay 10% loss 2ms±1ms delay 5% reorder", true,
			netns.Netem{Loss: 10, Delay: 2 * time.Millisecond, Jitter: time.Millisecond, Reorder: 5}, 20, 10},
	} {
		t.Run(v.name, func(t *testing.T) {
			n := v.cycles
			if short {
				n = v.shortTo
			}
			connectCycles(t, v.relay, v.netem, n)
		})
	}
}

func connectCycles(t *testing.T, relay bool, ne netns.Netem, cycles int) {
	p := netns.NewPair(t, netns.PairConfig{Relay: relay, Seed: 7})
	if out, err := p.A.Command("ping", "-c", "1", "-W", "5", p.B.Addr.String()).CombinedOutput(); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	for _, s := range []netns.Side{netns.A, netns.B} {
		if err := p.SetNetem(s, ne); err != nil {
			t.Fatal(err)
		}
	}
	const port = 7174
	srv := p.B.Command(os.Args[0], "-test.run=^TestConnectCyclesServer$", "-test.v")
	srv.Env = append(os.Environ(), fmt.Sprintf("%s=%s", scaleChildEnv, netip.AddrPortFrom(p.B.Addr, port)))
	stdin, err := srv.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- srv.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			srv.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "ready") {
	}
	go func() { // keep the pipe drained
		for sc.Scan() {
		}
	}()

	var dev verbs.Device
	if err := p.A.Do(func() (err error) {
		dev, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: p.A.Addr}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	m := rdmacm.NewManager(scaleCfg)
	t.Cleanup(func() { m.Close() })
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	runCycles(t, m, netip.AddrPortFrom(p.B.Addr, port), cycles)
}

// runCycles runs cycles connect/disconnect cycles from m to a serveCycles
// server at dst (either side disconnecting in turn), then three connects
// to dst's port+1, where nobody listens, which must end REJECTED with
// "invalid service ID"; at least 95% of the cycles must connect.
func runCycles(t *testing.T, m *rdmacm.Manager, dst netip.AddrPort, cycles int) {
	t.Helper()
	ch := rdmacm.NewEventChannel()
	start := time.Now()
	var established, failed, byServer int
	for i := range cycles {
		who := byte(clientDisconnects)
		if i%2 == 1 {
			who = serverDisconnects
		}
		ok, ev := cycle(t, m, ch, dst, who)
		if ok {
			established++
			if who == serverDisconnects {
				byServer++
			}
		} else {
			failed++
			t.Logf("cycle %d: %v (status %d): %v", i, ev.Type, ev.Status, ev.Err)
		}
	}
	// Nobody listens on port+1: the server's CM rejects.
	rejected := 0
	for range 3 {
		if ok, ev := cycle(t, m, ch, netip.AddrPortFrom(dst.Addr(), dst.Port()+1), clientDisconnects); ok {
			t.Fatal("connected to a port nobody listens on")
		} else if ev.Type == rdmacm.EventRejected && ev.Status == int(mad.RejInvalidServiceID) {
			rejected++
		} else if ev.Type != rdmacm.EventUnreachable { // a REQ lost 15 times is possible, if unlikely
			t.Fatalf("no listener: %v (status %d)", ev.Type, ev.Status)
		}
	}
	t.Logf("%d cycles in %v: %d established and disconnected (%d by the server), %d failed with an event; %d/3 no-listener connects REJECTED(8)",
		cycles, time.Since(start).Round(time.Millisecond), established, byServer, failed, rejected)
	if rejected == 0 {
		t.Error("no REJECTED event for the port without listener")
	}
	// 15 tries per MAD at 10% loss: a failure is a 1e-15 event.
	if established < cycles*95/100 {
		t.Errorf("only %d of %d cycles connected", established, cycles)
	}
}

var cycleQPN atomic.Uint32

// cycleGuard bounds one wait; the CM's own timeouts end every exchange
// within ~1 s per MAD here, so reaching it means a hang.
const cycleGuard = 60 * time.Second

// nextFor returns the next event about id, skipping those of earlier
// connections (TIMEWAIT_EXIT, late DISCONNECTED).
func nextFor(t *testing.T, ch *rdmacm.EventChannel, id *rdmacm.ID) *rdmacm.Event {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cycleGuard)
		ev, err := ch.GetEvent(ctx)
		cancel()
		if err != nil {
			t.Fatalf("hang: no event for %v: %v", id.RemoteAddr(), err)
		}
		if ev.ID == id && ev.Type != rdmacm.EventTimewaitExit {
			return ev
		}
	}
}

// cycle connects to dst (no QP: CONNECT_RESPONSE, then Establish),
// disconnects as who says and destroys the ID. It reports whether the
// connection was established, or the failure event.
func cycle(t *testing.T, m *rdmacm.Manager, ch *rdmacm.EventChannel, dst netip.AddrPort, who byte) (bool, *rdmacm.Event) {
	t.Helper()
	qpn := 0x1000 + cycleQPN.Add(1) // QPNs of ended connections sit in timewait
	id, err := m.CreateID(ch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextFor(t, ch, id); ev.Type != rdmacm.EventAddrResolved {
		return false, ev
	}
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextFor(t, ch, id); ev.Type != rdmacm.EventRouteResolved {
		return false, ev
	}
	if err := id.Connect(&rdmacm.ConnParam{QPNum: qpn, PrivateData: []byte{who}, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := nextFor(t, ch, id)
	if ev.Type != rdmacm.EventConnectResponse {
		return false, ev
	}
	if err := id.Establish(); err != nil {
		t.Fatal(err)
	}
	if who == clientDisconnects {
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
	}
	ev = nextFor(t, ch, id)
	switch {
	case ev.Type == rdmacm.EventDisconnected:
	case ev.Type == rdmacm.EventRejected && ev.Status == int(mad.RejStaleConn):
		// On a network that duplicates and reorders, a late copy of our
		// REQ can reach the server once this connection is in its
		// timewait; the server answers it with REJ(stale connection),
		// which ends the connection here as it would on the kernel's CM
		// (cm_dup_req_handler, cm_rej_handler). The connection was
		// established all the same.
		t.Logf("after establish: REJECTED (stale connection) from a late duplicate REQ")
		return true, nil
	default:
		t.Fatalf("after establish: %v (status %d)", ev.Type, ev.Status)
	}
	if who == serverDisconnects {
		if err := id.Disconnect(); err != nil { // the DREP
			t.Fatal(err)
		}
	}
	return true, nil
}

// TestConnectCyclesServer is the server process of TestConnectCycles; it
// does nothing unless started by it. It accepts every request, and for
// connections that ask for it disconnects first once established; it
// answers the client's disconnects. It exits when stdin closes.
func TestConnectCyclesServer(t *testing.T) {
	spec := os.Getenv(scaleChildEnv)
	if spec == "" {
		return
	}
	addr := netip.MustParseAddrPort(spec)
	dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := rdmacm.NewManager(scaleCfg)
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // stdin closing ends the server
		var b [1]byte
		os.Stdin.Read(b[:])
		cancel()
	}()
	serveCycles(ctx, t, m, addr, func() { fmt.Println("ready") },
		func(accepted, disconnected int) {
			fmt.Printf("served %d connections, %d disconnected\n", accepted, disconnected)
		})
}

// serveCycles is the server side of the connect cycles: it listens on
// addr, accepts every request, disconnects first once established when
// the connection asks for it, answers the client's disconnects, and
// returns (calling done with its counts) when ctx ends.
func serveCycles(ctx context.Context, t *testing.T, m *rdmacm.Manager, addr netip.AddrPort, ready func(), done func(accepted, disconnected int)) {
	ch := rdmacm.NewEventChannel()
	lis, err := m.CreateID(ch, nil, rdmacm.PSTCP)
	if err == nil {
		err = lis.BindAddr(addr)
	}
	if err == nil {
		err = lis.Listen(0)
	}
	if err != nil { // an Error, not Fatal: this may run on a goroutine
		t.Errorf("listen on %v: %v", addr, err)
		done(0, 0)
		return
	}
	ready()
	var accepted, disconnected int
	qpn := uint32(0x100000)
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			done(accepted, disconnected)
			return
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			who := byte(clientDisconnects)
			if len(ev.Conn.PrivateData) > 0 {
				who = ev.Conn.PrivateData[0]
			}
			ev.ID.SetContext(who)
			qpn++
			if err := ev.ID.Accept(&rdmacm.ConnParam{QPNum: qpn, RNRRetryCount: 7}); err != nil {
				t.Errorf("accept: %v", err)
			}
			accepted++
		case rdmacm.EventEstablished:
			if ev.ID.Context() == byte(serverDisconnects) {
				ev.ID.Disconnect()
			}
		case rdmacm.EventDisconnected:
			disconnected++
			if ev.ID.Context() == byte(clientDisconnects) {
				ev.ID.Disconnect() // the DREP
			}
			ev.ID.Destroy()
		case rdmacm.EventUnreachable, rdmacm.EventRejected, rdmacm.EventConnectError:
			ev.ID.Destroy()
		}
	}
}
