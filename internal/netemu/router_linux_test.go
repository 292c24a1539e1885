//go:build linux

package netemu_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/internal/e2etest"
	"softib/internal/netemu"
	"softib/internal/testenv"
)

// Datagrams of the UDP tests: a 4-byte sequence number, a kind byte,
// padding.
const (
	kindData   = 0
	kindMarker = 1
)

// arrival is one datagram seen by the receiver.
type arrival struct {
	seq uint32
	src netip.Addr
}

// udpFlow sends n numbered datagrams of size bytes from host from to
// host to (IPv6 if v6), then calls between, then resends an end marker
// until it arrives, and returns the data datagrams in arrival order.
// flowWindow is how many datagrams udpFlow lets be on their way (sent,
// neither received nor dropped by the router's impairment): far fewer
// than the receiver's socket buffer or a CPU's netdev backlog (1000)
// holds, so the kernel never drops one however long the reader or the
// router goes unscheduled on a loaded machine, and only the impairment
// loses datagrams. More than any ReorderGap, so held packets get out.
const flowWindow = 64

// waitWindow blocks until fewer than flowWindow of the sent datagrams are
// unaccounted for: received (unique) or dropped or corrupted by the
// router in direction d.
func waitWindow(t *testing.T, r *netemu.Router, d netemu.Dir, sent int, unique *atomic.Int64, progress <-chan struct{}) {
	t.Helper()
	var tick *time.Ticker
	deadline := time.Now().Add(15 * time.Second) // hang guard only
	for {
		s := r.Stats().AtoB
		if d == netemu.BtoA {
			s = r.Stats().BtoA
		}
		if int64(sent)-unique.Load()-int64(s.Dropped+s.Corrupted) < flowWindow {
			return
		}
		if time.Now().After(deadline) {
			to := r.B
			if d == netemu.BtoA {
				to = r.A
			}
			out, _ := to.Command("sh", "-c", "ip -s link; grep Udp: /proc/net/snmp; ip netns exec "+r.NS+" ip -s link").CombinedOutput()
			t.Fatalf("window stuck: %d sent, %d received, router stats %+v\n%s", sent, unique.Load(), s, out)
		}
		if tick == nil {
			tick = time.NewTicker(time.Millisecond) // router drops do not signal progress
			defer tick.Stop()
		}
		select {
		case <-progress:
		case <-tick.C:
		}
	}
}

// udpRcvbufErrors returns the UDP RcvbufErrors counter of h's namespace:
// datagrams its sockets' receive buffers had no room for.
func udpRcvbufErrors(t *testing.T, h *netemu.Host) uint64 {
	return e2etest.SNMP(t, h.Do, "Udp", "RcvbufErrors")
}

// endMarkers is how many end markers the receiver of udpFlow waits for:
// more than the largest ReorderGap the tests use.
const endMarkers = 4

