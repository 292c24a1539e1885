package rxe_test

import (
	"testing"

	"softib/rxe"
	"softib/verbs"
)

// TestECNQPIntrospection: the per-QP congestion counters and limiter
// state in Resources (softib stat qp, softib res, the metrics exporter).
// Each device has one QP, so its counters are the device's; the sending
// QP shows its limiter, the receiving QP (never sent a CNP to) none.
func TestECNQPIntrospection(t *testing.T) {
	x, y := ecnPair(t, rxe.ECNConfig{MinRate: 2e9, MaxRate: 40e9})
	const chunk = 64 << 10
	for i := 0; i < 32; i += 8 {
		var wrs []verbs.SendWR
		for j := i; j < i+8; j++ {
			wrs = append(wrs, verbs.SendWR{ID: uint64(j), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{x.mr.SGE(j*chunk, chunk)}, RemoteAddr: y.mr.Addr() + uint64(j*chunk), RKey: y.mr.RKey()})
		}
		post(t, x, wrs...)
		for _, wc := range waitWC(t, x.cq, len(wrs)) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	y.sync()

	qpInfo := func(e *end) rxe.QPInfo {
		t.Helper()
		for _, q := range e.dev.Resources().QPs {
			if q.QPN == e.qp.QPN() {
				return q
			}
		}
		t.Fatalf("QP %d not in the snapshot", e.qp.QPN())
		return rxe.QPInfo{}
	}
	counters := func(q rxe.QPInfo) map[string]uint64 {
		m := map[string]uint64{}
		for _, c := range q.Counters {
			m[c.Name] = c.Value
		}
		return m
	}
	xq, yq := qpInfo(x), qpInfo(y)
	xc, yc := counters(xq), counters(yq)
	xs, ys := rxe.CQDeviceStats(x.cq), rxe.CQDeviceStats(y.cq)
	for _, k := range []struct {
		name, field string
	}{{"np_ecn_marked_roce_packets", "NPECNMarked"}, {"np_cnp_sent", "NPCNPSent"},
		{"rp_cnp_handled", "RPCNPHandled"}, {"rp_cnp_ignored", "RPCNPIgnored"}} {
		if _, ok := xc[k.name]; !ok {
			t.Errorf("QP counters lack %s: %v", k.name, xq.Counters)
		}
		if xc[k.name] != xs[k.field] || yc[k.name] != ys[k.field] {
			t.Errorf("%s: QPs x %d y %d, devices x %d y %d", k.name, xc[k.name], yc[k.name], xs[k.field], ys[k.field])
		}
	}
	if yc["np_cnp_sent"] == 0 || xc["rp_cnp_handled"] == 0 {
		t.Fatalf("no CNPs: y sent %d, x handled %d", yc["np_cnp_sent"], xc["rp_cnp_handled"])
	}
	if yq.Congestion != nil && (yq.Congestion.Limiting || yq.Congestion.RateCuts != 0) {
		t.Errorf("y's QP, which got no CNP, limits: %+v", *yq.Congestion)
	}
	cc := xq.Congestion
	if cc == nil || cc.RateCuts == 0 {
		t.Fatalf("x's QP congestion state %+v, want rate cuts", cc)
	}
	if cc.Limiting {
		// Until it recovers (after many 300 µs timers): its rates.
		if cc.Rate < 2e9 || cc.Rate > 40e9 || cc.TargetRate < cc.Rate || cc.MinRate > cc.Rate || !(cc.Alpha > 0 && cc.Alpha <= 1) {
			t.Errorf("x's limiter %+v", *cc)
		}
	} else if cc.Rate != 0 {
		t.Errorf("recovered limiter shows a rate: %+v", *cc)
	}
}
