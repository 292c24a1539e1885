package perftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"softib/tools/internal/rdmautil"
	"softib/verbs"
)

// Engine runs the data path of a test over QPs that are already connected.
// It is shared by the perftest tools and the in-process demo.
//
// Buffer layout (as perftest's): MR holds 2×len(QPs) regions of Region
// bytes and one spare; region i is QP i's local source, region
// len(QPs)+i the memory its peer targets (the VAddr announced for QP i,
// and the receive buffer of send tests).
type Engine struct {
	QPs    []verbs.QP
	SendCQ verbs.CQ
	RecvCQ verbs.CQ
	MR     verbs.MR
	Region int
	// Remote are the peers' keys (VAddr and RKey of their target region).
	Remote []Key
	Verb   Verb
	Atomic AtomicOp
	// TxDepth bounds the outstanding sends per QP; CQMod is the signaling
	// interval; RxDepth the receives kept posted per QP. Send tests must
	// keep RxDepth at most their iteration count: a run then consumes
	// every receive it posted, and the next size starts clean.
	TxDepth, CQMod, RxDepth int
	// Cycle and CacheLine shape the remote address walk of BW tests.
	Cycle, CacheLine int
	// Inline is the largest size sent inline (0 = never).
	Inline int
	// Events sleeps on completion channels instead of spinning.
	Events bool
	// PostList, when above 1, makes every post call carry exactly that
	// many WRs (-l).
	PostList int
	// UD marks datagram QPs: sends carry AHs[qi] (set on the sending
	// side), the peer's QPN and QKey; receives leave GRHLen bytes in
	// front of the payload for the GRH.
	UD  bool
	AHs []verbs.AH
	// RecvIdle, if set, ends a receiver that saw no message for this
	// long with what it has (perftest's check_alive, for UD and UC
	// where lost messages never arrive).
	RecvIdle time.Duration
	// StrictDeadline makes a duration receiver stop at its deadline
	// instead of draining until the sender stops (--run_infinitely
	// intervals).
	StrictDeadline bool

	sendW, recvW rdmautil.Waiter
	wcs          []verbs.WC
	recvPosted   []int
	// rwr and rsge are the scratch receive WR, reused for every post so
	// that the data path does not allocate.
	rwr  [1]verbs.RecvWR
	rsge [1]verbs.SGE
}

// postRecv posts one receive of size into QP qi's target region.
func (e *Engine) postRecv(qi, size int) error {
	if e.UD {
		size += GRHLen
	}
	e.rsge[0] = e.MR.SGE(e.TargetOff(qi), size)
	e.rwr[0] = verbs.RecvWR{ID: wrID(qi, 0), SGL: e.rsge[:]}
	if _, err := e.QPs[qi].PostRecv(e.rwr[:]); err != nil {
		return err
	}
	e.recvPosted[qi]++
	return nil
}

func (e *Engine) init() {
	if e.wcs == nil {
		e.wcs = make([]verbs.WC, 32)
		e.sendW = rdmautil.Waiter{CQ: e.SendCQ, Events: e.Events}
		e.recvW = rdmautil.Waiter{CQ: e.RecvCQ, Events: e.Events}
		e.recvPosted = make([]int, len(e.QPs))
	}
	if e.CQMod < 1 {
		e.CQMod = 1
	}
	if e.Cycle <= 0 {
		e.Cycle = DefaultCycle
	}
	if e.CacheLine <= 0 {
		e.CacheLine = DefaultCacheLine
	}
}

// LocalOff returns the MR offset of QP i's source region.
func (e *Engine) LocalOff(i int) int { return i * e.Region }

// TargetOff returns the MR offset of QP i's target region.
func (e *Engine) TargetOff(i int) int { return (len(e.QPs) + i) * e.Region }

// wrID packs a QP index and a message index.
func wrID(qp, n int) uint64 { return uint64(qp)<<40 | uint64(n) }
func wrQP(id uint64) int    { return int(id >> 40) }
func wrN(id uint64) int     { return int(id & (1<<40 - 1)) }

// Sample holds the timestamps of one measurement (ns since Start).
type Sample struct {
	Size  int
	Iters uint64
	Start time.Time
	// Posted are post times; Completed are (message index, time) of
	// completions, each covering the messages since the previous one.
	Posted    []int64
	Completed []Completion
	// Elapsed is the time from the first post (or receive) to the last
	// completion.
	Elapsed time.Duration
	// RTTFactor is 2 for ping-pong latency tests and 1 otherwise.
	RTTFactor int
	// PerQP are the messages each QP completed (BW requester) or
	// received (send_bw responder).
	PerQP []uint64
	// Idle marks a receive sample cut short by Engine.RecvIdle.
	Idle bool
}

