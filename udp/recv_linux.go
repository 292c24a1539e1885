//go:build linux

package udp

import (
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// groRecv is a recvmmsg vector with, in GRO mode, its own receive
// buffers, and the datagrams received into them that are not yet split
// out to a caller. ReadBatch (reader) and PollReader each have one.
type groRecv struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	oob   []byte // oobLen per message, when GRO or RecvTOS is on
	bufs  [][]byte

	// recvTOS (set before init) reserves control space for the
	// IP_TOS/IPV6_TCLASS message of Config.RecvTOS; oobLen is the
	// control space per entry.
	recvTOS bool
	oobLen  int

	// GRO mode: datagrams received into bufs and not yet handed out are
	// bufs[next:cnt]; off is the offset in bufs[next].
	next, cnt, off int

	// live is how many GRO buffers exist: bufs[:live] (growGRO). A read
	// asks for at most live datagrams.
	live int

	zone zoneCache
}

// init allocates a vector of b entries, with GRO buffers if gro.
func (g *groRecv) init(b int, gro bool) {
	g.hdrs = make([]unix.Mmsghdr, b)
	g.iovs = make([]unix.Iovec, b)
	g.names = make([]sockaddr, b)
	g.oobLen = 0
	if gro {
		g.oobLen += groCmsgSize
	}
	if g.recvTOS {
		g.oobLen += tosCmsgSize
	}
	if g.oobLen > 0 {
		g.oob = make([]byte, b*g.oobLen)
	}
	if gro {
		g.bufs = make([][]byte, b)
		g.live = 0
		g.growTo(min(groStartBufs, b))
	}
}

// GRO receive buffers are made as the traffic needs them: a vector
// starts with groStartBufs (256 KiB, 64 segments of 4 KiB or 256 of 1
// KiB: a whole rxe batch) and doubles, up to its batch size, whenever a
// read filled every buffer it had (the socket held more). A shard of an
// idle or lightly used device so holds 256 KiB instead of batch × 64
// KiB (4 MiB at the default 64), and a busy one grows within its first
// few reads; no read allocates after that.
const groStartBufs = 4

// growTo makes the GRO buffers up to n.
func (g *groRecv) growTo(n int) {
	for ; g.live < n; g.live++ {
		g.bufs[g.live] = make([]byte, groBufSize)
	}
}

// grewAfter grows the GRO buffers after a read that returned n
// datagrams into vlen entries and reports whether it did: when the read
// filled every buffer there is, the next one gets twice as many.
func (g *groRecv) grewAfter(n, vlen int) bool {
	if n < vlen || vlen < g.live || g.live == len(g.bufs) {
		return false
	}
	g.growTo(min(2*g.live, len(g.bufs)))
	return true
}

// setupGRO points recvmmsg entry i at GRO buffer i and its control
// space, undoing what the kernel wrote into the entry.
func (g *groRecv) setupGRO(i int) {
	iov := &g.iovs[i]
	iov.Base = &g.bufs[i][0]
	iov.SetLen(groBufSize)
	h := &g.hdrs[i].Hdr
	h.Name = (*byte)(unsafe.Pointer(&g.names[i]))
	h.Namelen = unix.SizeofSockaddrInet6
	h.Iov = iov
	h.SetIovlen(1)
	h.Control = &g.oob[i*g.oobLen]
	h.SetControllen(g.oobLen)
	h.Flags = 0
}

// setDirectTOS gives direct-mode entry i (set up by setDirect) its
// control space for the received traffic class.
func (g *groRecv) setDirectTOS(i int) {
	h := &g.hdrs[i].Hdr
	h.Control = &g.oob[i*g.oobLen]
	h.SetControllen(g.oobLen)
}

// ctl returns the control data the last receive returned in entry i.
func (g *groRecv) ctl(i int) []byte {
	if g.oobLen == 0 {
		return nil
	}
	cl := min(int(g.hdrs[i].Hdr.Controllen), g.oobLen)
	return g.oob[i*g.oobLen : i*g.oobLen+cl]
}

// pending reports whether received datagrams (or the rest of a split
// one) wait to be handed out.
func (g *groRecv) pending() bool { return g.next < g.cnt }

// reader holds the preallocated recvmmsg state; mu serializes ReadBatch.
type reader struct {
	mu sync.Mutex
	s  *Socket
	groRecv

	// Results of the last syscall, set by the RawConn callbacks.
	n     int
	errno syscall.Errno
	vlen  int

	recvFn, pollFn func(fd uintptr) bool
}

