//go:build linux

package netns_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/udp"
)

// exchange sends n datagrams of size bytes from node `from` to the socket
// at dst on node `to`, then calls between (to lift impairments) and sends
// an end marker, and returns how many data datagrams arrived.
func exchange(t *testing.T, from, to *netns.Node, dst netip.AddrPort, n, size int, between func()) int {
	t.Helper()
	var rx, tx *udp.Socket
	if err := to.Do(func() (err error) { rx, err = udp.Listen(dst, nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	src := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if dst.Addr().Is6() {
		src = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
	}
	if err := from.Do(func() (err error) { tx, err = udp.Listen(src, nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()

	done := make(chan int, 1)
	ready := make(chan struct{})
	go func() {
		signal := ready
		msgs := make([]udp.Message, rx.BatchSize())
		for i := range msgs {
			msgs[i].Buf = make([]byte, size+100)
		}
		got := 0
		for {
			k, err := rx.ReadBatch(msgs)
			if err != nil {
				t.Errorf("ReadBatch: %v", err)
				done <- got
				return
			}
			for _, m := range msgs[:k] {
				switch {
				case m.N == 1 && m.Buf[0] == 0xFE: // warm-up probe
					if signal != nil {
						close(signal)
						signal = nil
					}
				case m.N == 1 && m.Buf[0] == 0xFF:
					done <- got
					return
				default:
					got++
				}
			}
		}
	}()

	// Warm up until ARP/ND has resolved, so that neighbour queue
	// overflow cannot lose datagrams.
	probe := []udp.Message{{Buf: []byte{0xFE}, N: 1, Addr: dst}}
	for warm := false; !warm; {
		if _, err := tx.WriteBatch(probe); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ready:
			warm = true
		case <-time.After(20 * time.Millisecond):
		}
	}

	out := make([]udp.Message, tx.BatchSize())
	for i := range out {
		out[i] = udp.Message{Buf: make([]byte, size), N: size, Addr: dst}
	}
	for sent := 0; sent < n; {
		k, err := tx.WriteBatch(out[:min(len(out), n-sent)])
		if err != nil {
			t.Fatalf("WriteBatch: %v", err)
		}
		sent += k
		// Pace a little so the receiver's buffer never overflows: only
		// the impairment should lose datagrams.
		time.Sleep(time.Millisecond)
	}
	if between != nil {
		between()
	}
	marker := []udp.Message{{Buf: []byte{0xFF}, N: 1, Addr: dst}}
	stop := time.NewTicker(100 * time.Millisecond)
	defer stop.Stop()
	for {
		// The marker is resent until it arrives.
		if _, err := tx.WriteBatch(marker); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-done:
			return got
		case <-stop.C:
		case <-time.After(30 * time.Second): // hang guard
			t.Fatal("receiver never saw the end marker")
		}
	}
}

func TestPairExchange(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{MTU: 9000})
	for _, c := range []struct {
		name     string
		from, to *netns.Node
		dst      netip.AddrPort
	}{
		{"A→B v4", p.A, p.B, netip.AddrPortFrom(p.B.Addr, 4791)},
		{"B→A v4", p.B, p.A, netip.AddrPortFrom(p.A.Addr, 4791)},
		{"A→B v6", p.A, p.B, netip.AddrPortFrom(p.B.Addr6, 4791)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := exchange(t, c.from, c.to, c.dst, 500, 4200, nil); got != 500 {
				t.Fatalf("got %d of 500 datagrams on an unimpaired link", got)
			}
		})
	}
}

func TestPairLoss(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{MTU: 9000})
	if err := p.SetNetem(netns.A, netns.Netem{Loss: 10}); err != nil {
		t.Fatal(err)
	}
	// Single datagrams per syscall without GSO would be the cleanest
	// loss sample; with GSO whole super-packets are lost, so only check
	// that something but not everything arrived.
	const n = 3000
	got := exchange(t, p.A, p.B, netip.AddrPortFrom(p.B.Addr, 4791), n, 1000, func() {
		if err := p.A.ClearNetem(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("10%% loss: %d of %d arrived", got, n)
	if got == 0 || got >= n {
		t.Fatalf("got %d of %d with 10%% loss", got, n)
	}
}

func TestPairDuplicate(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{})
	if err := p.SetNetem(netns.B, netns.Netem{Duplicate: 20}); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	got := exchange(t, p.B, p.A, netip.AddrPortFrom(p.A.Addr, 4791), n, 100, func() { p.B.ClearNetem() })
	t.Logf("20%% duplication: %d arrived for %d sent", got, n)
	if got <= n {
		t.Fatalf("got %d for %d sent with 20%% duplication", got, n)
	}
}

func TestNetemDelay(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{})
	err := p.SetNetem(netns.A, netns.Netem{Delay: 5 * time.Millisecond, Reorder: 10, Corrupt: 1})
	if errors.Is(err, netns.ErrNetemUnsupported) {
		t.Logf("kernel has no netem: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := exchange(t, p.A, p.B, netip.AddrPortFrom(p.B.Addr, 4791), 200, 100, func() { p.A.ClearNetem() }); got < 150 {
		t.Fatalf("got %d of 200", got)
	}
}

func TestCommand(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{MTU: 4000})
	testenv.RequireTool(t, "ping")
	out, err := p.B.Command("ip", "-o", "addr", "show", "dev", p.B.Dev).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{p.B.Addr.String(), p.B.Addr6.String()} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ip addr in %s lacks %s:\n%s", p.B.Name, want, out)
		}
	}
	out, err = p.A.Command("ping", "-c", "1", "-W", "5", p.B.Addr.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping: %v: %s", err, out)
	}
}

