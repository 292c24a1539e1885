package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"softib/tools/perftest"
)

// Progress is what the whole-stack demo reports its steps to
// (tools/progress.Bar).
type Progress interface {
	Start(label string)
	Step(label string)
	Finish()
}

// StackConfig shapes the whole-stack demo (RunStack). The zero value is
// the default demo.
type StackConfig struct {
	Cluster  ClusterConfig
	Selftest SelftestConfig
	// RDMA is the verbs sweep run after the LNet cluster is down; its
	// devices default to the first two cluster addresses and its tests
	// and sizes to a short set (RDMATests, RDMASizes).
	RDMA Config
	// NoRDMA leaves the verbs sweep out.
	NoRDMA bool
	// Short makes every run tiny (tests, CI).
	Short bool
	// NewProgress, if set, makes the progress reporter once the number
	// of steps is known.
	NewProgress func(total int) Progress
}

// RDMATests and RDMASizes are the whole-stack demo's verbs sweep.
var (
	RDMATests = []perftest.Test{perftest.WriteBW, perftest.ReadBW, perftest.SendBW, perftest.WriteLat, perftest.SendLat}
	RDMASizes = []int{8, 4 << 10, 1 << 20}
)

// Report is the whole-stack demo's result (the --json document).
type Report struct {
	Stack       string         `json:"stack"`
	Nodes       [][]string     `json:"nodes"` // each node's NIDs
	Port        int            `json:"socklnd_port"`
	O2IBSkipped string         `json:"o2ib_skipped,omitempty"`
	Selftest    []Result       `json:"selftest"`
	RDMA        []perftest.Row `json:"rdma,omitempty"`
	RDMADevices []string       `json:"rdma_devices,omitempty"`
	Seconds     float64        `json:"seconds"`
	OK          bool           `json:"ok"`
	// Interrupted is set when SIGINT/SIGTERM stopped the demo (the rows
	// so far are reported; OK stays false).
	Interrupted bool `json:"interrupted,omitempty"`
}

type noProgress struct{}

func (noProgress) Start(string) {}
func (noProgress) Step(string)  {}
func (noProgress) Finish()      {}

// RunStack runs the whole-stack demo: an LNet cluster (StartCluster),
// the selftest on each of its nets, then the verbs sweep. The report
// holds whatever ran, also when an error is returned.
func RunStack(ctx context.Context, cfg StackConfig) (*Report, error) {
	begin := time.Now()
	rep := &Report{}
	if cfg.Short && cfg.Selftest.Duration == 0 {
		cfg.Selftest.Duration = 150 * time.Millisecond
	}
	cl, err := StartCluster(ctx, cfg.Cluster)
	if err != nil {
		return rep, err
	}
	closed := false
	defer func() {
		if !closed {
			cl.Close()
		}
	}()
	rep.Stack, rep.Port, rep.O2IBSkipped = cl.Stack(), cl.Port, cl.O2IBSkipped
	for _, n := range cl.Nodes {
		nids := []string{n.TCP.String()}
		if n.O2IB != 0 {
			nids = append(nids, n.O2IB.String())
		}
		rep.Nodes = append(rep.Nodes, nids)
	}
	rc := cfg.RDMA
	if !rc.AddrA.IsValid() {
		rc.AddrA = cl.Nodes[0].Addr
	}
	if !rc.AddrB.IsValid() {
		rc.AddrB = cl.Nodes[1].Addr
	}
	if len(rc.Tests) == 0 {
		rc.Tests = RDMATests
	}
	if len(rc.Sizes) == 0 {
		rc.Sizes = RDMASizes
	}
	rc.Short = rc.Short || cfg.Short
	if cfg.Short {
		rc.Sizes = []int{4 << 10}
	}
	total := cl.Runs(cfg.Selftest)
	if !cfg.NoRDMA {
		total += rc.Runs()
	}
	var bar Progress = noProgress{}
	if cfg.NewProgress != nil {
		bar = cfg.NewProgress(total)
	}
	defer bar.Finish()
	sc := cfg.Selftest
	sc.Start, sc.Step = bar.Start, bar.Step
	rep.Selftest, err = cl.Selftest(ctx, sc)
	cl.Close()
	closed = true
	if err != nil {
		rep.Seconds = time.Since(begin).Seconds()
		return rep, fmt.Errorf("lnet selftest: %w", err)
	}
	if !cfg.NoRDMA {
		// The cluster's devices are closed: the sweep opens its own on
		// the same addresses.
		a, b, err := OpenPair(rc)
		if err != nil {
			rep.Seconds = time.Since(begin).Seconds()
			return rep, fmt.Errorf("rdma sweep: %w (pick other addresses with --addr-a/--addr-b)", err)
		}
		rep.RDMADevices = []string{"rxe0 " + rc.AddrA.String(), "rxe1 " + rc.AddrB.String()}
		rc.Start, rc.Step = bar.Start, bar.Step
		rep.RDMA, err = Sweep(ctx, a, b, rc)
		CloseDevice(a)
		CloseDevice(b)
		if err != nil {
			rep.Seconds = time.Since(begin).Seconds()
			return rep, fmt.Errorf("rdma sweep: %w", err)
		}
	}
	rep.Seconds = time.Since(begin).Seconds()
	rep.OK = true
	return rep, nil
}

