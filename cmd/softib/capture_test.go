//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/tsharktest"
	"softib/tools/stat"
)

// TestCLILnetdSocklndPcap: lnetd --pcap records its socklnd connections
// (synthesised IPv4/TCP framing) and Wireshark's LNet dissector decodes
// them: the HELLO handshake and the ping's GET/REPLY, no malformed frame.
func TestCLILnetdSocklndPcap(t *testing.T) {
	bin := buildSoftib(t)
	port := reservePort()
	a, b := testaddr.Next().String(), testaddr.Next().String()
	path := filepath.Join(t.TempDir(), "lnetd.pcap")
	da, sock := startLnetdArgs(t, bin, a, port, "--pcap", path)
	startLnetdArgs(t, bin, b, port)
	for range 2 {
		if code, out, errs := runBin(t, bin, "lnetctl", "--socket", sock, "ping", b+"@tcp"); code != 0 {
			t.Fatalf("ping: exit %d\n%s%s", code, out, errs)
		}
	}
	// SIGTERM: lnetd closes its NIs and flushes the capture.
	if err := da.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, da); code != 0 {
		t.Fatalf("lnetd exit %d", code)
	}
	decode := []string{"-d", "tcp.port==" + port + ",lnet"}
	if bad := tsharktest.Problems(t, path, decode...); len(bad) > 0 {
		t.Errorf("tshark problems:\n%s", strings.Join(bad, "\n"))
	}
	rows := tsharktest.Fields(t, path, []string{"lnet.ksm_type", "lnet.msg_type", "lnet.hello_type"}, append(decode, "-Y", "lnet")...)
	seen := map[string]bool{}
	for _, r := range rows {
		for i, f := range []string{"ksm", "msg", "hello"} {
			for _, v := range strings.Split(r[i], ",") {
				if v != "" {
					seen[f+" "+v] = true
				}
			}
		}
	}
	// LNET frames (ksm 0xc1) carrying GET (2) and REPLY (3); HELLOs.
	for _, want := range []string{"ksm 0x000000c1", "msg 2", "msg 3"} {
		if !seen[want] {
			t.Errorf("no %q in the capture: %v", want, seen)
		}
	}
	if t.Failed() {
		t.Log(tsharktest.Run(t, path, decode...))
	}
}

// startLnetdArgs is startLnetd with extra lnetd flags.
func startLnetdArgs(t *testing.T, bin, ip, port string, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	cfg, sock := dir+"/lnet.yaml", dir+"/lnetd.sock"
	yaml := "net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              0: " + ip +
		"\nglobal:\n    accept_port: " + port + "\n    accept: all\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, out, errb := startProc(t, bin, append([]string{"lnetd", "--config", cfg, "--socket", sock}, extra...)...)
	deadline := time.Now().Add(netnsGuard)
	for !strings.Contains(out.String()+errb.String(), "lnetd: ready") {
		if time.Now().After(deadline) {
			t.Fatalf("lnetd on %s not ready:\n%s%s", ip, out, errb)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, sock
}

// TestCLIDemoObserve: while `softib demo` runs, another process reads its
// o2ib devices with `softib stat` and `softib res`; its --pcap holds the
// devices' RoCE packets and the tcp NIs' socklnd streams, each connection
// once (both of its ends are in the demo's process), which tshark
// decodes: no TCP analysis warning, nothing malformed but what Wireshark's
// LNet dissector does with lnet_selftest's messages (it does so on a
// kernel's captures alike).
func TestCLIDemoObserve(t *testing.T) {
	bin := buildSoftib(t)
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir) // the processes' control sockets go here
	a, b, port := testaddr.Next().String(), testaddr.Next().String(), reservePort()
	path := filepath.Join(dir, "demo.pcap")
	d, out, errb := startProc(t, bin, "demo", "--short", "--no-rdma", "--seconds", "0.5", "--addrs", a+","+b, "--port", port, "--pcap", path)
	exited := make(chan int, 1)
	go func() {
		// Not exitCode: t.Fatal belongs to the test's goroutine.
		d.Wait()
		exited <- d.ProcessState.ExitCode()
	}()
	var links []stat.LinkJSON
	for len(links) == 0 {
		select {
		case code := <-exited:
			t.Fatalf("demo ended (exit %d) before softib stat saw its device\n%s%s", code, out, errb)
		case <-time.After(20 * time.Millisecond):
		}
		code, sout, _ := runBin(t, bin, "stat", "--json", "--addr", a)
		if code == 0 {
			if err := json.Unmarshal([]byte(sout), &links); err != nil {
				t.Fatalf("stat --json: %v\n%s", err, sout)
			}
		}
	}
	if l := links[0]; l.IfName != "rxe_demo0" || l.PID != d.Process.Pid {
		t.Errorf("stat: %+v (demo pid %d)", l, d.Process.Pid)
	}
	if code, rout, rerr := runBin(t, bin, "res", "--addr", b); code != 0 || !strings.HasPrefix(rout, "rxe_demo1: pd ") {
		t.Errorf("res --addr %s: exit %d\n%s%s", b, code, rout, rerr)
	}
	if code := <-exited; code != 0 {
		t.Fatalf("demo exit %d\n%s%s", code, out, errb)
	}
	// The RPC-over-RDMA heuristic claims zero-filled SENDs and throws on
	// them: a Wireshark limitation, not the capture's.
	args := []string{"--disable-protocol", "rpcordma", "-d", "tcp.port==" + port + ",lnet"}
	// One pass over the file (tens of MB).
	rows := tsharktest.Fields(t, path, []string{"tcp.analysis.flags", "_ws.malformed", "lnet.msg_type", "infiniband.bth.opcode", "frame.number"}, args...)
	var flagged, badOther, roce, lnetTCP int
	for _, r := range rows {
		isLNet, isIB := r[2] != "", r[3] != ""
		switch {
		case r[0] != "":
			flagged++
			if flagged < 5 {
				t.Logf("TCP analysis warning in frame %s", r[4])
			}
		case r[1] != "" && !isLNet:
			badOther++
		}
		if isIB {
			roce++
		}
		if isLNet && !isIB {
			lnetTCP++
		}
	}
	if flagged != 0 || badOther != 0 {
		t.Errorf("%d frames with TCP analysis warnings, %d malformed outside LNet", flagged, badOther)
	}
	if roce < 100 || lnetTCP < 10 {
		t.Errorf("%d RoCE packets and %d LNet frames over TCP in the demo's capture", roce, lnetTCP)
	}
}
