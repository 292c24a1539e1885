package metrics_test

import (
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"softib/internal/testaddr"
	"softib/lnet"
	"softib/rxe"
	"softib/tools/metrics"
	"softib/verbs"
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
