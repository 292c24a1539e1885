package demo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
	_ "softib/rxe"
	"softib/tools/demo"
)

func TestSweepShort(t *testing.T) {
	cfg := demo.Config{AddrA: testaddr.Next(), AddrB: testaddr.Next(), Short: true, RunTimeout: 20 * time.Second}
	if testing.Short() {
		cfg.Sizes = []int{8, 4096}
	}
	a, b, err := demo.OpenPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	var labels []string
	cfg.Start = func(l string) { labels = append(labels, l) }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows, err := demo.Sweep(ctx, a, b, cfg)
	if err != nil {
		type statser interface{ Stats() map[string]uint64 }
		for _, d := range []any{a, b} {
			if s, ok := d.(statser); ok {
				t.Logf("stats: %v", s.Stats())
			}
		}
		t.Fatal(err)
	}
	if len(rows) != cfg.Runs() || len(labels) != cfg.Runs() {
		t.Fatalf("%d rows, %d labels, want %d", len(rows), len(labels), cfg.Runs())
	}
	for _, r := range rows {
		if r.Lat && r.TTypical <= 0 || !r.Lat && r.BWAvg <= 0 {
			t.Errorf("row %+v", r)
		}
	}
	var out bytes.Buffer
	demo.WriteTable(&out, rows)
	if !strings.Contains(out.String(), "BW avg[MB/sec]") || strings.Count(out.String(), "\n") != len(rows)+1 {
		t.Errorf("table:\n%s", out.String())
	}
}
