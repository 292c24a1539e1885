package rdmacm_test

import (
	"testing"

	"softib/internal/leakcheck"
)

// TestMain fails the package when its tests leave goroutines behind (a
// manager, CM or device not closed, an ID's timer still armed).
func TestMain(m *testing.M) { leakcheck.Main(m) }
