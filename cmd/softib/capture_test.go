package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/tsharktest"
)

// TestCLILnetdSocklndPcap: lnetd --pcap records its socklnd connections
// (synthesised IPv4/TCP framing) and Wireshark's LNet dissector decodes
// them: the HELLO handshake and the ping's GET/REPLY, no malformed frame.
func TestCLILnetdSocklndPcap(t *testing.T) {
	bin := buildSoftib(t)
	port := freePort(t)
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
