package selftest

import (
	"fmt"
	"io"
	"time"

	"softib/wire/lnetwire"
)

// Sample is one round of STAT replies.
type Sample struct {
	Time  time.Time
	Nodes map[lnetwire.NID]NodeResult
}

// TakeSample turns STAT results into a Sample stamped now.
func TakeSample(res []NodeResult) Sample {
	s := Sample{Time: time.Now(), Nodes: make(map[lnetwire.NID]NodeResult, len(res))}
	for _, r := range res {
		s.Nodes[r.NID] = r
	}
	return s
}

// Rate is an average, minimum and maximum over the nodes of a group.
type Rate struct {
	Avg float64 `json:"avg"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// NodeStats are one node's rates over an interval and its counters.
type NodeStats struct {
	NID   string `json:"nid"`
	Error string `json:"error,omitempty"`
	// Interval is the node's own time between the samples (running_ms).
	Interval float64 `json:"interval_s"`
	// LNet message and byte rates (lst's [LNet Rates] / [LNet Bandwidth]).
	RecvMsgs float64 `json:"lnet_recv_msgs_s"`
	SendMsgs float64 `json:"lnet_send_msgs_s"`
	RecvMiB  float64 `json:"lnet_recv_mib_s"`
	SendMiB  float64 `json:"lnet_send_mib_s"`
	// Selftest RPC rates: requests sent (a client's test RPCs) and
	// received, and brw bytes the node moved as a server.
	RPCsSent float64  `json:"rpcs_sent_s"`
	RPCsRcvd float64  `json:"rpcs_rcvd_s"`
	BulkMiB  float64  `json:"bulk_mib_s"`
	Counters Counters `json:"counters"`
}

// GroupStats summarise a group over one interval, as lst stat.
type GroupStats struct {
	Group    string      `json:"group"`
	Nodes    []NodeStats `json:"nodes"`
	Down     int         `json:"down"` // nodes whose STAT failed (lst: "Failed to stat on N nodes")
	Sampled  int         `json:"sampled"`
	RecvMsgs Rate        `json:"lnet_recv_msgs_s"`
	SendMsgs Rate        `json:"lnet_send_msgs_s"`
	RecvMiB  Rate        `json:"lnet_recv_mib_s"`
	SendMiB  Rate        `json:"lnet_send_mib_s"`
	// Group totals of the selftest rates and of the error counters.
	RPCsSent   float64 `json:"rpcs_sent_s"`
	RPCsRcvd   float64 `json:"rpcs_rcvd_s"`
	BulkMiB    float64 `json:"bulk_mib_s"`
	BRWErrors  uint64  `json:"brw_errors"`
	PingErrors uint64  `json:"ping_errors"`
	RPCErrors  uint64  `json:"rpc_errors"`
	Expired    uint64  `json:"rpcs_expired"`
	Dropped    uint64  `json:"rpcs_dropped"`
}

const mib = 1 << 20

// Errors are the group's failed test RPCs and RPC-layer failures.
func (g *GroupStats) Errors() uint64 {
	return g.BRWErrors + g.PingErrors + g.Expired
}

// rate32 is the per-second change of a 32-bit wire counter (which wraps).
func rate32(a, b uint32, dt float64) float64 {
	if dt <= 0 {
		return 0
	}
	return float64(b-a) / dt
}

// rate64 is the per-second change of a counter (0 if it went backwards).
func rate64(a, b uint64, dt float64) float64 {
	if b < a || dt <= 0 {
		return 0
	}
	return float64(b-a) / dt
}

// ComputeGroup derives a group's rates between two samples. As lst, a
// node's interval is the difference of its running_ms (the sampling
// time when that does not advance, e.g. the node rejoined).
func ComputeGroup(name string, nids []lnetwire.NID, prev, cur Sample) GroupStats {
	wall := cur.Time.Sub(prev.Time).Seconds()
	g := GroupStats{Group: name}
	var lr lstRates
	for _, n := range nids {
		ns := NodeStats{NID: n.String()}
		c, ok := cur.Nodes[n]
		p, pok := prev.Nodes[n]
		switch {
		case !ok:
			ns.Error = "not sampled"
		case c.Err != nil:
			ns.Error = c.Err.Error()
		case !pok || p.Err != nil:
			ns.Counters = c.Counters()
			ns.Error = "no previous sample"
		default:
			a, b := p.Counters(), c.Counters()
			ns.Counters = b
			dt := float64(b.FW.RunningMS-a.FW.RunningMS) / 1000
			if b.FW.RunningMS <= a.FW.RunningMS {
				dt = wall
			}
			ns.Interval = dt
			ns.RecvMsgs = rate32(a.LNet.RecvCount, b.LNet.RecvCount, dt)
			ns.SendMsgs = rate32(a.LNet.SendCount, b.LNet.SendCount, dt)
			ns.RecvMiB = rate64(a.LNet.RecvLength, b.LNet.RecvLength, dt) / mib
			ns.SendMiB = rate64(a.LNet.SendLength, b.LNet.SendLength, dt) / mib
			ns.RPCsSent = rate32(a.RPC.RPCsSent, b.RPC.RPCsSent, dt)
			ns.RPCsRcvd = rate32(a.RPC.RPCsRcvd, b.RPC.RPCsRcvd, dt)
			ns.BulkMiB = (rate64(a.RPC.BulkGet, b.RPC.BulkGet, dt) + rate64(a.RPC.BulkPut, b.RPC.BulkPut, dt)) / mib
			lr.add(&ns)
			g.Sampled++
		}
		if ns.Error != "" {
			g.Down++
		}
		k := ns.Counters
		g.RPCsSent += ns.RPCsSent
		g.RPCsRcvd += ns.RPCsRcvd
		g.BulkMiB += ns.BulkMiB
		g.BRWErrors += uint64(k.FW.BRWErrors)
		g.PingErrors += uint64(k.FW.PingErrors)
		g.RPCErrors += uint64(k.RPC.Errors)
		g.Expired += uint64(k.RPC.RPCsExpired)
		g.Dropped += uint64(k.RPC.RPCsDropped)
		g.Nodes = append(g.Nodes, ns)
	}
	g.RecvMsgs, g.SendMsgs, g.RecvMiB, g.SendMiB = lr.result()
	return g
}

// lstRates accumulates as lst_cal_lnet_stat: the minimum ignores zeros
// (a zero minimum means "none yet").
type lstRates struct {
	n              int
	rm, sm, rb, sb Rate // Avg holds the total until result
}

func accumulate(r *Rate, v float64) {
	r.Avg += v
	if r.Min > v || r.Min == 0 {
		r.Min = v
	}
	if r.Max < v {
		r.Max = v
	}
}

func (l *lstRates) add(ns *NodeStats) {
	l.n++
	accumulate(&l.rm, ns.RecvMsgs)
	accumulate(&l.sm, ns.SendMsgs)
	accumulate(&l.rb, ns.RecvMiB)
	accumulate(&l.sb, ns.SendMiB)
}

func (l *lstRates) result() (rm, sm, rb, sb Rate) {
	if l.n == 0 {
		return
	}
	for _, r := range []*Rate{&l.rm, &l.sm, &l.rb, &l.sb} {
		r.Avg /= float64(l.n)
	}
	return l.rm, l.sm, l.rb, l.sb
}

// Format prints the group as lst stat does (lst_print_stat): the count
// of nodes that failed to answer, then the LNet rates and bandwidth.
func (g *GroupStats) Format(w io.Writer) {
	if g.Down > 0 {
		fmt.Fprintf(w, "Failed to stat on %d nodes\n", g.Down)
	}
	if g.Sampled == 0 {
		return
	}
	fmt.Fprintf(w, "[LNet Rates of %s]\n", g.Group)
	fmt.Fprintf(w, "[R] Avg: %-8.0f RPC/s Min: %-8.0f RPC/s Max: %-8.0f RPC/s\n", g.RecvMsgs.Avg, g.RecvMsgs.Min, g.RecvMsgs.Max)
	fmt.Fprintf(w, "[W] Avg: %-8.0f RPC/s Min: %-8.0f RPC/s Max: %-8.0f RPC/s\n", g.SendMsgs.Avg, g.SendMsgs.Min, g.SendMsgs.Max)
	fmt.Fprintf(w, "[LNet Bandwidth of %s]\n", g.Group)
	fmt.Fprintf(w, "[R] Avg: %-8.2f MiB/s Min: %-8.2f MiB/s Max: %-8.2f MiB/s \n", g.RecvMiB.Avg, g.RecvMiB.Min, g.RecvMiB.Max)
	fmt.Fprintf(w, "[W] Avg: %-8.2f MiB/s Min: %-8.2f MiB/s Max: %-8.2f MiB/s \n", g.SendMiB.Avg, g.SendMiB.Min, g.SendMiB.Max)
}

// Totals sum a test run between two samples: the test RPCs the clients
// sent, the brw bytes the servers moved, and the errors.
type Totals struct {
	Seconds    float64 `json:"seconds"`
	RPCs       uint64  `json:"rpcs"`       // requests the clients sent (their test RPCs)
	Bytes      uint64  `json:"bytes"`      // brw payload the servers moved
	BRWErrors  uint64  `json:"brw_errors"` // failed brw RPCs, data mismatches included (clients)
	PingErrors uint64  `json:"ping_errors"`
	Expired    uint64  `json:"rpcs_expired"` // RPCs that timed out, any node
	Dropped    uint64  `json:"rpcs_dropped"` // requests servers dropped (e.g. failed bulk)
	Down       []lnetwire.NID
}

// Errors are the failed and timed-out RPCs.
func (t *Totals) Errors() uint64 { return t.BRWErrors + t.PingErrors + t.Expired }

// RunTotals computes Totals between start and end. The framework
// errors count since the session started; the RPC counters as deltas.
func RunTotals(start, end Sample, clients, servers []lnetwire.NID) Totals {
	t := Totals{Seconds: end.Time.Sub(start.Time).Seconds()}
	seen := map[lnetwire.NID]bool{}
	for _, group := range [][]lnetwire.NID{clients, servers} {
		for _, n := range group {
			if seen[n] {
				continue
			}
			seen[n] = true
			e, s := end.Nodes[n], start.Nodes[n]
			if e.Err != nil || e.Rep == nil {
				t.Down = append(t.Down, n)
				continue
			}
			b, a := e.Counters(), s.Counters()
			t.BRWErrors += uint64(b.FW.BRWErrors)
			t.PingErrors += uint64(b.FW.PingErrors)
			t.Expired += uint64(b.RPC.RPCsExpired - a.RPC.RPCsExpired)
			t.Dropped += uint64(b.RPC.RPCsDropped - a.RPC.RPCsDropped)
		}
	}
	for _, n := range clients {
		e, s := end.Nodes[n], start.Nodes[n]
		if e.Rep != nil && s.Rep != nil {
			t.RPCs += uint64(e.Counters().RPC.RPCsSent - s.Counters().RPC.RPCsSent)
		}
	}
	for _, n := range servers {
		e, s := end.Nodes[n], start.Nodes[n]
		if e.Rep != nil && s.Rep != nil {
			b, a := e.Counters(), s.Counters()
			t.Bytes += b.RPC.BulkGet - a.RPC.BulkGet + b.RPC.BulkPut - a.RPC.BulkPut
		}
	}
	return t
}
