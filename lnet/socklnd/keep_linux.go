//go:build linux

package socklnd

// Forwarding without copying the payload through user memory.
//
// A router that reads a 1 MiB payload into a router buffer and writes it
// out again copies every byte twice (socket → buffer → socket); on a
// 2-core machine those copies were 42% of the router's CPU and held a
// routed lst brw at about half the direct rate. Kernel Lustre's ksocklnd
// copies once (into the router buffer's pages) and sends those pages
// without copying. Here the router buffer of a message routed between
// two tcp NIs is a pipe instead: splice(2) moves the socket's pages into
// it (no copy), and later from it into the next hop's socket (no copy).
// Lustre's semantics stay: the whole payload is received before the
// core chooses the next hop and sends it; buffer pools, credits and
// queueing are the core's as before (the core still takes a router
// buffer for each message; the pipe replaces only the bytes).
//
//	reader: lnet_hdr ─► Parse ─► RecvKept ─► read-ahead bytes written to
//	        the pipe, the rest spliced from the socket ─► msg.LNDPrivate =
//	        the pipe ─► Finalize ─► core picks the next hop
//	core:   next hop on a tcp NI of this LND: Send as usual; elsewhere
//	        (o2ib): Materialize copies the pipe into the router buffer
//	writer: headers with writev, then the pipe spliced into the socket
//
// The receive falls back to reading into the router buffer when no pipe
// is available (the pool is bounded; F_SETPIPE_SZ may be refused) and,
// mid-message, when the pipe's slots run out before the payload does (a
// socket whose pages are small fragments): what the pipe holds is copied
// out and the rest read normally.

import (
	"errors"
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"softib/lnet/lnd"
)

const (
	// keepMinPayload is the smallest payload worth a pipe: below it the
	// copy costs less than the splice calls.
	keepMinPayload = 64 << 10
	// maxKeptPipes bounds the pipes of one LND (each holds at most one
	// payload's pages); messages beyond use copies.
	maxKeptPipes = 64
)

// keptPipeSize is the capacity asked of each pipe (tests lower it to
// exercise the fallback).
var keptPipeSize = lnd.MaxPayload

// keptPayload is a forwarded payload held in a pipe. The reader fills it,
// the writer of the next hop's connection empties it; in between it
// rides in lnd.Msg.LNDPrivate.
type keptPayload struct {
	l    *LND
	r, w int // pipe ends (non-blocking)
	n    int // bytes in the pipe
}

// pipePool is an LND's set of idle pipes. Guarded by LND.mu.
type pipePool struct {
	free   []*keptPayload
	total  int  // pipes open, idle or in use
	broken bool // F_SETPIPE_SZ or pipe2 failed once: copy from now on
}

// getPipe returns an empty pipe sized for lnd.MaxPayload, or nil.
func (l *LND) getPipe() *keptPayload {
	l.mu.Lock()
	pp := &l.pipes
	if k := len(pp.free); k > 0 {
		p := pp.free[k-1]
		pp.free[k-1] = nil
		pp.free = pp.free[:k-1]
		l.mu.Unlock()
		return p
	}
	if pp.broken || pp.total >= maxKeptPipes || len(l.drivers) == 0 {
		l.mu.Unlock()
		return nil
	}
	pp.total++
	l.mu.Unlock()
	var fds [2]int
	err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err == nil {
		// A pipe holds one page reference per slot (capacity/4 KiB
		// slots), and a socket's pages may be fragments of one MTU: ask
		// for 4× a payload (1,024 slots, beyond pipe-max-size, which a
		// privileged lnetd may exceed), else for one payload's worth.
		// A payload that still does not fit falls back to copying.
		if _, err = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, 4*keptPipeSize); err != nil {
			_, err = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, keptPipeSize)
		}
		if err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
	}
	if err != nil {
		l.mu.Lock()
		pp.total--
		pp.broken = true
		l.mu.Unlock()
		return nil
	}
	return &keptPayload{l: l, r: fds[0], w: fds[1]}
}

// putPipe takes a pipe back: an empty one is kept for reuse, one still
// holding bytes (a message dropped before it was sent) is closed, which
// frees its pages.
func (l *LND) putPipe(p *keptPayload) {
	l.mu.Lock()
	pp := &l.pipes
	if p.n == 0 && len(l.drivers) > 0 {
		pp.free = append(pp.free, p)
		l.mu.Unlock()
		return
	}
	pp.total--
	l.mu.Unlock()
	p.close()
}

func (p *keptPayload) close() {
	unix.Close(p.r)
	unix.Close(p.w)
	p.r, p.w, p.n = -1, -1, 0
}