// Completion is a completion event of a BW sample.
type Completion struct {
	Index int
	T     int64
}

func (e *Engine) fillWR(wr *verbs.SendWR, sge *[1]verbs.SGE, qi, size, k int, signaled bool) {
	off := e.LocalOff(qi)
	sge[0] = e.MR.SGE(off, size)
	*wr = verbs.SendWR{ID: wrID(qi, k), SGL: sge[:]}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	rem := e.Remote[qi]
	switch e.Verb {
	case VerbSend:
		wr.Opcode = verbs.WRSend
		if e.UD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = e.AHs[qi], rem.QPN, QKey
		}
	case VerbWrite, VerbRead:
		wr.Opcode = verbs.WRRDMAWrite
		if e.Verb == VerbRead {
			wr.Opcode = verbs.WRRDMARead
		}
		// Walk the peer's cycle buffer in cache-line steps, as perftest
		// does, while the messages fit in it.
		step := (size + e.CacheLine - 1) / e.CacheLine * e.CacheLine
		roff := 0
		if size <= e.Cycle/2 {
			if slots := (e.Cycle - size) / step; slots > 0 {
				roff = (k % (slots + 1)) * step
			}
		}
		wr.RemoteAddr, wr.RKey = rem.VAddr+uint64(roff), rem.RKey
	case VerbAtomic:
		wr.RemoteAddr, wr.RKey = rem.VAddr, rem.RKey
		if e.Atomic == CmpAndSwap {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
		} else {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, 1
		}
	}
	if (e.Verb == VerbSend || e.Verb == VerbWrite) && size <= e.Inline {
		wr.Flags |= verbs.SendInline
	}
}

// ErrInterrupted reports a test stopped by its context (Ctrl-C); the
// sample returned with it covers what completed.
var ErrInterrupted = errors.New("interrupted")

// BW runs the requester side of a bandwidth test: iters messages of size
// on every QP (or until deadline, when not zero), at most TxDepth in
// flight per QP.
func (e *Engine) BW(ctx context.Context, size, iters int, deadline time.Time) (*Sample, error) {
	e.init()
	nq := len(e.QPs)
	dur := !deadline.IsZero()
	s := &Sample{Size: size, Start: time.Now(), RTTFactor: 1}
	if !dur {
		s.Posted = make([]int64, 0, iters*nq)
	}
	scnt := make([]int, nq)
	ccnt := make([]int, nq)
	wrs := make([]verbs.SendWR, e.TxDepth)
	sges := make([][1]verbs.SGE, e.TxDepth)
	var total, done int
	stopped := false
	pl := max(e.PostList, 1)
	for {
		if dur && !stopped && time.Now().After(deadline) {
			stopped = true
		}
		for qi := range nq {
			n := 0
			limit := e.TxDepth - (scnt[qi] - ccnt[qi])
			if pl > 1 {
				// -l: whole lists only, and only when one fits.
				if limit < pl {
					continue
				}
				limit = pl
			}
			for (dur && !stopped || !dur && scnt[qi]+n < iters) && n < limit {
				k := scnt[qi] + n
				last := !dur && k == iters-1
				sig := (k+1)%e.CQMod == 0 || last
				e.fillWR(&wrs[n], &sges[n], qi, size, k, sig)
				n++
				if sig && dur && pl <= 1 {
					break
				}
			}
			if n == 0 {
				continue
			}
			if dur {
				// Keep the tail of what is in flight signaled, so that a
				// stop finds a completion for every WR.
				wrs[n-1].Flags |= verbs.SendSignaled
			}
			now := time.Since(s.Start).Nanoseconds()
			if !dur {
				for range n {
					s.Posted = append(s.Posted, now)
				}
			} else if total == 0 {
				s.Posted = append(s.Posted, now)
			}
			if p, err := e.QPs[qi].PostSend(wrs[:n]); err != nil {
				return nil, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", qi, scnt[qi]+p, err)
			}
			scnt[qi] += n
			total += n
		}
		if done == total && (stopped || !dur && done == iters*nq) {
			break
		}
		c, err := e.sendW.Wait(ctx, e.wcs)
		if err != nil {
			if ctx.Err() != nil && done > 0 {
				// Interrupted (Ctrl-C): what completed so far is a
				// result of its own.
				s.Iters = uint64(done)
				s.Elapsed = time.Duration(s.Completed[len(s.Completed)-1].T - s.Posted[0])
				return s, fmt.Errorf("%w after %d of %d messages: %w", ErrInterrupted, done, total, ctx.Err())
			}
			return nil, fmt.Errorf("poll send CQ after %d/%d completions: %w", done, total, err)
		}
		now := time.Since(s.Start).Nanoseconds()
		for i := range c {
			wc := &e.wcs[i]
			if err := wc.Err(); err != nil {
				return nil, fmt.Errorf("completion with error on qp %d message %d: %w", wrQP(wc.WRID), wrN(wc.WRID), err)
			}
			qi, k := wrQP(wc.WRID), wrN(wc.WRID)
			if qi >= nq || k+1 <= ccnt[qi] {
				continue
			}
			done += k + 1 - ccnt[qi]
			ccnt[qi] = k + 1
			s.Completed = append(s.Completed, Completion{Index: done - 1, T: now})
		}
	}
	s.Iters = uint64(done)
	if len(s.Completed) > 0 && len(s.Posted) > 0 {
		s.Elapsed = time.Duration(s.Completed[len(s.Completed)-1].T - s.Posted[0])
	}
	s.PerQP = make([]uint64, nq)
	for qi := range nq {
		s.PerQP[qi] = uint64(ccnt[qi])
	}
	return s, nil
}

