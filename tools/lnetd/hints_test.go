package lnetd

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

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
