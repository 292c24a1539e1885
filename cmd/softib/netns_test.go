//go:build linux

package main

// Multi-process RoCE tests over real kernel paths: the softib binary runs
// as two processes in two network namespaces joined by internal/netemu's
// impairing router, so every RoCEv2 packet crosses both kernels' UDP
// stacks and veths. Under loss, reordering and duplication RC must
// recover by retransmission and every tool must still exit 0.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"softib/internal/netemu"
	"softib/internal/testenv"
)

// netnsGuard bounds every softib process of these tests: a hang guard,
// not a timing assertion.
const netnsGuard = 90 * time.Second

// netnsTCPPort is the tools' TCP exchange port; each namespace pair is
// fresh, so a fixed port cannot collide with anything.
const netnsTCPPort = 18515

// buildSoftib builds this command once per test binary (every CLI test
// that runs real processes shares the binary; TestMain removes it).
func buildSoftib(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "softib-cli-test-")
		if err != nil {
			builtErr = err
			return
		}
		removeBuilt = func() { os.RemoveAll(dir) }
		bin := filepath.Join(dir, "softib")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "softib/cmd/softib").CombinedOutput()
		if err != nil {
			builtErr = fmt.Errorf("go build softib/cmd/softib: %v\n%s", err, out)
			return
		}
		builtBin = bin
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtBin
}

var (
	builtOnce sync.Once
	builtBin  string
	builtErr  error
)

// nsProc is a softib process running in a namespace.
type nsProc struct {
	cmd  *exec.Cmd
	out  bytes.Buffer // stdout and stderr; read only after done
	done chan struct{}
	err  error
}

// startIn starts `softib args...` in h's namespace, killed when ctx ends
// or the test finishes.
func startIn(t *testing.T, ctx context.Context, h *netemu.Host, bin string, args ...string) *nsProc {
	t.Helper()
	// ip netns exec execs the command, so the killed process is softib.
	p := &nsProc{cmd: exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, bin}, args...)...),
		done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.WaitDelay = 5 * time.Second
	// Should the test binary die (a go test -timeout panic skips
	// cleanups), take softib with it rather than leave it running.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// listening reports whether something in h's namespace listens on TCP
// port, read from the namespace's /proc/net/tcp and tcp6 (a tool given
// --addr listens on that address; without it, on the wildcard address, a
// dual-stack IPv6 socket).
func listening(t *testing.T, h *netemu.Host, port int) bool {
	t.Helper()
	out, err := h.Command("cat", "/proc/net/tcp", "/proc/net/tcp6").Output()
	if err != nil {
		t.Fatalf("reading /proc/net/tcp in %s: %v", h.Name, err)
	}
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// local_address is f[1] (hex ip:port), st is f[3]; 0A is LISTEN.
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true
		}
	}
	return false
}