func udpFlow(t *testing.T, r *netemu.Router, d netemu.Dir, v6 bool, n, size int, between func()) []arrival {
	t.Helper()
	from, to := r.A, r.B
	if d == netemu.BtoA {
		from, to = r.B, r.A
	}
	rcvbufErrs := udpRcvbufErrors(t, to)
	defer func() {
		// Every datagram the router forwarded reached the socket: the
		// window below keeps the receiver's buffer from overflowing, and
		// a drop there would read as a router fault.
		if k := udpRcvbufErrors(t, to) - rcvbufErrs; k != 0 {
			t.Errorf("the receiver's kernel dropped %d datagrams (UDP RcvbufErrors in %s)", k, to.Name)
		}
	}()
	srcIP, dstIP := from.Addr, to.Addr
	if v6 {
		srcIP, dstIP = from.Addr6, to.Addr6
	}
	var rx, tx *net.UDPConn
	if err := to.Do(func() (err error) {
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dstIP, 4791)))
		if err != nil {
			return err
		}
		// SO_RCVBUFFORCE (root, as these tests are): SetReadBuffer is
		// capped by rmem_max, too small to absorb a burst the router
		// forwards while a loaded machine leaves this reader unscheduled.
		raw, err := rx.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		}); err != nil {
			return err
		}
		return serr
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := from.Do(func() (err error) {
		tx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(srcIP, 0)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(dstIP, 4791))

	done := make(chan []arrival, 1)
	var unique atomic.Int64            // distinct data datagrams received
	progress := make(chan struct{}, 1) // a datagram arrived
	go func() {
		var got []arrival
		seen := make([]bool, n)
		markers := 0
		buf := make([]byte, size+100)
		for {
			k, src, err := rx.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Errorf("read: %v", err)
				done <- got
				return
			}
			if k < 5 {
				t.Errorf("short datagram of %d bytes", k)
				continue
			}
			if buf[4] == kindMarker {
				// The router may still hold data behind the first
				// markers (reordering holds a packet until ReorderGap
				// later ones passed): stop once enough markers went by
				// to push every held packet out.
				if markers++; markers >= endMarkers {
					done <- got
					return
				}
				continue
			}
			seq := binary.BigEndian.Uint32(buf)
			got = append(got, arrival{seq, src.Addr().Unmap()})
			if seq < uint32(n) && !seen[seq] {
				seen[seq] = true
				unique.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}
	}()

	b := make([]byte, max(size, 5))
	for i := range n {
		binary.BigEndian.PutUint32(b, uint32(i))
		b[4] = kindData
		if _, err := tx.WriteTo(b, dst); err != nil {
			t.Fatal(err)
		}
		waitWindow(t, r, d, i+1, &unique, progress)
	}
	if between != nil {
		between()
	}
	b[4] = kindMarker
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	hang := time.After(15 * time.Second) // hang guard only
	for {
		if _, err := tx.WriteTo(b[:5], dst); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-done:
			return got
		case <-tick.C:
		case <-hang:
			t.Fatal("the end marker never arrived")
		}
	}
}

// settle waits until the router has taken n packets off the ingress
// link in direction d, so that a later SetImpairment cannot catch
// datagrams still in its socket buffer.
func settle(t *testing.T, r *netemu.Router, d netemu.Dir, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // hang guard
	for {
		s := r.Stats()
		got := s.AtoB.Received
		if d == netemu.BtoA {
			got = s.BtoA.Received
		}
		if got >= uint64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("router received only %d of %d packets: %+v", got, n, s)
		}
		time.Sleep(time.Millisecond)
	}
}

// outOfOrder counts arrivals with a lower sequence number than one seen
// before, and duplicates.
func outOfOrder(got []arrival) (late, dups int) {
	seen := make(map[uint32]bool)
	var high uint32
	for i, a := range got {
		if seen[a.seq] {
			dups++
			continue
		}
		seen[a.seq] = true
		if i > 0 && a.seq < high {
			late++
		}
		high = max(high, a.seq)
	}
	return late, dups
}

func TestUnimpaired(t *testing.T) {
	r := netemu.New(t, netemu.Config{})
	for _, c := range []struct {
		name     string
		dir      netemu.Dir
		from, to *netemu.Host
		v6       bool
		n, size  int
	}{
		{"AtoB", netemu.AtoB, r.A, r.B, false, 2000, 1200},
		{"BtoA", netemu.BtoA, r.B, r.A, false, 2000, 1200},
		{"AtoB6", netemu.AtoB, r.A, r.B, true, 2000, 1200},
		{"AtoB-fragmented", netemu.AtoB, r.A, r.B, false, 100, 5000}, // IP fragments cross too
		{"BtoA6-fragmented", netemu.BtoA, r.B, r.A, true, 100, 5000},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := udpFlow(t, r, c.dir, c.v6, c.n, c.size, nil)
			if len(got) != c.n {
				t.Fatalf("got %d of %d datagrams; stats %+v", len(got), c.n, r.Stats())
			}
			want := c.from.Addr
			if c.v6 {
				want = c.from.Addr6
			}
			for i, a := range got {
				if a.seq != uint32(i) || a.src != want {
					t.Fatalf("arrival %d: seq %d from %v, want seq %d from %v", i, a.seq, a.src, i, want)
				}
			}
		})
	}
	s := r.Stats()
	t.Logf("stats %+v", s)
	if s.AtoB.Forwarded < 4000 || s.BtoA.Forwarded < 2000 {
		t.Errorf("router forwarded too little: %+v", s)
	}
}

