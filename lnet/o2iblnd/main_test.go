package o2iblnd_test

import (
	"testing"

	"softib/internal/leakcheck"
)

// TestMain fails the package when its tests leave goroutines behind (a
// connection, reaper or connd that outlived its LND, a CM or device not
// closed).
func TestMain(m *testing.M) { leakcheck.Main(m) }
