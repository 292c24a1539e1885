package stat_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"softib/rxe"
	"softib/tools/stat"
)

// TestWriteQPsCongestion: `softib stat qp` shows a QP's congestion
// counters and, once it has met congestion, its DCQCN limiter: rates in
// Mb/s while limiting, "idle" after recovery; --json carries the same.
func TestWriteQPsCongestion(t *testing.T) {
	cnt := []rxe.Counter{{Name: "sent_pkts", Value: 9}, {Name: "np_cnp_sent", Value: 0}, {Name: "rp_cnp_handled", Value: 7}}
	sn := &stat.Snapshot{Device: "rxe0", Port: 1, Addr: netip.MustParseAddrPort("127.0.0.2:4791"), PID: 42, Comm: "perf",
		Resources: rxe.Resources{QPs: []rxe.QPInfo{
			{QPN: 17, Type: "RC", Counters: cnt,
				Congestion: &rxe.QPCongestion{Limiting: true, Rate: 20.5e9, TargetRate: 40e9, Alpha: 0.99609375, MinRate: 10e9, RateCuts: 3, SendsHeld: 120}},
			{QPN: 18, Type: "RC", Counters: cnt, Congestion: &rxe.QPCongestion{RateCuts: 5, SendsHeld: 1}},
			{QPN: 19, Type: "UD", Counters: cnt[:1]},
		}}}
	var b strings.Builder
	stat.WriteQPs(&b, []*stat.Snapshot{sn})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{
		"link rxe0/1 lqpn 17 qp-type RC sent_pkts 9 np_cnp_sent 0 rp_cnp_handled 7 dcqcn limiting rate_mbps 20500 target_rate_mbps 40000 alpha 0.9961 rate_cuts 3 sends_held 120 pid 42 comm perf",
		"link rxe0/1 lqpn 18 qp-type RC sent_pkts 9 np_cnp_sent 0 rp_cnp_handled 7 dcqcn idle rate_cuts 5 sends_held 1 pid 42 comm perf",
		"link rxe0/1 lqpn 19 qp-type UD sent_pkts 9 pid 42 comm perf",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}

	j, err := json.Marshal(stat.QPs([]*stat.Snapshot{sn}))
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(j, &back); err != nil || len(back) != 3 {
		t.Fatalf("json %s: %v", j, err)
	}
	cc, ok := back[0]["congestion"].(map[string]any)
	if !ok || cc["limiting"] != true || cc["rate_bps"] != 20.5e9 || cc["target_rate_bps"] != 40e9 || cc["rate_cuts"] != 3.0 || cc["sends_held"] != 120.0 {
		t.Errorf("QP 17 congestion in json: %v", back[0]["congestion"])
	}
	if c := back[0]["counters"].(map[string]any); c["rp_cnp_handled"] != 7.0 {
		t.Errorf("QP 17 counters in json: %v", c)
	}
	if cc, ok := back[1]["congestion"].(map[string]any); !ok || cc["limiting"] != false || cc["rate_bps"] != nil || cc["rate_cuts"] != 5.0 {
		t.Errorf("QP 18 congestion in json: %v", back[1]["congestion"])
	}
	if _, ok := back[2]["congestion"]; ok {
		t.Errorf("QP 19 (no congestion met) has a congestion entry: %v", back[2])
	}
}
