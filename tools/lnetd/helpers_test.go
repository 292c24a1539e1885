package lnetd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
)

// hangGuard bounds every wait in these tests; it is a guard against
// hangs, never a timing assertion.
const hangGuard = 45 * time.Second

// testIP returns a fresh loopback address no other test binary uses
// (internal/testaddr's claimed blocks).
func testIP() string {
	return testaddr.Next().String()
}

// reservePort returns a TCP port for a test cluster's accept_port: every
// node binds it on its own NI address (testIP's), never on the wildcard,
// which the reservation would refuse. This test binary holds it with a
// live listener on a testaddr block's .0 address until it exits
// (testaddr.Port), which keeps every other process's wildcard socket off
// it: a port found free and closed again could be taken meanwhile.
func reservePort() int {
	return testaddr.Port(0)
}

// nodeYAML is the configuration of a one-NI test node.
func nodeYAML(ip string, port int, extra string) string {
	return fmt.Sprintf(`net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: %s
global:
    accept_port: %d
    accept: all
    transaction_timeout: 20
%s`, ip, port, extra)
}

// inprocNode is a Daemon served on a control socket inside the test.
type inprocNode struct {
	d    *Daemon
	ip   string
	nid  string
	sock string
	srv  *Server
	ln   net.Listener
}

func startInproc(t *testing.T, ip string, port int, extra string) *inprocNode {
	t.Helper()
	cfg, err := ParseConfig([]byte(nodeYAML(ip, port, extra)))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(&testLogWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := New(Options{Config: cfg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "ctl", "lnetd.sock")
	ln, err := Listen(sock)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	n := &inprocNode{d: d, ip: ip, nid: ip + "@tcp", sock: sock, srv: NewServer(d.Handle), ln: ln}
	go n.srv.Serve(ln)
	t.Cleanup(func() {
		ln.Close()
		n.srv.Close()
		d.Close()
	})
	return n
}

// testLogWriter sends log lines to t.Log while the test runs.
type testLogWriter struct{ t *testing.T }

func (w *testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// ctlRun runs lnetctl in-process against sock and returns exit code,
// stdout and stderr.
func ctlRun(t *testing.T, sock string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var out, errb bytes.Buffer
	code := RunCtl(ctx, append([]string{"--socket", sock}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// ctlOK runs lnetctl and fails the test unless it succeeds.
func ctlOK(t *testing.T, sock string, args ...string) string {
	t.Helper()
	code, out, errs := ctlRun(t, sock, args...)
	if code != 0 {
		t.Fatalf("lnetctl %v: exit %d\n%s%s", args, code, out, errs)
	}
	return out
}

// ctlDoc runs a show command with --json and decodes the document.
func ctlDoc(t *testing.T, sock string, args ...string) Map {
	t.Helper()
	out := ctlOK(t, sock, append([]string{"--json"}, args...)...)
	var m Map
	if err := m.UnmarshalJSON([]byte(out)); err != nil {
		t.Fatalf("lnetctl %v: bad JSON %v\n%s", args, err, out)
	}
	return m
}
