package perftestcm_test

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/e2etest"
	"softib/internal/testaddr"
	"softib/internal/tsharktest"
	"softib/rdmacm"
	_ "softib/rxe"
	"softib/tools/perftest"
	"softib/tools/perftestcm"
	"softib/verbs"
)

func openDev(t *testing.T) (verbs.Device, string) {
	t.Helper()
	a := testaddr.Next()
	d, err := verbs.Open(verbs.DeviceConfig{Addr: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, a.String()
}

var port atomic.Int32

// runPair runs cfg with -R between two devices on loopback addresses.
func runPair(t *testing.T, cfg perftest.Config) (srvRows, cliRows []perftest.Row, srvOut, cliOut string) {
	t.Helper()
	ds, _ := openDev(t)
	dc, _ := openDev(t)
	return runPairOn(t, ds, dc, cfg)
}

// runPairOn is runPair between a server on ds and a client on dc.
func runPairOn(t *testing.T, ds, dc verbs.Device, cfg perftest.Config) (srvRows, cliRows []perftest.Row, srvOut, cliOut string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	cfg.RDMACM, cfg.CM, cfg.GIDIndex = true, &perftestcm.Hook{}, -1
	cfg.TCPPort = 18515 + int(port.Add(1))
	var sb, cb bytes.Buffer
	srv, cli := cfg, cfg
	// The client starts once the server's RDMA CM listens: before that
	// the server device has no CM to answer (a kernel always has one).
	listening := make(chan struct{})
	srv.CM = &perftestcm.Hook{OnListen: func(netip.AddrPort) { close(listening) }}
	srv.Out = &sb
	cli.Out = &cb
	cli.Host = serverHost(t, ds)
	var wg sync.WaitGroup
	var serr, cerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if srvRows, serr = perftest.Run(ctx, ds, srv); serr != nil {
			cancel()
		}
	}()
	select {
	case <-listening:
	case <-ctx.Done():
	}
	if cliRows, cerr = perftest.Run(ctx, dc, cli); cerr != nil {
		cancel()
	}
	wg.Wait()
	srvOut, cliOut = sb.String(), cb.String()
	if serr != nil || cerr != nil {
		t.Fatalf("%v: server: %v\nclient: %v\nserver out:\n%s\nclient out:\n%s", cfg.Test, serr, cerr, srvOut, cliOut)
	}
	return
}

// serverHost returns the address of d's IPv4-mapped GID.
func serverHost(t *testing.T, d verbs.Device) string {
	t.Helper()
	g, err := d.QueryGID(1, perftest.BestGIDIndex(d, 1))
	if err != nil {
		t.Fatal(err)
	}
	return g.Addr().Unmap().String()
}

func TestRDMACM(t *testing.T) {
	for _, c := range []perftest.Config{
		{Test: perftest.WriteBW, Iters: 200, Size: 4096},
		{Test: perftest.WriteBW, Iters: 100, Size: 8192, QPs: 3},
		{Test: perftest.ReadBW, Iters: 200, Size: 8192},
		{Test: perftest.SendBW, Iters: 300, Size: 2048, QPs: 2, RxDepth: 64},
		{Test: perftest.AtomicBW, Iters: 100},
		{Test: perftest.WriteLat, Iters: 100},
		{Test: perftest.ReadLat, Iters: 100, Size: 64},
		{Test: perftest.SendLat, Iters: 100, Size: 32},
		{Test: perftest.AtomicLat, Iters: 50},
	} {
		t.Run(c.Test.String(), func(t *testing.T) {
			_, rows, _, out := runPair(t, c)
			// The aggregate, then one row per QP with -q N.
			if n := len(rows); n != 1 && n != 1+c.QPs || rows[0].QP != 0 || rows[0].Iters == 0 {
				t.Fatalf("client rows %+v\n%s", rows, out)
			}
			for _, want := range []string{" rdma_cm QPs\t : ON", " Data ex. method : rdma_cm", " remote address: LID 0000 QPN 0x"} {
				if !strings.Contains(out, want) {
					t.Errorf("client output lacks %q:\n%s", want, out)
				}
			}
			if want := uint64(c.Iters * max(c.QPs, 1)); !c.Test.IsLat() && rows[0].Iters != want {
				t.Errorf("iters %d, want %d", rows[0].Iters, want)
			}
		})
	}
}

func TestNoServer(t *testing.T) {
	ds, _ := openDev(t)
	dc, _ := openDev(t)
	// The server host has an RDMA CM (as every kernel does) but nothing
	// listens on the port: its CM rejects with "invalid service ID".
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	if err := m.AddDevice(ds); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := perftest.Run(ctx, dc, perftest.Config{Test: perftest.WriteBW, RDMACM: true, GIDIndex: -1,
		CM: &perftestcm.Hook{ConnectRetries: 2}, Host: serverHost(t, ds), TCPPort: 18400})
	if err == nil || !strings.Contains(err.Error(), "REJECTED") {
		t.Fatalf("%v", err)
	}
}

// TestClientNoServerCM is `perf -R` against a server without -R: its
// device runs no CM, so the client's REQs go unanswered. The client
// reports its wait and fails after the CM's timeout, naming the causes.
func TestClientNoServerCM(t *testing.T) {
	ds, _ := openDev(t) // a device, no CM: a perftest server without -R
	dc, _ := openDev(t)
	cmCfg := rdmacm.Config{PacketLifeTime: 12, ResponseTimeout: 14, MaxCMRetries: 2} // 3 REQs 100 ms apart
	var progress bytes.Buffer
	var mu sync.Mutex
	cfg := perftest.Config{Test: perftest.WriteBW, Iters: 10, RDMACM: true, GIDIndex: -1,
		TCPPort: 18515 + int(port.Add(1)), Host: serverHost(t, ds), Out: &bytes.Buffer{},
		CM: &perftestcm.Hook{CM: cmCfg, ConnectRetries: 1, Progress: writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return progress.Write(p)
		})}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	_, err := perftest.Run(ctx, dc, cfg)
	if err == nil || !strings.Contains(err.Error(), "no RDMA CM reply from") || !strings.Contains(err.Error(), "without -R") {
		t.Fatalf("error %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(progress.String(), "perf: no RDMA CM reply from") {
		t.Fatalf("no progress lines: %q", progress.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestRDMACMTOS: -T sets the RDMA CM IDs' TOS (rdma_set_option), which
// the route, the REQ's path and both sides' QPs carry: every RoCE packet
// of the run but the CM's own MADs has it in its IP header, as a capture
// of lo shows. -b runs over RDMA CM too.
func TestRDMACMTOS(t *testing.T) {
	ds, sa := openDev(t)
	dc, ca := openDev(t)
	capt := e2etest.StartCapture(t, "lo", "udp port 4791 and (host "+sa+" or host "+ca+")")
	const tos = 0x68
	_, rows, _, out := runPairOn(t, ds, dc, perftest.Config{Test: perftest.WriteBW, Iters: 100, Size: 4096, TOS: tos, Duplex: true})
	capt.Stop()
	if len(rows) == 0 || rows[0].Direction != perftest.DirBoth || !strings.Contains(out, "\tTOS    : 104") {
		t.Errorf("rows %+v\n%s", rows, out)
	}
	got := tsharktest.Fields(t, capt.Path, []string{"ip.dsfield"}, "-Y", "infiniband.bth.destqp != 1")
	seen := map[string]int{}
	for _, r := range got {
		seen[r[0]]++
	}
	if len(got) < 20 || len(seen) != 1 || seen["0x68"] == 0 {
		t.Errorf("%d RoCE packets off QP1, IP DS fields %v; want all 0x68", len(got), seen)
	}
}
