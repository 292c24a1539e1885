//go:build !race

package lnetd

// raceEnabled: this test binary is built with -race (tcpfloor_test.go
// says so beside its figures, which the detector inflates).
const raceEnabled = false
