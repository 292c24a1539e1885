//go:build linux

package socklnd

// RaceEnabled reports a -race build (allocation counts are off).
const RaceEnabled = raceEnabled

// KeepOff turns forwarding through pipes off (benchmarks).
var KeepOff = &keepOff

// KeptPipeSize exposes the pipe capacity for the fallback test.
var KeptPipeSize = &keptPipeSize

// KeptPipes returns the LND's open and idle pipes.
func (l *LND) KeptPipes() (total, idle int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pipes.total, len(l.pipes.free)
}
