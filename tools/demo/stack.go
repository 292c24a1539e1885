package demo

import (
	"context"
	"fmt"
	"io"
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
		a.Close()
		b.Close()
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
	if r.O2IBSkipped != "" {
		fmt.Fprintf(w, "\no2ib: skipped (%s)\n", r.O2IBSkipped)
	}
	fmt.Fprintf(w, "\nstack: %s\n", r.Stack)
	if len(r.RDMA) > 0 {
		fmt.Fprintf(w, "\nRDMA verbs sweep, RC, %s <-> %s:\n\n", r.RDMADevices[0], r.RDMADevices[1])
		WriteTable(w, r.RDMA)
	}
	verdict := map[bool]string{true: "OK", false: "FAILED"}[r.OK]
	if r.Interrupted {
		verdict = "interrupted"
	}
	fmt.Fprintf(w, "\nsoftib demo: %s in %.1f s\n", verdict, r.Seconds)
}
