package perftest_test

import (
	"context"
	"flag"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"softib/internal/e2etest"
	"softib/internal/tsharktest"
	"softib/tools/perftest"
	"softib/verbs"
)

// TestPerfBidirectional runs -b as perftest does: both sides send, each
// prints the sum of both directions, and --report-both adds each side's
// own table.
func TestPerfBidirectional(t *testing.T) {
	for _, c := range []perftest.Config{
		{Test: perftest.WriteBW, Iters: 200, Size: 4096, Duplex: true, ReportBoth: true},
		{Test: perftest.ReadBW, Iters: 100, Size: 8192, Duplex: true, QPs: 2},
		{Test: perftest.AtomicBW, Iters: 100, Duplex: true},
		{Test: perftest.SendBW, Iters: 200, Size: 2048, Duplex: true, ReportBoth: true, QPs: 2},
		{Test: perftest.SendBW, Iters: 100, Size: 1024, Duplex: true, UD: true},
	} {
		name := c.Test.String()
		if c.UD {
			name += "_ud"
		}
		t.Run(name, func(t *testing.T) {
			r := runPerfPair(t, c)
			for side, rows := range map[string][]perftest.Row{"server": r.srvRows, "client": r.cliRows} {
				out := map[string]string{"server": r.srvOut, "client": r.cliOut}[side]
				if !strings.Contains(out, " Bidirectional BW Test\n") || !strings.Contains(out, " TX depth ") {
					t.Errorf("%s banner:\n%s", side, out)
				}
				var sum, local, remote *perftest.Row
				qps := 0
				for i := range rows {
					switch x := &rows[i]; {
					case x.QP > 0:
						qps++
					case x.Direction == perftest.DirBoth:
						sum = x
					case x.Direction == perftest.DirLocal:
						local = x
					case x.Direction == perftest.DirRemote:
						remote = x
					}
				}
				if sum == nil || sum.Iters != uint64(c.Iters*max(c.QPs, 1)) || sum.BWAvg <= 0 {
					t.Fatalf("%s rows %+v\n%s", side, rows, out)
				}
				if c.QPs > 1 && qps != c.QPs {
					t.Errorf("%s: %d per-QP rows, want %d: %+v", side, qps, c.QPs, rows)
				}
				if !c.ReportBoth {
					continue
				}
				if local == nil || remote == nil || !strings.Contains(out, " Local results: ") || !strings.Contains(out, " Remote results: ") {
					t.Fatalf("%s: --report-both rows %+v\n%s", side, rows, out)
				}
				if d := sum.BWAvg - (local.BWAvg + remote.BWAvg); d > 1e-6 || d < -1e-6 {
					t.Errorf("%s: sum %.3f != local %.3f + remote %.3f", side, sum.BWAvg, local.BWAvg, remote.BWAvg)
				}
			}
			// Each side's local direction is the other's remote.
			if c.ReportBoth {
				find := func(rows []perftest.Row, dir string) perftest.Row {
					for _, x := range rows {
						if x.Direction == dir && x.QP == 0 {
							return x
						}
					}
					return perftest.Row{}
				}
				if a, b := find(r.srvRows, perftest.DirLocal), find(r.cliRows, perftest.DirRemote); a.BWAvg != b.BWAvg || a.Iters != b.Iters {
					t.Errorf("server local %+v, client remote %+v", a, b)
				}
			}
		})
	}
}

// TestPerfPostList runs -l: lists of N WRs per post, CQ moderation N.
func TestPerfPostList(t *testing.T) {
	for _, c := range []perftest.Config{
		{Test: perftest.WriteBW, Iters: 200, Size: 1024, PostList: 8},
		{Test: perftest.SendBW, Iters: 200, Size: 512, PostList: 4, QPs: 2, RxDepth: 200},
		{Test: perftest.WriteBW, Duration: 200 * time.Millisecond, Size: 1024, PostList: 16},
	} {
		t.Run(c.Test.String(), func(t *testing.T) {
			r := runPerfPair(t, c)
			if !strings.Contains(r.cliOut, " Post List BW Test\n") || !strings.Contains(r.cliOut, " Post List       : ") {
				t.Errorf("banner:\n%s", r.cliOut)
			}
			row := r.cliRows[0]
			if row.BWAvg <= 0 || c.Duration == 0 && row.Iters != uint64(c.Iters*max(c.QPs, 1)) {
				t.Fatalf("rows %+v", r.cliRows)
			}
		})
	}
}

