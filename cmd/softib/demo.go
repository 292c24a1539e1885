package main

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"softib/tools/demo"
	"softib/tools/devsel"
	"softib/tools/progress"
)

func init() {
	register(&command{name: "demo", summary: "two devices on loopback: RDMA write/read/send bandwidth and latency sweep", run: runDemo})
}

func runDemo(args []string) int {
	fs := devsel.NewFlagSet("demo", os.Stderr)
	asJSON := fs.Bool("json", false, "print the results as JSON")
	short := fs.Bool("short", false, "fewer iterations (a quick check)")
	gbits := fs.Bool("report_gbits", false, "report Gb/sec instead of MB/sec")
	addrA := fs.String("addr-a", "127.0.0.2", "address of the first device")
	addrB := fs.String("addr-b", "127.0.0.3", "address of the second device")
	if _, code, ok := parseTool(fs, args, "demo [--json] [--short]"); !ok {
		return code
	}
	cfg := demo.Config{Short: *short, Gbits: *gbits}
	var err error
	if cfg.AddrA, err = netip.ParseAddr(*addrA); err != nil {
		return fail("demo", fmt.Errorf("bad --addr-a: %w", err))
	}
	if cfg.AddrB, err = netip.ParseAddr(*addrB); err != nil {
		return fail("demo", fmt.Errorf("bad --addr-b: %w", err))
	}
	a, b, err := demo.OpenPair(cfg)
	if err != nil {
		return fail("demo", fmt.Errorf("%w (the demo binds %v and %v, UDP 4791; pick others with --addr-a/--addr-b)", err, cfg.AddrA, cfg.AddrB))
	}
	defer a.Close()
	defer b.Close()
	bar := progress.New(os.Stderr, cfg.Runs())
	cfg.Start, cfg.Step = bar.Start, bar.Step
	ctx, cancel := toolContext()
	defer cancel()
	start := time.Now()
	rows, err := demo.Sweep(ctx, a, b, cfg)
	bar.Finish()
	if err != nil {
		return fail("demo", err)
	}
	if *asJSON {
		if err := writeJSON(os.Stdout, map[string]any{"results": rows, "seconds": time.Since(start).Seconds()}); err != nil {
			return fail("demo", err)
		}
		return 0
	}
	fmt.Printf("softib demo: rxe0 %v <-> rxe1 %v, RC, %.1f s\n\n", cfg.AddrA, cfg.AddrB, time.Since(start).Seconds())
	demo.WriteTable(os.Stdout, rows)
	return 0
}
