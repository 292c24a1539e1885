package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"softib/tools/demo"
	"softib/tools/devsel"
	"softib/tools/progress"
)

func init() {
	register(&command{name: "demo", summary: "whole stack on loopback: LNet selftest over tcp and o2ib (rxe), then an RDMA verbs sweep", run: runDemo})
}

func runDemo(args []string) int {
	fs := devsel.NewFlagSet("demo", os.Stderr)
	asJSON := fs.Bool("json", false, "print the whole result as JSON")
	short := fs.Bool("short", false, "tiny runs (tests, CI)")
	rdmaOnly := fs.Bool("rdma", false, "only the RDMA verbs sweep (write/read/send bandwidth and latency, 8 B..1 MiB)")
	noRDMA := fs.Bool("no-rdma", false, "leave the RDMA verbs sweep out")
	tcpOnly := fs.Bool("tcp-only", false, "LNet over tcp only (no o2ib NIs, no rxe devices for LNet)")
	seconds := fs.Float64("seconds", 1, "run time of each LNet selftest")
	addrs := fs.String("addrs", "127.0.0.2,127.0.0.3,127.0.0.4", "the LNet nodes' addresses (comma separated, at least two)")
	port := fs.Int("port", 0, fmt.Sprintf("socklnd acceptor port of the nodes (0: the first free one from %d)", demo.DefaultPort))
	verbose := fs.Bool("v", false, "log the nodes' warnings to stderr")
	gbits := fs.Bool("report_gbits", false, "report Gb/sec instead of MB/sec in the RDMA sweep")
	addrA := fs.String("addr-a", "", "address of the RDMA sweep's first device (default: the first of --addrs)")
	addrB := fs.String("addr-b", "", "address of the RDMA sweep's second device (default: the second of --addrs)")
	// The demo's rxe devices are published like every tool's: softib
	// stat/res from another terminal, --pcap, --metrics.
	devsel.RegisterObserve(fs)
	if _, code, ok := parseTool(fs, args, "demo [--json] [--short] [--rdma | --no-rdma] [--tcp-only] [--addrs A,B,C] [--port N]"); !ok {
		return code
	}
	rc := demo.Config{Short: *short, Gbits: *gbits}
	var err error
	for _, x := range []struct {
		s    string
		flag string
		dst  *netip.Addr
	}{{*addrA, "--addr-a", &rc.AddrA}, {*addrB, "--addr-b", &rc.AddrB}} {
		if x.s == "" {
			continue
		}
		if *x.dst, err = netip.ParseAddr(x.s); err != nil {
			return fail("demo", fmt.Errorf("bad %s: %w", x.flag, err))
		}
	}
	if *rdmaOnly {
		return runDemoRDMA(rc, *asJSON)
	}
	cfg := demo.StackConfig{Short: *short, NoRDMA: *noRDMA, RDMA: rc}
	cfg.Cluster.Port, cfg.Cluster.NoO2IB = *port, *tcpOnly
	for _, s := range strings.Split(*addrs, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !a.Is4() {
			return fail("demo", fmt.Errorf("bad --addrs entry %q: want IPv4 addresses like 127.0.0.2,127.0.0.3,127.0.0.4", s))
		}
		cfg.Cluster.Addrs = append(cfg.Cluster.Addrs, a)
	}
	if len(cfg.Cluster.Addrs) < 2 {
		return fail("demo", fmt.Errorf("--addrs needs at least two addresses"))
	}
	if *seconds <= 0 {
		return fail("demo", fmt.Errorf("--seconds must be positive"))
	}
	secondsSet := false
	fs.Visit(func(f *flag.Flag) { secondsSet = secondsSet || f.Name == "seconds" })
	if !*short || secondsSet {
		cfg.Selftest.Duration = time.Duration(*seconds * float64(time.Second))
	}
	if *verbose {
		cfg.Cluster.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.NewProgress = func(total int) demo.Progress { return progress.New(os.Stderr, total) }
	ctx, cancel := toolContext()
	defer cancel()
	rep, err := demo.RunStack(ctx, cfg)
	interrupted := ctx.Err() != nil
	rep.Interrupted = interrupted
	if *asJSON {
		if werr := writeJSON(os.Stdout, rep); werr != nil && err == nil {
			err = werr
		}
	} else if len(rep.Selftest) > 0 {
		demo.WriteReport(os.Stdout, rep)
	}
	if interrupted {
		if len(rep.Selftest) == 0 && !*asJSON {
			fmt.Fprintf(os.Stderr, "softib demo: interrupted\n")
		}
		return exitInterrupted
	}
	if err != nil {
		if !errors.Is(err, demo.ErrAddrInUse) && ctx.Err() == nil {
			err = fmt.Errorf("%w\n(rerun with -v to see the nodes' warnings; --tcp-only leaves o2ib out, --no-rdma the verbs sweep)", err)
		}
		return fail("demo", err)
	}
	return 0
}

// runDemoRDMA is `softib demo --rdma`: the verbs sweep alone, 8 B..1 MiB.
func runDemoRDMA(cfg demo.Config, asJSON bool) int {
	if !cfg.AddrA.IsValid() {
		cfg.AddrA = netip.MustParseAddr("127.0.0.2")
	}
	if !cfg.AddrB.IsValid() {
		cfg.AddrB = netip.MustParseAddr("127.0.0.3")
	}
	a, b, err := demo.OpenPair(cfg)
	if err != nil {
		return fail("demo", fmt.Errorf("%w (the demo binds %v and %v, UDP 4791; pick others with --addr-a/--addr-b)", err, cfg.AddrA, cfg.AddrB))
	}
	defer demo.CloseDevice(a)
	defer demo.CloseDevice(b)
	bar := progress.New(os.Stderr, cfg.Runs())
	cfg.Start, cfg.Step = bar.Start, bar.Step
	ctx, cancel := toolContext()
	defer cancel()
	start := time.Now()
	rows, err := demo.Sweep(ctx, a, b, cfg)
	bar.Finish()
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "softib demo: interrupted\n")
		return exitInterrupted
	}
	if err != nil {
		return fail("demo", err)
	}
	if asJSON {
		if err := writeJSON(os.Stdout, map[string]any{"results": rows, "seconds": time.Since(start).Seconds()}); err != nil {
			return fail("demo", err)
		}
		return 0
	}
	fmt.Printf("softib demo --rdma: rxe0 %v <-> rxe1 %v, RC, %.1f s\n\n", cfg.AddrA, cfg.AddrB, time.Since(start).Seconds())
	demo.WriteTable(os.Stdout, rows)
	fmt.Print(demo.SweepLegend)
	demo.WriteSweepCommands(os.Stdout, rows, cfg.AddrA.String(), cfg.AddrB.String())
	return 0
}
