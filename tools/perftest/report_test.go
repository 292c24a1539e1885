package perftest_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"softib/tools/devsel"
	"softib/tools/perftest"
	"softib/verbs"
)

func TestRowFormat(t *testing.T) {
	r := perftest.Row{Bytes: 65536, Iters: 5000, BWPeak: 1234.5678, BWAvg: 1200, MsgRate: 0.0192}
	if got, want := string(perftest.AppendRow(nil, &r)), " 65536      5000             1234.57            1200.00\t\t   0.019200\n"; got != want {
		t.Errorf("BW row %q\nwant   %q", got, want)
	}
	l := perftest.Row{Lat: true, Bytes: 2, Iters: 1000, TMin: 1, TMax: 9, TTypical: 2, TAvg: 2.5, TStdev: 0.5, P99: 8, P999: 9}
	if got, want := string(perftest.AppendRow(nil, &l)), " 2       1000          1.00           9.00         2.00     \t       2.50        \t0.50   \t\t8.00    \t\t9.00   \n"; got != want {
		t.Errorf("lat row %q\nwant    %q", got, want)
	}
	if !strings.HasPrefix(perftest.Header(perftest.WriteBW, false, false), " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]") {
		t.Error("BW header")
	}
	if !strings.Contains(perftest.Header(perftest.SendBW, true, false), "BW peak[Gb/sec]") {
		t.Error("Gb header")
	}
	if !strings.HasPrefix(perftest.Header(perftest.ReadLat, false, false), " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]") {
		t.Error("lat header")
	}
}

func TestAddressLines(t *testing.T) {
	k := perftest.Key{QPN: 0x11, PSN: 0x9c8f9b, OutReads: 128, RKey: 0x202, VAddr: 0x7f2ba7b5e000, GID: gid2, HasGID: true}
	want := " local address: LID 0000 QPN 0x0011 PSN 0x9c8f9b OUT 0x80 RKey 0x000202 VAddr 0x007f2ba7b5e000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:02\n"
	if got := perftest.AddressLines("local", perftest.VerbRead, &k); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := perftest.AddressLines("remote", perftest.VerbSend, &k); !strings.HasPrefix(got, " remote address: LID 0000 QPN 0x0011 PSN 0x9c8f9b\n") {
		t.Errorf("send line %q", got)
	}
}

func TestBWRow(t *testing.T) {
	// 100 messages of 1 MiB, posted 1 ms apart, completed in groups of 10.
	s := &perftest.Sample{Size: 1 << 20, Iters: 100, Elapsed: 100 * time.Millisecond, RTTFactor: 1}
	for i := range 100 {
		s.Posted = append(s.Posted, int64(i)*int64(time.Millisecond))
		if i%10 == 9 {
			s.Completed = append(s.Completed, perftest.Completion{Index: i, T: int64(i+1) * int64(time.Millisecond)})
		}
	}
	r := perftest.BWRow(perftest.WriteBW, s, false)
	if r.BWAvg < 999 || r.BWAvg > 1001 || r.MsgRate < 0.00099 || r.MsgRate > 0.00101 {
		t.Fatalf("avg %v rate %v", r.BWAvg, r.MsgRate)
	}
	if r.BWPeak < r.BWAvg*0.99 {
		t.Fatalf("peak %v below avg %v", r.BWPeak, r.BWAvg)
	}
	g := perftest.BWRow(perftest.WriteBW, s, true)
	if g.Unit != "Gb/sec" || g.BWAvg < 8.38 || g.BWAvg > 8.39 {
		t.Fatalf("Gb/sec %+v", g)
	}
}

func TestLatRow(t *testing.T) {
	// Deltas 2,4,...,: posts at cumulative times; RTT factor 2 halves.
	s := &perftest.Sample{Size: 2, Iters: 7, RTTFactor: 2}
	var at int64
	for _, d := range []int64{0, 2000, 2000, 4000, 2000, 100000, 2000} {
		at += d
		s.Posted = append(s.Posted, at)
	}
	r := perftest.LatRow(perftest.SendLat, s)
	// deltas/2 in usec: 1,1,2,1,50,1 -> sorted 1,1,1,1,2,50; drop 2 -> 1,1,1,1
	if r.TMin != 1 || r.TTypical != 1 || r.TAvg != 1 || r.TMax != 2 || r.TStdev != 0 {
		t.Fatalf("row %+v", r)
	}
}

func TestFlagsAndConfig(t *testing.T) {
	fs := devsel.NewFlagSet("perf", io.Discard)
	o := devsel.NewOptions()
	o.Register(fs, -1, "x", "gid-index")
	cfg := perftest.Config{Test: perftest.AtomicBW}
	pf := perftest.RegisterFlags(fs, &cfg)
	pos, err := devsel.ParseArgs(fs, []string{"-d", "rxe0", "-x", "1", "-n", "7", "-F", "--report_gbits", "-A", "CMP_AND_SWAP", "-q", "2", "192.0.2.1", "-D", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Finish(pos); err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "192.0.2.1" || cfg.Iters != 7 || !cfg.ReportGbits || cfg.Atomic != perftest.CmpAndSwap || cfg.QPs != 2 ||
		cfg.Duration != 3*time.Second || o.GIDIndex != 1 || cfg.TCPPort != 18515 {
		t.Fatalf("cfg %+v", cfg)
	}
	fs = devsel.NewFlagSet("perf", io.Discard)
	cfg = perftest.Config{}
	pf = perftest.RegisterFlags(fs, &cfg)
	pos, _ = devsel.ParseArgs(fs, []string{"-c", "UD"})
	if err := pf.Finish(pos); err == nil {
		t.Fatal("UD accepted")
	}
}

func TestRDMACMRefused(t *testing.T) {
	_, err := perftest.Run(t.Context(), nil, perftest.Config{Test: perftest.WriteBW, RDMACM: true})
	if err == nil || !strings.Contains(err.Error(), "RDMA CM mode not yet available") {
		t.Fatalf("-R: %v", err)
	}
	_, err = perftest.Run(t.Context(), nil, perftest.Config{Test: perftest.AtomicBW, Size: 16})
	if err == nil {
		t.Fatal("atomic size 16 accepted")
	}
	_ = verbs.MTU1024
}

func TestParseTest(t *testing.T) {
	for _, tt := range perftest.Tests() {
		got, ok := perftest.ParseTest("ib_" + tt.String())
		if !ok || got != tt {
			t.Errorf("ParseTest(ib_%s) = %v %v", tt, got, ok)
		}
	}
	if _, ok := perftest.ParseTest("bogus"); ok {
		t.Error("bogus parsed")
	}
}

func TestLatSamplesHistogram(t *testing.T) {
	s := &perftest.Sample{Posted: []int64{0, 2500, 4000, 6200}, RTTFactor: 1}
	d := perftest.LatSamples(s)
	if len(d) != 3 || d[0] != 2.5 || d[1] != 1.5 || d[2] != 2.2 {
		t.Fatalf("samples %v", d)
	}
	h := perftest.LatHistogram(d)
	if len(h) != 2 || h[0] != (perftest.HistBucket{Usec: 1, Count: 1}) || h[1] != (perftest.HistBucket{Usec: 2, Count: 2}) {
		t.Fatalf("histogram %v", h)
	}
}