// TestPerfUD runs -c UD: send_bw and send_lat over datagram QPs.
func TestPerfUD(t *testing.T) {
	for _, c := range []perftest.Config{
		{Test: perftest.SendBW, Iters: 300, Size: 1024, UD: true, QPs: 2},
		{Test: perftest.SendBW, Iters: 100, UD: true}, // default size: the MTU
		{Test: perftest.SendLat, Iters: 100, Size: 64, UD: true},
	} {
		t.Run(c.Test.String(), func(t *testing.T) {
			r := runPerfPair(t, c)
			if !strings.Contains(r.cliOut, "Connection type : UD") {
				t.Errorf("banner:\n%s", r.cliOut)
			}
			row := r.cliRows[0]
			if row.Iters == 0 || !row.Lat && row.BWAvg <= 0 {
				t.Fatalf("rows %+v", r.cliRows)
			}
			if c.Test == perftest.SendBW {
				if want := uint64(c.Iters * max(c.QPs, 1)); r.srvRows[0].Iters != want {
					t.Errorf("server received %d, want %d", r.srvRows[0].Iters, want)
				}
				if c.Size == 0 && row.Bytes != 1024 {
					// The devices' active MTU.
					t.Logf("default UD size %d", row.Bytes)
				}
			}
		})
	}
}

// TestPerfPerQP: -q N prints each QP's row under the aggregate.
func TestPerfPerQP(t *testing.T) {
	r := runPerfPair(t, perftest.Config{Test: perftest.WriteBW, Iters: 100, Size: 4096, QPs: 3})
	var sum uint64
	n := 0
	for _, x := range r.cliRows[1:] {
		if x.QP > 0 {
			sum += x.Iters
			n++
		}
	}
	if n != 3 || sum != r.cliRows[0].Iters || strings.Count(r.cliOut, "   QP ") != 3 {
		t.Fatalf("rows %+v\n%s", r.cliRows, r.cliOut)
	}
}

// TestPerfSendRunInfinitely: send_bw --run_infinitely reports on both
// sides every interval until stopped.
func TestPerfSendRunInfinitely(t *testing.T) {
	ds, dc := openDev(t), openDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln := listen(t)
	srvRows := make(chan perftest.Row, 100)
	cliRows := make(chan perftest.Row, 100)
	base := perftest.Config{Test: perftest.SendBW, Size: 1024, RunInfinitely: true, Duration: 150 * time.Millisecond, GIDIndex: -1}
	srv, cli := base, base
	srv.Listener, srv.OnResult = ln, func(r perftest.Row) { srvRows <- r }
	cli.Host, cli.TCPPort, cli.OnResult = "127.0.0.1", port(ln), func(r perftest.Row) { cliRows <- r }
	errs := make(chan error, 2)
	go func() { _, err := perftest.Run(ctx, ds, srv); errs <- err }()
	go func() { _, err := perftest.Run(ctx, dc, cli); errs <- err }()
	for _, ch := range []chan perftest.Row{srvRows, cliRows, srvRows, cliRows} {
		select {
		case r := <-ch:
			if r.Iters == 0 || r.BWAvg <= 0 {
				t.Errorf("row %+v", r)
			}
		case err := <-errs:
			t.Fatalf("run ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no row")
		}
	}
	cancel()
	<-errs
	<-errs
}

