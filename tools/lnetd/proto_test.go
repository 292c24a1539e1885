package lnetd

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func pipeServer(t *testing.T, h Handler) *Client {
	t.Helper()
	a, b := net.Pipe()
	s := NewServer(h)
	s.mu.Lock()
	s.cs[b] = struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	go s.serveConn(b)
	t.Cleanup(func() { a.Close(); s.Close() })
	return NewClient(a)
}

func TestProtoCall(t *testing.T) {
	cl := pipeServer(t, func(_ context.Context, op string, args json.RawMessage) (any, *OpError) {
		switch op {
		case "echo":
			var a map[string]string
			_ = json.Unmarshal(args, &a)
			return Map{}.add("got", a["x"]).add("n", int64(3)), nil
		case "fail":
			return nil, opErr("add", "net", errnoInval, "cannot add network: bad")
		}
		return nil, nil
	})
	ctx := context.Background()
	var m Map
	if err := cl.Call(ctx, "echo", map[string]string{"x": "hi"}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Get("got") != "hi" || m.Get("n") != int64(3) || m[0].Key != "got" {
		t.Errorf("result %#v", m)
	}
	err := cl.Call(ctx, "fail", nil, nil)
	var oe *OpError
	if !errors.As(err, &oe) || oe.Errno != -22 || oe.Cmd != "add" || oe.Obj != "net" {
		t.Fatalf("err = %#v", err)
	}
	want := "add:\n    - net:\n          errno: -22\n          descr: \"cannot add network: bad\"\n"
	if got := string(YAML(oe.Doc())); got != want {
		t.Errorf("error block:\n%s\nwant\n%s", got, want)
	}
	if err := cl.Call(ctx, "nothing", nil, &m); err != nil {
		t.Errorf("nil result: %v", err)
	}
}

func TestProtoBadRequests(t *testing.T) {
	a, b := net.Pipe()
	s := NewServer(func(context.Context, string, json.RawMessage) (any, *OpError) { return "ok", nil })
	s.wg.Add(1)
	go s.serveConn(b)
	defer s.Close()
	defer a.Close()
	cl := NewClient(a)
	for _, line := range []string{"{not json\n", `{"v":99,"op":"x"}` + "\n"} {
		if _, err := a.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		raw, err := readLine(cl.r, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var resp Response
		if err := json.Unmarshal(raw, &resp); err != nil || resp.Err == nil || resp.Err.Errno != -errnoProto {
			t.Errorf("%q -> %s", line, raw)
		}
	}
	// The connection still works after bad requests.
	var s2 string
	if err := cl.Call(context.Background(), "x", nil, &s2); err != nil || s2 != "ok" {
		t.Errorf("after bad requests: %q, %v", s2, err)
	}
}

func TestListenPermissionsAndStale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "lnetd.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", fi.Mode().Perm())
	}
	fi, _ = os.Stat(path)
	if fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode %v", fi.Mode())
	}
	s := NewServer(func(context.Context, string, json.RawMessage) (any, *OpError) { return nil, nil })
	go s.Serve(ln)
	// A live socket is not stolen.
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "already listening") {
		t.Errorf("second Listen: %v", err)
	}
	cl, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Call(context.Background(), "x", nil, nil); err != nil {
		t.Error(err)
	}
	cl.Close()
	ln.SetUnlinkOnClose(false)
	ln.Close()
	s.Close()
	// A stale socket file (dead daemon) is replaced.
	ln2, err := Listen(path)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln2.Close()
	// An open directory is tightened.
	os.Chmod(dir, 0o755)
	ln3, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ln3.Close()
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode after re-listen %v", fi.Mode().Perm())
	}
}

func TestDialNoDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	_, err := Dial(path)
	if !errors.Is(err, ErrNoDaemon) || !strings.Contains(err.Error(), "is `softib lnetd` running?") {
		t.Fatalf("err = %v", err)
	}
	code, _, errs := ctlRun(t, path, "net", "show")
	if code != 1 || !strings.Contains(errs, "cannot reach lnetd at "+path) {
		t.Errorf("lnetctl without daemon: %d %q", code, errs)
	}
}

func TestDefaultSocketPath(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1234")
	if got := DefaultSocketPath(); got != "/run/user/1234/softib/lnetd.sock" {
		t.Errorf("%s", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got := DefaultSocketPath(); !strings.Contains(got, "softib-") || !strings.HasSuffix(got, "lnetd.sock") {
		t.Errorf("%s", got)
	}
}
