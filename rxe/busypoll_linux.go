//go:build linux

package rxe

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"softib/udp"
)

// sockReader reads a *udp.Socket's file descriptor directly with
// non-blocking recvmmsg, for the receive token (busypoll.go). udp.Conn has no
// non-blocking read; this is the minimal local one, and it only serves
// sockets without GRO (datagrams are received straight into the
// caller's buffers, one per message). Its state is guarded by the
// device's receive token. The vector keeps pointing into the device's
// receive batch between reads (those buffers are the batch's anyway).
//
// The reads run inside RawConn.Control (tryRead) or RawConn.Read (wait):
// Control does not take the descriptor's read lock, so a poller can read
// while the receive goroutine is parked in Read.
type sockReader struct {
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6

	zone  zoneCache
	fd    uintptr      // descriptor inside the current callback
	base  *udp.Message // the messages the vector points into
	vlen  int
	dirty int // entries [0, dirty) must be set up again before a read
	n     int
	errno syscall.Errno
	ready func() bool

	ctlFn  func(fd uintptr)      // method values made once: passing
	waitFn func(fd uintptr) bool // them to RawConn does not allocate
}

// newPollSock returns a sockReader for c, or nil when c is not a Linux
// *udp.Socket without GRO.
func newPollSock(c udp.Conn, batch int) pollSock {
	s, ok := c.(*udp.Socket)
	if !ok {
		return nil
	}
	if _, gro := s.Offloads(); gro {
		return nil
	}
	rc, err := s.UDPConn().SyscallConn()
	if err != nil {
		return nil
	}
	r := &sockReader{
		rc:    rc,
		hdrs:  make([]unix.Mmsghdr, batch),
		iovs:  make([]unix.Iovec, batch),
		names: make([]unix.RawSockaddrInet6, batch),
	}
	r.ctlFn = r.control
	r.waitFn = r.waitCallback
	return r
}

func (r *sockReader) control(fd uintptr) { r.syscall(fd) }

func (r *sockReader) waitCallback(fd uintptr) bool {
	r.fd = fd
	return r.ready()
}

func (r *sockReader) tryRead(msgs []udp.Message) (int, error) {
	r.prepare(msgs)
	if err := r.rc.Control(r.ctlFn); err != nil {
		return 0, err
	}
	return r.finish(msgs)
}

func (r *sockReader) wait(ready func() bool) error {
	r.ready = ready
	err := r.rc.Read(r.waitFn)
	r.ready = nil
	return err
}

func (r *sockReader) readNow(msgs []udp.Message) (int, error) {
	r.prepare(msgs)
	r.syscall(r.fd)
	return r.finish(msgs)
}

// prepare points the recvmmsg vector at msgs' buffers. The vector stays
// set up between reads: only the entries the last read filled (whose
// buffers the caller may have replaced, and whose lengths and flags the
// kernel changed) are redone, so an empty read costs only the syscall.
func (r *sockReader) prepare(msgs []udp.Message) {
	v := min(len(msgs), len(r.hdrs))
	if v == 0 {
		r.vlen = 0
		return
	}
	if &msgs[0] != r.base || v != r.vlen {
		r.base, r.vlen, r.dirty = &msgs[0], v, v
	}
	for i := range r.dirty {
		b := msgs[i].Buf
		iov := &r.iovs[i]
		iov.Base = unsafe.SliceData(b)
		iov.SetLen(cap(b))
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = iov
		h.SetIovlen(1)
		h.Control = nil
		h.SetControllen(0)
		h.Flags = 0
	}
	r.dirty = 0
	r.n, r.errno = 0, 0
}

func (r *sockReader) syscall(fd uintptr) {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])),
			uintptr(r.vlen), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		r.n, r.errno = int(n), e
		return
	}
}

// finish fills in N and Addr of the received datagrams. A datagram
// longer than its buffer gets N = -1 (queueBatch drops and counts it),
// so that every datagram stays in the slot the kernel filled.
func (r *sockReader) finish(msgs []udp.Message) (int, error) {
	switch r.errno {
	case 0:
	case unix.EAGAIN:
		return 0, nil
	default:
		return 0, os.NewSyscallError("recvmmsg", r.errno)
	}
	r.dirty = r.n
	for i := range r.n {
		h := &r.hdrs[i]
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			msgs[i].N = -1
		} else {
			msgs[i].N = int(h.Len)
		}
		msgs[i].Addr = r.zone.addr(&r.names[i])
	}
	return r.n, nil
}

// zoneCache remembers the zone name of the last IPv6 scope ID, so that
// a link-local peer does not cost an interface lookup per datagram.
type zoneCache struct {
	id   uint32
	name string
}

// addr is sockaddrAddr with the zone name cached.
func (z *zoneCache) addr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	if sa.Family != unix.AF_INET6 || sa.Scope_id == 0 {
		return sockaddrAddr(sa)
	}
	if z.id != sa.Scope_id || z.name == "" {
		z.id, z.name = sa.Scope_id, zoneName(sa.Scope_id)
	}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).WithZone(z.name), uint16(p[0])<<8|uint16(p[1]))
}

// sockaddrAddr decodes a sockaddr_in or sockaddr_in6 the kernel filled.
func sockaddrAddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	port := uint16(p[0])<<8 | uint16(p[1])
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		ip := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			ip = ip.WithZone(zoneName(sa.Scope_id))
		}
		return netip.AddrPortFrom(ip, port)
	}
	return netip.AddrPort{}
}

// zoneName names an interface index the way udp does (link-local
// sources only).
func zoneName(id uint32) string {
	if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
		return ifi.Name
	}
	return fmt.Sprint(id)
}
