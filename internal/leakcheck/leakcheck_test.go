package leakcheck

import (
	"strings"
	"testing"
	"time"
)

// TestFindsLeak: a goroutine started after the snapshot and still blocked
// is reported with its stack; once it ends, nothing is.
func TestFindsLeak(t *testing.T) {
	before := ids(snapshot())
	stop := make(chan struct{})
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		defer close(done)
		blockedForLeakTest(started, stop)
	}()
	// Once started is closed the goroutine's stack has the function,
	// whether or not it has reached the receive yet.
	<-started
	left := leaked(before, 50*time.Millisecond)
	if len(left) != 1 || !strings.Contains(left[0].stack, "blockedForLeakTest") {
		t.Fatalf("leaked %v, want the one blocked goroutine", left)
	}
	close(stop)
	<-done
	if left := leaked(before, Grace); len(left) != 0 {
		t.Fatalf("after it ended: %s", report(left))
	}
}

func blockedForLeakTest(started, stop chan struct{}) {
	close(started)
	<-stop
}

// TestIgnoresFramework: the test's own goroutine and its parents are not
// leaks.
func TestIgnoresFramework(t *testing.T) {
	if left := leaked(nil, 0); len(left) != 0 {
		t.Fatalf("framework goroutines counted: %s", report(left))
	}
}
