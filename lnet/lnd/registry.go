package lnd

import (
	"fmt"
	"sort"
	"sync"

	"softib/wire/lnetwire"
)

// Registry maps LND types to drivers. Each lnet.Instance owns one (there
// is no global registry); callers pass the LNDs they want in the
// instance's configuration.
type Registry struct {
	mu sync.RWMutex
	m  map[lnetwire.LNDType]LND
}

// NewRegistry returns a registry holding lnds; a duplicate type panics
// (a programming error).
func NewRegistry(lnds ...LND) *Registry {
	r := &Registry{m: make(map[lnetwire.LNDType]LND)}
	for _, l := range lnds {
		if err := r.Register(l); err != nil {
			panic(err)
		}
	}
	return r
}

// Register adds l; it fails if its type is already registered.
func (r *Registry) Register(l LND) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[lnetwire.LNDType]LND)
	}
	if _, dup := r.m[l.Type()]; dup {
		return fmt.Errorf("lnd: LND type %v already registered", l.Type())
	}
	r.m[l.Type()] = l
	return nil
}

// Lookup returns the LND for type t.
func (r *Registry) Lookup(t lnetwire.LNDType) (LND, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l, ok := r.m[t]
	return l, ok
}

// Types lists the registered types in ascending order.
func (r *Registry) Types() []lnetwire.LNDType {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ts := make([]lnetwire.LNDType, 0, len(r.m))
	for t := range r.m {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts
}
