package main

import (
	"os"
	"testing"
)

// removeBuilt removes the binary buildSoftib built (set by it; a variable
// of its own here because buildSoftib is Linux-only).
var removeBuilt = func() {}

func TestMain(m *testing.M) {
	code := m.Run()
	removeBuilt()
	os.Exit(code)
}