func TestReorder(t *testing.T) {
	r := netemu.New(t, netemu.Config{Seed: 1})
	r.SetImpairment(netemu.AtoB, netemu.Impairment{Reorder: 0.2, ReorderGap: 3})
	const n = 1000
	got := udpFlow(t, r, netemu.AtoB, false, n, 200, nil)
	late, dups := outOfOrder(got)
	s := r.Stats().AtoB
	t.Logf("20%% reorder: %d of %d late, %d dups; stats %+v", late, len(got), dups, s)
	if len(got) != n || dups != 0 {
		t.Fatalf("reordering alone lost or duplicated: got %d of %d, %d dups", len(got), n, dups)
	}
	if late < n/10 || s.Held == 0 || s.Reordered == 0 {
		t.Fatalf("too little reordering: %d late, stats %+v", late, s)
	}
}

func TestDuplicate(t *testing.T) {
	r := netemu.New(t, netemu.Config{Seed: 2})
	r.SetImpairment(netemu.BtoA, netemu.Impairment{Duplicate: 0.1})
	const n = 1000
	got := udpFlow(t, r, netemu.BtoA, false, n, 200, nil)
	_, dups := outOfOrder(got)
	s := r.Stats().BtoA
	t.Logf("10%% duplication: %d arrivals for %d sent, %d dups; stats %+v", len(got), n, dups, s)
	if dups < n/20 || dups != len(got)-n || s.Duplicated != uint64(dups) {
		t.Fatalf("%d dups in %d arrivals, stats %+v", dups, len(got), s)
	}
}

func TestLoss(t *testing.T) {
	r := netemu.New(t, netemu.Config{Seed: 3})
	r.SetImpairment(netemu.AtoB, netemu.Impairment{Loss: 0.2, Match: netemu.Filter{Proto: 17, Port: 4791}})
	const n = 1000
	got := udpFlow(t, r, netemu.AtoB, false, n, 200, func() {
		settle(t, r, netemu.AtoB, n)
		r.SetImpairment(netemu.Both, netemu.Impairment{})
	})
	s := r.Stats().AtoB
	t.Logf("20%% loss: %d of %d arrived; stats %+v", len(got), n, s)
	if s.Dropped < n/10 || s.Dropped > n/2 || uint64(len(got)) != n-s.Dropped {
		t.Fatalf("%d of %d arrived, stats %+v", len(got), n, s)
	}
}

func TestCorrupt(t *testing.T) {
	r := netemu.New(t, netemu.Config{Seed: 4})
	r.SetImpairment(netemu.AtoB, netemu.Impairment{Corrupt: 1})
	const n = 200
	got := udpFlow(t, r, netemu.AtoB, false, n, 200, func() {
		settle(t, r, netemu.AtoB, n)
		r.SetImpairment(netemu.AtoB, netemu.Impairment{})
	})
	s := r.Stats().AtoB
	t.Logf("100%% corruption: %d of %d arrived; stats %+v", len(got), n, s)
	// The receiver's kernel drops every datagram whose UDP checksum no
	// longer matches; a flipped byte in the ports may still land one on
	// our socket, but never intact.
	if s.Corrupted < n || len(got) > n/20 {
		t.Fatalf("%d of %d corrupted datagrams delivered, stats %+v", len(got), n, s)
	}
}

// TestDelay checks that the round trip takes at least the emulated
// delay of both directions (a lower bound, not a timing assertion).
func TestDelay(t *testing.T) {
	r := netemu.New(t, netemu.Config{})
	const delay = 5 * time.Millisecond
	r.SetImpairment(netemu.Both, netemu.Impairment{Delay: delay, Jitter: time.Millisecond})
	var a, b *net.UDPConn
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.B.Do(func() (err error) {
		b, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(r.B.Addr, 7)))
		return err
	}))
	defer b.Close()
	must(r.A.Do(func() (err error) { a, err = net.ListenUDP("udp", nil); return err }))
	defer a.Close()
	go func() { // echo server
		buf := make([]byte, 100)
		for {
			n, src, err := b.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			b.WriteToUDPAddrPort(buf[:n], src)
		}
	}()
	buf := make([]byte, 100)
	for i := range 10 {
		start := time.Now()
		_, err := a.WriteToUDPAddrPort([]byte{byte(i)}, netip.AddrPortFrom(r.B.Addr, 7))
		must(err)
		must(a.SetReadDeadline(time.Now().Add(5 * time.Second))) // hang guard
		_, _, err = a.ReadFromUDPAddrPort(buf)
		must(err)
		if rtt := time.Since(start); rtt < 2*(delay-time.Millisecond) {
			t.Fatalf("round trip %v, below the emulated minimum %v", rtt, 2*(delay-time.Millisecond))
		}
	}
}