func TestDoError(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{NoIPv6: true})
	want := errors.New("boom")
	if err := p.A.Do(func() error { return want }); err != want {
		t.Fatalf("Do = %v", err)
	}
	if err := p.A.Do(func() error { panic("x") }); err == nil {
		t.Fatal("panic not reported")
	}
}

func TestBridge(t *testing.T) {
	nw := netns.New(t, netns.Config{N: 3})
	if nw.Hub == "" || len(nw.Nodes) != 3 {
		t.Fatalf("network %+v", nw)
	}
	for _, to := range nw.Nodes[1:] {
		if got := exchange(t, nw.Nodes[0], to, netip.AddrPortFrom(to.Addr, 4791), 100, 1000, nil); got != 100 {
			t.Fatalf("to %s: got %d of 100", to.Name, got)
		}
	}
	if got := exchange(t, nw.Nodes[2], nw.Nodes[1], netip.AddrPortFrom(nw.Nodes[1].Addr6, 4791), 100, 1000, nil); got != 100 {
		t.Fatalf("v6: got %d of 100", got)
	}
}

func TestRelay(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{Relay: true, MTU: 9000, Seed: 7})
	dst := netip.AddrPortFrom(p.B.Addr, 4791)
	if got := exchange(t, p.A, p.B, dst, 300, 4200, nil); got != 300 {
		t.Fatalf("unimpaired relay: got %d of 300", got)
	}
	if got := exchange(t, p.B, p.A, netip.AddrPortFrom(p.A.Addr6, 4791), 300, 1000, nil); got != 300 {
		t.Fatalf("unimpaired relay v6: got %d of 300", got)
	}

	// A delayed link: a round trip takes at least the delay.
	testenv.RequireTool(t, "ping")
	const delay = 30 * time.Millisecond
	if err := p.SetNetem(netns.A, netns.Netem{Delay: delay}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := p.A.Command("ping", "-c", "1", "-W", "5", p.B.Addr.String()).CombinedOutput(); err != nil {
		t.Fatalf("ping: %v: %s", err, out)
	}
	if rtt := time.Since(start); rtt < delay {
		t.Fatalf("round trip %v shorter than the %v delay", rtt, delay)
	}

	imp := netns.Netem{Loss: 10, Duplicate: 5, Corrupt: 5, Reorder: 25, Delay: 2 * time.Millisecond, Jitter: time.Millisecond}
	if err := p.SetNetem(netns.A, imp); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	got := exchange(t, p.A, p.B, dst, n, 1000, func() { p.A.ClearNetem() })
	st := p.RelayStats()
	t.Logf("impaired relay: %d of %d arrived; dropped %v duplicated %v corrupted %v reordered %v",
		got, n, &st.Dropped, &st.Duplicated, &st.Corrupted, &st.Reordered)
	if got == 0 || got >= n+int(st.Duplicated.Load()) {
		t.Fatalf("got %d", got)
	}
	for name, c := range map[string]uint64{"dropped": st.Dropped.Load(), "duplicated": st.Duplicated.Load(),
		"corrupted": st.Corrupted.Load(), "reordered": st.Reordered.Load()} {
		if c == 0 {
			t.Errorf("relay %s nothing", name)
		}
	}
}
