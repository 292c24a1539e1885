package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/tools/demo"
)

// hangGuard bounds a whole demo run; it guards against hangs only.
const hangGuard = 2 * time.Minute

func addrs(n int) []netip.Addr {
	var out []netip.Addr
	for range n {
		out = append(out, testaddr.Next())
	}
	return out
}

// checkSelftest requires every run to have completed RPCs without errors.
func checkSelftest(t *testing.T, rep *demo.Report, nets ...string) {
	t.Helper()
	tests := demo.DefaultTests()
	if len(rep.Selftest) != len(nets)*len(tests) {
		t.Fatalf("%d selftest results, want %d", len(rep.Selftest), len(nets)*len(tests))
	}
	for i, r := range rep.Selftest {
		tc := tests[i%len(tests)]
		if r.Network != nets[i/len(tests)] || r.Test != tc.Name() || r.Size != tc.Size*btoi(tc.Kind == "brw") {
			t.Errorf("result %d is %s %s %d, want %s %s %d", i, r.Network, r.Test, r.Size, nets[i/len(tests)], tc.Name(), tc.Size)
		}
		if !r.OK() || r.RPCs == 0 || r.RPCRate <= 0 || r.Errors != 0 || r.BRWErrors != 0 {
			t.Errorf("%s %s %d: %+v", r.Network, r.Test, r.Size, r)
		}
		if r.Test != "ping" && (r.MiBRate <= 0 || r.Check != "full") {
			t.Errorf("%s %s %d: MiB/s %.1f, check %q", r.Network, r.Test, r.Size, r.MiBRate, r.Check)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

type countBar struct{ starts, steps, total int }

func (b *countBar) Start(string) { b.starts++ }
func (b *countBar) Step(string)  { b.steps++ }
func (b *countBar) Finish()      {}

func TestDemoStackShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	bar := &countBar{}
	cfg := demo.StackConfig{Short: true, Cluster: demo.ClusterConfig{Addrs: addrs(3)},
		NewProgress: func(total int) demo.Progress { bar.total = total; return bar }}
	rep, err := demo.RunStack(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.O2IBSkipped != "" {
		t.Fatalf("o2ib skipped: %s", rep.O2IBSkipped)
	}
	checkSelftest(t, rep, "tcp", "o2ib")
	if !rep.OK || len(rep.RDMA) == 0 || len(rep.Nodes) != 3 || len(rep.Nodes[0]) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.RDMA {
		if r.Lat && r.TTypical <= 0 || !r.Lat && r.BWAvg <= 0 {
			t.Errorf("rdma row %+v", r)
		}
	}
	if bar.total != len(rep.Selftest)+len(rep.RDMA) || bar.starts != bar.total || bar.steps != bar.total {
		t.Errorf("progress: total %d, %d starts, %d steps; %d results", bar.total, bar.starts, bar.steps, len(rep.Selftest)+len(rep.RDMA))
	}
	var out bytes.Buffer
	demo.WriteReport(&out, rep)
	for _, want := range []string{"network  test", "tcp      brw write    1 MiB   full", "o2ib     ping", "stack: 3 LNet nodes",
		"o2iblnd over RDMA CM over rxe", "RDMA verbs sweep", "BW avg[MB/sec]", "softib demo: OK"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "skipped") {
		t.Errorf("report:\n%s", out.String())
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"stack", "nodes", "selftest", "rdma", "ok", "socklnd_port"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
}

func TestDemoStackTCPOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	rep, err := demo.RunStack(ctx, demo.StackConfig{Short: true, NoRDMA: true,
		Cluster: demo.ClusterConfig{Addrs: addrs(2), NoO2IB: true}})
	if err != nil {
		t.Fatal(err)
	}
	checkSelftest(t, rep, "tcp")
	if rep.O2IBSkipped == "" || len(rep.RDMA) != 0 || len(rep.Nodes[0]) != 1 {
		t.Fatalf("report %+v", rep)
	}
	var out bytes.Buffer
	demo.WriteReport(&out, rep)
	if !strings.Contains(out.String(), "o2ib: skipped (disabled with --tcp-only)") || strings.Contains(out.String(), "RDMA verbs") {
		t.Errorf("report:\n%s", out.String())
	}
}

// TestDemoPortInUse: a taken acceptor port fails with ErrAddrInUse and a
// message naming --port; without an explicit port the next one is used.
func TestDemoPortInUse(t *testing.T) {
	as := addrs(2)
	l, err := net.Listen("tcp4", netip.AddrPortFrom(as[0], demo.DefaultPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err = demo.StartCluster(ctx, demo.ClusterConfig{Addrs: as, Port: demo.DefaultPort, NoO2IB: true})
	if err == nil || !strings.Contains(err.Error(), "--port") {
		t.Fatalf("err %v", err)
	}
	c, err := demo.StartCluster(ctx, demo.ClusterConfig{Addrs: as, NoO2IB: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Port == demo.DefaultPort {
		t.Errorf("picked the taken port %d", c.Port)
	}
}

func TestDemoSelftestTable(t *testing.T) {
	rs := []demo.Result{
		{Network: "tcp", Test: "brw write", Size: 1 << 20, Check: "full", RPCs: 100, RPCRate: 1000.4, MiBRate: 1000.4},
		{Network: "o2ib", Test: "ping", RPCs: 5, RPCRate: 30000, Errors: 2, Expired: 1},
	}
	var b bytes.Buffer
	demo.WriteSelftestTable(&b, rs)
	want := "network  test          size  check      RPC/s      MiB/s  errors\n" +
		"tcp      brw write    1 MiB   full       1000     1000.4       0\n" +
		"o2ib     ping             -      -      30000          -       3\n"
	if b.String() != want {
		t.Errorf("table\n%s\nwant\n%s", b.String(), want)
	}
	if !rs[0].OK() || rs[1].OK() || (&demo.Result{}).OK() {
		t.Error("OK")
	}
}
