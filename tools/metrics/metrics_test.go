package metrics_test

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/verbstest"
	"softib/lnet"
	"softib/rxe"
	"softib/tools/metrics"
	"softib/verbs"
	"softib/wire/roce"
)

// TestScrape serves the metrics of a device with a QP and of an LNet
// instance on a live listener and checks the scrape: rxe's counter
// names, QP and CQ gauges, LNet instance and NI values, all in the
// Prometheus text format.
func TestScrape(t *testing.T) {
	ip := testaddr.Next()
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 8})
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := lnet.New(lnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	e := metrics.New()
	e.AddDevice(d.(*rxe.Device))
	e.AddLNet(in)
	addr, err := e.Listen(netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// The text format sorts labels by name.
	dl := `addr="` + netip.AddrPortFrom(ip, rxe.RoCEv2Port).String() + `",device="rxe0"`
	qpn := `qpn="` + strconv.FormatUint(uint64(qp.QPN()), 10) + `"`
	for _, want := range []string{
		"# TYPE softib_rxe_sent_pkts_total counter",
		"softib_rxe_sent_pkts_total{" + dl + "} 0",
		"softib_rxe_duplicate_request_total{" + dl + "} 0",
		"softib_rxe_icrc_err_total{" + dl + "} 0",
		`softib_resources{` + dl + `,kind="qp"} 1`,
		`softib_qp_sq_depth{` + dl + `,` + qpn + `,type="RC"} 4`,
		`softib_qp_state{` + dl + `,` + qpn + `,state="RESET",type="RC"} 1`,
		`softib_cq_cqe{addr="` + netip.AddrPortFrom(ip, rxe.RoCEv2Port).String() + `",cqn="0",device="rxe0"} 8`,
		"softib_lnet_msgs_alloc 0",
		"softib_lnet_send_count_total 0",
		`softib_lnet_ni_up{lnd="lo",nid="0@lo"} 1`,
		`softib_lnet_ni_health{nid="0@lo"} 1000`,
		`softib_lnet_ni_failures_total{kind="timeout",nid="0@lo"} 0`,
		`softib_lnet_health_total{counter="resend_count"} 0`,
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

// TestScrapeDCQCN: a device with ECN on exports softib_rxe_ecn_enabled 1
// and, for a QP whose limiter a CNP started (sent from a UDP socket, as
// a peer's notification point would), softib_qp_dcqcn_limiting 1 with
// its current and target rates; a device with ECN off exports 0 and no
// limiter gauges.
func TestScrapeDCQCN(t *testing.T) {
	ip := testaddr.Next()
	// No rate-increase timer within the test: the limiter stays where the
	// CNP put it (with mlx5's 300 µs it recovers in milliseconds).
	d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}, ECN: rxe.ECNConfig{Enable: true, TimeReset: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dev := d.(*rxe.Device)
	ud := verbstest.NewEnd(t, d, verbs.QPTypeUD, verbstest.EndOpts{Buf: 4096})
	verbstest.Connect(t, ud, nil, verbstest.ConnOpts{})
	off, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()

	// The CNP, from a peer address, ICRC and all.
	peer, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(testaddr.Next(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	cnp := make([]byte, 64)
	n, err := roce.BuildCNP(cnp, ud.QP.QPN(), roce.DefaultPKey)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(cnp[n-4:], roce.ICRCFor(peer.LocalAddr().(*net.UDPAddr).AddrPort(), dev.Addr(), cnp[:n]))
	if _, err := peer.WriteToUDPAddrPort(cnp[:n], dev.Addr()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); dev.Stats()["RPCNPHandled"] == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("hang guard: the CNP was not handled: %v", dev.Stats())
		}
	}

	e := metrics.New()
	e.AddDevice(dev)
	e.AddDevice(off.(*rxe.Device))
	addr, err := e.Listen(netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	dl := `addr="` + dev.Addr().String() + `",device="rxe0"`
	ql := dl + `,qpn="` + strconv.FormatUint(uint64(ud.QP.QPN()), 10) + `",type="UD"`
	offl := `addr="` + off.(*rxe.Device).Addr().String() + `",device="rxe0"`
	// The first CNP cuts MaxRate (100 Gb/s) by initial alpha/2
	// (1023/2048); the target stays at MaxRate.
	for _, want := range []string{
		"# TYPE softib_rxe_ecn_enabled gauge",
		"softib_rxe_ecn_enabled{" + dl + "} 1",
		"softib_rxe_ecn_enabled{" + offl + "} 0",
		"# TYPE softib_qp_dcqcn_limiting gauge",
		"softib_qp_dcqcn_limiting{" + ql + "} 1",
		"softib_qp_dcqcn_rate_bps{" + ql + "} 5.0048828125e+10",
		"softib_qp_dcqcn_target_rate_bps{" + ql + "} 1e+11",
		"softib_qp_rp_cnp_handled_total{" + ql + "} 1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, "softib_qp_dcqcn_limiting{"+offl) {
		t.Error("limiter gauge for a device with ECN off")
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}