// TestFlagsModes checks the new flags' perftest refusals.
func TestFlagsModes(t *testing.T) {
	for _, c := range []struct {
		test perftest.Test
		args string
		want string // "" = accepted
	}{
		{perftest.WriteBW, "-c UD", "UD connection only possible in SEND verb"},
		{perftest.ReadBW, "-c UD", "UD connection only possible in SEND verb"},
		{perftest.SendBW, "-c UD", ""},
		{perftest.SendLat, "-c UD", ""},
		{perftest.SendBW, "-c UD -R", "RDMA CM"},
		{perftest.WriteLat, "--run_infinitely", "run_infinitely exists only in BW tests for now"},
		{perftest.SendBW, "--run_infinitely", ""},
		{perftest.SendBW, "--run_infinitely -b", "not supported in SEND Bidirectional BW test"},
		{perftest.WriteBW, "--run_infinitely -b", ""},
		{perftest.WriteBW, "--run_infinitely -e", "does not support events"},
		{perftest.WriteBW, "--report-both", "add -b"},
		{perftest.WriteBW, "--report-both -b", ""},
		{perftest.WriteLat, "-b", "bw tests"},
		{perftest.WriteLat, "-l 4", "Post list is supported in BW tests only"},
		{perftest.WriteBW, "-l 0", "must be positive"},
		{perftest.WriteBW, "-l 4 -b", ""},
		{perftest.WriteBW, "-T 104", "TOS only valid for rdma_cm based QP"},
		{perftest.WriteBW, "-T 104 -R", ""},
		{perftest.WriteBW, "-T 256 -R", "0-255"},
		{perftest.SendLat, "--tclass 104", ""},
		{perftest.SendLat, "--tclass 104 -R", "use -T"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg := perftest.Config{Test: c.test}
		f := perftest.RegisterFlags(fs, &cfg)
		err := fs.Parse(strings.Fields(c.args))
		if err == nil {
			err = f.Finish(nil)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v %s: %v", c.test, c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v %s: %v, want %q", c.test, c.args, err, c.want)
		}
	}
}

// TestConfigPostListChecks: perftest's post-list rules at Run.
func TestConfigPostListChecks(t *testing.T) {
	d := openDev(t)
	for _, c := range []struct {
		cfg  perftest.Config
		want string
	}{
		{perftest.Config{Test: perftest.WriteBW, Iters: 100, PostList: 3}, "multiple of post list size"},
		{perftest.Config{Test: perftest.WriteBW, Iters: 100, PostList: 4, CQMod: 3}, "multiple of CQ moderation"},
	} {
		_, err := perftest.Run(context.Background(), d, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// TestPerfTClass: --tclass puts the traffic class into the IP TOS byte of
// every RoCE packet, both ways, as a capture of the wire shows (the
// kernel's IP header on lo, not softib's synthesised --pcap framing;
// GSO/GRO glue several RoCE packets into one frame there).
func TestPerfTClass(t *testing.T) {
	ds, dc := openDev(t), openDev(t)
	var hosts []string
	for _, d := range []verbs.Device{ds, dc} {
		g, err := d.QueryGID(1, perftest.BestGIDIndex(d, 1))
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, "host "+g.Addr().String())
	}
	capt := e2etest.StartCapture(t, "lo", "udp port 4791 and ("+strings.Join(hosts, " or ")+")")
	const tc = 0x68 // DSCP AF31
	for _, c := range []perftest.Config{
		{Test: perftest.WriteBW, Iters: 50, Size: 4096, TClass: tc},
		{Test: perftest.SendBW, Iters: 50, Size: 512, TClass: tc, UD: true},
		{Test: perftest.ReadLat, Iters: 20, TClass: tc},
	} {
		runPerfPairOn(t, ds, dc, c)
	}
	capt.Stop()
	rows := tsharktest.Fields(t, capt.Path, []string{"ip.dsfield", "infiniband.bth.opcode"}, "-Y", "udp.port == 4791")
	seen := map[string]int{}
	for _, r := range rows {
		seen[r[0]]++
	}
	if len(rows) < 20 || len(seen) != 1 || seen["0x68"] == 0 {
		t.Errorf("%d RoCE packets, IP DS fields %v; want all 0x68", len(rows), seen)
	}
}

// TestKeysTargetRegions: with -q N each QP announces its own target
// region, apart from every QP's source region (-b sends both ways).
func TestKeysTargetRegions(t *testing.T) {
	d := openDev(t)
	cfg := perftest.Config{Test: perftest.ReadBW, QPs: 3, Size: 8192, TxDepth: 8, RxDepth: 8, CQMod: 1, Port: 1, GIDIndex: -1}
	res, err := perftest.NewResources(d, &cfg, 3, perftest.DefaultCycle, perftest.DefaultCacheLine)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	e := res.Engine
	for i, k := range res.Local {
		if want := e.MR.Addr() + uint64(e.TargetOff(i)); k.VAddr != want {
			t.Errorf("QP %d announces %#x, its target region is at %#x", i, k.VAddr, want)
		}
	}
}
