package o2iblnd

import (
	"errors"
	"testing"

	"softib/verbs"
)

// dereged reports whether e's MR is deregistered (a second Dereg says
// so; on a live MR it would deregister it, so only ask about entries
// that must be gone).
func dereged(e *mrEntry) bool { return errors.Is(e.mr.Dereg(), verbs.ErrClosed) }

// TestMRCacheFlushTrigger: with fmr_flush_trigger 2, a miss leaves at
// most 2 idle registrations, the least recently used deregistered;
// entries in use do not count and are never touched.
func TestMRCacheFlushTrigger(t *testing.T) {
	c := newMRCache(testPD(t), 100, 1<<30)
	c.flushTrigger = 2
	bufs := make([][]byte, 6)
	var es []*mrEntry
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	held, err := c.get(bufs[5]) // in use throughout
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bufs[:4] {
		e, err := c.get(b)
		if err != nil {
			t.Fatal(err)
		}
		c.put(e)
		es = append(es, e)
	}
	// A miss that found 2 idle deregistered the oldest first: bufs 0
	// and 1 went, 2 and 3 are cached, 5 is held.
	if n, _ := c.stats(); n != 3 {
		t.Fatalf("%d entries, want 3 (2 idle + 1 in use)", n)
	}
	for i, e := range es {
		cached := c.m[e.key] != nil
		if want := i >= 2; cached != want {
			t.Errorf("buffer %d cached %v, want %v", i, cached, want)
		}
		if !cached && !dereged(e) {
			t.Errorf("buffer %d evicted but still registered", i)
		}
	}
	if c.m[held.key] == nil || held.refs.Load() != 1 {
		t.Fatal("the entry in use was evicted")
	}
	// A hit re-uses without trimming.
	if e, _ := c.get(bufs[3]); e != es[3] {
		t.Fatal("cached buffer registered again")
	} else {
		c.put(e)
	}
	c.put(held)
	c.close()
}

// TestMRCacheOff: fmr_cache=0 registers every use afresh and deregisters
// when the last user is done; nothing stays cached.
func TestMRCacheOff(t *testing.T) {
	c := newMRCache(testPD(t), 100, 1<<30)
	c.noCache = true
	buf := make([]byte, 8192)
	a, err := c.get(buf)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.get(buf)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || a.mr == b.mr {
		t.Fatal("uncached registrations shared")
	}
	if n, _ := c.stats(); n != 0 {
		t.Fatalf("%d entries cached", n)
	}
	c.put(a)
	c.put(b)
	if !dereged(a) || !dereged(b) {
		t.Fatal("registration outlived its transfer")
	}
}
