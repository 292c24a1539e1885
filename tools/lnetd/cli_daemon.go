package lnetd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"softib/tools/devsel"
	"softib/verbs"
)

// RunDaemon is `softib lnetd`: it parses flags, starts the node from the
// YAML configuration, serves the control socket and runs until SIGINT or
// SIGTERM (or ctx ends); SIGHUP is ignored. It returns the exit code: 2 for a bad command
// line or configuration, 1 for a failure to start.
func RunDaemon(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("lnetd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "LNet configuration in lnetctl's YAML shape (see `softib lnetctl export`)")
	sock := fs.String("socket", DefaultSocketPath(), "control socket path (Unix domain, mode 0600)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	jsonLog := fs.Bool("log-json", false, "log in JSON instead of text")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics (LNet NIs, peers, credits, routes; o2ib devices, QPs, CQs) on `host:port` at /metrics")
	provider := fs.String("provider", "", "verbs `provider` of the o2ib NIs: rxe (softib's Soft-RoCE, the default) or ibverbs (the kernel RDMA device holding the NI address; a build with -tags ibverbs) (default $SOFTIB_PROVIDER)")
	pcapPath := fs.String("pcap", "", "write the NIs' traffic to this pcap `file`: o2ib's RoCE packets and socklnd's TCP streams (synthesised IPv4/TCP framing; Wireshark decodes both as LNet)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: softib lnetd [--config lnet.yaml] [--socket PATH]\n\n"+
			"Runs an LNet node (loopback + tcp) configured from YAML and serves\n"+
			"`softib lnetctl` on a local control socket. SIGINT/SIGTERM stop it (the\n"+
			"socket is removed); SIGHUP is logged and ignored: the configuration\n"+
			"changes through lnetctl, not by rereading the file.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lnetd: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "lnetd: bad --log-level %q (debug, info, warn, error)\n", *level)
		return 2
	}
	hopts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if *jsonLog {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(h)

	cfg := &Config{}
	if *cfgPath != "" {
		c, err := LoadConfig(*cfgPath)
		if err != nil {
			fmt.Fprintf(stderr, "lnetd: %v\n", err)
			if errors.Is(err, ErrConfig) {
				fmt.Fprintf(stderr, "lnetd: fix the configuration (`softib lnetctl export --backup` prints a valid example)\n")
			}
			return 2
		}
		cfg = c
	}
	// The socket first: a second lnetd on the same socket fails before
	// touching any port. Clients wait in the backlog until Serve.
	ln, err := Listen(*sock)
	if err != nil {
		fmt.Fprintf(stderr, "lnetd: control socket: %v\n", err)
		return 1
	}
	defer ln.Close()
	// o2ib devices opened from here on are captured and published
	// (tools/devsel's observer; the CLI flushes it when lnetd returns).
	devsel.SetPcapPath(*pcapPath)
	if *pcapPath != "" {
		// Create the file now: a bad path fails here, not at the
		// first tcp NI.
		if err := devsel.CaptureConfig(&verbs.DeviceConfig{}); err != nil {
			fmt.Fprintf(stderr, "lnetd: %v\n", err)
			return 2
		}
	}
	devsel.SetMetricsAddr(*metricsAddr)
	defer devsel.FinishObserve() // after the node's devices close (a defer below)
	exp, err := devsel.StartMetrics()
	if err != nil {
		fmt.Fprintf(stderr, "lnetd: %v\n", err)
		return 1
	}
	d, err := New(Options{Config: cfg, Log: log, Provider: *provider})
	if err != nil {
		if *cfgPath != "" {
			var ce *ConfigError
			if errors.As(err, &ce) && ce.File == "" {
				ce.File = *cfgPath
			}
		}
		fmt.Fprintf(stderr, "lnetd: %v\n", err)
		if errors.Is(err, ErrConfig) {
			return 2
		}
		return 1
	}
	defer d.Close()
	if exp != nil {
		exp.AddLNet(d.Instance())
	}
	srv := NewServer(d.Handle)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	nids := d.Instance().NIDs()
	strs := make([]string, len(nids))
	for i, n := range nids {
		strs[i] = n.String()
	}
	log.Info("lnetd: ready", "socket", *sock, "nids", strs, "pid", os.Getpid())

	sigs := make(chan os.Signal, 1)
	// SIGHUP (a closed terminal, a reload by habit) is logged and
	// ignored: the configuration changes through lnetctl, not by
	// rereading the file; the default action would kill lnetd and leave
	// its socket behind.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	code := 0
wait:
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGHUP {
				log.Info("lnetd: SIGHUP ignored (lnetd does not reread its configuration: change it with softib lnetctl)")
				continue
			}
			log.Info("lnetd: shutting down", "signal", s.String())
		case <-ctx.Done():
			log.Info("lnetd: shutting down")
		case err := <-served:
			log.Error("lnetd: control socket failed", "err", err)
			code = 1
		}
		break wait
	}
	ln.Close()
	srv.Close()
	os.Remove(*sock)
	return code
}

// socklndCapture is the --pcap writer of a tcp NI (nil without --pcap):
// socklnd's connections share the capture file with the o2ib devices.
func socklndCapture() io.Writer {
	var dc verbs.DeviceConfig
	if err := devsel.CaptureConfig(&dc); err != nil || dc.Capture == nil {
		// The file was created at start; after FinishObserve no NI
		// starts.
		return nil
	}
	return dc.Capture
}