// PostRecvs posts receives of size into each QP's target region until
// RxDepth are outstanding (ctx_set_recv_wqes).
func (e *Engine) PostRecvs(size int) error {
	e.init()
	for qi := range e.QPs {
		for e.recvPosted[qi] < e.RxDepth {
			if err := e.postRecv(qi, size); err != nil {
				return fmt.Errorf("couldn't post receive on qp %d: %w", qi, err)
			}
		}
	}
	return nil
}

// RecvBW is the responder side of send_bw: it counts iters receives per
// QP (or receives until deadline), re-posting as perftest does.
func (e *Engine) RecvBW(ctx context.Context, size, iters int, deadline time.Time) (*Sample, error) {
	return e.recvBW(ctx, size, iters, deadline, nil)
}

// recvBW is RecvBW; it closes first (when not nil) at the first message.
func (e *Engine) recvBW(ctx context.Context, size, iters int, deadline time.Time, first chan struct{}) (*Sample, error) {
	e.init()
	nq := len(e.QPs)
	dur := !deadline.IsZero()
	s := &Sample{Size: size, Start: time.Now(), RTTFactor: 1}
	rcnt := make([]int, nq)
	total := 0
	want := iters * nq
	wctx := ctx
	if dur {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, deadline.Add(time.Second))
		defer cancel()
	}
	for dur || total < want {
		if dur && e.StrictDeadline && time.Now().After(deadline) {
			break
		}
		c, err := e.waitRecv(wctx)
		if errors.Is(err, errRecvIdle) {
			if total == 0 {
				return nil, fmt.Errorf("no message arrived for %v: %w", e.RecvIdle, err)
			}
			// perftest's check_alive: report what arrived.
			s.Idle = true
			break
		}
		if err != nil {
			if dur && ctx.Err() == nil {
				break
			}
			if ctx.Err() != nil && total > 0 {
				s.Iters = uint64(total)
				s.Elapsed = time.Duration(s.Completed[len(s.Completed)-1].T - s.Posted[0])
				return s, fmt.Errorf("%w after %d of %d receives: %w", ErrInterrupted, total, want, ctx.Err())
			}
			return nil, fmt.Errorf("poll receive CQ after %d/%d receives: %w", total, want, err)
		}
		now := time.Since(s.Start).Nanoseconds()
		for i := range c {
			wc := &e.wcs[i]
			if err := wc.Err(); err != nil {
				return nil, fmt.Errorf("receive completion with error: %w", err)
			}
			qi := wrQP(wc.WRID)
			if qi >= nq {
				continue
			}
			if total == 0 {
				s.Posted = append(s.Posted, now)
				if first != nil {
					close(first)
				}
			}
			rcnt[qi]++
			total++
			e.recvPosted[qi]--
			if (total%e.CQMod == 0 || total == want) && !dur {
				s.Completed = append(s.Completed, Completion{Index: total - 1, T: now})
			} else if dur {
				if len(s.Completed) == 0 {
					s.Completed = append(s.Completed, Completion{})
				}
				s.Completed[len(s.Completed)-1] = Completion{Index: total - 1, T: now}
			}
			if dur || rcnt[qi]+e.RxDepth <= iters {
				if err := e.postRecv(qi, size); err != nil {
					return nil, fmt.Errorf("couldn't post receive: rcnt=%d: %w", rcnt[qi], err)
				}
			}
		}
	}
	s.Iters = uint64(total)
	if len(s.Completed) > 0 && len(s.Posted) > 0 {
		s.Elapsed = time.Duration(s.Completed[len(s.Completed)-1].T - s.Posted[0])
	}
	s.PerQP = make([]uint64, nq)
	for qi := range nq {
		s.PerQP[qi] = uint64(rcnt[qi])
	}
	return s, nil
}

