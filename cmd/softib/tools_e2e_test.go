package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/tools/perftest"
	"softib/tools/pingpong"
)

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// runServerClient runs a tool's server and client and returns their exit
// codes. The client retries until the server listens.
func runServerClient(t *testing.T, run func([]string) int, args ...string) (srv, cli int) {
	t.Helper()
	port := freePort(t)
	srvAddr := testaddr.Next().String()
	sargs := append([]string{"--addr", srvAddr, "-p", port}, args...)
	cargs := append([]string{"--addr", testaddr.Next().String(), "-p", port}, args...)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv = run(sargs)
	}()
	// Like the C tools, the client does not wait for the server: retry
	// while the server is still starting.
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The server listens on its --addr only.
		if cli = run(append(cargs, srvAddr)); cli == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
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
	port := freePort(t)
	srvA, srvB := testaddr.Next().String(), testaddr.Next().String()
	run := func(a []string) int { return runPerf(perftest.WriteBW, a) }
	codes := make([]int, 2)
	var wg sync.WaitGroup
	for i, srv := range []string{srvA, srvB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = run([]string{"--addr", srv, "-p", port, "-n", "20", "--json"})
		}()
	}
	for _, srv := range []string{srvA, srvB} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			cli := run([]string{"--addr", testaddr.Next().String(), "-p", port, "-n", "20", "--json", srv})
			if cli == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("client of %s: exit %d", srv, cli)
			}
			time.Sleep(50 * time.Millisecond)
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
	port := freePort(t)
	srv := testaddr.Next().String()
	var wg sync.WaitGroup
	var scode int
	wg.Add(1)
	go func() {
		defer wg.Done()
		scode = run([]string{"--addr", srv, "-p", port, "-n", "50", "-s", "512", "-I", "256", "-S", "3"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code := run([]string{"--addr", testaddr.Next().String(), "-p", port, "-n", "50", "-s", "512", "-I", "256", "-S", "3", "-N", "--out_json_file", file, srv})
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client exit %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	if scode != 0 {
		t.Fatalf("server exit %d", scode)
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

// udpBound reports whether a UDP socket is bound to addr:port, read from
// /proc/net/udp: probing with a bind of our own would race the server's
// bind and could make it fail with "address in use".
func udpBound(t *testing.T, addr string, port uint16) bool {
	t.Helper()
	a := netip.MustParseAddr(addr).As4()
	want := fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(a[:]), port)
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatalf("cannot see the server's socket: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == want {
			return true
		}
	}
	return false
}

// TestCLIRpingJSON: rping -s / -c with --json.
func TestCLIRpingJSON(t *testing.T) {
	port := freePort(t)
	srv := testaddr.Next().String()
	var wg sync.WaitGroup
	var scode int
	wg.Add(1)
	go func() {
		defer wg.Done()
		scode = runRping([]string{"-s", "-a", srv, "-p", port, "-C", "3", "-V", "--json"})
	}()
	// Connect once the server's device holds its UDP port: a REQ to an
	// address with no device waits for the CM's whole timeout.
	deadline := time.Now().Add(10 * time.Second)
	for !udpBound(t, srv, 4791) {
		if time.Now().After(deadline) {
			t.Fatal("rping server has no device")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		code := runRping([]string{"-c", "-a", srv, "-I", testaddr.Next().String(), "-p", port, "-C", "3", "-V", "--json"})
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client exit %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	if scode != 0 {
		t.Fatalf("server exit %d", scode)
	}
}
