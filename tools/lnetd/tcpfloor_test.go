//go:build linux

package lnetd

// The floor under issue #12's routing goal: what one more TCP hop costs
// on these links with no LNet at all. TestE2ERoutePerf runs, in its own
// namespaces and beside its lst runs, a bare stream of 1 MiB writes from
// A's namespace to a sink in C's (direct) and through a relay in R's to a
// sink in B's (relayed). The relay is the standard library's io.Copy
// between two TCP connections, which splices socket → pipe → socket
// (internal/poll's splice, 1 MiB pipes): no parsing, no credits, no
// copies. Whatever it costs above the direct stream is the kernel's work
// for the second hop (TCP send, the veth and bridge, the receiver's TCP
// input, which over veth runs in the sender's context), and any router
// on these links pays it.
//
// The roles run as this test binary re-executed in a namespace
// (`ip netns exec NS <test binary>` with tcpFloorEnv set); TestMain hands
// such a process to tcpFloorMain before any test runs.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// tcpFloorEnv names the role of a re-executed test binary: "sink ADDR",
// "relay ADDR TO" or "source TO SECONDS STREAMS".
const tcpFloorEnv = "SOFTIB_LNETD_TCPFLOOR"

// tcpFloorMain runs the role in tcpFloorEnv, if any, and exits; it
// returns at once in a normal test process.
func tcpFloorMain() {
	role := strings.Fields(os.Getenv(tcpFloorEnv))
	if len(role) == 0 {
		return
	}
	if err := tcpFloorRole(role); err != nil {
		fmt.Fprintf(os.Stderr, "tcp floor %s: %v\n", role[0], err)
		os.Exit(1)
	}
	os.Exit(0)
}

func tcpFloorRole(role []string) error {
	switch {
	case role[0] == "sink" && len(role) == 2:
		return floorServe(role[1], func(c net.Conn) {
			buf := make([]byte, 1<<20)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		})
	case role[0] == "relay" && len(role) == 3:
		return floorServe(role[1], func(c net.Conn) {
			out, err := net.Dial("tcp", role[2])
			if err != nil {
				fmt.Fprintf(os.Stderr, "relay: %v\n", err)
				return
			}
			defer out.Close()
			io.Copy(out, c) // *TCPConn → *TCPConn: splice(2) through a pipe
		})
	case role[0] == "source" && len(role) == 4:
		secs, err1 := strconv.ParseFloat(role[2], 64)
		streams, err2 := strconv.Atoi(role[3])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		return floorSource(role[1], time.Duration(secs*float64(time.Second)), streams)
	}
	return fmt.Errorf("bad role %q", role)
}

// floorServe listens on addr (port 0), prints "port N" on stdout and
// serves each connection with serve until stdin closes (the test's end).
func floorServe(addr string, serve func(net.Conn)) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return err
	}
	fmt.Printf("port %d\n", ln.Addr().(*net.TCPAddr).Port)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			serve(c)
		}()
	}
}

// floorSource writes 1 MiB buffers on streams connections to to for d
// and prints "MiB seconds hostCPUseconds": the bytes all streams wrote,
// the time from the first write to the last, and the machine's busy CPU
// time (/proc/stat) over the same span.
func floorSource(to string, d time.Duration, streams int) error {
	conns := make([]net.Conn, streams)
	for i := range conns {
		c, err := net.Dial("tcp", to)
		if err != nil {
			return err
		}
		defer c.Close()
		conns[i] = c
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	h0, err := procStatBusy()
	if err != nil {
		return err
	}
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	written := make([]int64, streams)
	errs := make([]error, streams)
	for i, c := range conns {
		wg.Go(func() {
			for time.Now().Before(end) {
				n, err := c.Write(buf)
				written[i] += int64(n)
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	h1, err := procStatBusy()
	if err := errors.Join(append(errs, err)...); err != nil {
		return err
	}
	var total int64
	for _, n := range written {
		total += n
	}
	fmt.Printf("%.1f %.4f %.4f\n", float64(total)/(1<<20), took.Seconds(), h1-h0)
	return nil
}

// startFloor starts a sink ("sink") or relay ("relay", to) in namespace ns
// listening on addr, and returns its address once it listens.
func startFloor(t *testing.T, ns, role, addr string, to ...string) string {
	t.Helper()
	cmd := floorCmd(t, ns, strings.Join(append([]string{role, addr}, to...), " "))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the server exits when its stdin closes
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var port int
	if _, err2 := fmt.Sscanf(line, "port %d", &port); err != nil || err2 != nil {
		t.Fatalf("tcp floor %s in %s: no port (%q, %v, %v)", role, ns, line, err, err2)
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

// floorCmd is this test binary in namespace ns, in role.
func floorCmd(t *testing.T, ns, role string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, self)
	cmd.Env = append(os.Environ(), tcpFloorEnv+"="+role)
	return cmd
}

// floorSample is one bare stream: MiB/s and the machine's CPU ms per MiB.
type floorSample struct{ mib, host float64 }

// runFloor streams from namespace ns to to for d with two connections.
func runFloor(t *testing.T, ns, to string, d time.Duration) floorSample {
	t.Helper()
	cmd := floorCmd(t, ns, fmt.Sprintf("source %s %g 2", to, d.Seconds()))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tcp floor source in %s → %s: %v", ns, to, err)
	}
	var mib, secs, host float64
	if _, err := fmt.Sscanf(string(out), "%g %g %g", &mib, &secs, &host); err != nil || mib <= 0 || secs <= 0 {
		t.Fatalf("tcp floor source in %s → %s: output %q: %v", ns, to, out, err)
	}
	return floorSample{mib: mib / secs, host: host / mib * 1e3}
}

// procStatBusy is the machine's busy CPU seconds (/proc/stat: all but
// idle and iowait; guest time is counted in user).
func procStatBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy float64
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i != 3 && i != 4 && i < 8 {
			busy += v
		}
	}
	return busy / clkTck, nil
}
