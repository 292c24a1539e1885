package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"softib/tools/devsel"
	"softib/tools/perftest"
)

// perfRDMACM is the RDMA CM mode of the perf tools (-R). The RDMA CM
// layer sets it from a file of its own in this package; while it is nil,
// -R is refused with a clear message.
var perfRDMACM perftest.CMHook

func init() {
	names := make([]string, 0, 8)
	for _, t := range perftest.Tests() {
		names = append(names, t.String())
	}
	register(&command{name: "perf", summary: "perftest tools: perf " + strings.Join(names, "|"), run: runPerfDispatch})
	for _, t := range perftest.Tests() {
		register(&command{name: t.String(), summary: "ib_" + t.String() + " compatible (same as perf " + t.String() + ")",
			run: func(args []string) int { return runPerf(t, args) }})
	}
}

func runPerfDispatch(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(os.Stderr, "usage: softib perf <test> [flags] [server]\n\ntests:\n")
		for _, t := range perftest.Tests() {
			fmt.Fprintf(os.Stderr, "  %s\n", t)
		}
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	t, ok := perftest.ParseTest(args[0])
	if !ok {
		fmt.Fprintf(os.Stderr, "softib perf: unknown test %q\n", args[0])
		return 2
	}
	return runPerf(t, args[1:])
}

func runPerf(t perftest.Test, args []string) int {
	name := "perf " + t.String()
	fs := devsel.NewFlagSet(name, os.Stderr)
	dev := devsel.NewOptions()
	// -1: pick the IPv4-mapped GID as perftest does on RoCE.
	dev.Register(fs, -1, "x", "gid-index")
	cfg := perftest.Config{Test: t, CM: perfRDMACM}
	pf := perftest.RegisterFlags(fs, &cfg)
	asJSON := fs.Bool("json", false, "print the results as JSON (instead of the perftest table)")
	pos, code, ok := parseTool(fs, args, name+" [flags] [server]   (no server: be the server)")
	if !ok {
		return code
	}
	if err := pf.Finish(pos); err != nil {
		fmt.Fprintf(os.Stderr, "softib %s: %v\n", name, err)
		return 2
	}
	if cfg.RDMACM && cfg.CM == nil {
		return fail(name, fmt.Errorf("-R: RDMA CM mode not yet available in softib; run without -R (TCP exchange)"))
	}
	d, err := dev.Open()
	if err != nil {
		return fail(name, err)
	}
	defer d.Close()
	if err := perftest.CheckDevice(d, &cfg); err != nil {
		return fail(name, err)
	}
	cfg.Port, cfg.GIDIndex, cfg.PeerUDPPort = dev.Port(), dev.GIDIndex, dev.PeerPort()
	cfg.BindAddr = dev.BindAddr()
	if pf.SourceIP != "" {
		a, err := netip.ParseAddr(pf.SourceIP)
		if err != nil {
			fmt.Fprintf(os.Stderr, "softib %s: bad --source_ip %q: want an IP address\n", name, pf.SourceIP)
			return 2
		}
		cfg.BindAddr = a.Unmap()
	}
	var out io.Writer = os.Stdout
	if *asJSON {
		out = io.Discard
	}
	cfg.Out = out
	ctx, cancel := toolContext()
	defer cancel()
	cpu0, wall0 := cpuTime(), time.Now()
	rows, err := perftest.Run(ctx, d, cfg)
	interrupted := err != nil && ctx.Err() != nil
	var cpuPct float64
	if pf.CPUUtil {
		cpuPct = 100 * (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds()
		if !*asJSON {
			fmt.Printf(" CPU Util[%%]: %.2f (this process, user+system over the run's wall time)\n", cpuPct)
		}
	}
	if err != nil && !interrupted {
		return fail(name, err)
	}
	doc := map[string]any{"test": t.String(), "server": cfg.Host == "", "results": rows}
	if interrupted {
		doc["interrupted"] = true
	}
	if pf.CPUUtil {
		doc["cpu_util_percent"] = cpuPct
	}
	if *asJSON {
		if err := writeJSON(os.Stdout, doc); err != nil {
			return fail(name, err)
		}
	}
	if pf.OutJSON {
		f, err := os.Create(pf.OutJSONFile)
		if err != nil {
			return fail(name, fmt.Errorf("--out_json_file: %w", err))
		}
		werr := writeJSON(f, doc)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fail(name, fmt.Errorf("--out_json_file: %w", werr))
		}
	}
	if interrupted {
		fmt.Fprintf(os.Stderr, "softib %s: interrupted\n", name)
		return exitInterrupted
	}
	if pf.LimitBW > 0 && cfg.Host != "" {
		for _, r := range rows {
			// The aggregate rows: not the per-QP rows, nor the
			// per-direction rows of --report-both.
			if r.QP == 0 && (r.Direction == "" || r.Direction == perftest.DirBoth) && r.BWAvg < pf.LimitBW {
				return fail(name, fmt.Errorf("-w: bandwidth average %.2f %s at %d bytes is below the limit %g", r.BWAvg, r.Unit, r.Bytes, pf.LimitBW))
			}
		}
	}
	return 0
}

// cpuTime is this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
