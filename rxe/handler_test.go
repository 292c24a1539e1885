package rxe_test

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// TestCQHandlerPingPong runs an RC ping-pong driven entirely by CQ
// completion handlers: each side replies from its handler, on the
// receive goroutine. Every message carries its sequence number, which
// the other side checks and echoes.
func TestCQHandlerPingPong(t *testing.T) {
	const rounds = 2000
	var (
		x, y   *end
		got    atomic.Int64 // round trips x saw
		bad    atomic.Value
		done   = make(chan struct{})
		wcx    = make([]verbs.WC, 8)
		wcy    = make([]verbs.WC, 8)
		active atomic.Int32 // handler calls in flight, per side summed
	)
	drain := func(cq verbs.CQ, wcs []verbs.WC, fn func(*verbs.WC)) {
		if active.Add(1) > 2 {
			bad.Store("more than one handler call per CQ at once")
		}
		defer active.Add(-1)
		for {
			n, err := cq.Poll(wcs)
			if err == nil && n == 0 {
				cq.ReqNotify(false)
				n, err = cq.Poll(wcs)
			}
			if err != nil {
				bad.Store(err.Error())
				return
			}
			if n == 0 {
				return
			}
			for i := range wcs[:n] {
				if wcs[i].Status != verbs.WCSuccess {
					bad.Store(wcs[i].Status.String())
					return
				}
				fn(&wcs[i])
			}
		}
	}
	send := func(e *end, seq uint64) {
		binary.LittleEndian.PutUint64(e.buf[1024:], seq)
		w := []verbs.SendWR{{ID: seq, Opcode: verbs.WRSend, SGL: []verbs.SGE{e.mr.SGE(1024, 8)}, Flags: verbs.SendSignaled}}
		if _, err := e.qp.PostSend(w); err != nil {
			bad.Store(err.Error())
		}
	}
	repost := func(e *end) {
		if _, err := e.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{e.mr.SGE(0, 64)}}}); err != nil {
			bad.Store(err.Error())
		}
	}
	hy := func(cq verbs.CQ) {
		drain(cq, wcy, func(wc *verbs.WC) {
			if wc.Opcode != verbs.WCRecv {
				return
			}
			seq := binary.LittleEndian.Uint64(y.buf)
			repost(y)
			send(y, seq)
		})
	}
	var next uint64
	hx := func(cq verbs.CQ) {
		drain(cq, wcx, func(wc *verbs.WC) {
			if wc.Opcode != verbs.WCRecv {
				return
			}
			if seq := binary.LittleEndian.Uint64(x.buf); seq != next {
				bad.Store("echo out of order")
			}
			repost(x)
			if got.Add(1) == rounds {
				close(done)
				return
			}
			next++
			send(x, next)
		})
	}
	x, y = pairHandlers(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096, hx, hy)
	postRecv(t, x, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{x.mr.SGE(0, 64)}})
	postRecv(t, y, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{y.mr.SGE(0, 64)}})
	x.cq.ReqNotify(false)
	y.cq.ReqNotify(false)
	send(x, 0)
	select {
	case <-done:
	case <-time.After(30 * time.Second): // hang guard
		t.Fatalf("hang after %d round trips (%v)", got.Load(), bad.Load())
	}
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
}

