package rping_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/testenv"
	"softib/rdmacm"
	"softib/rxe"
	"softib/tools/internal/rdmautil"
	"softib/tools/rping"
	"softib/verbs"
)

var addrSeq atomic.Uint32

// loopAddr returns a loopback address unique to this test process.
func loopAddr() netip.Addr {
	n := addrSeq.Add(1)
	pid := os.Getpid()
	return netip.AddrFrom4([4]byte{127, byte(100 + pid%50), byte(pid >> 6), byte(n)})
}

// node is one "host": a manager with one rxe device, as a softib rping
// process has.
func node(t *testing.T) (*rdmacm.Manager, netip.Addr) {
	t.Helper()
	a := loopAddr()
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a}})
	if err != nil {
		t.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddDevice(d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); d.Close() })
	return m, a
}

// want is the data rping sends in ping i (computed independently of
// Pattern: the start character advances by one per ping from 'A').
func want(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	c := byte('A' + i%58)
	for len(b) < size-1 {
		b = append(b, c)
		if c++; c > 'z' {
			c = 'A'
		}
	}
	return string(b)
}

type run struct {
	res       rping.Result
	err       error
	out, err2 *testenv.Buffer
}

func startServer(t *testing.T, ctx context.Context, m *rdmacm.Manager, cfg rping.Config) (<-chan run, netip.AddrPort) {
	t.Helper()
	ready := make(chan netip.AddrPort, 1)
	r := run{out: &testenv.Buffer{}, err2: &testenv.Buffer{}}
	cfg.Server, cfg.Out, cfg.Err = true, r.out, r.err2
	cfg.Ready = func(a netip.AddrPort) { ready <- a }
	done := make(chan run, 1)
	go func() {
		r.res, r.err = rping.Run(ctx, m, cfg)
		done <- r
	}()
	select {
	case a := <-ready:
		return done, a
	case r := <-done:
		t.Fatalf("server: %v\n%s", r.err, r.err2)
	}
	return nil, netip.AddrPort{}
}

func client(ctx context.Context, m *rdmacm.Manager, cfg rping.Config) run {
	r := run{out: &testenv.Buffer{}, err2: &testenv.Buffer{}}
	cfg.Out, cfg.Err = r.out, r.err2
	r.res, r.err = rping.Run(ctx, m, cfg)
	return r
}

func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		count, size int
		selfQP      bool
	}{{1, 64, false}, {10, 26, false}, {100, 64, false}, {5, 4096, false}, {3, 65535, false}, {20, 100, true}} {
		t.Run(fmt.Sprintf("C%d_S%d_q%v", tc.count, tc.size, tc.selfQP), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
			defer cancel()
			ms, as := node(t)
			mc, ac := node(t)
			port := uint16(7000 + addrSeq.Load())
			sdone, _ := startServer(t, ctx, ms, rping.Config{Addr: as, Port: port, Size: tc.size, Verbose: true, SelfQP: tc.selfQP})
			c := client(ctx, mc, rping.Config{Addr: as, Source: ac, Port: port, Count: tc.count, Size: tc.size,
				Verbose: true, Validate: true, SelfQP: tc.selfQP})
			if c.err != nil || c.res.Pings != tc.count {
				t.Fatalf("client: %+v %v\n%s", c.res, c.err, c.err2)
			}
			s := <-sdone
			if s.err != nil || s.res.Pings != tc.count {
				t.Fatalf("server: %+v %v\n%s", s.res, s.err, s.err2)
			}
			cl := strings.Split(strings.TrimSuffix(c.out.String(), "\n"), "\n")
			sl := strings.Split(strings.TrimSuffix(s.out.String(), "\n"), "\n")
			if len(cl) != tc.count || len(sl) != tc.count {
				t.Fatalf("%d client and %d server lines, want %d", len(cl), len(sl), tc.count)
			}
			for i := range tc.count {
				if w := "ping data: " + want(i, tc.size); cl[i] != w {
					t.Fatalf("client line %d:\n%q\nwant\n%q", i, cl[i], w)
				}
				if w := "server ping data: " + want(i, tc.size); sl[i] != w {
					t.Fatalf("server line %d:\n%q\nwant\n%q", i, sl[i], w)
				}
			}
			if !strings.Contains(s.err2.String(), "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n") {
				t.Errorf("server stderr %q", s.err2.String())
			}
		})
	}
}

