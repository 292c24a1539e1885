package socklnd

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

var testSizes = []int{0, 1, 100, 927, 928, 1000, 4096, 16<<10 - 1, 16 << 10, 64 << 10, 1 << 20}

func TestSendSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"v3", func(*Config) {}},
		{"v2", func(c *Config) { c.Version = lnetwire.SockProtoV2 }},
		{"v1", func(c *Config) { c.Version = lnetwire.SockProtoV1 }},
		{"v3-csum", func(c *Config) { c.EnableCsum = true }},
		{"v2-csum", func(c *Config) { c.Version, c.EnableCsum = lnetwire.SockProtoV2, true }},
		{"single-conn", func(c *Config) { c.SingleConn = true }},
		{"no-zc", func(c *Config) { c.DisableZCRequest = true }},
		{"delayed-recv", func(*Config) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ips := testIPs(2)
			ca := baseConfig()
			tc.cfg(&ca)
			a := startNode(t, ips[0], ca)
			b := startNode(t, ips[1], baseConfig())
			if tc.name == "delayed-recv" {
				b.host.delay.Store(true)
			}
			for i, n := range testSizes {
				data := pattern(n, byte(i))
				m := putMsg(a.nid, b.nid, data, uint64(i))
				if err := a.send(t, m); err != nil {
					t.Fatalf("size %d: %v", n, err)
				}
				r := b.waitRx(t)
				if r.from != a.nid || r.hdr.MatchBits != uint64(i) || r.hdr.Type != lnetwire.MsgPUT {
					t.Fatalf("size %d: got %v from %s", n, &r.hdr, r.from)
				}
				if !bytes.Equal(r.data, data) {
					t.Fatalf("size %d: payload differs", n)
				}
			}
			// And back over the connections b accepted.
			data := pattern(70000, 9)
			if err := b.send(t, putMsg(b.nid, a.nid, data, 99)); err != nil {
				t.Fatal(err)
			}
			if r := a.waitRx(t); !bytes.Equal(r.data, data) {
				t.Fatal("reverse payload differs")
			}
			conns := a.d.Conns(b.nid)
			switch {
			case ca.SingleConn:
				if conns[lnetwire.SockConnAny] != 1 || len(conns) != 1 {
					t.Fatalf("conns %v, want one ANY", conns)
				}
			default:
				if conns[lnetwire.SockConnControl] != 1 || conns[lnetwire.SockConnBulkOut] != 1 {
					t.Fatalf("conns %v, want CONTROL and BULK_OUT", conns)
				}
			}
			st := a.d.Stats()
			zcWanted := ca.Version != lnetwire.SockProtoV1 && !ca.DisableZCRequest
			if got := st.ZCAcksRecv.Load(); zcWanted != (got > 0) {
				t.Fatalf("ZC ACKs received %d, requests on: %v", got, zcWanted)
			}
			if b.d.Stats().Malformed.Load() != 0 || b.d.Stats().CsumErrors.Load() != 0 {
				t.Fatal("receiver counted errors")
			}
		})
	}
}

// TestTypedConnSelection checks the min_bulk rule: small messages ride
// CONTROL, large ones BULK_OUT, and the receiver sees the inverse types.
func TestTypedConnSelection(t *testing.T) {
	ips := testIPs(2)
	a := startNode(t, ips[0], baseConfig())
	b := startNode(t, ips[1], baseConfig())
	if err := a.send(t, putMsg(a.nid, b.nid, nil, 1)); err != nil {
		t.Fatal(err)
	}
	b.waitRx(t)
	eventually(t, "all three types up", func() bool { return len(a.d.Conns(b.nid)) == 3 })
	bc := b.d.Conns(a.nid)
	if bc[lnetwire.SockConnControl] != 1 || bc[lnetwire.SockConnBulkIn] != 1 || bc[lnetwire.SockConnBulkOut] != 1 {
		t.Fatalf("passive side conns %v", bc)
	}
	b.d.mu.Lock()
	p := b.d.peers[a.nid]
	counts := map[lnetwire.SockConnType]uint64{}
	for _, c := range p.conns {
		counts[c.typ] = uint64(c.lastRx.Load())
	}
	b.d.mu.Unlock()
	// A message of min_bulk bytes in total goes on a's BULK_OUT, which b
	// sees as BULK_IN.
	small := lnetwire.SockMsgHdrLen + lnetwire.HdrSize
	d := a.d
	d.mu.Lock()
	pa := d.peers[b.nid]
	if c := d.pickConn(pa, small, false); c == nil || c.typ != lnetwire.SockConnControl {
		t.Fatalf("small message picked %v", c)
	}
	if c := d.pickConn(pa, DefaultMinBulk, false); c == nil || c.typ != lnetwire.SockConnBulkOut {
		t.Fatalf("min_bulk message picked %v", c)
	}
	if c := d.pickConn(pa, DefaultMinBulk-1, false); c == nil || c.typ != lnetwire.SockConnControl {
		t.Fatalf("min_bulk-1 message picked %v", c)
	}
	d.mu.Unlock()
	_ = counts
}

