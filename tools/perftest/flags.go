package perftest

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"softib/verbs"
)

// Flags holds the command-line form of a Config; Register adds perftest's
// flags (device flags come from devsel).
type Flags struct {
	fs       *flag.FlagSet
	cfg      *Config
	duration int
	atomic   string
	conn     string
	cpuFreq  bool
	sl       uint
	tos      int
	tclass   int
	// SourceIP is --source_ip (the CLI binds the exchange to it).
	SourceIP string
	// OutJSON and OutJSONFile are --out_json and --out_json_file: the
	// CLI writes the results as JSON to the file (perftest_out.json).
	OutJSON     bool
	OutJSONFile string
	// LimitBW is -w/--limit_bw: the run fails when the bandwidth average
	// is below it (the row's unit); 0: no check.
	LimitBW float64
	// CPUUtil is --cpu_util: report the process's CPU use over the run
	// (with -D, as perftest).
	CPUUtil bool
}

// RegisterFlags adds perftest's flags for cfg to fs.
func RegisterFlags(fs *flag.FlagSet, cfg *Config) *Flags {
	f := &Flags{fs: fs, cfg: cfg}
	both := func(short, long string, fn func(name string)) {
		fn(short)
		fn(long)
	}
	both("s", "size", func(n string) { fs.IntVar(&cfg.Size, n, 0, "message `size` (BW 65536, latency 2, atomic 8)") })
	both("n", "iters", func(n string) { fs.IntVar(&cfg.Iters, n, 0, "number of exchanges (write_bw 5000, others 1000)") })
	both("D", "duration", func(n string) { fs.IntVar(&f.duration, n, 0, "run for this many `seconds` instead of -n") })
	both("q", "qp", func(n string) { fs.IntVar(&cfg.QPs, n, 1, "number of QPs") })
	both("m", "mtu", func(n string) { fs.IntVar(&cfg.MTU, n, 0, "path MTU in bytes (default: the port's active MTU)") })
	both("a", "all", func(n string) { fs.BoolVar(&cfg.AllSizes, n, false, "run sizes from 2 to 2^23 bytes") })
	both("t", "tx-depth", func(n string) { fs.IntVar(&cfg.TxDepth, n, 0, "send queue depth (BW 128, latency 1)") })
	both("r", "rx-depth", func(n string) { fs.IntVar(&cfg.RxDepth, n, 0, "receive queue depth of send tests (512)") })
	both("Q", "cq-mod", func(n string) { fs.IntVar(&cfg.CQMod, n, 0, "generate a completion every `N` sends (100)") })
	both("o", "outs", func(n string) { fs.IntVar(&cfg.OutReads, n, 0, "outstanding reads/atomics (default: device maximum)") })
	both("A", "atomic_type", func(n string) {
		fs.StringVar(&f.atomic, n, "FETCH_AND_ADD", "atomic `type`: CMP_AND_SWAP or FETCH_AND_ADD")
	})
	both("F", "CPU-freq", func(n string) {
		fs.BoolVar(&f.cpuFreq, n, false, "accepted for compatibility (softib uses the monotonic clock)")
	})
	fs.BoolVar(&cfg.ReportGbits, "report_gbits", false, "report Gb/sec instead of MB/sec")
	both("p", "port", func(n string) { fs.IntVar(&cfg.TCPPort, n, DefaultTCPPort, "TCP `port` of the exchange") })
	both("R", "rdma_cm", func(n string) { fs.BoolVar(&cfg.RDMACM, n, false, "connect QPs with RDMA CM") })
	both("e", "events", func(n string) { fs.BoolVar(&cfg.Events, n, false, "sleep on CQ events instead of polling") })
	both("I", "inline_size", func(n string) {
		fs.IntVar(&cfg.Inline, n, 0, "largest message `size` sent inline (default: 220 write_lat, 236 send_lat, none otherwise; -1: never)")
	})
	both("S", "sl", func(n string) { fs.UintVar(&f.sl, n, 0, "service `level` of the address vectors (0-15)") })
	both("T", "tos", func(n string) {
		fs.IntVar(&f.tos, n, -1, "type of service (IP TOS byte, 0-255) of the RDMA CM QPs' packets (with -R)")
	})
	fs.IntVar(&f.tclass, "tclass", -1, "traffic `class` (IP TOS byte, 0-255) of the QPs' address vectors (without -R)")
	both("N", "noPeak", func(n string) { fs.BoolVar(&cfg.NoPeak, n, false, "report no peak bandwidth (0.00)") })
	both("U", "report-unsorted", func(n string) {
		fs.BoolVar(&cfg.LatUnsorted, n, false, "latency tests: print every sample in the order measured (#, usec)")
	})
	both("H", "report-histogram", func(n string) {
		fs.BoolVar(&cfg.LatHistogram, n, false, "latency tests: print a histogram of the samples (1 usec buckets)")
	})
	both("w", "limit_bw", func(n string) {
		fs.Float64Var(&f.LimitBW, n, 0, "fail when the bandwidth average is below this `value` (MB/sec, or Gb/sec with --report_gbits)")
	})
	fs.BoolVar(&f.CPUUtil, "cpu_util", false, "report this process's CPU use (user+system over wall time, %) with -D")
	fs.BoolVar(&cfg.ReportBoth, "report-both", false, "with -b, also report the local and the remote direction separately")
	fs.BoolVar(&cfg.RunInfinitely, "run_infinitely", false, "report every -D seconds (default 5) until interrupted (bw tests)")
	both("b", "bidirectional", func(n string) {
		fs.BoolVar(&cfg.Duplex, n, false, "measure bidirectional bandwidth: both sides send (bw tests)")
	})
	both("l", "post_list", func(n string) {
		fs.IntVar(&cfg.PostList, n, 1, "post `N` work requests per post call (bw tests; CQ moderation defaults to N)")
	})
	fs.StringVar(&f.SourceIP, "source_ip", "", "source IP `address` of the exchange connection (default: --addr when given)")
	fs.BoolVar(&f.OutJSON, "out_json", false, "also write the results as JSON to --out_json_file")
	fs.StringVar(&f.OutJSONFile, "out_json_file", "", "`file` for --out_json (default perftest_out.json; implies --out_json)")
	both("c", "connection", func(n string) {
		fs.StringVar(&f.conn, n, "RC", "connection `type`: RC, UC (write and send tests) or UD (send tests)")
	})
	return f
}

