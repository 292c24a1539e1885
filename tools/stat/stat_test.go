package stat_test

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/tools/res"
	"softib/tools/stat"
	"softib/verbs"
)

func openDev(t *testing.T) verbs.Device {
	t.Helper()
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestPublishQuery publishes a device with a QP, CQ, MR and PD and reads
// them back through its control socket, as `softib stat` and `softib
// res` do from another process.
func TestPublishQuery(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	d := openDev(t)
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 8})
	if _, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	s, err := stat.Publish(d)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: mode %v, %v; want 0600", s.Path(), fi.Mode(), err)
	}
	if di, err := os.Stat(filepath.Dir(s.Path())); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory mode %v, %v; want 0700", di.Mode(), err)
	}

	// A stale socket of a dead process is removed, not reported.
	stale := filepath.Join(stat.Dir(), "rxe-127.0.0.9-4791-1.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()

	sns, err := stat.QueryAll(netip.Addr{})
	if err != nil || len(sns) != 1 {
		t.Fatalf("QueryAll: %d snapshots, %v", len(sns), err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale socket still there: %v", err)
	}
	sn := sns[0]
	if sn.PID != os.Getpid() || sn.Addr != d.(*rxe.Device).Addr() || sn.Counters[0].Name != "sent_pkts" {
		t.Errorf("snapshot %+v", sn)
	}
	r := sn.Resources
	if len(r.QPs) != 1 || r.QPs[0].State != "RESET" || len(r.CQs) != 1 || r.CQs[0].CQE < 8 || len(r.MRs) != 1 || r.PDCount != 1 {
		t.Errorf("resources %+v", r)
	}

	var b strings.Builder
	stat.WriteLinks(&b, sns)
	if !strings.HasPrefix(b.String(), "link rxe0/1 sent_pkts 0 rcvd_pkts 0 duplicate_request 0") || !strings.HasSuffix(b.String(), " ecn off]\n") {
		t.Errorf("stat line: %s", b.String())
	}
	if sn.ECN == nil || sn.ECN.Enable {
		t.Errorf("snapshot ECN of a device with ECN off: %+v", sn.ECN)
	}
	b.Reset()
	stat.WriteQPs(&b, sns)
	if l := b.String(); !strings.Contains(l, " np_ecn_marked_roce_packets 0 np_cnp_sent 0 rp_cnp_handled 0 rp_cnp_ignored 0 pid ") ||
		strings.Contains(l, "dcqcn") {
		t.Errorf("stat qp line (congestion counters, no limiter): %s", l)
	}
	b.Reset()
	if err := res.Write(&b, "qp", sns); err != nil || !strings.Contains(b.String(), "type RC state RESET") {
		t.Errorf("res qp: %s %v", b.String(), err)
	}

	// Another address selects nothing.
	if _, err := stat.QueryAll(netip.MustParseAddr("127.0.0.9")); err == nil {
		t.Error("QueryAll on an address without a device succeeded")
	}
	s.Close()
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
	if _, err := stat.QueryAll(netip.Addr{}); err != stat.ErrNoDevices {
		t.Errorf("QueryAll with nothing published: %v", err)
	}
}

// TestPublishECN: the snapshot carries the device's congestion control,
// on with its DCQCN parameters (defaults and set ones, mlx5's names and
// units): the stat line says "ecn on" and --json has the parameters.
func TestPublishECN(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}, ECN: rxe.ECNConfig{Enable: true, MaxRate: 25e9}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := stat.Publish(d)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sn, err := stat.Query(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if e := sn.ECN; e == nil || !e.Enable || e.Algorithm != "DCQCN" || e.MinTimeBetweenCNPs != 4 || e.MaxRate != 25000 || e.TimeReset != 300 ||
		e.ClampTgtRate || !e.ClampTgtRateAfterTimeInc {
		t.Fatalf("snapshot ECN: %+v", sn.ECN)
	}
	var b strings.Builder
	stat.WriteLinks(&b, []*stat.Snapshot{sn})
	if !strings.HasSuffix(b.String(), " ecn on]\n") {
		t.Errorf("stat line: %s", b.String())
	}
	j, err := json.Marshal(stat.Links([]*stat.Snapshot{sn}))
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(j, &back); err != nil || len(back) != 1 {
		t.Fatalf("json %s: %v", j, err)
	}
	if e, _ := back[0]["ecn"].(map[string]any); e["enable"] != true || e["rpg_max_rate_mbps"] != 25000.0 || e["min_time_between_cnps_us"] != 4.0 {
		t.Errorf("stat --json ecn: %v", back[0]["ecn"])
	}
}