func TestManyConcurrent(t *testing.T) {
	ips := testIPs(3)
	a := startNode(t, ips[0], baseConfig())
	b := startNode(t, ips[1], baseConfig())
	c := startNode(t, ips[2], baseConfig())
	const per = 200
	var wg sync.WaitGroup
	for _, dst := range []*node{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				n := (i * 997) % (40 << 10)
				if err := a.d.Send(putMsg(a.nid, dst.nid, pattern(n, byte(i)), uint64(i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for range 2 * per {
		if f := <-a.host.fins; f.status != nil {
			t.Fatal(f.status)
		}
	}
	for _, dst := range []*node{b, c} {
		seen := map[uint64]bool{}
		for range per {
			r := dst.waitRx(t)
			i := r.hdr.MatchBits
			if seen[i] || !bytes.Equal(r.data, pattern((int(i)*997)%(40<<10), byte(i))) {
				t.Fatalf("message %d duplicated or corrupt", i)
			}
			seen[i] = true
		}
	}
}

func TestConnectFailureAndBackoff(t *testing.T) {
	ips := testIPs(2)
	cfg := baseConfig()
	cfg.MinReconnect = time.Hour // keep the backoff window open for the test
	cfg.MaxReconnect = time.Hour
	a := startNode(t, ips[0], cfg)
	dead := tcpNID(ips[1]) // nobody listens there
	err := a.send(t, putMsg(a.nid, dead, []byte("x"), 1))
	if !errors.Is(err, lnd.ErrPeerDown) {
		t.Fatalf("send to dead peer: %v, want ErrPeerDown", err)
	}
	// Inside the backoff window the send fails at once.
	err = a.d.Send(putMsg(a.nid, dead, []byte("x"), 2))
	if !errors.Is(err, lnd.ErrPeerDown) {
		t.Fatalf("send in backoff: %v", err)
	}
	a.d.mu.Lock()
	p := a.d.peers[dead]
	backoff := p.backoff
	a.d.mu.Unlock()
	if backoff != time.Hour {
		t.Fatalf("backoff %v", backoff)
	}
	if a.d.Stats().ConnectFailures.Load() != 1 {
		t.Fatal("failure not counted")
	}
	a.host.mu.Lock()
	alive, ok := a.host.alive[dead]
	a.host.mu.Unlock()
	if !ok || alive {
		t.Fatal("core not told the peer is down")
	}
}

func TestBackoffDoubles(t *testing.T) {
	ips := testIPs(2)
	cfg := baseConfig()
	cfg.MinReconnect = time.Millisecond
	cfg.MaxReconnect = 8 * time.Millisecond
	a := startNode(t, ips[0], cfg)
	dead := tcpNID(ips[1])
	var got []time.Duration
	for range 6 {
		a.d.mu.Lock()
		p := a.d.findPeer(dead)
		wait := time.Until(p.retryAt)
		a.d.mu.Unlock()
		time.Sleep(max(wait, 0) + time.Millisecond)
		if err := a.send(t, putMsg(a.nid, dead, nil, 0)); err == nil {
			t.Fatal("send to dead peer succeeded")
		}
		a.d.mu.Lock()
		got = append(got, a.d.peers[dead].backoff)
		a.d.mu.Unlock()
	}
	want := []time.Duration{2, 4, 8, 8, 8, 8}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoff sequence %v", got)
		}
	}
}

func TestRace(t *testing.T) {
	for round := range 5 {
		ips := testIPs(2)
		a := startNode(t, ips[0], baseConfig())
		b := startNode(t, ips[1], baseConfig())
		const n = 20
		var wg sync.WaitGroup
		for _, pair := range [][2]*node{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					if err := pair[0].d.Send(putMsg(pair[0].nid, pair[1].nid, pattern(i*300, 1), uint64(i))); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		for _, x := range []*node{a, b} {
			for range n {
				if err := (<-x.host.fins).status; err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			for range n {
				x.waitRx(t)
			}
		}
		// Settled: at most one connection of each type per side.
		for _, x := range [][2]*node{{a, b}, {b, a}} {
			for typ, k := range x[0].d.Conns(x[1].nid) {
				if k > 1 {
					t.Fatalf("round %d: %s has %d %v conns", round, x[0].nid, k, typ)
				}
			}
		}
	}
}

// TestRaceDecision drives the passive-side rule directly: the higher NID
// refuses an incoming connection of the type it is dialling itself.
func TestRaceDecision(t *testing.T) {
	ips := testIPs(2)
	hi := startNode(t, ips[1], baseConfig())
	lo := tcpNID(ips[0])
	if hi.nid < lo {
		t.Fatal("test assumes ips[1] > ips[0]")
	}
	hi.d.mu.Lock()
	p := hi.d.findPeer(lo)
	p.dialing = lnetwire.SockConnBulkOut
	hi.d.mu.Unlock()
	h := lnetwire.SockHello{Version: 3, SrcNID: uint64(lo), SrcIncarnation: 5, ConnType: lnetwire.SockConnBulkIn}
	// lo's BULK_IN is hi's BULK_OUT: same type as hi dials → refused.
	if err := hi.d.admit(newConn(hi.d, nil), &h, h.ConnType.Invert(), false); !errors.Is(err, ErrRace) {
		t.Fatalf("admit: %v, want ErrRace", err)
	}
	// CONTROL is not being dialled: admitted.
	h.ConnType = lnetwire.SockConnControl
	c := newConn(hi.d, nopConn{})
	if err := hi.d.admit(c, &h, lnetwire.SockConnControl, false); err != nil {
		t.Fatal(err)
	}
	// A second CONTROL is a duplicate.
	if err := hi.d.admit(newConn(hi.d, nopConn{}), &h, lnetwire.SockConnControl, false); !errors.Is(err, ErrRace) {
		t.Fatalf("duplicate: %v", err)
	}
	// New incarnation: the old connection is closed as stale, the new one
	// admitted.
	h.SrcIncarnation = 6
	if err := hi.d.admit(newConn(hi.d, nopConn{}), &h, lnetwire.SockConnControl, false); err != nil {
		t.Fatal(err)
	}
	if hi.d.Stats().PeerReboots.Load() != 1 {
		t.Fatal("reboot not counted")
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if !closed {
		t.Fatal("stale connection left open")
	}
	// The lower NID never refuses for a race.
	lower := startNode(t, ips[0], baseConfig())
	lower.d.mu.Lock()
	lower.d.findPeer(hi.nid).dialing = lnetwire.SockConnControl
	lower.d.mu.Unlock()
	h2 := lnetwire.SockHello{Version: 3, SrcNID: uint64(hi.nid), SrcIncarnation: 1, ConnType: lnetwire.SockConnControl}
	if err := lower.d.admit(newConn(lower.d, nopConn{}), &h2, lnetwire.SockConnControl, false); err != nil {
		t.Fatalf("lower NID refused: %v", err)
	}
}

func TestPeerRestart(t *testing.T) {
	ips := testIPs(2)
	a := startNode(t, ips[0], baseConfig())
	b := startNode(t, ips[1], baseConfig())
	if err := a.send(t, putMsg(a.nid, b.nid, []byte("one"), 1)); err != nil {
		t.Fatal(err)
	}
	b.waitRx(t)
	oldInc := b.d.Incarnation()
	b.d.Shutdown()
	// A write racing with the peer's close can still "succeed" into the
	// dead socket (plain TCP semantics); wait until a has seen the close.
	eventually(t, "a notices b's close", func() bool { return len(a.d.Conns(b.nid)) == 0 })
	// Restart b with the same NID: new incarnation.
	var b2 *node
	eventually(t, "restart b", func() bool {
		h := newStubHost()
		ni := lnd.NewNI(h, lnd.NIConfig{NID: b.nid, PID: lnetwire.PIDLustre, LNDConfig: baseConfig(), Log: testLog})
		drv, err := New(Config{}).Startup(ni)
		if err != nil {
			return false
		}
		b2 = &node{d: drv.(*Driver), host: h, nid: b.nid}
		h.drv.Store(b2.d)
		t.Cleanup(b2.d.Shutdown)
		return true
	})
	if b2.d.Incarnation() == oldInc {
		t.Fatal("same incarnation after restart")
	}
	// Sends may fail while a notices the old connections died; then a
	// fresh connection must work.
	eventually(t, "send after restart", func() bool {
		a.d.mu.Lock()
		a.d.peers[b.nid].retryAt = time.Time{}
		a.d.mu.Unlock()
		return a.send(t, putMsg(a.nid, b.nid, []byte("two"), 2)) == nil
	})
	if r := b2.waitRx(t); string(r.data) != "two" {
		t.Fatalf("got %q", r.data)
	}
	if a.d.Stats().PeerReboots.Load() != 1 {
		t.Fatalf("PeerReboots = %d, want 1", a.d.Stats().PeerReboots.Load())
	}
	a.d.mu.Lock()
	inc := a.d.peers[b.nid].incarnation
	a.d.mu.Unlock()
	if inc != b2.d.Incarnation() {
		t.Fatal("new incarnation not recorded")
	}
}

// TestPeerKilledMidTransfer: the receiver dies while 1 MiB sends stream
// to it. Every send is finalized exactly once; with zero-copy ACKs a
// success means the receiver got the message, so successes never exceed
// deliveries, and some sends fail.
func TestPeerKilledMidTransfer(t *testing.T) {
	ips := testIPs(2)
	cfg := baseConfig()
	cfg.ZCMinPayload = 1 // every payload asks for an ACK
	a := startNode(t, ips[0], cfg)
	b := startNode(t, ips[1], baseConfig())
	const n = 64
	data := pattern(1<<20, 3)
	msgs := make([]*lnd.Msg, n)
	for i := range msgs {
		msgs[i] = putMsg(a.nid, b.nid, data, uint64(i))
	}
	var delivered int
	go func() {
		for i, m := range msgs {
			if err := a.d.Send(m); err != nil {
				a.host.fins <- fin{m, err}
			}
			if i == 4 {
				// Kill b once the stream is under way.
				go func() {
					b.waitRx(t)
					b.d.Shutdown()
				}()
			}
		}
	}()
	ok, failed := 0, 0
	seen := map[*lnd.Msg]bool{}
	for range n {
		f := <-a.host.fins
		if seen[f.msg] {
			t.Fatal("message finalized twice")
		}
		seen[f.msg] = true
		if f.status == nil {
			ok++
		} else {
			failed++
		}
	}
	delivered = 1 + len(b.host.rxs) // the one waitRx consumed
	if failed == 0 {
		t.Fatal("no send failed although the peer died")
	}
	if ok > delivered {
		t.Fatalf("%d sends succeeded but only %d were delivered", ok, delivered)
	}
	t.Logf("ok %d failed %d delivered %d", ok, failed, delivered)
}

// TestShutdownFailsQueued: a message queued behind a handshake that
// hangs (the peer accepts but never answers) is finalized when the NI
// stops, and Shutdown does not wait for the silent peer.
func TestShutdownFailsQueued(t *testing.T) {
	ips := testIPs(3)
	a := startNode(t, ips[0], baseConfig())
	silent := mustListen(t, ips[1]+":"+strconv.Itoa(testPort()))
	defer silent.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := silent.Accept(); err == nil {
			accepted <- c
		}
	}()
	m := putMsg(a.nid, tcpNID(ips[1]), []byte("x"), 1)
	if err := a.d.Send(m); err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	defer c.Close()
	// And a silent client on a's acceptor.
	raw, err := net.Dial("tcp4", a.d.ListenAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	eventually(t, "both handshakes in progress", func() bool {
		a.d.mu.Lock()
		defer a.d.mu.Unlock()
		return len(a.d.handshakes) == 2
	})
	done := make(chan struct{})
	go func() { a.d.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal("hang guard: Shutdown waits for a silent peer")
	}
	if err := a.waitFin(t, m); !errors.Is(err, lnd.ErrShutdown) && !errors.Is(err, lnd.ErrPeerDown) {
		t.Fatalf("status %v", err)
	}
	if err := a.d.Send(m); !errors.Is(err, lnd.ErrShutdown) {
		t.Fatalf("send after shutdown: %v", err)
	}
}

func TestTooBig(t *testing.T) {
	ips := testIPs(1)
	a := startNode(t, ips[0], baseConfig())
	m := putMsg(a.nid, tcpNID("127.0.0.9"), nil, 0)
	m.Payload = lnd.IOV{Len: lnd.MaxPayload + 1}
	if err := a.d.Send(m); !errors.Is(err, lnd.ErrTooBig) {
		t.Fatal(err)
	}
}

// TestNoGoroutineLeak: after Shutdown every driver goroutine (acceptor,
// reaper, handshakes, readers, writers) has exited.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	ips := testIPs(2)
	a := startNode(t, ips[0], baseConfig())
	b := startNode(t, ips[1], baseConfig())
	if err := a.send(t, putMsg(a.nid, b.nid, pattern(20000, 1), 1)); err != nil {
		t.Fatal(err)
	}
	b.waitRx(t)
	a.d.Shutdown()
	b.d.Shutdown()
	eventually(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= before })
}

// TestConnsPerPeer: with conns_per_peer 2 each side keeps one CONTROL and
// two BULK connections of each direction, and bulk traffic uses both.
func TestConnsPerPeer(t *testing.T) {
	ips := testIPs(2)
	cfg := baseConfig()
	cfg.ConnsPerPeer = 2
	a := startNode(t, ips[0], cfg)
	b := startNode(t, ips[1], cfg)
	if err := a.send(t, putMsg(a.nid, b.nid, nil, 0)); err != nil {
		t.Fatal(err)
	}
	b.waitRx(t)
	eventually(t, "all connections up", func() bool {
		c := a.d.Conns(b.nid)
		return c[lnetwire.SockConnControl] == 1 && c[lnetwire.SockConnBulkIn] == 2 && c[lnetwire.SockConnBulkOut] == 2
	})
	const n = 64
	for i := range n {
		if err := a.d.Send(putMsg(a.nid, b.nid, pattern(8192, byte(i)), uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := a.waitFin(t, nil); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		b.waitRx(t)
	}
	b.d.mu.Lock()
	used := 0
	for _, c := range b.d.peers[a.nid].conns {
		if c.typ == lnetwire.SockConnBulkIn && c.rxMsgs.Load() != 0 {
			used++
		}
	}
	b.d.mu.Unlock()
	if used != 2 {
		t.Fatalf("%d BULK_IN connections carried traffic, want 2", used)
	}
}

// TestSingleConnWithTypedPeer: an untyped node (one ANY connection) and a
// typed one interoperate in both directions.
func TestSingleConnWithTypedPeer(t *testing.T) {
	ips := testIPs(2)
	single := baseConfig()
	single.SingleConn = true
	a := startNode(t, ips[0], single)
	b := startNode(t, ips[1], baseConfig())
	for _, big := range []bool{false, true} {
		n := 10
		if big {
			n = 100000
		}
		data := pattern(n, 4)
		if err := a.send(t, putMsg(a.nid, b.nid, data, 1)); err != nil {
			t.Fatal(err)
		}
		if r := b.waitRx(t); !bytes.Equal(r.data, data) {
			t.Fatal("a→b payload differs")
		}
		if err := b.send(t, putMsg(b.nid, a.nid, data, 2)); err != nil {
			t.Fatal(err)
		}
		if r := a.waitRx(t); !bytes.Equal(r.data, data) {
			t.Fatal("b→a payload differs")
		}
	}
	if c := b.d.Conns(a.nid); c[lnetwire.SockConnAny] != 1 || len(c) != 1 {
		t.Fatalf("typed side conns %v, want one ANY", c)
	}
}
