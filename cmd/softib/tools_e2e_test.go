package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/tools/perftest"
	"softib/tools/pingpong"
)

// reservePort returns a TCP port this test binary holds with a live
// listener on a testaddr block's .0 address (testaddr.Port) until it
// exits, which keeps every other process's wildcard socket off it: a port
// found free and closed again could be taken before the test's server
// binds it. The servers here bind it on this binary's own testaddr
// addresses (the tools' --addr, lnetd's NI address), never on the
// wildcard address, which the reservation would refuse.
func reservePort() string {
	return strconv.Itoa(testaddr.Port(0))
}

// serverGuard bounds the wait for a server's socket: a hang guard, not a
// timing check.
const serverGuard = 60 * time.Second

// waitBound waits until a socket of network ("tcp": a listener, "udp")
// serves addr:port (testaddr.Bound, which does not bind it), failing the
// test if done is closed first (the server ended) or after serverGuard.
func waitBound(t *testing.T, network, addr, port string, done <-chan struct{}) {
	t.Helper()
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(p))
	deadline := time.Now().Add(serverGuard)
	for {
		ok, err := testaddr.Bound(network, ap)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-done:
			t.Fatalf("the server ended before its %s socket on %v was bound", network, ap)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s socket on %v after %v", network, ap, serverGuard)
		}
	}
}

// runServerClient runs a tool's server and client and returns their exit
// codes. Like the C tools, the client does not wait for the server: it
// runs once the server's TCP listener is up.
func runServerClient(t *testing.T, run func([]string) int, args ...string) (srv, cli int) {
	t.Helper()
	port := reservePort()
	srvAddr := testaddr.Next().String()
	sargs := append([]string{"--addr", srvAddr, "-p", port}, args...)
	cargs := append([]string{"--addr", testaddr.Next().String(), "-p", port}, args...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv = run(sargs)
	}()
	// The server listens on its --addr only.
	waitBound(t, "tcp", srvAddr, port, done)
	cli = run(append(cargs, srvAddr))
	<-done
	return srv, cli
}

func TestCLIEndToEnd(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func([]string) int
		args []string
	}{
		{"rc_pingpong", func(a []string) int { return runPingpong(pingpong.RC, a) }, []string{"-n", "20", "-s", "100", "-c"}},
		{"ud_pingpong", func(a []string) int { return runPingpong(pingpong.UD, a) }, []string{"-n", "20", "-s", "100"}},
		// No -s: the default 2048 fits the port MTU (shrunk to it on a 1500-byte link).
		{"ud_pingpong default size", func(a []string) int { return runPingpong(pingpong.UD, a) }, []string{"-n", "20"}},
		{"rc_pingpong json", func(a []string) int { return runPingpong(pingpong.RC, a) }, []string{"-n", "20", "--json"}},
		{"perf write_bw", func(a []string) int { return runPerf(perftest.WriteBW, a) }, []string{"-n", "50", "-s", "1000", "-x", "1"}},
		{"perf send_lat", func(a []string) int { return runPerf(perftest.SendLat, a) }, []string{"-n", "20", "--json"}},
		{"perf write_lat -U -H", func(a []string) int { return runPerf(perftest.WriteLat, a) }, []string{"-n", "20", "-U", "-H"}},
		{"perf write_bw -c UC", func(a []string) int { return runPerf(perftest.WriteBW, a) }, []string{"-n", "50", "-c", "UC"}},
		{"perf send_lat -c UC", func(a []string) int { return runPerf(perftest.SendLat, a) }, []string{"-n", "20", "-c", "UC"}},
		{"perf read_bw", func(a []string) int { return runPerf(perftest.ReadBW, a) }, []string{"-n", "20", "-s", "4096", "--json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if s, cl := runServerClient(t, c.run, c.args...); s != 0 || cl != 0 {
				t.Fatalf("exit codes server %d client %d", s, cl)
			}
		})
	}
	if code := runDevinfo([]string{"--addr", testaddr.Next().String(), "-v"}); code != 0 {
		t.Fatalf("devinfo exit %d", code)
	}
}

