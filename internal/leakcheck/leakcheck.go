// Package leakcheck finds goroutines that tests leave behind: a CM timer
// loop whose Close was forgotten, a device receive goroutine that outlived
// its socket, a connection reaper that never ended. It compares goroutine
// stacks, as wireguard-go's goroutineLeakCheck does, without a
// dependency.
//
// Use Main in a package's TestMain (every test of the binary, checked once
// at the end) or Check per test. Goroutines of the runtime and the testing
// framework are not counted.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Grace is how long a check waits for goroutines to end on their own:
// closing a device or CM returns before every goroutine it stopped has
// run its last instructions, so a leak is a goroutine still there after
// this long, not one seen at the first look.
const Grace = 10 * time.Second

// goroutine is one entry of a full stack dump.
type goroutine struct {
	id    string // "goroutine 17"
	stack string // the whole entry
}

// snapshot returns the goroutines that are not the runtime's or the
// testing framework's.
func snapshot() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for entry := range strings.SplitSeq(string(buf), "\n\n") {
		head, _, _ := strings.Cut(entry, " [")
		if head == "" || ignored(entry) {
			continue
		}
		out = append(out, goroutine{id: head, stack: entry})
	}
	return out
}

// ignored reports whether a stack entry belongs to the runtime, the
// testing framework or the checker itself.
func ignored(entry string) bool {
	for _, s := range []string{
		"softib/internal/leakcheck.snapshot", // the checking goroutine
		"testing.(*M).",                      // TestMain
		"testing.tRunner(",                   // running tests and their parents
		"testing.(*T).Run(",
		"testing.runTests",
		"testing.(*F).Fuzz",
		"os/signal.signal_recv", // signal.Notify's loop
		"os/signal.loop",
		"runtime.ensureSigM",
		"runtime/trace.",
		"created by runtime.gc", // GC workers
	} {
		if strings.Contains(entry, s) {
			return true
		}
	}
	return false
}

// leaked waits up to grace for every goroutine not in before to end and
// returns those that did not.
func leaked(before map[string]bool, grace time.Duration) []goroutine {
	deadline := time.Now().Add(grace)
	for {
		var left []goroutine
		for _, g := range snapshot() {
			if !before[g.id] {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ids(gs []goroutine) map[string]bool {
	m := make(map[string]bool, len(gs))
	for _, g := range gs {
		m[g.id] = true
	}
	return m
}

func report(gs []goroutine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d goroutine(s) leaked:\n", len(gs))
	slices.SortFunc(gs, func(a, b goroutine) int { return strings.Compare(a.id, b.id) })
	for _, g := range gs {
		b.WriteString(g.stack)
		b.WriteString("\n\n")
	}
	return b.String()
}

// Check records the goroutines running now and, when t ends (after the
// cleanups registered before it ran later ones: register it first), fails
// t if goroutines started since are still there after Grace.
func Check(t testing.TB) {
	t.Helper()
	before := ids(snapshot())
	t.Cleanup(func() {
		if t.Failed() {
			return // the failure is the news; its goroutines may be stuck on purpose
		}
		if left := leaked(before, Grace); len(left) > 0 {
			t.Error(report(left))
		}
	})
}

// Main runs the tests and, if they passed, fails the binary when
// goroutines other than the runtime's and the testing framework's are
// still there after Grace; it exits the process. Call it from TestMain
// after any setup.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main returning the exit code (for a TestMain that checks more
// after the tests).
func Run(m *testing.M) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	if left := leaked(nil, Grace); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: leakcheck: %s", report(left))
		return 1
	}
	return code
}
