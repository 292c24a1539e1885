package udp

import (
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PollReader reads a Socket without blocking, for callers that poll (a
// busy-polling consumer, or one that takes over the receive while it
// spins) alongside a goroutine that parks until the socket is readable.
// A PollReader is not safe for concurrent use: its caller serialises
// TryRead, Wait, ReadNow and Pending (rxe does so with its receive
// token).
//
// Without GRO, datagrams land straight in the caller's buffers, one per
// message, and the vector keeps pointing into the caller's messages
// between reads (they are the caller's buffers anyway). On a GRO socket
// one recvmmsg receives into the reader's own buffers, and the
// super-datagrams are split into the caller's messages as ReadBatch
// splits them; segments that did not fit stay pending in the reader, and
// the next TryRead or ReadNow hands them out first, without a syscall.
// Either way every datagram or segment fills exactly one Message: one
// that cannot be handed out whole gets N = -1 (and counts in
// Stats.RxTruncated), so a caller that tracks buffers by index finds
// every datagram in the slot it was received into.
//
// The reads run inside RawConn.Control (TryRead) or RawConn.Read (Wait):
// Control does not take the descriptor's read lock, so a poller can read
// while another goroutine is parked in Wait. ReadBatch must not be used
// on a socket that has a PollReader.
type PollReader struct {
	s   *Socket
	rc  syscall.RawConn
	v   groRecv // the recvmmsg vector; GRO buffers and pending datagrams
	gro bool

	fd    uintptr  // descriptor inside the current callback
	base  *Message // without GRO: the messages the vector points into
	vlen  int
	dirty int // entries [0, dirty) must be set up again before a read
	n     int
	errno syscall.Errno
	ready func() bool

	ctlFn  func(fd uintptr)      // method values made once: passing
	waitFn func(fd uintptr) bool // them to RawConn does not allocate
}

// PollReader returns a non-blocking reader of up to batch datagrams
// (GRO: super-datagrams) per call, or nil if batch < 1. On a GRO socket
// it has its own receive buffers, 64 KiB per datagram of batch at most,
// made as the traffic needs them (groStartBufs).
func (s *Socket) PollReader(batch int) *PollReader {
	if batch < 1 {
		return nil
	}
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return nil
	}
	r := &PollReader{s: s, rc: rc, gro: s.gro}
	r.v.recvTOS = s.cfg.RecvTOS
	r.v.init(min(batch, MaxBatchSize), s.gro)
	if s.gro {
		r.dirty = r.v.live // set every entry up at the first read
	}
	r.ctlFn = r.control
	r.waitFn = r.waitCallback
	return r
}

func (r *PollReader) control(fd uintptr) { r.syscall(fd) }

func (r *PollReader) waitCallback(fd uintptr) bool {
	r.fd = fd
	return r.ready()
}

// TryRead receives into msgs without blocking and returns how many it
// filled; 0 means no datagram was pending or queued. Pending segments
// of an earlier GRO read come first, without a syscall.
func (r *PollReader) TryRead(msgs []Message) (int, error) {
	if r.v.pending() {
		return r.v.split(&r.s.Stats, msgs, true), nil
	}
	r.prepare(msgs)
	if r.vlen == 0 {
		return 0, nil
	}
	if err := r.rc.Control(r.ctlFn); err != nil {
		return 0, err
	}
	return r.finish(msgs)
}

// Wait calls ready from a netpoller callback until it returns true,
// parking while the socket is not readable in between. ready reads with
// ReadNow or ReadNowOne (with a non-empty msgs), and may return false
// only after such a read returned 0, that is found nothing pending AND the socket
// empty: the netpoller is edge-triggered, so data queued before that
// read raises no new readiness, and pending GRO segments raise none at
// all. Wait calls ready at once, before it first parks.
func (r *PollReader) Wait(ready func() bool) error {
	r.ready = ready
	err := r.rc.Read(r.waitFn)
	r.ready = nil
	return err
}

// ReadNow is TryRead for use inside Wait's callback.
func (r *PollReader) ReadNow(msgs []Message) (int, error) { return r.readNow(msgs, false) }

// readNow is ReadNow, or ReadNowOne with one.
func (r *PollReader) readNow(msgs []Message, one bool) (int, error) {
	if r.v.pending() {
		return r.v.split(&r.s.Stats, msgs, true), nil
	}
	r.prepare(msgs)
	if r.vlen == 0 {
		return 0, nil
	}
	if one {
		r.n, r.errno = recvmmsg(r.fd, r.v.hdrs, 1)
	} else {
		r.syscall(r.fd)
	}
	return r.finish(msgs)
}

// ReadNowOne is ReadNow asking the kernel for one datagram (with GRO,
// one super-datagram, still split into up to len(msgs) messages). After
// a wakeup for a lone datagram, which is what a ping-pong or a request
// that waits for its response sees, it spares recvmmsg a second,
// failing dequeue (a msghdr copied in and the queue locked for nothing);
// a caller that got one reads the rest of a burst with ReadNow.
func (r *PollReader) ReadNowOne(msgs []Message) (int, error) { return r.readNow(msgs, true) }

// Pending reports whether segments of a GRO read wait for the next
// TryRead or ReadNow. A caller that stops reading while they do must
// make sure someone reads again: they raise no readiness in Wait.
func (r *PollReader) Pending() bool { return r.v.pending() }

// prepare sets the recvmmsg vector up for a read into msgs. The vector
// stays set up between reads: only the entries the last read filled
// (whose lengths and flags the kernel changed, and without GRO whose
// buffers the caller may have replaced) are redone, so an empty read
// costs only the syscall.
func (r *PollReader) prepare(msgs []Message) {
	r.n, r.errno = 0, 0
	v := min(len(msgs), len(r.v.hdrs))
	if v == 0 {
		r.vlen = 0
		return
	}
	if r.gro {
		for i := range r.dirty {
			r.v.setupGRO(i)
		}
		r.vlen = min(v, r.v.live)
	} else {
		if &msgs[0] != r.base || v != r.vlen {
			r.base, r.vlen, r.dirty = &msgs[0], v, v
		}
		for i := range r.dirty {
			setDirect(&r.v.hdrs[i], &r.v.iovs[i], &r.v.names[i], msgs[i].Buf)
			if r.v.recvTOS {
				r.v.setDirectTOS(i)
			}
		}
	}
	r.dirty = 0
}

func (r *PollReader) syscall(fd uintptr) {
	r.n, r.errno = recvmmsg(fd, r.v.hdrs, r.vlen)
}

// finish hands out what the read received: without GRO it fills in N
// and Addr of the datagrams in msgs, with GRO it splits them into msgs.
func (r *PollReader) finish(msgs []Message) (int, error) {
	switch r.errno {
	case 0:
	case unix.EAGAIN:
		return 0, nil
	default:
		return 0, os.NewSyscallError("recvmmsg", r.errno)
	}
	if r.n <= 0 {
		return 0, nil
	}
	r.dirty = r.n
	r.s.Stats.RxSyscalls.Inc()
	if r.gro {
		if r.v.grewAfter(r.n, r.vlen) {
			r.dirty = r.v.live // the new buffers' entries too
		}
		r.v.next, r.v.cnt, r.v.off = 0, r.n, 0
		return r.v.split(&r.s.Stats, msgs, true), nil
	}
	good := r.n
	for i := range r.n {
		h := &r.v.hdrs[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			msgs[i].N = -1
			r.s.Stats.RxTruncated.Inc()
			good--
		} else {
			msgs[i].N = int(h.Len)
		}
		msgs[i].TOS = recvClass(r.v.ctl(i))
		msgs[i].Addr = r.v.zone.addr(&r.v.names[i])
	}
	r.s.Stats.RxDatagrams.Add(uint64(good))
	return r.n, nil
}

// zoneCache remembers the zone name of the last IPv6 scope ID, so that
// a link-local peer does not cost an interface lookup per datagram.
type zoneCache struct {
	id   uint32
	name string
}

// addr is getSockaddr with the zone name cached.
func (z *zoneCache) addr(sa *sockaddr) netip.AddrPort {
	if sa.Family != unix.AF_INET6 || sa.Scope_id == 0 {
		return getSockaddr(sa)
	}
	if z.id != sa.Scope_id || z.name == "" {
		z.id, z.name = sa.Scope_id, zoneName(sa.Scope_id)
	}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).WithZone(z.name), uint16(p[0])<<8|uint16(p[1]))
}

var _ PollConn = (*Socket)(nil)

// NewReader implements PollConn: it returns s.PollReader(batch), or nil.
func (s *Socket) NewReader(batch int) Reader {
	if r := s.PollReader(batch); r != nil {
		return r
	}
	return nil
}