func (r *reader) init(s *Socket) {
	r.s = s
	// Method values made once: passing them to RawConn.Read does not
	// allocate per call.
	r.recvFn = r.recv
	r.pollFn = r.poll
}

// alloc sets up the vector (and in GRO mode its first buffers, see
// groStartBufs) on the first ReadBatch: a socket read through a
// PollReader never needs it.
func (r *reader) alloc() {
	if r.hdrs == nil {
		r.recvTOS = r.s.cfg.RecvTOS
		r.groRecv.init(r.s.cfg.BatchSize, r.s.gro)
	}
}

// recv is the netpoller-integrated callback: false on EAGAIN parks the
// goroutine until the socket is readable.
func (r *reader) recv(fd uintptr) bool {
	r.syscall(fd)
	return r.errno != unix.EAGAIN
}

// poll is the busy-poll callback: it never parks.
func (r *reader) poll(fd uintptr) bool {
	r.syscall(fd)
	return true
}

func (r *reader) syscall(fd uintptr) { r.n, r.errno = recvmmsg(fd, r.hdrs, r.vlen) }

// recvmmsg is one non-blocking recvmmsg of up to vlen datagrams into
// hdrs, repeated on EINTR (ReadBatch and PollReader share it).
func recvmmsg(fd uintptr, hdrs []unix.Mmsghdr, vlen int) (int, syscall.Errno) {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])),
			uintptr(vlen), unix.MSG_DONTWAIT, 0, 0)
		if e != unix.EINTR {
			return int(n), e
		}
	}
}

// setDirect points one recvmmsg entry at the caller's buffer b, with no
// control data (datagrams land straight in b).
func setDirect(h *unix.Mmsghdr, iov *unix.Iovec, name *sockaddr, b []byte) {
	iov.Base = unsafe.SliceData(b)
	iov.SetLen(cap(b))
	h.Hdr.Name = (*byte)(unsafe.Pointer(name))
	h.Hdr.Namelen = unix.SizeofSockaddrInet6
	h.Hdr.Iov = iov
	h.Hdr.SetIovlen(1)
	h.Hdr.Control = nil
	h.Hdr.SetControllen(0)
	h.Hdr.Flags = 0
}

// ReadBatch implements Conn. It blocks until at least one datagram has
// arrived. Datagrams longer than cap(msgs[i].Buf) are dropped and counted
// in Stats.RxTruncated. The Buf fields are never changed: datagram i is in
// msgs[i].Buf[:msgs[i].N]. Without GRO, datagrams are received straight
// into the callers' buffers; with GRO they are received into socket
// buffers and copied out.
func (s *Socket) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	r := &s.rd
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alloc()
	for {
		if s.closed.Load() {
			return 0, errClosed
		}
		if s.gro {
			if n := r.drain(msgs); n > 0 {
				return n, nil
			}
			r.prepareGRO(min(len(msgs), len(r.hdrs)))
		} else {
			r.prepareDirect(msgs[:min(len(msgs), len(r.hdrs))])
		}
		if err := r.receive(); err != nil {
			r.clear()
			return 0, err
		}
		s.Stats.RxSyscalls.Inc()
		if s.gro {
			r.next, r.cnt, r.off = 0, r.n, 0
			r.grewAfter(r.n, r.vlen)
			continue
		}
		n := r.finishDirect(msgs)
		r.clear()
		if n > 0 {
			return n, nil
		}
	}
}

// receive runs recvmmsg until it returns at least one datagram.
func (r *reader) receive() error {
	s := r.s
	if s.cfg.BusyPoll {
		start := time.Now()
		for spins := 0; ; spins++ {
			if err := s.rc.Read(r.pollFn); err != nil {
				return s.wrapErr("recvmmsg", err)
			}
			if r.errno != unix.EAGAIN {
				break
			}
			if spins&31 == 31 && time.Since(start) > s.cfg.BusyPollSpin {
				// Idle: park until readable rather than burn a core.
				if err := s.rc.Read(r.recvFn); err != nil {
					return s.wrapErr("recvmmsg", err)
				}
				break
			}
			runtime.Gosched()
		}
	} else if err := s.rc.Read(r.recvFn); err != nil {
		return s.wrapErr("recvmmsg", err)
	}
	if r.errno != 0 {
		return s.wrapErr("recvmmsg", r.errno)
	}
	return nil
}

