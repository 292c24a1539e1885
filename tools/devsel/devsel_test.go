package devsel_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"softib/internal/testaddr"
	"softib/tools/devsel"
	"softib/verbs"

	_ "softib/rxe"
)

func TestParseArgs(t *testing.T) {
	fs := devsel.NewFlagSet("x", io.Discard)
	n := fs.Int("n", 0, "")
	v := fs.Bool("v", false, "")
	pos, err := devsel.ParseArgs(fs, []string{"host", "-n", "3", "other", "-v", "--", "-n"})
	if err != nil {
		t.Fatal(err)
	}
	if *n != 3 || !*v || strings.Join(pos, ",") != "host,other,-n" {
		t.Fatalf("n=%d v=%v pos=%q", *n, *v, pos)
	}
	if _, err := devsel.ParseArgs(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

func TestOptions(t *testing.T) {
	t.Setenv(devsel.EnvAddr, "127.0.0.9")
	fs := devsel.NewFlagSet("x", io.Discard)
	o := devsel.NewOptions()
	o.Register(fs, -1, "x")
	if _, err := devsel.ParseArgs(fs, []string{"-d", "rxe3", "-i", "1", "-x", "1", "--udp-port", "4800"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != netip.MustParseAddr("127.0.0.9") || cfg.Port != 4800 || cfg.Name != "rxe3" || o.GIDIndex != 1 || o.Port() != 1 {
		t.Fatalf("cfg %+v opts %+v", cfg, o)
	}
	if o.PeerPort() != 4800 {
		t.Fatalf("peer port %d", o.PeerPort())
	}
	o.Addr = "not-an-ip"
	if _, err := o.Config(); err == nil || !strings.Contains(err.Error(), "--addr") {
		t.Fatalf("bad addr: %v", err)
	}
	if a := devsel.DefaultAddr(); !a.Is4() {
		t.Fatalf("default addr %v", a)
	}
}

type failProvider struct{ err error }

func (p failProvider) Open(verbs.DeviceConfig) (verbs.Device, error) { return nil, p.err }

// Providers register once per test binary (verbs panics on duplicates,
// and -count=N reruns tests).
func init() {
	verbs.Register("devsel-test-inuse", failProvider{fmt.Errorf("udp: listen: %w", syscall.EADDRINUSE)})
}

func TestOpenErrors(t *testing.T) {
	o := &devsel.Options{Addr: "127.0.0.2", GIDIndex: -1}
	// Open uses the first registered provider only when Name is empty;
	// go through verbs.Open with the test provider by name.
	cfg, _ := o.Config()
	cfg.Provider = "devsel-test-inuse"
	_, err := verbs.Open(cfg)
	msg := devsel.Explain(err, cfg).Error()
	if !strings.Contains(msg, "cannot bind 127.0.0.2:4791: address in use") || !strings.Contains(msg, "--udp-port or --addr") {
		t.Fatalf("message %q", msg)
	}
	if !errors.Is(devsel.Explain(err, cfg), syscall.EADDRINUSE) {
		t.Fatal("cause lost")
	}
}

// TestOpenFallback: a second process on the default address (two
// terminals, no --addr) gets a loopback address of its own instead of
// "address in use"; a chosen --addr never moves, and the exchange sockets
// bind only a chosen address.
func TestOpenFallback(t *testing.T) {
	a := testaddr.Next()
	defer devsel.SetDefaultAddr(a)()
	t.Setenv(devsel.EnvAddr, "")
	first := devsel.NewOptions()
	d1, err := first.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	if got, _ := first.LocalAddr(); got != a || first.BindAddr().IsValid() {
		t.Fatalf("first: %v, bind %v", got, first.BindAddr())
	}
	second := devsel.NewOptions()
	d2, err := second.Open()
	if err != nil {
		t.Fatalf("second process on the default address: %v", err)
	}
	defer d2.Close()
	got, _ := second.LocalAddr()
	if got == a || !got.IsLoopback() || second.BindAddr().IsValid() {
		t.Fatalf("second: %v, bind %v", got, second.BindAddr())
	}
	chosen := &devsel.Options{Addr: a.String(), GIDIndex: -1}
	if _, err := chosen.Open(); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("--addr %v in use: %v", a, err)
	}
	if chosen.BindAddr() != a {
		t.Fatalf("chosen bind %v", chosen.BindAddr())
	}
}
