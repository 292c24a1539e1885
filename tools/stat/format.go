package stat

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"softib/rxe"
)

// WriteLinks prints the device counters as `rdma statistic show` does:
// one line per device, "link rxe0/1" then name-value pairs, rxe's
// counters first; the process holding the device follows in brackets,
// with the device's congestion control ("ecn on" or "ecn off").
func WriteLinks(w io.Writer, sns []*Snapshot) {
	for _, sn := range sns {
		var b strings.Builder
		fmt.Fprintf(&b, "link %s/%d", sn.Device, sn.Port)
		for _, c := range sn.Counters {
			fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
		}
		fmt.Fprintf(&b, " [addr %v pid %d comm %s", sn.Addr, sn.PID, sn.Comm)
		if sn.ECN != nil {
			b.WriteString(" ecn " + onOff(sn.ECN.Enable))
		}
		b.WriteString("]")
		fmt.Fprintln(w, b.String())
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// WriteQPs prints the per-QP counters as `rdma statistic qp show` does:
// one line per QP. A QP that has met congestion (a CE mark or a CNP on a
// device with ECN on) adds its DCQCN limiter: "dcqcn limiting" with the
// current and target rates in Mb/s and alpha while it paces the QP,
// "dcqcn idle" once recovered, and its rate cuts and held sends.
func WriteQPs(w io.Writer, sns []*Snapshot) {
	for _, sn := range sns {
		for _, q := range sn.Resources.QPs {
			var b strings.Builder
			fmt.Fprintf(&b, "link %s/%d lqpn %d qp-type %s", sn.Device, sn.Port, q.QPN, q.Type)
			for _, c := range q.Counters {
				fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
			}
			if cc := q.Congestion; cc != nil {
				if cc.Limiting {
					fmt.Fprintf(&b, " dcqcn limiting rate_mbps %s target_rate_mbps %s alpha %.4g", mbps(cc.Rate), mbps(cc.TargetRate), cc.Alpha)
				} else {
					b.WriteString(" dcqcn idle")
				}
				fmt.Fprintf(&b, " rate_cuts %d sends_held %d", cc.RateCuts, cc.SendsHeld)
			}
			fmt.Fprintf(&b, " pid %d comm %s", sn.PID, sn.Comm)
			fmt.Fprintln(w, b.String())
		}
	}
}

// mbps formats a rate in bits/s as Mb/s, to the kb/s.
func mbps(bps float64) string {
	return strconv.FormatFloat(math.Round(bps/1e3)/1e3, 'f', -1, 64)
}

// LinkJSON is one device in `softib stat --json` (rdma -j statistic
// show's fields, plus the device's address and counters by name).
type LinkJSON struct {
	IfName   string            `json:"ifname"`
	Port     int               `json:"port"`
	Addr     string            `json:"addr"`
	PID      int               `json:"pid"`
	Comm     string            `json:"comm"`
	Counters map[string]uint64 `json:"counters"`
	// ECN is the device's congestion control and its DCQCN parameters
	// (mlx5's names and units, as softib devinfo --json shows them).
	ECN *rxe.ECNInfo `json:"ecn,omitempty"`
}

// QPJSON is one QP in `softib stat qp --json`.
type QPJSON struct {
	IfName   string            `json:"ifname"`
	Port     int               `json:"port"`
	LQPN     uint32            `json:"lqpn"`
	QPType   string            `json:"qp_type"`
	PID      int               `json:"pid"`
	Comm     string            `json:"comm"`
	Counters map[string]uint64 `json:"counters"`
	// Congestion is the QP's DCQCN state (absent until the QP meets
	// congestion).
	Congestion *rxe.QPCongestion `json:"congestion,omitempty"`
}

// Links converts snapshots to their JSON form.
func Links(sns []*Snapshot) []LinkJSON {
	out := []LinkJSON{}
	for _, sn := range sns {
		l := LinkJSON{IfName: sn.Device, Port: sn.Port, Addr: sn.Addr.String(), PID: sn.PID, Comm: sn.Comm, Counters: map[string]uint64{}, ECN: sn.ECN}
		for _, c := range sn.Counters {
			l.Counters[c.Name] = c.Value
		}
		out = append(out, l)
	}
	return out
}

// QPs converts snapshots' QPs to their JSON form.
func QPs(sns []*Snapshot) []QPJSON {
	out := []QPJSON{}
	for _, sn := range sns {
		for _, q := range sn.Resources.QPs {
			j := QPJSON{IfName: sn.Device, Port: sn.Port, LQPN: q.QPN, QPType: q.Type, PID: sn.PID, Comm: sn.Comm, Counters: map[string]uint64{},
				Congestion: q.Congestion}
			for _, c := range q.Counters {
				j.Counters[c.Name] = c.Value
			}
			out = append(out, j)
		}
	}
	return out
}
