package perftest_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/internal/testaddr"
	_ "softib/rxe"
	"softib/tools/perftest"
	"softib/verbs"
)

func openDev(t *testing.T) verbs.Device {
	t.Helper()
	d, err := verbs.Open(verbs.DeviceConfig{Addr: testaddr.Next()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

type pairResult struct {
	srvRows, cliRows []perftest.Row
	srvOut, cliOut   string
}

func runPerfPair(t *testing.T, cfg perftest.Config) pairResult {
	t.Helper()
	return runPerfPairOn(t, openDev(t), openDev(t), cfg)
}

// runPerfPairOn runs cfg between a server on ds and a client on dc.
func runPerfPairOn(t *testing.T, ds, dc verbs.Device, cfg perftest.Config) pairResult {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sb, cb bytes.Buffer
	if cfg.GIDIndex == 0 {
		cfg.GIDIndex = -1
	}
	srv := cfg
	srv.Listener, srv.Out = ln, &sb
	cli := cfg
	cli.Host, cli.TCPPort, cli.Out = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port, &cb
	var r pairResult
	var wg sync.WaitGroup
	var serr, cerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if r.srvRows, serr = perftest.Run(ctx, ds, srv); serr != nil {
			cancel()
		}
	}()
	if r.cliRows, cerr = perftest.Run(ctx, dc, cli); cerr != nil {
		cancel()
	}
	wg.Wait()
	r.srvOut, r.cliOut = sb.String(), cb.String()
	if serr != nil || cerr != nil {
		type statser interface{ Stats() map[string]uint64 }
		if a, ok := ds.(statser); ok {
			t.Logf("server device stats: %v", nonzero(a.Stats()))
		}
		if a, ok := dc.(statser); ok {
			t.Logf("client device stats: %v", nonzero(a.Stats()))
		}
		t.Fatalf("%v: server: %v\nclient: %v\nserver out:\n%s\nclient out:\n%s", cfg.Test, serr, cerr, r.srvOut, r.cliOut)
	}
	return r
}

func TestPerfE2E(t *testing.T) {
	for _, c := range []perftest.Config{
		{Test: perftest.WriteBW, Iters: 200, Size: 4096},
		{Test: perftest.WriteBW, Iters: 100, Size: 70000, QPs: 2},
		{Test: perftest.ReadBW, Iters: 200, Size: 8192},
		{Test: perftest.SendBW, Iters: 300, Size: 2048, QPs: 2, RxDepth: 64},
		{Test: perftest.AtomicBW, Iters: 200},
		{Test: perftest.AtomicBW, Iters: 50, Atomic: perftest.CmpAndSwap},
		{Test: perftest.WriteLat, Iters: 100},
		{Test: perftest.WriteLat, Iters: 20, Size: 5000},
		{Test: perftest.ReadLat, Iters: 100, Size: 64},
		{Test: perftest.SendLat, Iters: 100, Size: 32},
		{Test: perftest.SendLat, Iters: 30, Size: 3000, Events: true},
		{Test: perftest.AtomicLat, Iters: 100},
	} {
		t.Run(c.Test.String(), func(t *testing.T) {
			r := runPerfPair(t, c)
			// The aggregate, then one row per QP with -q N.
			if n := len(r.cliRows); n != 1 && n != 1+c.QPs || r.cliRows[0].QP != 0 {
				t.Fatalf("client rows %+v\n%s", r.cliRows, r.cliOut)
			}
			row := r.cliRows[0]
			if row.Iters == 0 || (!row.Lat && row.BWAvg <= 0) || (row.Lat && row.TTypical <= 0) {
				t.Fatalf("client row %+v", row)
			}
			hdr := "#bytes     #iterations    BW peak[MB/sec]"
			if c.Test.IsLat() {
				hdr = "#bytes #iterations    t_min[usec]"
			}
			for _, want := range []string{hdr, " local address: LID 0000 QPN 0x", " remote address: LID 0000 QPN 0x", " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:",
				c.Test.Verb().Title() + " ", "Test\n", perftest.ResultLine} {
				if !strings.Contains(r.cliOut, want) {
					t.Errorf("client output lacks %q:\n%s", want, r.cliOut)
				}
			}
			switch c.Test {
			case perftest.WriteBW, perftest.ReadBW, perftest.AtomicBW:
				// The server prints the client's report.
				if len(r.srvRows) != 1 || r.srvRows[0].BWAvg != row.BWAvg || r.srvRows[0].Iters != row.Iters {
					t.Errorf("server rows %+v, client %+v", r.srvRows, row)
				}
			case perftest.SendBW, perftest.WriteLat, perftest.SendLat:
				if len(r.srvRows) == 0 || r.srvRows[0].Iters == 0 {
					t.Errorf("server rows %+v", r.srvRows)
				}
			}
			want := uint64(c.Iters * max(c.QPs, 1))
			if !c.Test.IsLat() && row.Iters != want {
				t.Errorf("iters %d, want %d", row.Iters, want)
			}
		})
	}
}

func TestPerfDuration(t *testing.T) {
	r := runPerfPair(t, perftest.Config{Test: perftest.WriteBW, Duration: 300 * time.Millisecond, Size: 1024})
	if len(r.cliRows) != 1 || r.cliRows[0].Iters == 0 || r.cliRows[0].BWAvg <= 0 {
		t.Fatalf("rows %+v", r.cliRows)
	}
	r = runPerfPair(t, perftest.Config{Test: perftest.SendLat, Duration: 300 * time.Millisecond})
	if len(r.cliRows) != 1 || r.cliRows[0].TAvg <= 0 || !strings.Contains(r.cliOut, "tps average") {
		t.Fatalf("rows %+v\n%s", r.cliRows, r.cliOut)
	}
}

func nonzero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}