// closeIdlePipes closes the idle pipes; called when the LND's last NI
// shuts down (pipes in use are closed when they come back).
func (l *LND) closeIdlePipesLocked() {
	for i, p := range l.pipes.free {
		p.close()
		l.pipes.free[i] = nil
	}
	l.pipes.total -= len(l.pipes.free)
	l.pipes.free = l.pipes.free[:0]
}

// keepOff makes every forwarded payload go through the router buffer
// (benchmarks compare the two).
var keepOff bool

// keepable reports whether d can splice: payload checksums are off (a
// checksum needs the bytes) and d does not capture (a captured
// connection has no socket to splice into, and bytes that bypass user
// space would be missing from the capture; which of a capturing
// driver's connections are wrapped depends on which end claimed them).
func (d *Driver) keepable() bool {
	return d.lnd != nil && !d.cfg.EnableCsum && d.capt == nil && !keepOff
}

// KeepsFor reports whether a payload d receives with RecvKept can stay in
// its pipe when the message is sent on by tx (a tcp NI of the same LND
// without checksums); otherwise the core copies it out with Materialize.
func (d *Driver) KeepsFor(tx lnd.Driver) bool {
	t, ok := tx.(*Driver)
	return ok && d.keepable() && t.keepable() && t.lnd == d.lnd
}