// errRecvIdle ends a receiver that waited RecvIdle for a message.
var errRecvIdle = errors.New("receiver idle")

// waitRecv waits for receive completions, at most RecvIdle when set.
func (e *Engine) waitRecv(ctx context.Context) (int, error) {
	if e.RecvIdle <= 0 {
		return e.recvW.Wait(ctx, e.wcs)
	}
	ictx, cancel := context.WithTimeout(ctx, e.RecvIdle)
	defer cancel()
	n, err := e.recvW.Wait(ictx, e.wcs)
	if err != nil && ctx.Err() == nil && ictx.Err() != nil {
		return 0, errRecvIdle
	}
	return n, err
}

// BiSend runs both directions of a bidirectional send_bw (run_iter_bi):
// it receives iters messages per QP (receives posted by PostRecvs) while
// it sends iters per QP. waitFirst holds the sends back until the first
// message arrives, as perftest's server does. The sample is the send
// direction's; recvd is how many messages arrived.
func (e *Engine) BiSend(ctx context.Context, size, iters int, deadline time.Time, waitFirst bool) (s *Sample, recvd uint64, err error) {
	e.init()
	// The receive half runs on a copy of the engine with its own
	// completion scratch; the QPs, CQs and receive counts are shared
	// (each CQ is polled by one side only).
	r := *e
	r.wcs = make([]verbs.WC, len(e.wcs))
	first := make(chan struct{})
	type result struct {
		s   *Sample
		err error
	}
	done := make(chan result, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		rs, err := r.recvBW(rctx, size, iters, deadline, first)
		done <- result{rs, err}
	}()
	if waitFirst {
		select {
		case <-first:
		case res := <-done:
			if res.err != nil {
				return nil, 0, res.err
			}
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	s, err = e.BW(ctx, size, iters, deadline)
	if err != nil && !errors.Is(err, ErrInterrupted) {
		stop()
		<-done
		return s, 0, err
	}
	res := <-done
	if res.s != nil {
		recvd = res.s.Iters
	}
	if err == nil {
		err = res.err
	}
	return s, recvd, err
}

// LatReq is the requester of read_lat and atomic_lat: one operation at a
// time on QP 0.
func (e *Engine) LatReq(ctx context.Context, size, iters int, deadline time.Time) (*Sample, error) {
	e.init()
	dur := !deadline.IsZero()
	s := &Sample{Size: size, Start: time.Now(), RTTFactor: 1}
	var wr [1]verbs.SendWR
	var sge [1]verbs.SGE
	for k := 0; dur || k < iters; k++ {
		now := time.Since(s.Start).Nanoseconds()
		if dur && now > deadline.Sub(s.Start).Nanoseconds() {
			break
		}
		s.Posted = append(s.Posted, now)
		e.fillWR(&wr[0], &sge, 0, size, 0, true)
		if _, err := e.QPs[0].PostSend(wr[:]); err != nil {
			return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", k, err)
		}
		if err := e.waitOne(ctx, &e.sendW); err != nil {
			return nil, err
		}
	}
	s.Iters = uint64(len(s.Posted))
	if dur {
		s.Elapsed = time.Since(s.Start) - time.Duration(s.Posted[0])
	}
	return s, nil
}

func (e *Engine) waitOne(ctx context.Context, w *rdmautil.Waiter) error {
	n, err := w.Wait(ctx, e.wcs[:1])
	if err != nil {
		return fmt.Errorf("poll CQ: %w", err)
	}
	if n == 1 {
		if err := e.wcs[0].Err(); err != nil {
			return fmt.Errorf("completion with error: %w", err)
		}
	}
	return nil
}

// longSpin is how many polls of its buffer WriteLat makes before it
// backs off to short sleeps.
const longSpin = 1 << 16

// loadByte reads memory that the provider's goroutines write under RDMA
// WRITE, as write_lat polls its buffer. There is no Go synchronization to
// tell the race detector about: the order comes from the peer's protocol.
//
//go:norace
//go:noinline
func loadByte(b []byte, i int) byte { return b[i] }

// WriteLat runs run_iter_lat_write on QP 0: each side writes size bytes
// whose last byte is the iteration count and polls its own target region
// for the peer's count. The client sends first.
func (e *Engine) WriteLat(ctx context.Context, size, iters int, client bool, deadline time.Time) (*Sample, error) {
	e.init()
	dur := !deadline.IsZero()
	s := &Sample{Size: size, Start: time.Now(), RTTFactor: 2}
	buf := e.MR.Buf()
	post := e.LocalOff(0) + size - 1
	poll := e.TargetOff(0) + size - 1
	var wr [1]verbs.SendWR
	var sge [1]verbs.SGE
	scnt, ccnt, rcnt := 0, 0, 0
	more := func(c int) bool { return c < iters || dur && time.Now().Before(deadline) }
	for more(scnt) || !dur && (ccnt < iters || rcnt < iters) {
		if (rcnt < iters || dur) && !(scnt < 1 && !client) {
			rcnt++
			for spins := 0; loadByte(buf, poll) != byte(rcnt); spins++ {
				if spins%64 == 63 {
					if err := ctx.Err(); err != nil {
						return nil, fmt.Errorf("waiting for the peer's write %d: %w", rcnt, err)
					}
					// Poll the (empty: every send was waited for) CQ:
					// a softib device's polling reader then takes the
					// peer's WRITE off the socket in this goroutine. Go
					// runs a spinner that yields again before it
					// checks the netpoller, so with both sides spinning
					// on two cores the device's receive goroutine
					// would wait for one of them to sleep.
					if n, err := e.SendCQ.Poll(e.wcs[:1]); err != nil || n > 0 {
						return nil, fmt.Errorf("unexpected completion while waiting for the peer's write %d: %v %+v", rcnt, err, e.wcs[0])
					}
					if dur && time.Now().After(deadline.Add(time.Second)) {
						s.Iters = uint64(scnt)
						return s, nil
					}
					if spins > longSpin {
						// A peer this slow is not measured in
						// microseconds: stop burning a shared core.
						time.Sleep(20 * time.Microsecond)
					} else {
						runtime.Gosched()
					}
				}
			}
		}
		if more(scnt) {
			s.Posted = append(s.Posted, time.Since(s.Start).Nanoseconds())
			scnt++
			buf[post] = byte(scnt)
			e.fillWR(&wr[0], &sge, 0, size, 0, true)
			if _, err := e.QPs[0].PostSend(wr[:]); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			if err := e.waitOne(ctx, &e.sendW); err != nil {
				return nil, err
			}
			ccnt++
		} else if dur {
			break
		}
	}
	s.Iters = uint64(scnt)
	if dur && len(s.Posted) > 0 {
		s.Elapsed = time.Since(s.Start) - time.Duration(s.Posted[0])
	}
	return s, nil
}

// SendLat runs run_iter_lat_send on QP 0: ping-pong of SENDs; the client
// sends first. Receives must have been posted (PostRecvs).
func (e *Engine) SendLat(ctx context.Context, size, iters int, client bool, deadline time.Time) (*Sample, error) {
	e.init()
	dur := !deadline.IsZero()
	s := &Sample{Size: size, Start: time.Now(), RTTFactor: 2}
	var wr [1]verbs.SendWR
	var sge [1]verbs.SGE
	scnt, rcnt := 0, 0
	wctx := ctx
	if dur {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, deadline.Add(time.Second))
		defer cancel()
	}
	for scnt < iters || rcnt < iters || dur {
		if (rcnt < iters || dur) && !(scnt < 1 && client) {
			n, err := e.recvW.Wait(wctx, e.wcs[:1])
			if err != nil {
				if dur && ctx.Err() == nil {
					break
				}
				return nil, fmt.Errorf("waiting for receive %d: %w", rcnt+1, err)
			}
			if n == 1 {
				if err := e.wcs[0].Err(); err != nil {
					return nil, fmt.Errorf("receive completion with error: %w", err)
				}
				rcnt++
				e.recvPosted[0]--
				if dur || rcnt+e.RxDepth <= iters {
					if err := e.postRecv(0, size); err != nil {
						return nil, fmt.Errorf("couldn't post recv: rcnt=%d: %w", rcnt, err)
					}
				}
			}
		}
		if scnt < iters || dur && time.Now().Before(deadline) {
			s.Posted = append(s.Posted, time.Since(s.Start).Nanoseconds())
			scnt++
			e.fillWR(&wr[0], &sge, 0, size, 0, true)
			if _, err := e.QPs[0].PostSend(wr[:]); err != nil {
				return nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			if err := e.waitOne(ctx, &e.sendW); err != nil {
				return nil, err
			}
		} else if dur {
			break
		}
	}
	s.Iters = uint64(scnt)
	if dur && len(s.Posted) > 0 {
		s.Elapsed = time.Since(s.Start) - time.Duration(s.Posted[0])
	}
	return s, nil
}
