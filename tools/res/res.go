// Package res is softib's `rdma resource show`: the QPs, CQs, MRs and PDs
// of every device a process on this host holds, read through the
// devices' control sockets (tools/stat).
package res

import (
	"encoding/json"
	"fmt"
	"io"

	"softib/tools/stat"
)

// Kinds are the resource kinds res shows, in `rdma resource` order.
var Kinds = []string{"qp", "cq", "mr", "pd"}

// WriteSummary prints one line per device with its resource counts, as
// `rdma resource show` does.
func WriteSummary(w io.Writer, sns []*stat.Snapshot) {
	for _, sn := range sns {
		r := &sn.Resources
		fmt.Fprintf(w, "%s: pd %d cq %d qp %d mr %d [addr %v pid %d comm %s]\n",
			sn.Device, r.PDCount, len(r.CQs), len(r.QPs), len(r.MRs), sn.Addr, sn.PID, sn.Comm)
	}
}

// Write prints the resources of one kind, one line each, in the format
// of `rdma resource show KIND` with softib's extra fields (depths,
// unacknowledged PSN) after rdma's.
func Write(w io.Writer, kind string, sns []*stat.Snapshot) error {
	for _, sn := range sns {
		r := &sn.Resources
		tail := fmt.Sprintf("pid %d comm %s", sn.PID, sn.Comm)
		switch kind {
		case "qp":
			for _, q := range r.QPs {
				rqpn := ""
				if q.DestQPN != 0 {
					rqpn = fmt.Sprintf(" rqpn %d", q.DestQPN)
				}
				fmt.Fprintf(w, "link %s/%d lqpn %d%s type %s state %s rq-psn %d sq-psn %d unacked-psn %d pdn %d sq-depth %d sq-used %d rq-depth %d rq-used %d path-mtu %d %s\n",
					sn.Device, sn.Port, q.QPN, rqpn, q.Type, q.State, q.RQPSN, q.SQPSN, q.UnackPSN, q.PDN,
					q.SQDepth, q.SQUsed, q.RQDepth, q.RQUsed, q.PathMTU, tail)
			}
		case "cq":
			for _, c := range r.CQs {
				fmt.Fprintf(w, "dev %s cqn %d cqe %d users %d used %d poll-ctx %s armed %v %s\n",
					sn.Device, c.CQN, c.CQE, c.Users, c.Used, c.Poll, c.Armed, tail)
			}
		case "mr":
			for _, m := range r.MRs {
				fmt.Fprintf(w, "dev %s mrlen %d pdn %d lkey 0x%x rkey 0x%x iova 0x%x access %s %s\n",
					sn.Device, m.Length, m.PDN, m.LKey, m.RKey, m.Addr, m.Access, tail)
			}
		case "pd":
			for _, p := range r.PDs {
				fmt.Fprintf(w, "dev %s pdn %d users %d %s\n", sn.Device, p.PDN, p.Users, tail)
			}
		default:
			return fmt.Errorf("unknown resource %q (want qp, cq, mr or pd)", kind)
		}
	}
	return nil
}

// JSON returns the resources of one kind (every kind, per device, when
// kind is "") for --json: flat objects as `rdma -j resource show KIND`
// prints them, each with its device's ifname, addr, pid and comm.
func JSON(kind string, sns []*stat.Snapshot) (any, error) {
	out := []map[string]any{}
	for _, sn := range sns {
		tag := func(m map[string]any) map[string]any {
			m["ifname"], m["addr"], m["pid"], m["comm"] = sn.Device, sn.Addr.String(), sn.PID, sn.Comm
			return m
		}
		r := &sn.Resources
		var items []any
		switch kind {
		case "":
			out = append(out, tag(map[string]any{"qp": len(r.QPs), "cq": len(r.CQs), "mr": len(r.MRs), "pd": r.PDCount}))
			continue
		case "qp":
			for _, v := range r.QPs {
				items = append(items, v)
			}
		case "cq":
			for _, v := range r.CQs {
				items = append(items, v)
			}
		case "mr":
			for _, v := range r.MRs {
				items = append(items, v)
			}
		case "pd":
			for _, v := range r.PDs {
				items = append(items, v)
			}
		default:
			return nil, fmt.Errorf("unknown resource %q (want qp, cq, mr or pd)", kind)
		}
		for _, v := range items {
			m, err := flatten(v)
			if err != nil {
				return nil, err
			}
			out = append(out, tag(m))
		}
	}
	return out, nil
}

// flatten turns a struct into the map of its JSON fields.
func flatten(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(b, &m)
}