// RecvKept is Recv for a message this node forwards: the payload may be
// left in a pipe (recorded in msg.LNDPrivate) rather than written to dst,
// which is the router buffer. dst must cover rlen.
func (d *Driver) RecvKept(private any, msg *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error {
	return d.recv(private, msg, dst, rlen, d.keepable() && msg != nil && dst.Len >= rlen && rlen >= keepMinPayload)
}

// Materialize copies a payload RecvKept left in a pipe into dst and frees
// the pipe; without one it does nothing.
func (d *Driver) Materialize(msg *lnd.Msg, dst lnd.IOV) error {
	p, ok := msg.LNDPrivate.(*keptPayload)
	if !ok {
		return nil
	}
	msg.LNDPrivate = nil
	err := p.drainTo(dst)
	p.l.putPipe(p)
	return err
}

// ReleaseKept frees the pipe of a forwarded message that was not sent
// from it (dropped, or failed before the writer took it).
func (d *Driver) ReleaseKept(msg *lnd.Msg) {
	if p, ok := msg.LNDPrivate.(*keptPayload); ok {
		msg.LNDPrivate = nil
		p.l.putPipe(p)
	}
}

// takeKept detaches msg's pipe for the writer of a connection of d.
func (d *Driver) takeKept(msg *lnd.Msg) *keptPayload {
	if msg == nil {
		return nil
	}
	p, ok := msg.LNDPrivate.(*keptPayload)
	if !ok || p.l != d.lnd || !d.keepable() {
		return nil
	}
	msg.LNDPrivate = nil
	return p
}

// drainTo reads the whole pipe into the start of dst (all of it is there:
// the reads do not wait).
func (p *keptPayload) drainTo(dst lnd.IOV) error {
	if p.n > dst.Len {
		return io.ErrShortBuffer
	}
	var iov [][]byte
	iov = dst.Slice(0, p.n).AppendBuffers(iov)
	for _, b := range iov {
		for len(b) > 0 {
			k, err := unix.Read(p.r, b)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if k == 0 {
				return io.ErrUnexpectedEOF
			}
			b = b[k:]
			p.n -= k
		}
	}
	return nil
}

// errPipeFull stops a splice into a pipe with no free slot left.
var errPipeFull = errors.New("socklnd: pipe full")

// readKept receives rlen payload bytes into a pipe, reporting it through
// the returned value; nil means they were read into dst instead. Called
// by the reader after Parse, with nothing of the payload consumed yet.
func (c *conn) readKept(dst lnd.IOV, rlen int) (*keptPayload, error) {
	if c.raw == nil || c.br.Buffered() >= rlen {
		return nil, c.readInto(dst, rlen)
	}
	p := c.d.lnd.getPipe()
	if p == nil {
		return nil, c.readInto(dst, rlen)
	}
	// What the reader already buffered goes first (a copy of at most
	// rxBufSize); the pipe is empty, so the write does not wait unless
	// the pipe is smaller than that.
	var err error
	if b := c.br.Buffered(); b > 0 {
		ahead, _ := c.br.Peek(b)
		for len(ahead) > 0 && err == nil {
			k, werr := unix.Write(p.w, ahead)
			switch {
			case k > 0:
				c.br.Discard(k)
				ahead = ahead[k:]
				p.n += k
			case werr == unix.EINTR:
			case werr == unix.EAGAIN:
				err = errPipeFull
			default:
				err = werr
			}
		}
	}
	// The read buffer is empty now: the rest comes off the socket.
	if err == nil {
		if c.sin.fn == nil {
			c.sin.fn = c.spliceInStep // bound once: no allocation per message
		}
		c.sin.p, c.sin.want, c.sin.err = p, rlen, nil
		err = c.raw.Read(c.sin.fn)
		if err == nil {
			err = c.sin.err
		}
		c.sin.p, c.sin.err = nil, nil
	}
	if err == errPipeFull {
		// Copy what the pipe holds, read the rest into dst.
		c.d.stats.KeptFallbacks.Add(1)
		n := p.n
		err = p.drainTo(dst)
		p.l.putPipe(p)
		if err != nil {
			return nil, err
		}
		return nil, c.readInto(dst.Slice(n, rlen-n), rlen-n)
	}
	if err != nil {
		p.l.putPipe(p)
		return nil, err
	}
	c.d.stats.KeptRx.Add(1)
	return p, nil
}

// readInto reads n payload bytes into dst (dst.Len ≥ n).
func (c *conn) readInto(dst lnd.IOV, n int) error {
	c.rxIov = dst.Slice(0, n).AppendBuffers(c.rxIov[:0])
	defer clear(c.rxIov)
	for _, b := range c.rxIov {
		if _, err := io.ReadFull(c.br, b); err != nil {
			return err
		}
	}
	return nil
}

// spliceIO is one side's splice in progress (the reader's into a pipe,
// the writer's out of one): the step function RawConn calls is bound to
// the connection once, and its state lives here, so a message costs no
// closure allocation.
type spliceIO struct {
	p    *keptPayload
	want int  // spliceInStep: the bytes the pipe must hold
	more bool // spliceOutStep: SPLICE_F_MORE, bytes of the batch follow
	err  error
	fn   func(fd uintptr) bool
}

// maxMoreIov bounds the iovecs sent with MSG_MORE ahead of a spliced
// payload; a longer run (other messages' payloads in many fragments) is
// written with writev first.
const maxMoreIov = 64

// moreIO is the writer's sendmsg(MSG_MORE) of the bytes ahead of a
// spliced payload (its ksock_msg and lnet_hdr, and whatever else of the
// batch comes first). Without MSG_MORE the connection (TCP_NODELAY, as
// socklnd's nagle=0) pushes those ~200 bytes as a segment of their own,
// which costs the router a transmit and the next hop a receive and an
// ACK for every forwarded message; with it they leave in the same
// segment as the payload's first bytes. The iovec array lives in the
// conn, and the step is bound once, so a message allocates nothing.
type moreIO struct {
	iov   [maxMoreIov]unix.Iovec
	n, i  int // iovecs filled, first one not fully sent
	flags int // sendmsg flags of this call
	err   error
	fn    func(fd uintptr) bool
}

// writeMore writes bufs, the bytes before a spliced payload, holding
// back the push of their last segment for the payload.
func (c *conn) writeMore(bufs [][]byte) error { return c.sendBufs(bufs, true) }

// sendBufs writes bufs with sendmsg(2), at most maxMoreIov iovecs a
// call: every call but the last with MSG_MORE, and the last one too when
// more is set (a splice follows).
func (c *conn) sendBufs(bufs [][]byte, more bool) error {
	m := &c.more
	if m.fn == nil {
		m.fn = c.moreStep
	}
	for {
		m.n, m.i, m.err = 0, 0, nil
		for len(bufs) > 0 && m.n < maxMoreIov {
			if b := bufs[0]; len(b) > 0 {
				m.iov[m.n].Base = &b[0]
				m.iov[m.n].SetLen(len(b))
				m.n++
			}
			bufs = bufs[1:]
		}
		// Bytes follow only if a non-empty buffer does: a last call
		// left with MSG_MORE would hold its segment back.
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if m.n == 0 {
			return nil
		}
		m.flags = unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL
		if more || len(bufs) > 0 {
			m.flags |= unix.MSG_MORE
		}
		err := c.raw.Write(m.fn)
		if err == nil {
			err = m.err
		}
		clear(m.iov[:m.n])
		if err != nil {
			return err
		}
	}
}

// moreStep sends c.more's iovecs; false asks RawConn to wait until the
// socket is writable.
func (c *conn) moreStep(fd uintptr) bool {
	m := &c.more
	for m.i < m.n {
		var h unix.Msghdr
		h.Iov = &m.iov[m.i]
		h.SetIovlen(m.n - m.i)
		k, _, e := unix.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&h)), uintptr(m.flags))
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return false
		case e != 0:
			m.err = e
			return true
		case k == 0:
			m.err = io.ErrShortWrite
			return true
		}
		// Skip what was sent: whole iovecs, then into a partial one.
		for left := int(k); left > 0; {
			v := &m.iov[m.i]
			if int(v.Len) <= left {
				left -= int(v.Len)
				m.i++
				continue
			}
			v.Base = (*byte)(unsafe.Add(unsafe.Pointer(v.Base), left))
			v.SetLen(int(v.Len) - left)
			left = 0
		}
	}
	return true
}

