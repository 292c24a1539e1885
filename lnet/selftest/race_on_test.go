//go:build race

package selftest

const raceEnabled = true
