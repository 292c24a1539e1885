// Package testenv holds helpers that decide whether a test can run in the
// current environment. Tests that need root (network namespaces, tc netem)
// or an external tool (tshark, ip) skip on a developer machine that lacks
// them, but fail in CI (CI=true), where everything must run.
package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// skipOrFail skips the test outside CI and fails it in CI.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot makes the test run only as root (needed for network
// namespaces, veth and tc netem).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root")
	}
}

// RequireTool makes the test run only when the named program is on PATH
// and returns its path.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		skipOrFail(t, "needs %s on PATH (run scripts/test.sh, which installs it)", name)
	}
	return p
}

// Short reports whether the test run asked for short mode; long soak
// variants should shrink their iteration counts then.
func Short() bool { return testing.Short() }

// SoakDuration returns a soak test's time budget (SOFTIB_SOAK_SECONDS,
// default 60 s) and skips the test unless SOFTIB_SOAK=1: soaks run in the
// soak stage (scripts/soak.sh), not in the unit-test run.
func SoakDuration(t testing.TB) time.Duration {
	t.Helper()
	if os.Getenv("SOFTIB_SOAK") != "1" {
		t.Skip("soak test: set SOFTIB_SOAK=1 (and SOFTIB_SOAK_SECONDS, default 60)")
	}
	s := 60.0
	if v := os.Getenv("SOFTIB_SOAK_SECONDS"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			t.Fatalf("SOFTIB_SOAK_SECONDS=%q: want a positive number", v)
		}
		s = f
	}
	return time.Duration(s * float64(time.Second))
}

// Buffer is a bytes.Buffer that a command's output goroutines write while
// a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
