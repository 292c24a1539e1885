package devsel_test

import (
	"errors"
	"io"
	"testing"

	"softib/internal/testaddr"
	"softib/tools/devsel"
	"softib/verbs"
)

// TestRxShardsFlag: --rx-shards reaches the device config, a negative
// count is refused by the flag parsing, and a count the device cannot
// honour fails Open instead of being ignored.
func TestRxShardsFlag(t *testing.T) {
	parse := func(args ...string) *devsel.Options {
		fs := devsel.NewFlagSet("x", io.Discard)
		o := devsel.NewOptions()
		o.Register(fs, -1, "x")
		if _, err := devsel.ParseArgs(fs, append([]string{"--addr", testaddr.Next().String(), "--udp-port", "0"}, args...)); err != nil {
			t.Fatal(err)
		}
		return o
	}
	cfg, err := parse("--rx-shards", "3").Config()
	if err != nil || cfg.RxShards != 3 {
		t.Fatalf("--rx-shards 3: cfg.RxShards %d, %v", cfg.RxShards, err)
	}
	if _, err := parse("--rx-shards", "-1").Config(); err == nil {
		t.Fatal("--rx-shards -1 accepted")
	}
	if d, err := parse("--rx-shards", "100000").Open(); !errors.Is(err, verbs.ErrInvalidArgument) {
		if err == nil {
			d.Close()
		}
		t.Fatalf("--rx-shards 100000: %v, want ErrInvalidArgument", err)
	}
	d, err := parse("--rx-shards", "2").Open()
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}
