//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/internal/pcap"
	"softib/internal/testaddr"
	"softib/internal/tsharktest"
	"softib/tools/stat"
	"softib/wire/roce"
)

// TestCLIObserve runs an rc_pingpong server with --pcap and --metrics
// as a real process and, while it waits for its client, reads its
// device through `softib stat` and `softib res` (other processes) and
// scrapes its metrics; then a client with --pcap runs against it, and
// both captures must hold one record per RoCE packet, each with a
// correct ICRC, that tshark decodes without a malformed frame.
func TestCLIObserve(t *testing.T) {
	bin := buildSoftib(t)
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir) // the processes' control sockets go here
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sa, ca := testaddr.Next().String(), testaddr.Next().String()
	port := reservePort()
	spcap, cpcap := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")

	srv := exec.CommandContext(ctx, bin, "rc_pingpong", "--addr", sa, "-p", port, "-n", "50", "-s", "3000",
		"--pcap", spcap, "--metrics", sa+":0")
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	// The server prints where its metrics are once it has a device.
	sc := bufio.NewScanner(stderr)
	metricsURL := ""
	for metricsURL == "" && sc.Scan() {
		if _, u, ok := strings.Cut(sc.Text(), "Prometheus metrics on "); ok {
			metricsURL = u
		}
	}
	if metricsURL == "" {
		t.Fatalf("server printed no metrics address (%v)", sc.Err())
	}
	go io.Copy(io.Discard, stderr)

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			t.Fatalf("softib %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var links []stat.LinkJSON
	if err := json.Unmarshal([]byte(run("stat", "--json", "--addr", sa)), &links); err != nil || len(links) != 1 {
		t.Fatalf("stat --json: %v %+v", err, links)
	}
	if l := links[0]; l.IfName != "rxe0" || !strings.HasPrefix(l.Addr, sa+":") || l.PID != srv.Process.Pid {
		t.Errorf("stat --json: %+v", l)
	}
	if _, ok := links[0].Counters["retry_rnr_exceeded_err"]; !ok {
		t.Errorf("stat --json has no retry_rnr_exceeded_err: %v", links[0].Counters)
	}
	if out := run("stat", "--addr", sa); !strings.HasPrefix(out, "link rxe0/1 sent_pkts ") {
		t.Errorf("stat: %s", out)
	}
	if out := run("res", "--addr", sa); !strings.HasPrefix(out, "rxe0: pd 1 cq ") {
		t.Errorf("res: %s", out)
	}
	if out := run("res", "qp", "--addr", sa); !strings.Contains(out, " type RC state ") {
		t.Errorf("res qp: %s", out)
	}
	var qps []map[string]any
	if err := json.Unmarshal([]byte(run("res", "qp", "--json", "--addr", sa)), &qps); err != nil || len(qps) != 1 || qps[0]["type"] != "RC" {
		t.Errorf("res qp --json: %v %v", err, qps)
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "softib_rxe_sent_pkts_total{") || !strings.Contains(string(body), `softib_qp_state{`) {
		t.Errorf("metrics scrape lacks device or QP metrics:\n%s", body)
	}

	if out, err := exec.CommandContext(ctx, bin, "rc_pingpong", "--addr", ca, "-p", port, "-n", "50", "-s", "3000",
		"--pcap", cpcap, sa).CombinedOutput(); err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v", err)
	}
	if socks, _ := filepath.Glob(filepath.Join(stat.Dir(), "rxe-*.sock")); len(socks) != 0 {
		t.Errorf("control sockets left after exit: %v", socks)
	}
	for _, p := range []string{spcap, cpcap} {
		_, recs, err := pcap.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// 50 round trips of 3000 bytes: at least 3 packets each way.
		if len(recs) < 50*2*3 {
			t.Errorf("%s: %d records, want at least %d", p, len(recs), 50*2*3)
		}
		for i, r := range recs {
			f, err := roce.ParseFrame(r.Data)
			if err == nil {
				err = f.VerifyICRC()
			}
			if err != nil {
				t.Errorf("%s record %d: %v", p, i, err)
				break
			}
		}
		tsharktest.CheckNoMalformed(t, p)
	}
	os.Remove(spcap)
}
