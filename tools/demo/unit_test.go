package demo_test

import (
	"bytes"
	"strings"
	"testing"

	"softib/tools/demo"
	"softib/tools/perftest"
)

func TestSizeString(t *testing.T) {
	for n, want := range map[int]string{8: "8 B", 4096: "4 KiB", 65536: "64 KiB", 1 << 20: "1 MiB", 1000: "1000 B"} {
		if got := demo.SizeString(n); got != want {
			t.Errorf("SizeString(%d) = %q", n, got)
		}
	}
	if (demo.Config{}).Runs() != 24 {
		t.Error("default runs")
	}
}

func TestWriteTable(t *testing.T) {
	rows := []perftest.Row{
		{Test: "write_bw", Bytes: 4096, Iters: 100, Unit: "MB/sec", BWAvg: 512.5, MsgRate: 0.13},
		{Test: "send_lat", Bytes: 8, Iters: 30, Lat: true, TTypical: 12.5, P99: 40},
	}
	var b bytes.Buffer
	demo.WriteTable(&b, rows)
	want := "test           bytes   iters BW avg[MB/sec]  MsgRate[Mpps]  t_typical[usec]      t_99%[usec]\n" +
		"write_bw        4096     100         512.50       0.130000                -                -\n" +
		"send_lat           8      30              -              -            12.50            40.00\n"
	if b.String() != want {
		t.Errorf("table\n%s\nwant\n%s", b.String(), want)
	}
	if !strings.Contains(b.String(), "BW avg") {
		t.Error("header")
	}
}

// TestWriteReportExplains: the report explains its columns and prints,
// per row, the command that runs it alone.
func TestWriteReportExplains(t *testing.T) {
	r := &demo.Report{Stack: "s", Port: 21988, OK: true,
		Nodes:       [][]string{{"127.0.0.2@tcp", "127.0.0.2@o2ib"}, {"127.0.0.3@tcp", "127.0.0.3@o2ib"}, {"127.0.0.4@tcp", "127.0.0.4@o2ib"}},
		Selftest:    []demo.Result{{Network: "o2ib", Test: "brw write", Size: 1 << 20, Check: "full", Seconds: 2}, {Network: "tcp", Test: "ping", Seconds: 1}},
		RDMA:        []perftest.Row{{Test: "write_bw", Bytes: 4096, Iters: 1000}},
		RDMADevices: []string{"rxe0 127.0.0.2", "rxe1 127.0.0.3"}}
	var b strings.Builder
	demo.WriteReport(&b, r)
	out := b.String()
	for _, want := range []string{
		"MiB/s:          brw payload",
		"distribute 1:N",
		"softib lst quick --port 21988 --from 127.0.0.2@o2ib --to 127.0.0.3@o2ib,127.0.0.4@o2ib --distribute 1:2 --seconds 2 brw write size=1M check=full",
		"softib lst quick --port 21988 --from 127.0.0.2@tcp --to 127.0.0.3@tcp,127.0.0.4@tcp --distribute 1:2 --seconds 1 ping",
		"softib perf write_bw --addr 127.0.0.2 -s 4096 -n 1000 & softib perf write_bw --addr 127.0.0.3 -s 4096 -n 1000 127.0.0.2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
