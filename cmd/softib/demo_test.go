package main

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"softib/internal/testaddr"
	"softib/tools/demo"
)

// demoStdout runs the demo with os.Stdout captured.
func demoStdout(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	code := runDemo(args)
	os.Stdout = old
	w.Close()
	return code, string(<-done)
}

func demoAddrs(n int) string {
	var s []string
	for range n {
		s = append(s, testaddr.Next().String())
	}
	return strings.Join(s, ",")
}

func TestDemoCLIJSON(t *testing.T) {
	code, out := demoStdout(t, "--short", "--json", "--addrs", demoAddrs(3))
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	var rep demo.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !rep.OK || rep.O2IBSkipped != "" || len(rep.Selftest) != 2*len(demo.DefaultTests()) || len(rep.RDMA) == 0 {
		t.Fatalf("report:\n%s", out)
	}
	for _, r := range rep.Selftest {
		if r.RPCs == 0 || r.Errors != 0 || r.BRWErrors != 0 || r.Expired != 0 {
			t.Errorf("%s %s %d: %+v", r.Network, r.Test, r.Size, r)
		}
	}
}

func TestDemoCLITable(t *testing.T) {
	code, out := demoStdout(t, "--short", "--tcp-only", "--no-rdma", "--seconds", "0.1", "--addrs", demoAddrs(2))
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"network  test          size  check      RPC/s      MiB/s  errors", "tcp      brw read     4 KiB   full",
		"o2ib: skipped (disabled with --tcp-only)", "stack: 2 LNet nodes", "softib demo: OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "tcp" && (f[len(f)-1] != "0" || f[len(f)-3] == "0") {
			t.Errorf("row %q: want RPCs and no errors", l)
		}
	}
}

func TestDemoCLIRDMAOnly(t *testing.T) {
	code, out := demoStdout(t, "--rdma", "--short", "--addr-a", testaddr.Next().String(), "--addr-b", testaddr.Next().String())
	if code != 0 || !strings.Contains(out, "softib demo --rdma: rxe0") || !strings.Contains(out, "send_lat") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestDemoCLIErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--addrs", "127.0.0.2"},
		{"--addrs", "127.0.0.2,nope"},
		{"--addr-b", "bogus"},
		{"--seconds", "-1"},
	} {
		if code, _ := demoStdout(t, args...); code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
	}
}
