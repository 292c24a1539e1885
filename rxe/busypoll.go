package rxe

import "softib/udp"

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

// rxLoopPoll is the receive goroutine on a pollSock.
func (d *Device) rxLoopPoll() {
	st := &d.rxState
	ready := d.rxReady // one method value: no allocation per wait
	for {
		st.got, st.taken, st.err, st.woken = 0, false, nil, false
		if err := d.sr.Wait(ready); err != nil {
			d.linkDown()
			return
		}
		if st.taken {
			// A poller has the token: take it after the poller and
			// read what it may have left, since the edge that woke us
			// is spent.
			d.rxTok.Lock()
			st.got, st.err = d.sr.TryRead(d.rb.msgs)
		}
		// The token is held here.
		if st.err != nil {
			d.rxTok.Unlock()
			d.linkDown()
			return
		}
		d.flushDeferred()
		if st.got > 0 {
			d.queueBatch(d.rb, st.got)
			d.runBatch(d.rb, st.got, sendYield)
		}
		d.rxTok.Unlock()
	}
}

// rxReady is the receive goroutine's wait callback: with the token it
// reads without blocking and keeps the token if it got datagrams (or an
// error); an empty socket with nothing pending (ReadNow returned 0)
// gives the token back and parks.
func (d *Device) rxReady() bool {
	st := &d.rxState
	if !d.rxTok.TryLock() {
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
		n, err = d.sr.ReadNowOne(d.rb.msgs)
	} else {
		n, err = d.sr.ReadNow(d.rb.msgs)
	}
	st.woken = true
	if err != nil {
		st.err = err
		return true
	}
	if n == 0 {
		d.rxTok.Unlock()
		return false
	}
	st.got = n
	return true
}

// pollRx is a CQ poller's receive step (see above): one read, then the
// segments a GRO read left pending. It reports whether it received
// anything.
func (d *Device) pollRx() bool {
	if !d.rxTok.TryLock() {
		return false
	}
	got := false
	for {
		// Errors are left to the receive goroutine, which reports them.
		n, _ := d.sr.TryRead(d.rb.msgs)
		if n > 0 {
			got = true
			d.stats.PollRxBatches.Inc()
			d.queueBatch(d.rb, n)
			d.runBatch(d.rb, n, sendDefer)
		}
		if n == 0 || !d.sr.Pending() {
			break
		}
	}
	d.rxTok.Unlock()
	return got
}
