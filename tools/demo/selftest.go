package demo

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"softib/lnet/selftest"
	"softib/wire/lnetwire"
)

// TestCase is one selftest run of the demo.
type TestCase struct {
	Kind        string // "brw" or "ping"
	Op          string // brw: "write" or "read"
	Size        int    // brw payload bytes
	Check       string // brw: none, simple, full
	Concurrency int    // RPCs in flight per client and server (lst --concurrency: units per destination)
}

// Name is "brw write", "brw read" or "ping".
func (t TestCase) Name() string {
	if t.Kind == "brw" {
		return "brw " + t.Op
	}
	return t.Kind
}

// DefaultTests are brw write and read at 1 MiB and 4 KiB with
// check=full, then ping.
func DefaultTests() []TestCase {
	return []TestCase{
		{Kind: "brw", Op: "write", Size: 1 << 20, Check: "full", Concurrency: 4},
		{Kind: "brw", Op: "read", Size: 1 << 20, Check: "full", Concurrency: 4},
		{Kind: "brw", Op: "write", Size: 4 << 10, Check: "full", Concurrency: 16},
		{Kind: "brw", Op: "read", Size: 4 << 10, Check: "full", Concurrency: 16},
		{Kind: "ping", Concurrency: 16},
	}
}

// SelftestConfig shapes Cluster.Selftest.
type SelftestConfig struct {
	// Tests run on every net (DefaultTests()).
	Tests []TestCase
	// Duration is each test's run time (1 s).
	Duration time.Duration
	// Start and Step are called around each test with its label.
	Start, Step func(label string)
}

// Result is one selftest run's outcome, summed over the nodes.
type Result struct {
	Network   string  `json:"network"`
	Test      string  `json:"test"`
	Size      int     `json:"size,omitempty"`
	Check     string  `json:"check,omitempty"`
	Clients   int     `json:"clients"`
	Servers   int     `json:"servers"`
	Seconds   float64 `json:"seconds"`
	RPCs      uint64  `json:"rpcs"` // test RPCs the clients sent
	RPCRate   float64 `json:"rpcs_per_s"`
	MiBRate   float64 `json:"mib_per_s"` // brw payload
	Errors    uint64  `json:"errors"`    // failed test RPCs (brw and ping)
	BRWErrors uint64  `json:"brw_errors"`
	Expired   uint64  `json:"rpcs_expired"`
}

// OK reports a run that completed RPCs without errors.
func (r *Result) OK() bool { return r.RPCs > 0 && r.Errors == 0 && r.Expired == 0 }

// Runs returns how many tests Selftest runs.
func (c *Cluster) Runs(sc SelftestConfig) int {
	sc.setDefaults()
	return len(sc.Tests) * len(c.Nets())
}

func (sc *SelftestConfig) setDefaults() {
	if len(sc.Tests) == 0 {
		sc.Tests = DefaultTests()
	}
	if sc.Duration <= 0 {
		sc.Duration = time.Second
	}
}

// Selftest runs every test on every net: the first node is the client,
// the others the servers (distribute 1:N). It returns the results so
// far and an error naming the first test that failed or had errors.
func (c *Cluster) Selftest(ctx context.Context, sc SelftestConfig) ([]Result, error) {
	sc.setDefaults()
	var out []Result
	var errs []error
	for _, net := range c.Nets() {
		for _, t := range sc.Tests {
			label := fmt.Sprintf("%-4s %-9s %-6s", net, t.Name(), sizeLabel(t))
			if sc.Start != nil {
				sc.Start(label)
			}
			r, err := c.runTest(ctx, net, t, sc.Duration)
			out = append(out, r)
			if err == nil && !r.OK() {
				err = fmt.Errorf("%d RPCs, %d errors (%d brw), %d expired", r.RPCs, r.Errors, r.BRWErrors, r.Expired)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %s %s: %w", net, t.Name(), sizeLabel(t), err))
			}
			if sc.Step != nil {
				sc.Step(label)
			}
			if ctx.Err() != nil {
				return out, errors.Join(append(errs, ctx.Err())...)
			}
		}
	}
	return out, errors.Join(errs...)
}