// spliceNB is splice(2) between a pipe and a non-blocking socket with
// SPLICE_F_NONBLOCK, as a raw call (see rawRead).
func spliceNB(in, out, n, flags int) (int, error) {
	k, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), uintptr(flags))
	if e != 0 {
		return 0, e
	}
	return int(k), nil
}

// inq is the socket's unread byte count (SIOCINQ), as a raw call.
func inq(fd uintptr) (int, error) {
	var q int32
	if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&q))); e != 0 {
		return 0, e
	}
	return int(q), nil
}

// rawRead reads into p with read(2) through RawConn (which waits on the
// poller for readability and honours the read deadline).
//
// The hot calls of a connection (this read, sendmsg, splice, SIOCINQ)
// are raw system calls, invisible to the Go scheduler: each is made on a
// non-blocking socket or pipe and returns without sleeping, so it is
// CPU work like any Go code, and nothing is gained by handing the P to
// another thread meanwhile. A scheduler-visible call, by contrast, wakes
// the runtime's monitor (sysmon) from its deep sleep each time an idle
// process starts working again, and sysmon then polls every 20 µs while
// any P is busy: on a router forwarding lst brw (busy and idle in turns
// many times per millisecond) that was 7-10% of its CPU, 1.6-2.4
// nanosleeps and twice as many context switches per MiB moved in every
// lnetd (BENCHMARKS.md "Routing").
func (r *capReader) rawRead(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.fn == nil {
		r.fn = r.readStep // bound once: no allocation per read
	}
	r.p, r.n, r.err = p, 0, nil
	err := r.raw.Read(r.fn)
	if err == nil {
		err = r.err
	}
	n := r.n
	r.p, r.err = nil, nil
	return n, err
}

// readStep is one read(2) into r.p; false asks RawConn to wait.
func (r *capReader) readStep(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case 0:
			if n == 0 {
				r.err = io.EOF
			}
			r.n = int(n)
			return true
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			r.err = e
			return true
		}
	}
}

// spliceInStep moves socket bytes into c.sin.p until it holds c.sin.want;
// false asks RawConn to wait until the socket is readable.
func (c *conn) spliceInStep(fd uintptr) bool {
	s := &c.sin
	queued := false // the socket held data before the last splice
	for s.p.n < s.want {
		k, err := spliceNB(int(fd), s.p.w, s.want-s.p.n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch {
		case k > 0:
			s.p.n += int(k)
			queued = false
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			// No data, or no room in the pipe. Data seen on the socket
			// before a splice that still moved nothing (only we read
			// it) means the second.
			q, qerr := inq(fd)
			if qerr != nil || q == 0 {
				return false
			}
			if queued {
				s.err = errPipeFull
				return true
			}
			queued = true
		case err == nil:
			s.err = io.ErrUnexpectedEOF
			return true
		default:
			s.err = err
			return true
		}
	}
	return true
}

// spliceOutStep moves c.sout.p's bytes into the socket; false asks
// RawConn to wait until it is writable.
func (c *conn) spliceOutStep(fd uintptr) bool {
	s := &c.sout
	flags := unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
	if s.more {
		flags |= unix.SPLICE_F_MORE
	}
	for s.p.n > 0 {
		k, err := spliceNB(s.p.r, int(fd), s.p.n, flags)
		switch {
		case k > 0:
			s.p.n -= int(k)
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return false // the socket is full; the pipe is not empty
		case err == nil:
			s.err = io.ErrShortWrite
			return true
		default:
			s.err = err
			return true
		}
	}
	return true
}

// spliceOut writes the pipe's bytes into the connection (the writer);
// more says other bytes of the batch follow, so the last segment need
// not be pushed alone.
func (c *conn) spliceOut(p *keptPayload, more bool) error {
	if c.sout.fn == nil {
		c.sout.fn = c.spliceOutStep
	}
	c.sout.p, c.sout.err, c.sout.more = p, nil, more
	err := c.raw.Write(c.sout.fn)
	if err == nil {
		err = c.sout.err
	}
	c.sout.p, c.sout.err = nil, nil
	if err == nil {
		c.d.stats.KeptTx.Add(1)
	}
	return err
}

// rawConn returns the socket of nc for splice, or nil (not a kernel
// socket, as in tests that wrap connections).
func rawConn(nc any) syscall.RawConn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
