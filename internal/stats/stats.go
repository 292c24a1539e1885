// Package stats provides atomic event counters and a way to snapshot a
// struct of them by field name. Every layer of softib keeps one struct of
// Counters per object (device, QP, NI, socket) and names each drop reason
// after the matching rxe/LNet counter, e.g. OutOfSeqReq or DupReq.
package stats

import (
	"reflect"
	"strconv"
	"sync/atomic"
)

// Counter is a monotonically increasing event counter that is safe for
// concurrent use. Its zero value is a ready counter at 0. Counters must not
// be copied after first use.
type Counter struct {
	_ noCopy
	v atomic.Uint64
}

// Add adds n to the counter.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Inc adds 1 to the counter.
func (c *Counter) Inc() { c.v.Add(1) }

// Load returns the current value.
func (c *Counter) Load() uint64 { return c.v.Load() }

// String formats the current value in decimal.
func (c *Counter) String() string { return strconv.FormatUint(c.v.Load(), 10) }

// noCopy makes `go vet` (copylocks) flag copies of a Counter.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

var counterType = reflect.TypeFor[Counter]()

// Snapshot returns the values of all Counter fields of the struct that v
// points to, keyed by field name. Fields that are themselves structs (or
// pointers to structs) are walked recursively and their counters are keyed
// "Outer.Inner". Unexported fields and fields of other types are ignored.
// It uses reflection and allocates; call it off the data path. A nil or
// non-struct v gives an empty map.
func Snapshot(v any) map[string]uint64 {
	m := make(map[string]uint64)
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return m
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return m
	}
	if !rv.CanAddr() {
		// A struct passed by value: work on an addressable copy.
		cp := reflect.New(rv.Type()).Elem()
		cp.Set(rv)
		rv = cp
	}
	walk(m, "", rv)
	return m
}

func walk(m map[string]uint64, prefix string, rv reflect.Value) {
	t := rv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := rv.Field(i)
		name := prefix + f.Name
		if f.Type == counterType {
			m[name] = fv.Addr().Interface().(*Counter).Load()
			continue
		}
		if f.Type.Kind() == reflect.Pointer && f.Type.Elem() == counterType {
			if !fv.IsNil() {
				m[name] = fv.Interface().(*Counter).Load()
			}
			continue
		}
		for fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				break
			}
			fv = fv.Elem()
		}
		if fv.Kind() == reflect.Struct {
			walk(m, name+".", fv)
		}
	}
}
