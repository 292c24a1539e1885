// Package pool provides typed, fixed-size buffer pools for softib's data
// path, in the manner of wireguard-go's device/pools.go: a buffer is a
// pointer to a fixed-size array, so a buffer of the wrong size cannot be
// put back, and getting or putting one does not allocate.
//
//	var frames pool.Pool[[4352]byte]
//	b := frames.Get() // *[4352]byte
//	...
//	frames.Put(b)
//
// Bytes is the same for []byte buffers of one fixed capacity; putting back
// a buffer of another capacity panics. Limit bounds how many buffers may
// be out at once, blocking Get until one is returned.
package pool

import (
	"fmt"
	"sync"
	"unsafe"
)

// Pool is a pool of *T, typically T = [N]byte or a message batch struct.
// The zero value is ready to use and allocates a zeroed T when empty. It
// is safe for concurrent use.
type Pool[T any] struct {
	// Reset, if set, is called on every value passed to Put, e.g. to
	// clear pointers so that a stale reference cannot keep data alive or
	// leak it to the next user. Buffers are not cleared otherwise.
	Reset func(*T)

	p sync.Pool
}

// Get returns a value from the pool, or a new zero T.
func (p *Pool[T]) Get() *T {
	if v, ok := p.p.Get().(*T); ok {
		return v
	}
	return new(T)
}

// Put returns v to the pool. v must not be used afterwards. Put(nil) is a
// no-op.
func (p *Pool[T]) Put(v *T) {
	if v == nil {
		return
	}
	if p.Reset != nil {
		p.Reset(v)
	}
	p.p.Put(v)
}

// Bytes is a pool of []byte buffers that all have length and capacity
// Size. Create it with NewBytes. It is safe for concurrent use.
type Bytes struct {
	size int
	p    sync.Pool // holds the *byte of each buffer's array (no boxing)
}

// NewBytes returns a pool of size-byte buffers. size must be positive.
func NewBytes(size int) *Bytes {
	if size <= 0 {
		panic(fmt.Sprintf("pool: NewBytes(%d)", size))
	}
	return &Bytes{size: size}
}

// Size returns the length and capacity of the pool's buffers.
func (p *Bytes) Size() int { return p.size }

// Get returns a buffer with len and cap Size. Its contents are whatever
// the previous user left.
func (p *Bytes) Get() []byte {
	if ptr, ok := p.p.Get().(*byte); ok {
		return unsafe.Slice(ptr, p.size)
	}
	return make([]byte, p.size)
}

// Put returns b to the pool. It panics if cap(b) is not Size, which
// catches buffers returned to the wrong pool. b may have been resliced
// (b[:n] or b[:0]) but must start at the buffer's first byte.
func (p *Bytes) Put(b []byte) {
	if cap(b) != p.size {
		panic(fmt.Sprintf("pool: Put of a %d-byte buffer into a %d-byte pool", cap(b), p.size))
	}
	p.p.Put(unsafe.SliceData(b[:1]))
}

// Limit bounds the number of items taken from a pool and not yet
// released, like wireguard-go's WaitPool: Acquire blocks while Max are out.
// The zero value, or Max <= 0, has no bound. Use it alongside a Pool or
// Bytes:
//
//	lim.Acquire(); b := bufs.Get(); ...; bufs.Put(b); lim.Release()
type Limit struct {
	// Max is the bound; set it before first use.
	Max int

	mu   sync.Mutex
	cond sync.Cond
	out  int
}

// Acquire takes one slot, blocking while Max slots are taken.
func (l *Limit) Acquire() {
	if l.Max <= 0 {
		return
	}
	l.mu.Lock()
	if l.cond.L == nil {
		l.cond.L = &l.mu
	}
	for l.out >= l.Max {
		l.cond.Wait()
	}
	l.out++
	l.mu.Unlock()
}

// TryAcquire takes one slot if one is free and reports whether it did.
func (l *Limit) TryAcquire() bool {
	if l.Max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.out >= l.Max {
		return false
	}
	l.out++
	return true
}

// Release frees a slot taken by Acquire or TryAcquire.
func (l *Limit) Release() {
	if l.Max <= 0 {
		return
	}
	l.mu.Lock()
	if l.out <= 0 {
		l.mu.Unlock()
		panic("pool: Limit.Release without Acquire")
	}
	l.out--
	if l.cond.L != nil {
		l.cond.Signal()
	}
	l.mu.Unlock()
}

// Out returns the number of slots currently taken.
func (l *Limit) Out() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out
}
