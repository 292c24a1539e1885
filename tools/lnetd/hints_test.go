package lnetd

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/lnet/socklnd"
)

// TestExplainPrivilegedPort: binding port 988 without privilege names the
// privilege and accept_port, not another node on the port.
func TestExplainPrivilegedPort(t *testing.T) {
	err := &net.OpError{Op: "listen", Net: "tcp4", Err: os.NewSyscallError("bind", syscall.EACCES)}
	msg := explainAddNet(err, NIConfig{}, socklnd.Config{AcceptPort: 988}).Error()
	if !strings.Contains(msg, "port 988 is privileged") || !strings.Contains(msg, "accept_port") || strings.Contains(msg, "another node") {
		t.Fatalf("message %q", msg)
	}
	err = &net.OpError{Op: "listen", Net: "tcp4", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	if msg := explainAddNet(err, NIConfig{}, socklnd.Config{AcceptPort: 988}).Error(); !strings.Contains(msg, "another node") {
		t.Fatalf("in use: %q", msg)
	}
}

// TestSecondsFlag: --timeout as Lustre's lnetctl parses it (seconds) or
// as a duration.
func TestSecondsFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.5": 500 * time.Millisecond, "5s": 5 * time.Second, "250ms": 250 * time.Millisecond} {
		var s secondsFlag
		if err := s.Set(in); err != nil || time.Duration(s) != want {
			t.Errorf("%q: %v, %v", in, time.Duration(s), err)
		}
	}
	var s secondsFlag
	if s.Set("-1") == nil || s.Set("x") == nil {
		t.Error("bad values accepted")
	}
}