// TestPersistentServer serves several clients, two at a time, from one
// -P server.
func TestPersistentServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ms, as := node(t)
	sctx, stop := context.WithCancel(ctx)
	sdone, _ := startServer(t, sctx, ms, rping.Config{Addr: netip.IPv4Unspecified(), Port: 7174, Persistent: true})
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 { // rping listens with backlog 3
		mc, _ := node(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(ctx, mc, rping.Config{Addr: as, Count: 5 + i, Validate: true})
			if c.err != nil || c.res.Pings != 5+i {
				errs <- fmt.Errorf("client %d: %+v %v %s", i, c.res, c.err, c.err2)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The server serves until stopped; every ping it counted is whole
	// even when the stop interrupts a connection's last wait.
	stop()
	s := <-sdone
	if s.res.Conns != 3 || s.res.Pings != 5+6+7 {
		t.Fatalf("server %+v %v\n%s", s.res, s.err, s.err2)
	}
}

func TestNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, as := node(t)
	mc, _ := node(t)
	c := client(ctx, mc, rping.Config{Addr: as, Port: 7999, Count: 1})
	if c.err == nil || !strings.Contains(c.err2.String(), "cma event RDMA_CM_EVENT_REJECTED, error 8") {
		t.Fatalf("client %v\n%s", c.err, c.err2)
	}
}

func TestBadConfig(t *testing.T) {
	mc, _ := node(t)
	for _, cfg := range []rping.Config{{Size: 25, Addr: netip.MustParseAddr("127.0.0.1")}, {Size: 65536, Server: true},
		{Count: -1, Server: true}, {}} {
		if _, err := rping.Run(context.Background(), mc, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// BenchmarkPing runs b.N rping iterations (two SENDs, an RDMA READ, an
// RDMA WRITE and two go-ahead SENDs each) with -V; -benchmem shows the
// loop allocates nothing per ping once set up (setup is amortized).
func BenchmarkPing(b *testing.B) {
	ms, as := benchNode(b)
	mc, _ := benchNode(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := rping.Run(ctx, ms, rping.Config{Server: true, Addr: as, Port: 7300,
			Ready: func(netip.AddrPort) { close(ready) }})
		done <- err
	}()
	<-ready
	b.ReportAllocs()
	b.ResetTimer()
	res, err := rping.Run(ctx, mc, rping.Config{Addr: as, Port: 7300, Count: b.N, Validate: true})
	b.StopTimer()
	if err != nil || res.Pings != b.N {
		b.Fatalf("%+v %v", res, err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func benchNode(b *testing.B) (*rdmacm.Manager, netip.Addr) {
	b.Helper()
	a := loopAddr()
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a}})
	if err != nil {
		b.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddDevice(d); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(); d.Close() })
	return m, a
}

// TestClientNoPeerCM: a client whose server address has no device (or no
// CM) reports its wait while the CM resends, and fails after the CM's
// timeout naming the likely causes.
func TestClientNoPeerCM(t *testing.T) {
	a := loopAddr()
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a}})
	if err != nil {
		t.Fatal(err)
	}
	// A short CM timeout: 3 REQs 100 ms apart.
	cmCfg := rdmacm.Config{PacketLifeTime: 12, ResponseTimeout: 14, MaxCMRetries: 2}
	m := rdmacm.NewManager(cmCfg)
	if err := m.AddDevice(d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); d.Close() })
	var progress testenv.Buffer
	_, err = rping.Run(t.Context(), m, rping.Config{Addr: loopAddr(), Source: a, Count: 1,
		Progress: &progress, CMTimeout: rdmautil.CMConnectTimeout(cmCfg)})
	if err == nil || !strings.Contains(err.Error(), "no RDMA CM reply from") || !strings.Contains(err.Error(), "no softib or rxe device") {
		t.Fatalf("error %v", err)
	}
	if !strings.Contains(progress.String(), "rping: no RDMA CM reply from") {
		t.Fatalf("no progress lines: %q", progress.String())
	}
}