// runAcross runs a tool's server in r.A and its client in r.B (the same
// arguments plus --addr and, for the client, the server's address) and
// fails the test unless both exit 0; see waitStraggler for the one
// exception of ping-pong under loss.
func runAcross(t *testing.T, r *netemu.Router, bin string, pingpong bool, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), netnsGuard)
	defer cancel()
	port := []string{"-p", fmt.Sprint(netnsTCPPort)}
	srv := startIn(t, ctx, r.A, bin, append(append(append([]string{}, args...), port...), "--addr", r.A.Addr.String())...)
	// The client does not retry its TCP connect: wait for the listener.
	for !listening(t, r.A, netnsTCPPort) {
		select {
		case <-srv.done:
			t.Fatalf("server %v exited before listening: %v\n%s", args, srv.err, &srv.out)
		case <-ctx.Done():
			t.Fatalf("hang guard: server %v never listened", args)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cli := startIn(t, ctx, r.B, bin, append(append(append([]string{}, args...), port...),
		"--addr", r.B.Addr.String(), r.A.Addr.String())...)
	if pingpong {
		// Either side may be the one left retransmitting its last SEND
		// after the other exited (see waitStraggler).
		select {
		case <-cli.done:
			if cli.err == nil {
				waitStraggler(t, r, srv, "server", true)
			}
		case <-srv.done:
			if srv.err == nil {
				waitStraggler(t, r, cli, "client", false)
			}
		}
	}
	<-cli.done
	<-srv.done
	if srv.err != nil || cli.err != nil {
		t.Fatalf("%v: server %v, client %v\nserver output:\n%s\nclient output:\n%s", args, srv.err, cli.err, &srv.out, &cli.out)
	}
	if testing.Verbose() {
		t.Logf("%v client:\n%s", args, &cli.out)
	}
}

// waitStraggler waits for the side of a ping-pong whose peer already
// exited 0. The last SEND of a ping-pong may lose its ACK to the router
// after the receiver, done with its loop, has destroyed its QP; the
// sender then retransmits to a QP that no longer exists and, with
// retry_cnt 7 (ibv_rc_pingpong's value, which rxe treats as "retry
// forever"), never completes. rdma-core's tool on Linux rxe does the
// same: its "done" exchange happens before the ping-pong, not after.
// Whichever side is left, the data was proven by then: each side posts a
// SEND only after receiving and checking (-c) the peer's message, and the
// side that exited 0 checked all of them. So a straggler that is still
// retransmitting (its packets keep crossing the router) is killed and the
// run counted as passed; one that exits must exit 0, and one that hangs
// without sending fails the test. aToB says which way its packets go.
func waitStraggler(t *testing.T, r *netemu.Router, p *nsProc, who string, aToB bool) {
	t.Helper()
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	sent := func() uint64 {
		if aToB {
			return r.Stats().AtoB.Received
		}
		return r.Stats().BtoA.Received
	}
	before := sent()
	select {
	case <-p.done:
		return
	case <-time.After(2 * time.Second):
	}
	if sent() == before {
		t.Fatalf("%s hangs without retransmitting\n%s", who, &p.out)
	}
	t.Logf("the last ACK was lost after the peer exited: %s retransmitting its last SEND forever (retry_cnt 7); killed", who)
	p.cmd.Process.Kill()
	<-p.done
	p.err = nil
}

// Tool runs: data-checked RC ping-pong at two sizes and the RDMA WRITE,
// READ and SEND bandwidth tests.
var (
	pingpongRuns = []roceRun{
		// The path crosses a router: rdma-core's hop limit 1 (the IP
		// TTL, as on Linux rxe) would die there.
		{"rc_pingpong_4k", []string{"rc_pingpong", "--hop-limit", "8", "-c", "-s", "4096", "-n", "200"}},
		{"rc_pingpong_64k", []string{"rc_pingpong", "--hop-limit", "8", "-c", "-s", "65536", "-n", "200"}},
	}
	perfRuns = []roceRun{
		{"write_bw", []string{"perf", "write_bw", "-s", "65536", "-n", "50"}},
		{"read_bw", []string{"perf", "read_bw", "-s", "65536", "-n", "50"}},
		{"send_bw", []string{"perf", "send_bw", "-s", "65536", "-n", "50"}},
	}
)

type roceRun struct {
	name string
	args []string
}

func runAll(t *testing.T, r *netemu.Router, bin string, runs []roceRun) {
	t.Helper()
	for _, c := range runs {
		t.Run(c.name, func(t *testing.T) { runAcross(t, r, bin, c.args[0] == "rc_pingpong", c.args...) })
	}
}

// TestNetnsRoCEClean runs the tools between two softib processes in two
// namespaces over an unimpaired routed path.
func TestNetnsRoCEClean(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildSoftib(t)
	r := netemu.New(t, netemu.Config{NoIPv6: true})
	runAll(t, r, bin, pingpongRuns)
	runAll(t, r, bin, perfRuns)
	if s := r.Stats(); s.AtoB.Forwarded == 0 || s.BtoA.Forwarded == 0 {
		t.Fatalf("nothing crossed the router: %+v", s)
	}
}

// impaired returns a router with 10% loss, 10% reordering, 5%
// duplication and 1 ms delay on RoCEv2 (UDP 4791) in both directions.
func impaired(t *testing.T) *netemu.Router {
	r := netemu.New(t, netemu.Config{NoIPv6: true, Seed: 4791})
	r.SetImpairment(netemu.Both, netemu.Impairment{
		Loss: 0.10, Reorder: 0.10, Duplicate: 0.05, Delay: time.Millisecond,
		Match: netemu.Filter{Proto: 17, Port: 4791},
	})
	return r
}

// checkBit fails unless the router dropped, reordered and duplicated
// packets in both directions.
func checkBit(t *testing.T, r *netemu.Router) {
	s := r.Stats()
	t.Logf("router A→B %+v", s.AtoB)
	t.Logf("router B→A %+v", s.BtoA)
	for _, d := range []struct {
		name string
		s    netemu.DirStats
	}{{"A→B", s.AtoB}, {"B→A", s.BtoA}} {
		if d.s.Dropped == 0 || d.s.Reordered == 0 || d.s.Duplicated == 0 {
			t.Errorf("%s: impairment did not bite: dropped %d reordered %d duplicated %d",
				d.name, d.s.Dropped, d.s.Reordered, d.s.Duplicated)
		}
	}
}

// TestNetnsRoCEImpairedPingpong: data-checked RC ping-pong between two
// softib processes over the impaired path; RC retransmits until every
// message arrives intact.
func TestNetnsRoCEImpairedPingpong(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildSoftib(t)
	r := impaired(t)
	runs := append([]roceRun(nil), pingpongRuns...)
	// Go-back-N over 64 packets per message at 10% loss is slow: fewer
	// iterations keep the test short.
	runs[1].args = []string{"rc_pingpong", "--hop-limit", "8", "-c", "-s", "65536", "-n", "50"}
	runAll(t, r, bin, runs)
	checkBit(t, r)
}

// TestNetnsRoCEImpairedPerf: RDMA WRITE, READ and SEND bandwidth tests
// between two softib processes over the impaired path.
func TestNetnsRoCEImpairedPerf(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildSoftib(t)
	r := impaired(t)
	runAll(t, r, bin, perfRuns)
	checkBit(t, r)
}