// prepareDirect points the recvmmsg vector at the callers' buffers.
func (r *reader) prepareDirect(msgs []Message) {
	for i := range msgs {
		setDirect(&r.hdrs[i], &r.iovs[i], &r.names[i], msgs[i].Buf)
		if r.recvTOS {
			r.setDirectTOS(i)
		}
	}
	r.vlen = len(msgs)
}

// prepareGRO points the recvmmsg vector at the first n socket buffers
// (at most the live ones).
func (r *reader) prepareGRO(n int) {
	n = min(n, r.live)
	for i := range n {
		r.setupGRO(i)
	}
	r.vlen = n
}

// clear drops the references to caller buffers so that the socket does
// not keep them alive.
func (r *reader) clear() {
	for i := range r.vlen {
		r.iovs[i].Base = nil
	}
}

// finishDirect fills in N and Addr for the r.n received datagrams and
// compacts away truncated ones.
func (r *reader) finishDirect(msgs []Message) int {
	n := 0
	for i := range r.n {
		h := &r.hdrs[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			r.s.Stats.RxTruncated.Inc()
			continue
		}
		if n != i {
			// Close the gap left by a dropped datagram. Copying (rare)
			// rather than swapping Buf slices keeps every Buf where the
			// caller put it; callers track buffers by index.
			if int(h.Len) > cap(msgs[n].Buf) {
				r.s.Stats.RxTruncated.Inc()
				continue
			}
			copy(msgs[n].Buf[:cap(msgs[n].Buf)], msgs[i].Buf[:h.Len])
		}
		msgs[n].N = int(h.Len)
		msgs[n].TOS = recvClass(r.ctl(i))
		msgs[n].Addr = getSockaddr(&r.names[i])
		n++
	}
	r.s.Stats.RxDatagrams.Add(uint64(n))
	return n
}

// drain copies pending GRO-mode datagrams into msgs, splitting
// super-datagrams at their segment size, and returns how many it filled;
// truncated datagrams and segments are dropped.
func (r *reader) drain(msgs []Message) int { return r.split(&r.s.Stats, msgs, false) }

// split copies pending GRO-mode datagrams into msgs, one segment per
// Message (a super-datagram's last segment may be shorter), and returns
// how many Messages it filled. A datagram or segment that cannot be
// handed out whole (MSG_TRUNC, MSG_CTRUNC, or longer than its Message's
// buffer) is counted in RxTruncated and dropped, or with keep takes its
// Message with N = -1; keep also hands out an empty datagram as N = 0,
// so that every received datagram fills at least one Message.
func (g *groRecv) split(st *Stats, msgs []Message, keep bool) int {
	n, good := 0, 0
	for g.next < g.cnt && n < len(msgs) {
		i := g.next
		h := &g.hdrs[i]
		total := int(h.Len)
		seg := total
		var tos uint8
		// MSG_CTRUNC: the kernel had more control data than fits, so
		// a UDP_GRO size may be missing and the datagram may hold
		// several segments: it cannot be split safely.
		bad := h.Hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0
		if !bad {
			// Only the control bytes this receive returned: the rest of
			// the slot may hold a stale UDP_GRO size from an earlier
			// receive, which would split a plain datagram.
			ctl := g.ctl(i)
			tos = recvClass(ctl)
			if gs := groSize(ctl); gs > 0 && gs < total {
				seg = gs
				if g.off == 0 {
					st.RxGROSplit.Inc()
				}
			}
		}
		addr := g.zone.addr(&g.names[i])
		if keep && total == 0 {
			m := &msgs[n]
			m.N, m.Addr, m.TOS = 0, addr, tos
			if bad {
				m.N = -1
				st.RxTruncated.Inc()
			} else {
				good++
			}
			n++
		}
		for g.off < total && n < len(msgs) {
			l := min(seg, total-g.off)
			m := &msgs[n]
			if l > cap(m.Buf) || bad {
				st.RxTruncated.Inc()
				if keep {
					m.N, m.Addr = -1, addr
					n++
				}
			} else {
				m.N = copy(m.Buf[:cap(m.Buf)], g.bufs[i][g.off:g.off+l])
				m.Addr, m.TOS = addr, tos
				n++
				good++
			}
			g.off += l
		}
		if g.off >= total {
			g.next++
			g.off = 0
		}
	}
	st.RxDatagrams.Add(uint64(good))
	return n
}
