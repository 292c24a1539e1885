package devsel

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"softib/internal/pcap"
	"softib/tools/metrics"
	"softib/tools/stat"
	"softib/verbs"
)

// The observability every tool that opens a device through Options
// gets: the device's control socket (softib stat, softib res), --pcap
// FILE (verbs.DeviceConfig.Capture) and --metrics ADDR (Prometheus).
// Options.Register adds the flags and Options.Open applies them; the
// CLI calls FinishObserve after the tool returns, when its devices are
// closed, to flush the capture.
var obs observer

type observer struct {
	mu          sync.Mutex
	pcapPath    string
	metricsAddr string

	f      *os.File
	bw     *bufio.Writer // guarded by mu (lockedWriter)
	stop   chan struct{} // ends the flusher
	header bool          // the file has its header

	exp     *metrics.Exporter
	servers map[verbs.Device]*stat.Server
}

// RegisterObserve adds --pcap and --metrics to fs (Options.Register
// calls it).
func RegisterObserve(fs *flag.FlagSet) {
	// fs.Var, not fs.StringVar: StringVar writes the default into the
	// shared observer at registration, a data race when two tools run in
	// one process (the CLI tests run a server and a client side by side).
	if fs.Lookup("pcap") == nil {
		fs.Var(obsString{&obs.pcapPath}, "pcap", "write every RoCE packet the device sends and receives to this pcap `file` (Wireshark decodes it as RoCE)")
	}
	if fs.Lookup("metrics") == nil {
		fs.Var(obsString{&obs.metricsAddr}, "metrics", "serve Prometheus metrics on `host:port` (/metrics): device, QP and CQ counters")
	}
}

// obsString is a flag.Value setting one of the observer's strings under
// its lock.
type obsString struct{ p *string }

func (v obsString) String() string {
	if v.p == nil {
		return ""
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	return *v.p
}

func (v obsString) Set(s string) error {
	obs.mu.Lock()
	defer obs.mu.Unlock()
	*v.p = s
	return nil
}

// lockedWriter is one device's view of the shared capture file: it
// serialises the devices' records (each one Write, see
// verbs.DeviceConfig.Capture) with the flusher, and lets only the first
// file header through.
type lockedWriter struct {
	o       *observer
	started bool // this device wrote (or dropped) its header
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	o := w.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bw == nil {
		return 0, os.ErrClosed // after FinishObserve
	}
	if !w.started {
		w.started = true
		if len(p) == pcap.FileHeaderLen && o.header {
			return len(p), nil
		}
		o.header = true
	}
	return o.bw.Write(p)
}

// CaptureConfig sets cfg.Capture when --pcap was given (Options.Open
// calls it; tools that open devices themselves call it before Open).
// The process's devices share the file: the first creates it.
func CaptureConfig(cfg *verbs.DeviceConfig) error {
	o := &obs
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pcapPath == "" {
		return nil
	}
	if o.f == nil {
		f, err := os.Create(o.pcapPath)
		if err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		o.f, o.bw, o.stop = f, bufio.NewWriterSize(f, 256<<10), make(chan struct{})
		// Flush now and then, so that a capture of a process that is
		// killed, or of one that runs for days, can be read meanwhile.
		go o.flusher(o.stop)
	}
	cfg.Capture = &lockedWriter{o: o}
	return nil
}

func (o *observer) flusher(stop chan struct{}) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			o.mu.Lock()
			if o.bw != nil {
				o.bw.Flush()
			}
			o.mu.Unlock()
		}
	}
}

// SetPcapPath sets --pcap for tools with their own flag parsing (lnetd).
func SetPcapPath(path string) {
	obs.mu.Lock()
	obs.pcapPath = path
	obs.mu.Unlock()
}

// Observe publishes dev on its control socket and, with --metrics,
// exports it. Tools that open devices without Options.Open (lnetd's
// o2ib NIs) call it themselves. A device of another provider (ibverbs)
// has no counters to publish and is left alone, but --pcap on it is an
// error: only softib's rxe captures. Other failures are reported on
// stderr: the tool works without them.
func Observe(dev verbs.Device) error {
	o := &obs
	if _, ok := dev.(stat.Introspector); !ok {
		o.mu.Lock()
		pcapPath := o.pcapPath
		o.mu.Unlock()
		if pcapPath != "" {
			return fmt.Errorf("--pcap: device %s is not a softib rxe device and cannot capture (use the provider's own tools, e.g. tcpdump on the RoCE interface)", dev.Name())
		}
		return nil
	}
	if s, err := stat.Publish(dev); err != nil {
		fmt.Fprintf(os.Stderr, "softib: %v (softib stat and res will not see %s)\n", err, dev.Name())
	} else {
		o.mu.Lock()
		if o.servers == nil {
			o.servers = map[verbs.Device]*stat.Server{}
		}
		o.servers[dev] = s
		o.mu.Unlock()
	}
	if exp := Metrics(); exp != nil {
		exp.AddDevice(dev.(stat.Introspector))
	}
	return nil
}

// Unobserve undoes Observe, for a device closed before the tool ends
// (an LNet NI deleted at run time).
func Unobserve(dev verbs.Device) {
	o := &obs
	o.mu.Lock()
	s, exp := o.servers[dev], o.exp
	delete(o.servers, dev)
	o.mu.Unlock()
	if s != nil {
		s.Close()
	}
	if d, ok := dev.(stat.Introspector); ok && exp != nil {
		exp.RemoveDevice(d)
	}
}

// Metrics returns the exporter --metrics started (starting it on first
// use), or nil without --metrics. A bad address ends the process with a
// message: the user asked for metrics and would otherwise get none.
func Metrics() *metrics.Exporter {
	exp, err := StartMetrics()
	if err != nil {
		fmt.Fprintf(os.Stderr, "softib: %v\n", err)
		os.Exit(1)
	}
	return exp
}

// StartMetrics is Metrics with the listen error returned, for tools that
// clean up before they exit (lnetd).
func StartMetrics() (*metrics.Exporter, error) {
	o := &obs
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.metricsAddr == "" {
		return nil, nil
	}
	if o.exp == nil {
		exp := metrics.New()
		a, err := exp.Listen(o.metricsAddr)
		if err != nil {
			return nil, err
		}
		// Say where: with port 0 the user learns the port here.
		fmt.Fprintf(os.Stderr, "softib: Prometheus metrics on http://%v/metrics\n", a)
		o.exp = exp
	}
	return o.exp, nil
}

// SetMetricsAddr sets --metrics for tools with their own flag parsing.
func SetMetricsAddr(addr string) {
	obs.mu.Lock()
	obs.metricsAddr = addr
	obs.mu.Unlock()
}

// FinishObserve removes the control sockets, stops the metrics server
// and flushes and closes the capture file. Call it when the tool's
// devices are closed.
func FinishObserve() error {
	o := &obs
	o.mu.Lock()
	servers, exp := o.servers, o.exp
	o.servers, o.exp = nil, nil
	o.mu.Unlock()
	for _, s := range servers {
		s.Close()
	}
	if exp != nil {
		exp.Close()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return nil
	}
	close(o.stop)
	err := errors.Join(o.bw.Flush(), o.f.Close())
	o.f, o.bw, o.header = nil, nil, false
	return err
}
