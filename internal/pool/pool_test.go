package pool_test

import (
	"sync"
	"testing"
	"testing/synctest"

	"softib/internal/pool"
)

func TestPool(t *testing.T) {
	var p pool.Pool[[4096]byte]
	b := p.Get()
	if len(b) != 4096 {
		t.Fatal("wrong size")
	}
	b[0] = 1
	p.Put(b)
	p.Put(nil)
	allocs := testing.AllocsPerRun(100, func() { p.Put(p.Get()) })
	if allocs != 0 {
		t.Fatalf("%v allocs per Get/Put", allocs)
	}
}

func TestPoolReset(t *testing.T) {
	type batch struct {
		bufs [4]*[64]byte
		n    int
	}
	p := pool.Pool[batch]{Reset: func(b *batch) { *b = batch{} }}
	b := p.Get()
	b.bufs[0], b.n = new([64]byte), 3
	p.Put(b)
	if b.bufs[0] != nil || b.n != 0 {
		t.Fatal("Reset not applied on Put")
	}
}

func TestBytes(t *testing.T) {
	p := pool.NewBytes(4352)
	b := p.Get()
	if len(b) != 4352 || cap(b) != 4352 || p.Size() != 4352 {
		t.Fatalf("len %d cap %d", len(b), cap(b))
	}
	b[0] = 0xAB
	p.Put(b[:10])
	allocs := testing.AllocsPerRun(100, func() { p.Put(p.Get()[:0]) })
	if allocs != 0 {
		t.Fatalf("%v allocs per Get/Put", allocs)
	}
}

func TestBytesWrongSizePanics(t *testing.T) {
	for _, b := range [][]byte{make([]byte, 100), make([]byte, 10, 4352)[2:]} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Put of cap %d did not panic", cap(b))
				}
			}()
			pool.NewBytes(4352).Put(b)
		}()
	}
	defer func() {
		if recover() == nil {
			t.Error("NewBytes(0) did not panic")
		}
	}()
	pool.NewBytes(0)
}

func TestBytesConcurrent(t *testing.T) {
	p := pool.NewBytes(128)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				b := p.Get()
				b[0] = byte(g)
				b[127] = byte(i)
				if b[0] != byte(g) {
					t.Error("buffer shared")
				}
				p.Put(b)
			}
		})
	}
	wg.Wait()
}

func TestLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := pool.Limit{Max: 2}
		l.Acquire()
		if !l.TryAcquire() || l.TryAcquire() {
			t.Fatal("TryAcquire ignores Max")
		}
		got := make(chan struct{})
		go func() {
			l.Acquire()
			close(got)
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("Acquire did not block at Max")
		default:
		}
		l.Release()
		<-got
		if l.Out() != 2 {
			t.Fatalf("Out = %d", l.Out())
		}
		l.Release()
		l.Release()
		var unbounded pool.Limit
		unbounded.Acquire()
		unbounded.Release()
	})
}

func BenchmarkBytes(b *testing.B) {
	p := pool.NewBytes(4352)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Put(p.Get())
		}
	})
}