// Finish applies the parsed flags and the positional arguments (the
// server address; none for a server) to the Config.
func (f *Flags) Finish(args []string) error {
	switch len(args) {
	case 0:
	case 1:
		f.cfg.Host = args[0]
	default:
		return fmt.Errorf("too many arguments %q: want at most the server address", args)
	}
	// Zero is the Config's "default", so a 0 given on the command line
	// would silently become perftest's default: refuse it, as perftest
	// does.
	var bad error
	f.fs.Visit(func(fl *flag.Flag) {
		if bad != nil {
			return
		}
		switch fl.Name {
		case "s", "size":
			if f.cfg.Size < 1 || f.cfg.Size > MaxSize {
				bad = fmt.Errorf("-%s %s: the message size must be 1..%d", fl.Name, fl.Value, MaxSize)
			}
		case "n", "iters":
			if f.cfg.Iters < 1 {
				bad = fmt.Errorf("-%s %s: the number of iterations must be positive", fl.Name, fl.Value)
			}
		case "q", "qp":
			if f.cfg.QPs < 1 {
				bad = fmt.Errorf("-%s %s: the number of QPs must be positive", fl.Name, fl.Value)
			}
		case "t", "tx-depth", "r", "rx-depth", "Q", "cq-mod", "l", "post_list":
			if v := fl.Value.(flag.Getter).Get().(int); v < 1 {
				bad = fmt.Errorf("-%s %s: must be positive", fl.Name, fl.Value)
			}
		}
	})
	if bad != nil {
		return bad
	}
	if f.sl > 15 {
		return fmt.Errorf("-S %d: the service level must be 0-15", f.sl)
	}
	f.cfg.SL = uint8(f.sl)
	if f.tos >= 0 {
		switch {
		case f.tos > 255:
			return fmt.Errorf("-T %d: the TOS must be 0-255", f.tos)
		case !f.cfg.RDMACM:
			// perftest: -T is rdma_set_option's TOS.
			return fmt.Errorf("-T %d: TOS only valid for rdma_cm based QP (-R); without -R use --tclass", f.tos)
		}
		f.cfg.TOS = uint8(f.tos)
	}
	if f.tclass >= 0 {
		switch {
		case f.tclass > 255:
			return fmt.Errorf("--tclass %d: the traffic class must be 0-255", f.tclass)
		case f.cfg.RDMACM:
			// RDMA CM builds the address vectors from its route.
			return fmt.Errorf("--tclass %d: with -R the QPs' traffic class is the RDMA CM TOS: use -T", f.tclass)
		}
		f.cfg.TClass = uint8(f.tclass)
	}
	if f.OutJSONFile != "" {
		f.OutJSON = true
	} else if f.OutJSON {
		f.OutJSONFile = "perftest_out.json"
	}
	if f.duration < 0 {
		return fmt.Errorf("bad -D %d", f.duration)
	}
	f.cfg.Duration = time.Duration(f.duration) * time.Second
	// perftest's own refusals (force_dependecies), in its words.
	if f.cfg.RunInfinitely {
		switch {
		case f.cfg.Test.IsLat():
			return fmt.Errorf("--run_infinitely: run_infinitely exists only in BW tests for now")
		case f.cfg.Events:
			return fmt.Errorf("--run_infinitely: run_infinitely does not support events feature yet")
		case f.cfg.Duplex && f.cfg.Test.Verb() == VerbSend:
			return fmt.Errorf("--run_infinitely: run_infinitely mode is not supported in SEND Bidirectional BW test")
		}
	}
	if f.cfg.ReportBoth && !f.cfg.Duplex {
		// perftest takes it and prints nothing more without -b.
		return fmt.Errorf("--report-both: reports the two directions of a bidirectional bw test (-b) separately; add -b")
	}
	if f.cfg.ReportBoth && f.cfg.Test == SendBW && f.duration > 0 {
		return fmt.Errorf("--report-both: a -D bidirectional send_bw exchanges no reports (each side prints its own sends); drop --report-both or -D")
	}
	if f.cfg.Duplex && f.cfg.Test.IsLat() {
		return fmt.Errorf("-b: bidirectional mode is for the bw tests (latency tests are ping-pong already)")
	}
	if f.cfg.PostList > 1 && f.cfg.Test.IsLat() {
		return fmt.Errorf("-l %d: Post list is supported in BW tests only", f.cfg.PostList)
	}
	if (f.cfg.LatUnsorted || f.cfg.LatHistogram) && !f.cfg.Test.IsLat() {
		return fmt.Errorf("-U and -H: only the latency tests report samples")
	}
	if f.CPUUtil && f.duration == 0 {
		return fmt.Errorf("--cpu_util: needs -D (a duration run), as perftest's")
	}
	if f.LimitBW < 0 || f.LimitBW > 0 && f.cfg.Test.IsLat() {
		return fmt.Errorf("-w %g: a positive bandwidth limit, for the bw tests", f.LimitBW)
	}
	if f.cfg.RunInfinitely && f.cfg.Duration == 0 {
		f.cfg.Duration = 5 * time.Second
	}
	switch strings.ToUpper(f.atomic) {
	case "FETCH_AND_ADD", "":
		f.cfg.Atomic = FetchAndAdd
	case "CMP_AND_SWAP":
		f.cfg.Atomic = CmpAndSwap
	default:
		return fmt.Errorf("bad -A %q: use CMP_AND_SWAP or FETCH_AND_ADD", f.atomic)
	}
	switch c := strings.ToUpper(f.conn); c {
	case "RC":
	case "UC":
		// As perftest: UC carries RDMA WRITE and SEND, not READ or
		// atomics.
		if v := f.cfg.Test.Verb(); v != VerbWrite && v != VerbSend {
			return fmt.Errorf("-c UC: UC connection not possible in READ/ATOMIC verbs (UC: write_bw, write_lat, send_bw, send_lat)")
		}
		if f.cfg.RDMACM {
			return fmt.Errorf("-c UC with -R: softib's RDMA CM mode connects RC QPs only; run UC without -R")
		}
		f.cfg.UC = true
	case "UD":
		if f.cfg.Test.Verb() != VerbSend {
			return fmt.Errorf("-c UD: UD connection only possible in SEND verb (send_bw, send_lat)")
		}
		if f.cfg.RDMACM {
			return fmt.Errorf("-c UD with -R: softib's RDMA CM mode connects RC QPs only; run UD without -R")
		}
		f.cfg.UD = true
	default:
		return fmt.Errorf("-c %s: Invalid Connection type; softib's perftest runs RC, UC or UD", c)
	}
	return nil
}

// CheckDevice refuses, before any connection, settings the device cannot
// hold: more QPs (-q) than it has.
func CheckDevice(dev verbs.Device, cfg *Config) error {
	attr := dev.Query()
	// One QP of the device is the GSI QP (QP1) and the control channel
	// of -R takes one more.
	if limit := attr.MaxQP - 2; attr.MaxQP > 0 && cfg.QPs > limit {
		return fmt.Errorf("-q %d: %s holds at most %d QPs for a test (max_qp %d)", cfg.QPs, dev.Name(), limit, attr.MaxQP)
	}
	return nil
}
