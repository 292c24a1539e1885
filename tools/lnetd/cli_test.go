package lnetd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/testenv"
)

// TestRunDaemonInProcess runs the lnetd command in-process (under the race
// detector), talks to it and stops it through its context.
func TestRunDaemonInProcess(t *testing.T) {
	dir := t.TempDir()
	ip := testIP()
	cfg := filepath.Join(dir, "lnet.yaml")
	os.WriteFile(cfg, []byte(nodeYAML(ip, reservePort(), "")), 0o644)
	sock := filepath.Join(dir, "s", "lnetd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.Buffer
	done := make(chan int, 1)
	go func() { done <- RunDaemon(ctx, []string{"--config", cfg, "--socket", sock, "--log-json"}, &logs) }()
	deadline := time.Now().Add(hangGuard)
	for !strings.Contains(logs.String(), "lnetd: ready") {
		select {
		case code := <-done:
			t.Fatalf("lnetd exited %d:\n%s", code, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out := ctlOK(t, sock, "net", "show"); !strings.Contains(out, "nid: "+ip+"@tcp") {
		t.Errorf("net show:\n%s", out)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d", code)
		}
	case <-time.After(hangGuard):
		t.Fatal("lnetd did not stop")
	}
	if !strings.Contains(logs.String(), `"msg":"lnetd: NI up"`) {
		t.Errorf("no JSON NI-up line:\n%s", logs.String())
	}
}

func TestRunDaemonFlags(t *testing.T) {
	var errb bytes.Buffer
	if code := RunDaemon(context.Background(), []string{"--log-level", "loud"}, &errb); code != 2 || !strings.Contains(errb.String(), "bad --log-level") {
		t.Errorf("%d %s", code, errb.String())
	}
	errb.Reset()
	if code := RunDaemon(context.Background(), []string{"extra"}, &errb); code != 2 {
		t.Errorf("%d %s", code, errb.String())
	}
	errb.Reset()
	if code := RunDaemon(context.Background(), []string{"-h"}, &errb); code != 0 || !strings.Contains(errb.String(), "usage: softib lnetd") {
		t.Errorf("%d %s", code, errb.String())
	}
}

func TestLNetPingInProcess(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	b := startInproc(t, testIP(), port, "")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var out, errb bytes.Buffer
	// Through a's lnetd.
	code := RunLNet(ctx, []string{"ping", b.nid, "--socket", a.sock, "-c", "2", "-i", "1ms"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "from lnetd at "+a.sock) || !strings.Contains(out.String(), "2 replies, 0% loss") {
		t.Errorf("via lnetd: %d\n%s%s", code, out.String(), errb.String())
	}
	// Standalone: its own node from a fresh address.
	out.Reset()
	errb.Reset()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	src := testIP()
	code = RunLNet(ctx, []string{"ping", b.nid, "--port", fmt.Sprint(port), "--source", src + "@tcp"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "from "+src+"@tcp") || !strings.Contains(out.String(), "nids="+b.nid) {
		t.Errorf("standalone: %d\n%s%s", code, out.String(), errb.String())
	}
	// Standalone, source chosen by the kernel's route (loopback here).
	out.Reset()
	code = RunLNet(ctx, []string{"ping", b.nid, "--port", fmt.Sprint(port)}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "1 replies") {
		t.Errorf("standalone, routed source: %d\n%s%s", code, out.String(), errb.String())
	}
	// Nobody there: no reply, 100% loss, exit 1.
	out.Reset()
	dead := testIP() + "@tcp"
	code = RunLNet(ctx, []string{"ping", dead, "--port", fmt.Sprint(port), "--timeout", "2s", "-c", "2", "-i", "1ms"}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "no reply from "+dead) || !strings.Contains(out.String(), "100% loss") {
		t.Errorf("dead peer: %d\n%s", code, out.String())
	}
	for _, args := range [][]string{{}, {"pong"}, {"ping"}, {"ping", "notanid"}, {"ping", "1.2.3.4@o2ib", "--socket", ""}} {
		out.Reset()
		errb.Reset()
		if code := RunLNet(ctx, args, &out, &errb); code == 0 {
			t.Errorf("%v: exit 0\n%s", args, out.String())
		}
	}
	if code := RunLNet(ctx, []string{"ping", b.nid, "--socket", filepath.Join(t.TempDir(), "x")}, &out, &errb); code != 1 {
		t.Errorf("missing socket: %d", code)
	}
}

func TestCtlJSONErrorsAndUsage(t *testing.T) {
	a := startInproc(t, testIP(), reservePort(), "")
	code, _, errs := ctlRun(t, a.sock, "--json", "net", "del", "--net", "tcp7")
	if code != 1 || !strings.Contains(errs, `"errno": -2`) || !strings.Contains(errs, `"del"`) {
		t.Errorf("JSON error: %d %s", code, errs)
	}
	var out, errb bytes.Buffer
	if c := RunCtl(context.Background(), nil, nil, &out, &errb); c != 2 || !strings.Contains(errb.String(), "usage: softib lnetctl") {
		t.Errorf("no args: %d", c)
	}
	for _, args := range [][]string{{"bogus"}, {"net", "add"}, {"set", "x"}, {"import"}, {"test", "put"}, {"peer", "add"}, {"route", "add"}, {"ping"}} {
		if code, _, errs := ctlRun(t, a.sock, args...); code != 2 {
			t.Errorf("%v: exit %d %s", args, code, errs)
		}
	}
	// import from stdin
	var o2, e2 bytes.Buffer
	code = RunCtl(context.Background(), []string{"--socket", a.sock, "import", "-"},
		strings.NewReader("global:\n    retry_count: 4\n"), &o2, &e2)
	if code != 0 {
		t.Fatalf("import -: %d %s", code, e2.String())
	}
	if g := ctlDoc(t, a.sock, "global", "show"); g.Path("global", "retry_count") != int64(4) {
		t.Errorf("retry_count after import:\n%s", YAML(g))
	}
}