// WriteReport prints the report: the selftest table, the o2ib note, the
// stack line and the verbs sweep table.
func WriteReport(w io.Writer, r *Report) {
	fmt.Fprintf(w, "LNet selftest (1 client -> %d servers, distribute 1:N):\n\n", max(len(r.Nodes)-1, 0))
	WriteSelftestTable(w, r.Selftest)
	fmt.Fprint(w, SelftestLegend)
	WriteSelftestCommands(w, r)
	if r.O2IBSkipped != "" {
		fmt.Fprintf(w, "\no2ib: skipped (%s)\n", r.O2IBSkipped)
	}
	fmt.Fprintf(w, "\nstack: %s\n", r.Stack)
	if len(r.RDMA) > 0 {
		fmt.Fprintf(w, "\nRDMA verbs sweep, RC, %s <-> %s:\n\n", r.RDMADevices[0], r.RDMADevices[1])
		WriteTable(w, r.RDMA)
		fmt.Fprint(w, SweepLegend)
		if a, b, ok := sweepAddrs(r.RDMADevices); ok {
			WriteSweepCommands(w, r.RDMA, a, b)
		}
	}
	verdict := map[bool]string{true: "OK", false: "FAILED"}[r.OK]
	if r.Interrupted {
		verdict = "interrupted"
	}
	fmt.Fprintf(w, "\nsoftib demo: %s in %.1f s\n", verdict, r.Seconds)
}

// SelftestLegend explains the selftest table's columns, one line each.
const SelftestLegend = `
  brw write/read: bulk RPCs, each moving size bytes from the client to a server (write) or back (read)
  ping:           empty RPCs (latency bound)
  check:          brw data verification: full checks every byte, simple the first and last 8 per page
  distribute 1:N: the client sends to each of the N servers in turn
  RPC/s:          test RPCs the client completed per second
  MiB/s:          brw payload in MiB/s (2^20 bytes, lst's unit; perftest's MB/sec below is the same 2^20)
  errors:         failed and expired test RPCs
`

// SweepLegend explains the verbs sweep's columns.
const SweepLegend = `
  BW avg: payload bandwidth (perftest's MB/sec: 2^20 bytes/s); MsgRate: million messages/s;
  t_typical / t_99%: latency tests' median and 99th percentile one-way time (half the round trip)
`

// WriteSelftestCommands prints, for each selftest row, the lst command
// that runs it against lnetd nodes (one per cluster address, started as
// the README shows with the demo's accept_port).
func WriteSelftestCommands(w io.Writer, r *Report) {
	if len(r.Selftest) == 0 || len(r.Nodes) < 2 {
		return
	}
	fmt.Fprintf(w, "\nEach row alone, against lnetd nodes on the same addresses (accept_port %d; o2ib rows need o2ib nets):\n", r.Port)
	for _, res := range r.Selftest {
		col := 0
		if res.Network == "o2ib" {
			col = 1
		}
		nid := func(i int) string {
			if col < len(r.Nodes[i]) {
				return r.Nodes[i][col]
			}
			return r.Nodes[i][0]
		}
		var to []string
		for i := 1; i < len(r.Nodes); i++ {
			to = append(to, nid(i))
		}
		test := "ping"
		if res.Test != "ping" {
			test = fmt.Sprintf("brw %s size=%s check=%s", strings.TrimPrefix(res.Test, "brw "), lstSize(res.Size), res.Check)
		}
		fmt.Fprintf(w, "  softib lst quick --port %d --from %s --to %s --distribute 1:%d --seconds %.0f %s\n",
			r.Port, nid(0), strings.Join(to, ","), len(to), max(1, math.Round(res.Seconds)), test)
	}
}

// lstSize writes a size as lst takes it (1M, 4K, 512).
func lstSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// sweepAddrs reads the sweep's two addresses from Report.RDMADevices
// ("rxe0 127.0.0.2").
func sweepAddrs(devs []string) (a, b string, ok bool) {
	if len(devs) != 2 {
		return "", "", false
	}
	fa, fb := strings.Fields(devs[0]), strings.Fields(devs[1])
	if len(fa) != 2 || len(fb) != 2 {
		return "", "", false
	}
	return fa[1], fb[1], true
}

// WriteSweepCommands prints, for each verbs sweep row, the perf server
// and client commands that run it.
func WriteSweepCommands(w io.Writer, rows []perftest.Row, a, b string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nEach row alone (server & then client):\n")
	for _, r := range rows {
		args := fmt.Sprintf("-s %d -n %d", r.Bytes, r.Iters)
		fmt.Fprintf(w, "  softib perf %s --addr %s %s & softib perf %s --addr %s %s %s\n", r.Test, a, args, r.Test, b, args, a)
	}
}
