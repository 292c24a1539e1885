package rxe

import (
	"sync/atomic"

	"softib/udp"
)

// Poll-driven receive. On a socket that allows non-blocking reads
// (pollSock: a Linux *udp.Socket, with or without GRO), reading the
// socket is a token: the holder of Device.rxTok is the only reader, owns
// Device.rb and the ICRC cache, and processes what it read before
// letting go. The token is taken by
//
//   - a CQ poller whose CQ is empty (CQ.Poll → pollRx): in busy-poll
//     mode on every empty Poll, otherwise once the application has
//     polled the CQ empty Config.PollRxAfter times in a row (it is
//     spinning, like perftest and rdmautil.Waiter). It reads one batch
//     without blocking and runs the QPs inline, so the completion it is
//     waiting for is pushed by its own goroutine, with no wakeup of
//     another goroutine and no scheduler hand-off in between;
//   - the receive goroutine (rxLoopPoll), which parks in the netpoller
//     while the socket is empty, so that a device nobody polls makes
//     progress at normal latency, and an application that sleeps on a
//     completion channel is woken as before.
//
// Neither spins inside rxe: an application that wants busy polling
// calls Poll in a loop (yielding with runtime.Gosched between empty
// rounds), and TryLock makes every poller but one return at once, so a
// device has one socket spinner at most.
//
// On a GRO socket one read may bring more segments than a batch holds;
// the reader keeps them pending and hands them out first on the next
// read. Pending segments raise no readiness in the netpoller, so no
// holder leaves them behind for good: the receive goroutine lets the
// token go only to go straight back to Wait, whose callback takes it
// and reads them at once, and a poller processes batches until none is
// left.

// pollSock is the non-blocking socket access the receive token needs:
// a udp.Reader (see its doc for the contract of each method), from a
// Linux *udp.Socket in production and from a udptest endpoint in the
// deterministic tests, which so run the same receive path.
type pollSock = udp.Reader

// newPollSock returns a non-blocking reader of c, or nil when c offers
// none (other Conns keep the plain receive loop on ReadBatch).
func newPollSock(c udp.Conn, batch int) pollSock {
	if pc, ok := c.(udp.PollConn); ok {
		return pc.NewReader(batch)
	}
	return nil
}

// rxPollState is the receive goroutine's state across wait callbacks.
type rxPollState struct {
	got   int   // datagrams the callback read (token held)
	taken bool  // the callback found the token taken by a poller
	err   error // read error (token held)
	woken bool  // the callback runs after a netpoller wakeup
}

// rxLoopPoll is the shard's receive goroutine on a pollSock.
func (s *rxShard) rxLoopPoll() {
	d := s.d
	st := &s.st
	ready := s.rxReady // one method value: no allocation per wait
	for {
		st.got, st.taken, st.err, st.woken = 0, false, nil, false
		if err := s.sr.Wait(ready); err != nil {
			d.linkDown()
			return
		}
		if st.taken {
			// A poller has the token: take it after the poller and
			// read what it may have left, since the edge that woke us
			// is spent.
			s.tok.Lock()
			st.got, st.err = s.sr.TryRead(s.rb.msgs)
		}
		// The token is held here.
		if st.err != nil {
			s.tok.Unlock()
			d.linkDown()
			return
		}
		d.flushDeferred()
		if st.got > 0 {
			s.queueBatch(s.rb, st.got)
			d.runBatch(s.rb, st.got, byDevice)
		}
		s.tok.Unlock()
	}
}

// rxReady is the receive goroutine's wait callback: with the token it
// reads without blocking and keeps the token if it got datagrams (or an
// error); an empty socket with nothing pending (ReadNow returned 0)
// gives the token back and parks.
func (s *rxShard) rxReady() bool {
	st := &s.st
	if !s.tok.TryLock() {
		st.taken = true
		return true
	}
	// Wait's first call follows a processed batch: read a whole batch
	// (usually nothing: the socket is empty). A call after a wakeup
	// asks for one datagram: mostly one arrived (a request, a
	// response, a ping-pong message), and a burst is read in full by
	// the next round's first call.
	var n int
	var err error
	if st.woken {
		n, err = s.sr.ReadNowOne(s.rb.msgs)
	} else {
		n, err = s.sr.ReadNow(s.rb.msgs)
	}
	st.woken = true
	if err != nil {
		st.err = err
		return true
	}
	if n == 0 {
		s.tok.Unlock()
		return false
	}
	st.got = n
	return true
}

// pollRx is a CQ poller's receive step on the shard (see above): one
// read, then the segments a GRO read left pending. It reports whether it
// received anything.
func (s *rxShard) pollRx() bool {
	if !s.tok.TryLock() {
		return false
	}
	d := s.d
	got := false
	for {
		// Errors are left to the receive goroutine, which reports them.
		n, _ := s.sr.TryRead(s.rb.msgs)
		if n > 0 {
			got = true
			d.stats.PollRxBatches.Inc()
			s.queueBatch(s.rb, n)
			d.runBatch(s.rb, n, byPoller)
		}
		if n == 0 || !s.sr.Pending() {
			break
		}
	}
	s.tok.Unlock()
	return got
}

// cqPoll is a CQ's state for the device's poll hook.
type cqPoll struct {
	empties atomic.Int32 // empty Polls in a row (spin detection)
	// shard is the index in Device.pollShards of the shard whose read
	// last brought this CQ a completion: the next empty Poll reads it
	// first (a CQ's QPs usually sit on one shard).
	shard atomic.Int32
}

// pollEmpty is the device hook an empty CQ.Poll calls: it sends the
// responses deferred for the application's post, and when the
// application is spinning (Config.PollRxAfter; at once in busy-poll
// mode) it reads the receive shards itself, the CQ's last useful shard
// first, until one brings the CQ a completion. It reports whether the CQ
// should be polled again.
func (d *Device) pollEmpty(cq *CQ) bool {
	d.flushDeferred()
	n := len(d.pollShards)
	if n == 0 || cq.rx.empties.Add(1) <= d.spinPolls {
		return false
	}
	h := int(cq.rx.shard.Load())
	for i := range n {
		k := (h + i) % n
		if d.pollShards[k].pollRx() && cq.nonEmpty() {
			if k != h {
				cq.rx.shard.Store(int32(k))
			}
			return true
		}
	}
	return false
}