func sizeLabel(t TestCase) string {
	if t.Kind != "brw" {
		return ""
	}
	return SizeString(t.Size)
}

func randomStamp() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])>>1 | 1
}

// runTest runs one test in a session of its own (so the counters start
// at zero), like `lst quick`.
func (c *Cluster) runTest(ctx context.Context, net string, t TestCase, d time.Duration) (Result, error) {
	r := Result{Network: net, Test: t.Name(), Clients: 1, Servers: len(c.Nodes) - 1}
	if t.Kind == "brw" {
		r.Size, r.Check = t.Size, t.Check
	}
	clients := []lnetwire.NID{c.Nodes[0].nid(net)}
	var servers []lnetwire.NID
	for _, n := range c.Nodes[1:] {
		servers = append(servers, n.nid(net))
	}
	st := &selftest.State{Name: "demo", Stamp: randomStamp(), Console: c.Nodes[0].TCP.String(),
		Timeout: 60, Force: true, RPCTimeout: 10}
	// Loop -1 with Concurrency units per client and server (1:N): the
	// clients keep Concurrency RPCs in flight to every server.
	con := selftest.NewConsoleVia(c.caller(), st)
	defer func() {
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		con.End(ectx)
	}()
	spec := selftest.TestSpec{Kind: t.Kind, Op: t.Op, Size: t.Size, Check: t.Check, From: "clients", To: "servers",
		Concurrency: t.Concurrency, Distribute: "1:N", Loop: -1}
	if _, err := con.AddGroup(ctx, "clients", clients); err != nil {
		return r, err
	}
	if _, err := con.AddGroup(ctx, "servers", servers); err != nil {
		return r, err
	}
	if err := con.AddBatch("demo"); err != nil {
		return r, err
	}
	if err := con.AddTest(ctx, "demo", spec); err != nil {
		return r, err
	}
	first := selftest.TakeSample(con.Stat(ctx, con.AllNodes()))
	if _, err := con.BatchOp(ctx, "demo", selftest.BatchRun); err != nil {
		return r, err
	}
	timer := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	timer.Stop()
	// Stop (even when interrupted), wait for the RPCs in flight, then
	// read the totals.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := con.BatchOp(pctx, "demo", selftest.BatchStop); err != nil {
		return r, err
	}
	if err := con.WaitIdle(pctx, "demo"); err != nil {
		return r, err
	}
	end := selftest.TakeSample(con.Stat(pctx, con.AllNodes()))
	tot := selftest.RunTotals(first, end, clients, servers)
	if len(tot.Down) > 0 {
		return r, end.Nodes[tot.Down[0]].Err
	}
	r.Seconds = tot.Seconds
	r.RPCs, r.Errors, r.BRWErrors, r.Expired = tot.RPCs, tot.BRWErrors+tot.PingErrors, tot.BRWErrors, tot.Expired
	if r.Seconds > 0 {
		r.RPCRate = float64(r.RPCs) / r.Seconds
		r.MiBRate = float64(tot.Bytes) / (1 << 20) / r.Seconds
	}
	return r, ctx.Err()
}

// WriteSelftestTable prints the selftest results as one table.
func WriteSelftestTable(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-8s %-10s %7s %6s %10s %10s %7s\n", "network", "test", "size", "check", "RPC/s", "MiB/s", "errors")
	for _, r := range rs {
		size, check, mibs := "-", "-", "-"
		if r.Test != "ping" {
			size, check, mibs = SizeString(r.Size), r.Check, fmt.Sprintf("%.1f", r.MiBRate)
		}
		fmt.Fprintf(w, "%-8s %-10s %7s %6s %10.0f %10s %7d\n", r.Network, r.Test, size, check, r.RPCRate, mibs, r.Errors+r.Expired)
	}
}