func TestCLIDemoShort(t *testing.T) {
	// Every address of this test binary's own (the LNet nodes' rxe
	// devices bind UDP 4791 on them, the sweep's too): another softib
	// on 127.0.0.2-4 does not collide. --port 0 takes a free port.
	nodes := []string{testaddr.Next().String(), testaddr.Next().String(), testaddr.Next().String()}
	args := []string{"--short", "--json", "--addrs", strings.Join(nodes, ","),
		"--addr-a", testaddr.Next().String(), "--addr-b", testaddr.Next().String()}
	if code := runDemo(args); code != 0 {
		t.Fatalf("demo exit %d", code)
	}
}

// TestCLIServersShareTCPPort: servers on two addresses listen on the same
// -p (each on its --addr), and each client reaches its own server from its
// --addr.
func TestCLIServersShareTCPPort(t *testing.T) {
	port := reservePort()
	srvA, srvB := testaddr.Next().String(), testaddr.Next().String()
	run := func(a []string) int { return runPerf(perftest.WriteBW, a) }
	codes := make([]int, 2)
	var wg sync.WaitGroup
	done := []chan struct{}{make(chan struct{}), make(chan struct{})}
	for i, srv := range []string{srvA, srvB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[i])
			codes[i] = run([]string{"--addr", srv, "-p", port, "-n", "20", "--json"})
		}()
	}
	for i, srv := range []string{srvA, srvB} {
		waitBound(t, "tcp", srv, port, done[i])
		if cli := run([]string{"--addr", testaddr.Next().String(), "-p", port, "-n", "20", "--json", srv}); cli != 0 {
			t.Errorf("client of %s: exit %d", srv, cli)
		}
	}
	wg.Wait()
	if codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("server exits %v", codes)
	}
}

// TestCLIPerfFlags: -I, -S, -N and --out_json_file reach the run; -T is
// refused while the device cannot put a TOS into its packets.
func TestCLIPerfFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "out.json")
	run := func(a []string) int { return runPerf(perftest.WriteBW, a) }
	port := reservePort()
	srv := testaddr.Next().String()
	done := make(chan struct{})
	var scode int
	go func() {
		defer close(done)
		scode = run([]string{"--addr", srv, "-p", port, "-n", "50", "-s", "512", "-I", "256", "-S", "3"})
	}()
	waitBound(t, "tcp", srv, port, done)
	code := run([]string{"--addr", testaddr.Next().String(), "-p", port, "-n", "50", "-s", "512", "-I", "256", "-S", "3", "-N", "--out_json_file", file, srv})
	<-done
	if code != 0 || scode != 0 {
		t.Fatalf("exit codes server %d client %d", scode, code)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Test    string `json:"test"`
		Results []struct {
			Bytes  int     `json:"bytes"`
			BWPeak float64 `json:"bw_peak"`
			BWAvg  float64 `json:"bw_average"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Test != "write_bw" || len(doc.Results) != 1 || doc.Results[0].BWPeak != 0 {
		t.Fatalf("--out_json_file: %v\n%s", err, b)
	}
	if code := run([]string{"-T", "4", srv}); code != 2 {
		t.Fatalf("-T: exit %d, want 2", code)
	}
}

// TestCLIRpingJSON: rping -s / -c with --json. rping's -p is an RDMA CM
// port, in the CM of the server's own device (on an address of this test
// binary's), not a kernel TCP port: the default needs no reservation.
func TestCLIRpingJSON(t *testing.T) {
	srv := testaddr.Next().String()
	done := make(chan struct{})
	var scode int
	go func() {
		defer close(done)
		scode = runRping([]string{"-s", "-a", srv, "-C", "3", "-V", "--json"})
	}()
	// Connect once the server's device holds its UDP port: a REQ to an
	// address with no device waits for the CM's whole timeout.
	waitBound(t, "udp", srv, "4791", done)
	// The device comes before the CM listener, and a REQ the CM has no
	// listener for is rejected (as rping's client, like the C one, does
	// not wait for its server): run the client again while the server,
	// still waiting for its client, has not yet listened.
	deadline := time.Now().Add(serverGuard)
	for {
		code := runRping([]string{"-c", "-a", srv, "-I", testaddr.Next().String(), "-C", "3", "-V", "--json"})
		if code == 0 {
			break
		}
		select {
		case <-done:
			t.Fatalf("client exit %d; the server ended (exit %d)", code, scode)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("client exit %d", code)
		}
	}
	<-done
	if scode != 0 {
		t.Fatalf("server exit %d", scode)
	}
}
