// Package metrics exports softib's counters in the Prometheus text
// format: Soft-RoCE device counters (under Linux rxe's hw_counters names),
// per-QP counters and queue depths, the device's ECN setting and each
// QP's DCQCN limiter (active, current and target rate), CQ fill levels,
// resource counts, and LNet's instance, NI, peer, credit and route
// state. Values are read when
// Prometheus scrapes (collectors, not mirrored gauges), so the data path
// pays nothing for the exporter.
//
// It uses the official client library, github.com/prometheus/client_golang
// (see the README's dependency section): exposition-format details
// (escaping, HELP/TYPE lines, content negotiation, OpenMetrics) are its
// job, and `promtool check metrics` accepts its output.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"softib/lnet"
	"softib/tools/stat"
)

// Exporter serves /metrics for the devices and LNet instances added to
// it.
type Exporter struct {
	reg *prometheus.Registry

	mu   sync.Mutex
	devs []stat.Introspector
	lnet []*lnet.Instance

	srv *http.Server
	ln  net.Listener
}

// New returns an exporter with nothing to export yet (plus the Go
// runtime and process collectors).
func New() *Exporter {
	e := &Exporter{reg: prometheus.NewRegistry()}
	e.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		devCollector{e}, lnetCollector{e})
	return e
}

// AddDevice exports dev until RemoveDevice.
func (e *Exporter) AddDevice(dev stat.Introspector) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.devs = append(e.devs, dev)
}

// RemoveDevice stops exporting dev (before it is closed).
func (e *Exporter) RemoveDevice(dev stat.Introspector) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, d := range e.devs {
		if d == dev {
			e.devs = append(e.devs[:i], e.devs[i+1:]...)
			return
		}
	}
}

// AddLNet exports an LNet instance.
func (e *Exporter) AddLNet(in *lnet.Instance) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lnet = append(e.lnet, in)
}

// Handler returns the /metrics handler.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{})
}

// Listen serves /metrics on addr (host:port; port 0 picks one) and
// returns the bound address.
func (e *Exporter) Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "softib metrics: see /metrics")
	})
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.ln = ln
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			// The listener failed under us: nothing to do but stop.
			ln.Close()
		}
	}()
	return ln.Addr(), nil
}

// Close stops the HTTP server.
func (e *Exporter) Close() error {
	if e.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return e.srv.Shutdown(ctx)
}

func (e *Exporter) snapshot() ([]stat.Introspector, []*lnet.Instance) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]stat.Introspector(nil), e.devs...), append([]*lnet.Instance(nil), e.lnet...)
}

// desc makes a descriptor. The collectors are unchecked (their metric
// set follows the devices' counters, which grow with softib).
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	devLabels = []string{"device", "addr"}
	qpLabels  = []string{"device", "addr", "qpn", "type"}
	cqLabels  = []string{"device", "addr", "cqn"}

	qpSQUsed   = desc("softib_qp_sq_used", "Send work requests posted and not yet completed.", qpLabels...)
	qpSQDepth  = desc("softib_qp_sq_depth", "Send queue capacity (max_send_wr).", qpLabels...)
	qpRQUsed   = desc("softib_qp_rq_used", "Receive work requests posted and not yet consumed.", qpLabels...)
	qpRQDepth  = desc("softib_qp_rq_depth", "Receive queue capacity (max_recv_wr).", qpLabels...)
	qpState    = desc("softib_qp_state", "QP state (1 for the labelled state).", append(qpLabels, "state")...)
	qpRetry    = desc("softib_qp_retry_left", "Transport retries left for the oldest send WR.", qpLabels...)
	cqUsed     = desc("softib_cq_used", "Completions waiting to be polled.", cqLabels...)
	cqDepth    = desc("softib_cq_cqe", "CQ capacity.", cqLabels...)
	cqOverrun  = desc("softib_cq_overrun", "1 when the CQ lost a completion because it was full.", cqLabels...)
	resCount   = desc("softib_resources", "Live resources of the device by kind.", append(devLabels, "kind")...)
	devECN     = desc("softib_rxe_ecn_enabled", "1 when the device does RoCEv2 congestion control (ECN marking, CNPs, DCQCN: --ecn).", devLabels...)
	qpLimiting = desc("softib_qp_dcqcn_limiting", "1 while the QP's DCQCN rate limiter paces its sends (devices with ECN on).", qpLabels...)
	qpRate     = desc("softib_qp_dcqcn_rate_bps", "The QP's DCQCN current rate in bits/s, while its limiter is active.", qpLabels...)
	qpTarget   = desc("softib_qp_dcqcn_target_rate_bps", "The QP's DCQCN target rate in bits/s, while its limiter is active.", qpLabels...)
	devCounter = map[string]*prometheus.Desc{}
	qpCounter  = map[string]*prometheus.Desc{}
	descMu     sync.Mutex
)

