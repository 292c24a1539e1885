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
// It serves sockets without GRO only: datagrams land straight in the
// caller's buffers, one per message. A PollReader is not safe for
// concurrent use: its caller serialises TryRead, Wait and ReadNow (rxe
// does so with its receive token). Its vector keeps pointing into the
// caller's messages between reads (they are the caller's buffers anyway).
//
// The reads run inside RawConn.Control (TryRead) or RawConn.Read (Wait):
// Control does not take the descriptor's read lock, so a poller can read
// while another goroutine is parked in Wait. ReadBatch must not be used
// on a socket that has a PollReader.
type PollReader struct {
	s     *Socket
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr

	zone  zoneCache
	fd    uintptr  // descriptor inside the current callback
	base  *Message // the messages the vector points into
	vlen  int
	dirty int // entries [0, dirty) must be set up again before a read
	n     int
	errno syscall.Errno
	ready func() bool

	ctlFn  func(fd uintptr)      // method values made once: passing
	waitFn func(fd uintptr) bool // them to RawConn does not allocate
}

// PollReader returns a non-blocking reader of up to batch datagrams per
// call, or nil when the socket receives with GRO.
func (s *Socket) PollReader(batch int) *PollReader {
	if s.gro || batch < 1 {
		return nil
	}
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return nil
	}
	r := &PollReader{
		s:     s,
		rc:    rc,
		hdrs:  make([]unix.Mmsghdr, batch),
		iovs:  make([]unix.Iovec, batch),
		names: make([]sockaddr, batch),
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

// TryRead receives into msgs without blocking; it returns 0 when no
// datagram is queued. A datagram longer than its buffer gets N = -1 (and
// counts in Stats.RxTruncated) so that every datagram stays in the slot
// the kernel filled.
func (r *PollReader) TryRead(msgs []Message) (int, error) {
	r.prepare(msgs)
	if err := r.rc.Control(r.ctlFn); err != nil {
		return 0, err
	}
	return r.finish(msgs)
}

// Wait calls ready from a netpoller callback until it returns true,
// parking while the socket is not readable in between. ready reads with
// ReadNow, and may return false only after ReadNow found the socket
// empty (the netpoller is edge-triggered: data queued before that read
// raises no new readiness).
func (r *PollReader) Wait(ready func() bool) error {
	r.ready = ready
	err := r.rc.Read(r.waitFn)
	r.ready = nil
	return err
}

// ReadNow is TryRead for use inside Wait's callback.
func (r *PollReader) ReadNow(msgs []Message) (int, error) {
	r.prepare(msgs)
	r.syscall(r.fd)
	return r.finish(msgs)
}

// prepare points the recvmmsg vector at msgs' buffers. The vector stays
// set up between reads: only the entries the last read filled (whose
// buffers the caller may have replaced, and whose lengths and flags the
// kernel changed) are redone, so an empty read costs only the syscall.
func (r *PollReader) prepare(msgs []Message) {
	v := min(len(msgs), len(r.hdrs))
	if v == 0 {
		r.vlen = 0
		return
	}
	if &msgs[0] != r.base || v != r.vlen {
		r.base, r.vlen, r.dirty = &msgs[0], v, v
	}
	for i := range r.dirty {
		setDirect(&r.hdrs[i], &r.iovs[i], &r.names[i], msgs[i].Buf)
	}
	r.dirty = 0
	r.n, r.errno = 0, 0
}

func (r *PollReader) syscall(fd uintptr) {
	if r.vlen > 0 {
		r.n, r.errno = recvmmsg(fd, r.hdrs, r.vlen)
	}
}

// finish fills in N and Addr of the received datagrams.
func (r *PollReader) finish(msgs []Message) (int, error) {
	switch r.errno {
	case 0:
	case unix.EAGAIN:
		return 0, nil
	default:
		return 0, os.NewSyscallError("recvmmsg", r.errno)
	}
	if r.n == 0 {
		return 0, nil
	}
	r.dirty = r.n
	good := r.n
	for i := range r.n {
		h := &r.hdrs[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			msgs[i].N = -1
			r.s.Stats.RxTruncated.Inc()
			good--
		} else {
			msgs[i].N = int(h.Len)
		}
		msgs[i].Addr = r.zone.addr(&r.names[i])
	}
	r.s.Stats.RxSyscalls.Inc()
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
