package socklnd

import (
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softib/wire/lnetwire"
)

// dialFrom opens a TCP connection to the node's acceptor from a given
// local address.
func dialFrom(t testing.TB, from string, to *node) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: hangGuard}
	return d.Dial("tcp4", net.JoinHostPort(nidAddr(to.nid).String(), strconv.Itoa(to.d.cfg.AcceptPort)))
}

// pendingAccepts is the number of accepted sockets still in a handshake.
func (d *Driver) pendingAccepts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending
}

// waitFor polls cond until it holds or the hang guard expires.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// putAndReceive sends one PUT from a to b and waits for b to receive it.
func putAndReceive(t testing.TB, a, b *node, seed byte) {
	t.Helper()
	data := pattern(4096, seed)
	if err := a.d.Send(putMsg(a.nid, b.nid, data, uint64(seed))); err != nil {
		t.Fatalf("send: %v", err)
	}
	select {
	case r := <-b.host.rxs:
		if string(r.data) != string(data) {
			t.Fatal("payload corrupted")
		}
	case <-time.After(hangGuard):
		t.Fatal("PUT not received: the acceptor is starved")
	}
	select {
	case f := <-a.host.fins:
		if f.status != nil {
			t.Fatalf("send completed with %v", f.status)
		}
	case <-time.After(hangGuard):
		t.Fatal("send not finalized")
	}
}

// TestSlowLoris: peers that connect and then send nothing, or half an
// acceptor request, hold at most MaxPendingPerAddr handshake slots each,
// are dropped after AcceptTimeout, and never stop a well-behaved peer
// from connecting.
func TestSlowLoris(t *testing.T) {
	ips := testIPs(4)
	cfg := baseConfig()
	cfg.AcceptTimeout = 300 * time.Millisecond
	srv := startNode(t, ips[0], cfg)
	good := startNode(t, ips[1], baseConfig())
	attackers := ips[2:]

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := lnetwire.AcceptorRequest{Version: lnetwire.AcceptorVersion1, Target: srv.nid}
	half := req.Append(nil)[:lnetwire.AcceptorMagicSize+2]
	for _, a := range attackers {
		for i := range 3 * cfg.withDefaults().MaxPendingPerAddr {
			c, err := dialFrom(t, a, srv)
			if err != nil {
				t.Fatalf("attacker dial: %v", err)
			}
			if i%2 == 1 {
				c.Write(half)
			}
			conns = append(conns, c)
		}
	}
	// The well-behaved peer connects and delivers while the slots of the
	// attackers' addresses are full.
	putAndReceive(t, good, srv, 1)
	if n := srv.d.stats.AcceptOverload.Load(); n == 0 {
		t.Error("no accepted socket was refused for exceeding the per-address limit")
	}
	// The stalled handshakes time out and release their slots.
	waitFor(t, "stalled handshakes to time out", func() bool { return srv.d.pendingAccepts() == 0 })
	if n := srv.d.stats.AcceptTimeouts.Load(); n < uint64(2*cfg.withDefaults().MaxPendingPerAddr) {
		t.Errorf("AcceptTimeouts = %d, want at least %d", n, 2*cfg.withDefaults().MaxPendingPerAddr)
	}
	for _, c := range conns[:4] {
		c.SetReadDeadline(time.Now().Add(hangGuard))
		var b [1]byte
		if _, err := c.Read(b[:]); err == nil {
			t.Error("a stalled socket was not closed by the acceptor")
		}
	}
	putAndReceive(t, good, srv, 2)
}

// TestConnectFlood: 10,000 connection attempts (closing at once, sending a
// bad magic, or naming another NID) from many addresses, 64 at a time,
// while a well-behaved peer keeps sending: every one of its messages
// arrives, and afterwards no handshake, goroutine or socket is left.
func TestConnectFlood(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 1000
	}
	ips := testIPs(18)
	srv := startNode(t, ips[0], baseConfig())
	good := startNode(t, ips[1], baseConfig())
	attackers := ips[2:]
	putAndReceive(t, good, srv, 0) // connections up before the baseline
	goroutines := runtime.NumGoroutine()

	other := lnetwire.MakeNID(srv.nid.Net(), srv.nid.Addr()+1)
	badReq := lnetwire.AcceptorRequest{Version: lnetwire.AcceptorVersion1, Target: other}
	bad := badReq.Append(nil)
	var next atomic.Int64
	var dialErrs atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				c, err := dialFrom(t, attackers[(int(i)+w)%len(attackers)], srv)
				if err != nil {
					dialErrs.Add(1)
					continue
				}
				switch i % 3 {
				case 1:
					c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
				case 2:
					c.Write(bad)
				}
				if i%3 != 0 {
					var b [64]byte
					c.SetReadDeadline(time.Now().Add(hangGuard))
					c.Read(b[:]) // the acceptor answers or closes
				}
				c.Close()
			}
		}()
	}
	sent := 0
	go func() { wg.Wait(); close(stop) }()
loop:
	for seed := byte(1); ; seed++ {
		select {
		case <-stop:
			break loop
		default:
		}
		putAndReceive(t, good, srv, seed)
		sent++
	}
	putAndReceive(t, good, srv, 255)
	t.Logf("%d connection attempts (%d dials failed), %d PUTs delivered meanwhile; overload refusals %d, refused %d",
		n, dialErrs.Load(), sent+1, srv.d.stats.AcceptOverload.Load(), srv.d.stats.AcceptRefused.Load())
	if dialErrs.Load() > int64(n/100) {
		t.Errorf("%d of %d dials failed", dialErrs.Load(), n)
	}
	waitFor(t, "handshakes to drain", func() bool { return srv.d.pendingAccepts() == 0 })
	waitFor(t, "goroutines to return to the baseline", func() bool { return runtime.NumGoroutine() <= goroutines+2 })
	srv.d.mu.Lock()
	left := len(srv.d.handshakes)
	srv.d.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sockets still tracked in setup", left)
	}
}
