package rxe

import (
	"testing"
)

// TestRateLimiterSnapshot: the introspection snapshot shows the
// limiter's rates while it limits and only the life counters once it has
// recovered, and looking advances a copy: the limiter itself stays where
// the engine's rounds left it.
func TestRateLimiterSnapshot(t *testing.T) {
	c := ecnDefaults(t)
	r := rateLimiter{cfg: c}
	if s := r.snapshot(0); s.Limiting || s.Rate != 0 || s.RateCuts != 0 {
		t.Fatalf("idle limiter: %+v", s)
	}
	r.onCNP(0)
	s := r.snapshot(0)
	if !s.Limiting || !near(s.Rate, r.rc) || !near(s.TargetRate, c.MaxRate) || !near(s.Alpha, c.InitialAlpha) ||
		!near(s.MinRate, r.rc) || s.RateCuts != 1 {
		t.Fatalf("after a CNP: %+v (limiter %+v)", s, r)
	}
	// One rate-increase timer later the snapshot has the increased
	// rate; the limiter has not moved.
	rc := r.rc
	s = r.snapshot(int64(c.TimeReset))
	if !s.Limiting || !(s.Rate > rc) || r.rc != rc || r.tCount != 0 {
		t.Fatalf("one timer later: snapshot %+v, limiter rc %g tCount %d (was %g)", s, r.rc, r.tCount, rc)
	}
	// Far later (no more CNPs) it has recovered to MaxRate and switched
	// off: no rates, the counters stay.
	r.held = 3
	s = r.snapshot(int64(1e12))
	if s.Limiting || s.Rate != 0 || s.TargetRate != 0 || s.RateCuts != 1 || s.SendsHeld != 3 {
		t.Fatalf("recovered: %+v", s)
	}
	if !r.active || r.rc != rc {
		t.Fatalf("snapshot moved the limiter: %+v", r)
	}
}
