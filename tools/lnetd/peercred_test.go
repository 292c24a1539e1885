package lnetd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"softib/internal/testenv"
)

// nobody is the unprivileged uid/gid the refusal test runs its client as.
const nobody = 65534

// TestHelperDialAsOther is the client half of TestControlSocketOtherUser:
// it runs in a child process as another user and prints what lnetd said.
func TestHelperDialAsOther(t *testing.T) {
	path := os.Getenv("SOFTIB_LNETD_DIAL")
	if path == "" {
		t.Skip("helper process only")
	}
	cl, err := Dial(path)
	if err == nil {
		err = cl.Call(context.Background(), "ping", nil, nil)
		cl.Close()
	}
	var oe *OpError
	switch {
	case err == nil:
		fmt.Println("RESULT accepted")
	case errors.As(err, &oe):
		fmt.Printf("RESULT refused %d %s (%s)\n", oe.Errno, oe.Descr, oe.Hint)
	default:
		fmt.Printf("RESULT error %v\n", err)
	}
}

// TestControlSocketOtherUser: a user other than lnetd's (and not root)
// cannot use the control socket: the 0700 directory stops it, and with the
// file modes opened up, SO_PEERCRED still refuses it with a message that
// names the cause.
func TestControlSocketOtherUser(t *testing.T) {
	testenv.RequireRoot(t)
	base, err := os.MkdirTemp("", "softib-peercred-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o711)
	path := filepath.Join(base, "run", "lnetd.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(func(context.Context, string, json.RawMessage) (any, *OpError) { return "pong", nil })
	go s.Serve(ln)
	t.Cleanup(func() { ln.Close(); s.Close() })

	// The test binary lives in a private build directory: give the other
	// user a copy it can run.
	exe := filepath.Join(base, "lnetd.test")
	if b, err := os.ReadFile(os.Args[0]); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func() string {
		t.Helper()
		cmd := exec.Command(exe, "-test.run=^TestHelperDialAsOther$", "-test.v")
		cmd.Env = append(os.Environ(), "SOFTIB_LNETD_DIAL="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid %d: %v\n%s", nobody, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if r, ok := strings.CutPrefix(l, "RESULT "); ok {
				return r
			}
		}
		t.Fatalf("helper printed no result:\n%s", out)
		return ""
	}

	// As Listen leaves it: the directory is 0700.
	if r := asNobody(); !strings.Contains(r, "permission denied") || !strings.Contains(r, "another user") {
		t.Errorf("default modes: %s", r)
	}
	// Modes opened up: the peer credential check refuses.
	os.Chmod(filepath.Dir(path), 0o777)
	os.Chmod(path, 0o777)
	r := asNobody()
	if !strings.HasPrefix(r, fmt.Sprintf("refused %d", -int(syscall.EACCES))) || !strings.Contains(r, fmt.Sprintf("uid %d", nobody)) {
		t.Errorf("open modes: %s", r)
	}
	// Root (lnetd's own user here) is still served.
	cl, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var res string
	if err := cl.Call(context.Background(), "ping", nil, &res); err != nil || res != "pong" {
		t.Errorf("root: %q, %v", res, err)
	}
}
