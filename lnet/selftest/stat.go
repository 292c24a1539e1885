package selftest

import (
	"fmt"
	"io"
	"math"
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

// NodeStats are one node's rates over an interval and its session totals.
type NodeStats struct {
	NID   string `json:"nid"`
	Error string `json:"error,omitempty"`
	// LNet message and byte rates (lst's [LNet Rates] / [LNet Bandwidth]).
	RecvMsgs float64 `json:"lnet_recv_msgs_s"`
	SendMsgs float64 `json:"lnet_send_msgs_s"`
	RecvMiB  float64 `json:"lnet_recv_mib_s"`
	SendMiB  float64 `json:"lnet_send_mib_s"`
	// Selftest RPC rates.
	RPCsSent float64  `json:"rpcs_sent_s"`
	RPCsRcvd float64  `json:"rpcs_rcvd_s"`
	TestRPCs float64  `json:"test_rpcs_s"` // completed test RPCs (as a client)
	TestMiB  float64  `json:"test_mib_s"`  // brw payload of those
	Counters Counters `json:"counters"`    // totals since the node joined the session
}

// GroupStats summarise a group over one interval.
type GroupStats struct {
	Group    string      `json:"group"`
	Interval float64     `json:"interval_s"`
	Nodes    []NodeStats `json:"nodes"`
	Down     int         `json:"down"`
	RecvMsgs Rate        `json:"lnet_recv_msgs_s"`
	SendMsgs Rate        `json:"lnet_send_msgs_s"`
	RecvMiB  Rate        `json:"lnet_recv_mib_s"`
	SendMiB  Rate        `json:"lnet_send_mib_s"`
	// Group totals of the selftest rates and of the error counters.
	RPCsSent   float64 `json:"rpcs_sent_s"`
	RPCsRcvd   float64 `json:"rpcs_rcvd_s"`
	TestRPCs   float64 `json:"test_rpcs_s"`
	TestMiB    float64 `json:"test_mib_s"`
	Errors     uint64  `json:"errors"`
	BRWErrors  uint64  `json:"brw_errors"`
	PingErrors uint64  `json:"ping_errors"`
	Expired    uint64  `json:"rpcs_expired"`
	Dropped    uint64  `json:"rpcs_dropped"`
}

const mib = 1 << 20

// rate is the per-second change of a counter (0 if it went backwards,
// e.g. after the node rejoined).
func rate(a, b uint64, dt float64) float64 {
	if b < a || dt <= 0 {
		return 0
	}
	return float64(b-a) / dt
}

// ComputeGroup derives a group's rates between two samples.
func ComputeGroup(name string, nids []lnetwire.NID, prev, cur Sample) GroupStats {
	dt := cur.Time.Sub(prev.Time).Seconds()
	g := GroupStats{Group: name, Interval: dt}
	var rm, sm, rb, sb []float64
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
			ns.Counters = c.Rep.Counters
		default:
			a, b := p.Rep.Counters, c.Rep.Counters
			ns.Counters = b
			ns.RecvMsgs = rate(a.LNetRecvCount, b.LNetRecvCount, dt)
			ns.SendMsgs = rate(a.LNetSendCount, b.LNetSendCount, dt)
			ns.RecvMiB = rate(a.LNetRecvLength, b.LNetRecvLength, dt) / mib
			ns.SendMiB = rate(a.LNetSendLength, b.LNetSendLength, dt) / mib
			ns.RPCsSent = rate(a.RPCsSent, b.RPCsSent, dt)
			ns.RPCsRcvd = rate(a.RPCsRcvd, b.RPCsRcvd, dt)
			ns.TestRPCs = rate(a.TestRPCs, b.TestRPCs, dt)
			ns.TestMiB = rate(a.TestBytes, b.TestBytes, dt) / mib
			rm, sm, rb, sb = append(rm, ns.RecvMsgs), append(sm, ns.SendMsgs), append(rb, ns.RecvMiB), append(sb, ns.SendMiB)
		}
		if ns.Error != "" {
			g.Down++
		}
		k := ns.Counters
		g.RPCsSent += ns.RPCsSent
		g.RPCsRcvd += ns.RPCsRcvd
		g.TestRPCs += ns.TestRPCs
		g.TestMiB += ns.TestMiB
		g.Errors += k.Errors
		g.BRWErrors += k.BRWErrors
		g.PingErrors += k.PingErrors
		g.Expired += k.RPCsExpired
		g.Dropped += k.RPCsDropped
		g.Nodes = append(g.Nodes, ns)
	}
	g.RecvMsgs, g.SendMsgs, g.RecvMiB, g.SendMiB = summarize(rm), summarize(sm), summarize(rb), summarize(sb)
	return g
}

func summarize(v []float64) Rate {
	if len(v) == 0 {
		return Rate{}
	}
	r := Rate{Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range v {
		r.Avg += x
		r.Min = min(r.Min, x)
		r.Max = max(r.Max, x)
	}
	r.Avg /= float64(len(v))
	return r
}

// Format prints the group in lst stat's layout, then softib's selftest
// lines and any unreachable node.
func (g *GroupStats) Format(w io.Writer) {
	fmt.Fprintf(w, "[LNet Rates of %s]\n", g.Group)
	fmt.Fprintf(w, "[R] Avg: %-8.0f RPC/s Min: %-8.0f RPC/s Max: %-8.0f RPC/s\n", g.RecvMsgs.Avg, g.RecvMsgs.Min, g.RecvMsgs.Max)
	fmt.Fprintf(w, "[W] Avg: %-8.0f RPC/s Min: %-8.0f RPC/s Max: %-8.0f RPC/s\n", g.SendMsgs.Avg, g.SendMsgs.Min, g.SendMsgs.Max)
	fmt.Fprintf(w, "[LNet Bandwidth of %s]\n", g.Group)
	fmt.Fprintf(w, "[R] Avg: %-8.2f MiB/s Min: %-8.2f MiB/s Max: %-8.2f MiB/s\n", g.RecvMiB.Avg, g.RecvMiB.Min, g.RecvMiB.Max)
	fmt.Fprintf(w, "[W] Avg: %-8.2f MiB/s Min: %-8.2f MiB/s Max: %-8.2f MiB/s\n", g.SendMiB.Avg, g.SendMiB.Min, g.SendMiB.Max)
	fmt.Fprintf(w, "[Selftest RPCs of %s]\n", g.Group)
	fmt.Fprintf(w, "[S] Sent: %.0f RPC/s Rcvd: %.0f RPC/s Completed: %.0f RPC/s Data: %.2f MiB/s\n", g.RPCsSent, g.RPCsRcvd, g.TestRPCs, g.TestMiB)
	fmt.Fprintf(w, "[E] Errors: %d BRW: %d Ping: %d Expired: %d Dropped: %d\n", g.Errors, g.BRWErrors, g.PingErrors, g.Expired, g.Dropped)
	for _, n := range g.Nodes {
		if n.Error != "" {
			fmt.Fprintf(w, "%s: unreachable: %s\n", n.NID, n.Error)
		}
	}
}