// TestTCPTransfer moves a few MiB over kernel TCP through loss,
// reordering, duplication and delay, and checks it arrives intact.
func TestTCPTransfer(t *testing.T) {
	r := netemu.New(t, netemu.Config{Seed: 5})
	size := 4 << 20
	if testing.Short() {
		size = 1 << 20
	}
	r.SetImpairment(netemu.AtoB, netemu.Impairment{
		Loss: 0.1, Reorder: 0.1, Duplicate: 0.02, Delay: time.Millisecond, Jitter: 200 * time.Microsecond,
	})
	r.SetImpairment(netemu.BtoA, netemu.Impairment{Loss: 0.02, Delay: time.Millisecond})
	data := make([]byte, size)
	rand.Read(data)

	var ln net.Listener
	if err := r.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(r.B.Addr, 5000).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sum := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
			sum <- [32]byte{}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(18 * time.Second)) // hang guard
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil || n != int64(size) {
			t.Errorf("received %d of %d bytes: %v", n, size, err)
		}
		sum <- [32]byte(h.Sum(nil))
	}()
	var c net.Conn
	if err := r.A.Do(func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err = d.Dial("tcp", netip.AddrPortFrom(r.B.Addr, 5000).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.SetDeadline(time.Now().Add(18 * time.Second))
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.Close()
	got := <-sum
	elapsed := time.Since(start)
	s := r.Stats()
	t.Logf("%d MiB in %v (%.1f MB/s); AtoB %+v", size>>20, elapsed, float64(size)/elapsed.Seconds()/1e6, s.AtoB)
	if got != sha256.Sum256(data) {
		t.Fatal("data corrupted in transit")
	}
	if s.AtoB.Dropped == 0 || s.AtoB.Held == 0 {
		t.Fatalf("impairment not applied: %+v", s.AtoB)
	}
}

// TestTTL checks that the router decrements the TTL (hop limit): a
// datagram sent with TTL 1 is dropped there.
func TestTTL(t *testing.T) {
	r := netemu.New(t, netemu.Config{})
	for i, dst := range []netip.Addr{r.B.Addr, r.B.Addr6} {
		var tx *net.UDPConn
		if err := r.A.Do(func() (err error) {
			src := r.A.Addr
			if dst.Is6() {
				src = r.A.Addr6
			}
			tx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		rc, err := tx.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) {
			if dst.Is4() {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, 1)
			} else {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, 1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(dst, 9)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second) // hang guard
		for r.Stats().AtoB.TTLExpired != uint64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("no TTL drop to %v: %+v", dst, r.Stats().AtoB)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestCommand pings B from a subprocess in A: ICMP crosses the router
// too, and the reply shows the TTL the router decremented.
func TestCommand(t *testing.T) {
	testenv.RequireTool(t, "ping")
	r := netemu.New(t, netemu.Config{})
	for _, dst := range []netip.Addr{r.B.Addr, r.B.Addr6} {
		out, err := r.A.Command("ping", "-c", "1", "-W", "5", dst.String()).CombinedOutput()
		if err != nil {
			t.Fatalf("ping %v: %v\n%s", dst, err, out)
		}
		// B answers with TTL (hop limit) 64, one less after the router.
		if !strings.Contains(string(out), "ttl=63") {
			t.Fatalf("ping %v: reply not routed once:\n%s", dst, out)
		}
	}
	if s := r.Stats(); s.AtoB.Forwarded < 2 || s.BtoA.Forwarded < 2 {
		t.Fatalf("stats %+v", s)
	}
}

// BenchmarkForward measures the router's forwarding rate: the sender
// blasts 64-byte UDP datagrams; delivered/s is what reached B.
func BenchmarkForward(b *testing.B) {
	r := netemu.New(b, netemu.Config{NoIPv6: true})
	var rx, tx *net.UDPConn
	if err := r.B.Do(func() (err error) {
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(r.B.Addr, 4791)))
		if err == nil {
			err = rx.SetReadBuffer(16 << 20)
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	if err := r.A.Do(func() (err error) { tx, err = net.ListenUDP("udp", nil); return err }); err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	count := make(chan int, 1)
	go func() {
		buf := make([]byte, 100)
		n := 0
		for {
			k, err := rx.Read(buf)
			if err != nil {
				count <- n
				return
			}
			if k == 64 {
				n++
			}
		}
	}()
	dst := netip.AddrPortFrom(r.B.Addr, 4791)
	msg := make([]byte, 64)
	start := time.Now()
	for b.Loop() {
		if _, err := tx.WriteToUDPAddrPort(msg, dst); err != nil {
			b.Fatal(err)
		}
	}
	sent := b.N
	for r.Queued() > 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the receiver catch up
	elapsed := time.Since(start)
	rx.Close()
	got := <-count
	s := r.Stats().AtoB
	b.ReportMetric(float64(got)/elapsed.Seconds(), "delivered/s")
	b.ReportMetric(float64(s.Forwarded)/elapsed.Seconds(), "forwarded/s")
	b.ReportMetric(1-float64(got)/float64(sent), "loss")
	b.ReportMetric(float64(s.KernelDrop)/float64(sent), "router-overrun")
}

// TestUDPGSO sends with UDP_SEGMENT (as softib's udp package does): the
// veth hands the router one super-packet, which it must split into
// datagrams with correct lengths and checksums.
func TestUDPGSO(t *testing.T) {
	r := netemu.New(t, netemu.Config{})
	for _, v6 := range []bool{false, true} {
		src, dst := r.A.Addr, r.B.Addr
		if v6 {
			src, dst = r.A.Addr6, r.B.Addr6
		}
		var rx, tx *net.UDPConn
		if err := r.B.Do(func() (err error) {
			rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		if err := r.A.Do(func() (err error) {
			tx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		rc, err := tx.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, 1000) })
		if err != nil {
			t.Fatal(err)
		}
		const segs = 8
		msg := make([]byte, segs*1000-300) // the last datagram is short
		for i := range msg {
			msg[i] = byte(i / 1000)
		}
		if _, err := tx.WriteToUDPAddrPort(msg, netip.AddrPortFrom(dst, 4791)); err != nil {
			t.Fatal(err)
		}
		rx.SetReadDeadline(time.Now().Add(5 * time.Second)) // hang guard
		buf := make([]byte, 2000)
		for i := range segs {
			n, from, err := rx.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("datagram %d: %v; stats %+v", i, err, r.Stats().AtoB)
			}
			want := min(1000, len(msg)-i*1000)
			if n != want || from.Addr().Unmap() != src || !bytes.Equal(buf[:n], msg[i*1000:i*1000+want]) {
				t.Fatalf("datagram %d: %d bytes from %v, want %d from %v", i, n, from, want, src)
			}
		}
	}
	s := r.Stats().AtoB
	t.Logf("stats %+v", s)
	if s.Segmented == 0 {
		t.Log("the kernel segmented before the router (no UDP GSO over veth)")
	}
}

// TestCleanup checks that a router leaves no namespace or goroutine
// behind.
func TestCleanup(t *testing.T) {
	before := runtime.NumGoroutine()
	var names []string
	t.Run("router", func(t *testing.T) {
		r := netemu.New(t, netemu.Config{})
		udpFlow(t, r, netemu.AtoB, false, 10, 10, nil)
		// Leave a packet queued at the end.
		r.SetImpairment(netemu.Both, netemu.Impairment{Delay: time.Hour})
		var tx *net.UDPConn
		if err := r.A.Do(func() (err error) { tx, err = net.ListenUDP("udp", nil); return err }); err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		deadline := time.Now().Add(5 * time.Second) // hang guard
		for r.Queued() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("nothing queued")
			}
			tx.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(r.B.Addr, 9))
			time.Sleep(time.Millisecond)
		}
		names = []string{r.A.Name, r.NS, r.B.Name}
	})
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, n := range names {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s survived the test", n)
		}
	}
	deadline := time.Now().Add(5 * time.Second) // hang guard
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines before, %d after", before, runtime.NumGoroutine())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