func counterDesc(m map[string]*prometheus.Desc, prefix, name string, labels []string) *prometheus.Desc {
	descMu.Lock()
	defer descMu.Unlock()
	d, ok := m[name]
	if !ok {
		d = desc(prefix+name+"_total", "rxe counter "+name+" (rdma statistic).", labels...)
		m[name] = d
	}
	return d
}

type devCollector struct{ e *Exporter }

// Describe sends nothing: the collector is unchecked.
func (devCollector) Describe(chan<- *prometheus.Desc) {}

func (c devCollector) Collect(ch chan<- prometheus.Metric) {
	devs, _ := c.e.snapshot()
	for _, d := range devs {
		sn := stat.Take(d)
		dl := []string{sn.Device, sn.Addr.String()}
		for _, k := range sn.Counters {
			ch <- prometheus.MustNewConstMetric(counterDesc(devCounter, "softib_rxe_", k.Name, devLabels), prometheus.CounterValue, float64(k.Value), dl...)
		}
		r := &sn.Resources
		for kind, n := range map[string]int{"qp": len(r.QPs), "cq": len(r.CQs), "mr": len(r.MRs), "pd": r.PDCount} {
			ch <- prometheus.MustNewConstMetric(resCount, prometheus.GaugeValue, float64(n), append(dl, kind)...)
		}
		ecn := sn.ECN != nil && sn.ECN.Enable
		if sn.ECN != nil {
			ch <- prometheus.MustNewConstMetric(devECN, prometheus.GaugeValue, b2f(ecn), dl...)
		}
		for _, q := range r.QPs {
			ql := append(append([]string(nil), dl...), strconv.FormatUint(uint64(q.QPN), 10), q.Type)
			// The limiter: on a device with ECN on, every QP has the
			// limiting gauge (0 until a CNP); the rates only while it
			// limits (idle, the QP is not rate-limited at all).
			if cc := q.Congestion; ecn {
				ch <- prometheus.MustNewConstMetric(qpLimiting, prometheus.GaugeValue, b2f(cc != nil && cc.Limiting), ql...)
				if cc != nil && cc.Limiting {
					ch <- prometheus.MustNewConstMetric(qpRate, prometheus.GaugeValue, cc.Rate, ql...)
					ch <- prometheus.MustNewConstMetric(qpTarget, prometheus.GaugeValue, cc.TargetRate, ql...)
				}
			}
			for _, k := range q.Counters {
				ch <- prometheus.MustNewConstMetric(counterDesc(qpCounter, "softib_qp_", k.Name, qpLabels), prometheus.CounterValue, float64(k.Value), ql...)
			}
			ch <- prometheus.MustNewConstMetric(qpSQUsed, prometheus.GaugeValue, float64(q.SQUsed), ql...)
			ch <- prometheus.MustNewConstMetric(qpSQDepth, prometheus.GaugeValue, float64(q.SQDepth), ql...)
			ch <- prometheus.MustNewConstMetric(qpRQUsed, prometheus.GaugeValue, float64(q.RQUsed), ql...)
			ch <- prometheus.MustNewConstMetric(qpRQDepth, prometheus.GaugeValue, float64(q.RQDepth), ql...)
			ch <- prometheus.MustNewConstMetric(qpRetry, prometheus.GaugeValue, float64(q.RetryLeft), ql...)
			ch <- prometheus.MustNewConstMetric(qpState, prometheus.GaugeValue, 1, append(ql, q.State)...)
		}
		for _, cq := range r.CQs {
			cl := append(append([]string(nil), dl...), strconv.Itoa(cq.CQN))
			ch <- prometheus.MustNewConstMetric(cqUsed, prometheus.GaugeValue, float64(cq.Used), cl...)
			ch <- prometheus.MustNewConstMetric(cqDepth, prometheus.GaugeValue, float64(cq.CQE), cl...)
			ch <- prometheus.MustNewConstMetric(cqOverrun, prometheus.GaugeValue, b2f(cq.Overrun), cl...)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
