package res_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"softib/rxe"
	"softib/tools/res"
	"softib/tools/stat"
)

func snapshot() []*stat.Snapshot {
	return []*stat.Snapshot{{
		Device: "rxe0", Port: 1, Addr: netip.MustParseAddrPort("127.0.0.2:4791"), PID: 42, Comm: "softib",
		Resources: rxe.Resources{
			QPs:     []rxe.QPInfo{{QPN: 17, Type: "RC", State: "RTS", DestQPN: 18, SQPSN: 5, RQPSN: 6, SQDepth: 16, RQDepth: 16, PathMTU: 1024}},
			CQs:     []rxe.CQInfo{{CQN: 0, CQE: 32, Users: 2, Poll: "channel"}},
			MRs:     []rxe.MRInfo{{PDN: 0, LKey: 0x100, RKey: 0x100, Addr: 0x1000, Length: 4096, Access: "LOCAL_WRITE"}},
			PDs:     []rxe.PDInfo{{PDN: 0, Users: 3}},
			PDCount: 1,
		},
	}}
}

// TestWrite checks each kind's line against rdma resource show's field
// names, and that an unknown kind is an error.
func TestWrite(t *testing.T) {
	sns := snapshot()
	for kind, want := range map[string]string{
		"qp": "link rxe0/1 lqpn 17 rqpn 18 type RC state RTS rq-psn 6 sq-psn 5 unacked-psn 0 pdn 0 sq-depth 16 sq-used 0 rq-depth 16 rq-used 0 path-mtu 1024 pid 42 comm softib\n",
		"cq": "dev rxe0 cqn 0 cqe 32 users 2 used 0 poll-ctx channel armed false pid 42 comm softib\n",
		"mr": "dev rxe0 mrlen 4096 pdn 0 lkey 0x100 rkey 0x100 iova 0x1000 access LOCAL_WRITE pid 42 comm softib\n",
		"pd": "dev rxe0 pdn 0 users 3 pid 42 comm softib\n",
	} {
		var b strings.Builder
		if err := res.Write(&b, kind, sns); err != nil || b.String() != want {
			t.Errorf("%s: %v\n got %q\nwant %q", kind, err, b.String(), want)
		}
	}
	var b strings.Builder
	res.WriteSummary(&b, sns)
	if want := "rxe0: pd 1 cq 1 qp 1 mr 1 [addr 127.0.0.2:4791 pid 42 comm softib]\n"; b.String() != want {
		t.Errorf("summary %q", b.String())
	}
	if err := res.Write(&b, "srq", sns); err == nil {
		t.Error("unknown kind accepted")
	}
}

// TestJSON checks that --json prints flat objects with snake_case
// fields and string enums, tagged with their device.
func TestJSON(t *testing.T) {
	v, err := res.JSON("qp", snapshot())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 {
		t.Fatalf("%s: %v", b, err)
	}
	q := got[0]
	if q["ifname"] != "rxe0" || q["qpn"] != float64(17) || q["state"] != "RTS" || q["type"] != "RC" || q["sq_psn"] != float64(5) || q["pid"] != float64(42) {
		t.Errorf("qp JSON: %s", b)
	}
	if v, err = res.JSON("", snapshot()); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(v)
	if !strings.Contains(string(b), `"qp":1`) || !strings.Contains(string(b), `"pd":1`) {
		t.Errorf("summary JSON: %s", b)
	}
	if _, err := res.JSON("srq", snapshot()); err == nil {
		t.Error("unknown kind accepted")
	}
}