// TestCQHandlerSerialized completes work on many QPs sharing one CQ from
// several goroutines at once (their posters and run loops, both devices'
// receive goroutines) and checks that handler calls never overlap and
// that no completion is stranded: every one is polled by a handler.
func TestCQHandlerSerialized(t *testing.T) {
	const (
		qps  = 8
		msgs = 200
	)
	da := openDev(t, rxe.Config{})
	db := openDev(t, rxe.Config{})
	var (
		inside, overlap atomic.Int32
		polled          atomic.Int64
		calls           atomic.Int64
		wcs             = make([]verbs.WC, 16)
	)
	h := func(cq verbs.CQ) {
		if inside.Add(1) != 1 {
			overlap.Add(1)
		}
		calls.Add(1)
		for {
			n, _ := cq.Poll(wcs)
			if n == 0 {
				cq.ReqNotify(false)
				if n, _ = cq.Poll(wcs); n == 0 {
					break
				}
			}
			polled.Add(int64(n))
		}
		inside.Add(-1)
	}
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	cqa, err := da.CreateCQ(verbs.CQAttr{CQE: 4096, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	cqb, _ := db.CreateCQ(verbs.CQAttr{CQE: 4096})
	bufA, bufB := make([]byte, 1<<16), make([]byte, 1<<16)
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	mra, _ := pa.RegMR(bufA, all)
	mrb, _ := pb.RegMR(bufB, all)
	qcap := verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}
	ends := make([][2]*end, qps)
	for i := range ends {
		qa, err := pa.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cqa, RecvCQ: cqa, Cap: qcap})
		if err != nil {
			t.Fatal(err)
		}
		qb, _ := pb.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cqb, RecvCQ: cqb, Cap: qcap})
		a := &end{dev: da, pd: pa, cq: cqa, qp: qa, mr: mra, buf: bufA}
		b := &end{dev: db, pd: pb, cq: cqb, qp: qb, mr: mrb, buf: bufB}
		connect(t, a, b, connOpts{})
		connect(t, b, a, connOpts{})
		ends[i] = [2]*end{a, b}
	}
	cqa.ReqNotify(false)
	// Every QP on a writes msgs signalled RDMA WRITEs to b and receives
	// msgs SENDs from b: send and receive completions from both sides'
	// goroutines.
	var wg sync.WaitGroup
	for i := range ends {
		a, b := ends[i][0], ends[i][1]
		for k := 0; k < msgs; k++ {
			postRecv(t, a, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{mra.SGE(4096*i, 64)}})
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for k := 0; k < msgs; k++ {
				w := []verbs.SendWR{{ID: uint64(k), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{mra.SGE(32768+1024*i, 512)}, RemoteAddr: mrb.Addr() + uint64(1024*i), RKey: mrb.RKey()}}
				for {
					if _, err := a.qp.PostSend(w); err == nil {
						break
					}
					time.Sleep(100 * time.Microsecond) // SQ full: wait for completions
				}
			}
		}()
		go func() {
			defer wg.Done()
			w := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: []byte("ping")}}
			for k := 0; k < msgs; k++ {
				for {
					if _, err := b.qp.PostSend(w); err == nil {
						break
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	want := int64(2 * qps * msgs)
	deadline := time.Now().Add(30 * time.Second) // hang guard
	for polled.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := polled.Load(); n != want {
		t.Fatalf("handlers polled %d of %d completions (%d calls)", n, want, calls.Load())
	}
	if n := overlap.Load(); n != 0 {
		t.Fatalf("%d overlapping handler calls", n)
	}
	t.Logf("%d completions in %d handler calls", want, calls.Load())
}

// TestCQHandlerFlush checks that flushed work requests reach the handler:
// moving the QP to ERR flushes its receives, and the handler runs (with
// the QP's lock released, so it can post) before Modify returns. A
// receive the handler posts is flushed at once and polled by the same
// call.
func TestCQHandlerFlush(t *testing.T) {
	var (
		ids     []uint64
		posted  bool
		postErr error
		x       *end
	)
	h := func(cq verbs.CQ) {
		wcs := make([]verbs.WC, 8)
		for {
			n, _ := cq.Poll(wcs)
			if n == 0 {
				return
			}
			for _, wc := range wcs[:n] {
				if wc.Status == verbs.WCWRFlushErr {
					ids = append(ids, wc.WRID)
				}
			}
			if !posted {
				posted = true
				_, postErr = x.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{x.mr.SGE(0, 8)}}})
			}
		}
	}
	x = newEndHandler(t, openDev(t, rxe.Config{}), verbs.QPTypeRC, 4096, h)
	y := newEnd(t, openDev(t, rxe.Config{}), verbs.QPTypeRC, 4096)
	connect(t, x, y, connOpts{})
	for i := range 3 {
		postRecv(t, x, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{x.mr.SGE(0, 64)}})
	}
	x.cq.ReqNotify(false)
	if err := x.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if postErr != nil {
		t.Fatalf("post from handler: %v", postErr)
	}
	if want := []uint64{0, 1, 2, 9}; !slices.Equal(ids, want) {
		t.Fatalf("handler saw flushed WRs %v before Modify returned, want %v", ids, want)
	}
}

// TestCQHandlerAndChannel checks a CQ with both a handler and a channel:
// one armed completion notifies both, an unarmed one neither.
func TestCQHandlerAndChannel(t *testing.T) {
	d := openDev(t, rxe.Config{})
	var calls atomic.Int32
	ch := verbs.NewCompChannel(0)
	cq, err := d.CreateCQ(verbs.CQAttr{CQE: 16, Channel: ch, Handler: func(verbs.CQ) { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := d.AllocPD()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
	e := &end{dev: d, pd: pd, cq: cq, qp: qp, mr: mr, buf: buf}
	connect(t, e, e, connOpts{})
	postRecv(t, e, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(0, 8)}})
	// Unarmed: a flush completion notifies nobody.
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 0 || len(ch.C()) != 0 {
		t.Fatalf("unarmed CQ notified: %d handler calls, %d events", calls.Load(), len(ch.C()))
	}
	waitWC(t, cq, 1)
	cq.ReqNotify(false)
	postRecv(t, e, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{mr.SGE(0, 8)}}) // flushed at once
	if calls.Load() != 1 || len(ch.C()) != 1 {
		t.Fatalf("armed CQ: %d handler calls, %d events; want 1 and 1", calls.Load(), len(ch.C()))
	}
	if wc := waitWC(t, cq, 1)[0]; wc.WRID != 2 {
		t.Fatalf("completion %+v", wc)
	}
}
