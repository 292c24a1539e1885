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
