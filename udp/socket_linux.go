//go:build linux

package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket is a batched UDP socket (Linux: recvmmsg/sendmmsg with GSO/GRO).
// It integrates with Go's netpoller through syscall.RawConn, so blocked
// readers and writers park like any net.Conn user and Close wakes them.
type Socket struct {
	conn  *net.UDPConn
	rc    syscall.RawConn
	laddr netip.AddrPort
	is6   bool
	cfg   Config

	gso    atomic.Bool                      // GSO currently in use
	gsoErr atomic.Pointer[GSODisabledError] // why GSO was switched off
	gro    bool                             // UDP_GRO enabled on the socket

	closed atomic.Bool

	rd reader
	wr writer

	// Stats counts socket events.
	Stats Stats
}

// Listen opens a UDP socket bound to addr. An IPv4 (or IPv4-mapped)
// address gives an IPv4 socket with DF set on every datagram; an IPv6
// address gives an IPV6_V6ONLY socket. An invalid (zero) addr means
// 0.0.0.0:0. cfg may be nil.
func Listen(addr netip.AddrPort, cfg *Config) (*Socket, error) {
	c := cfg.withDefaults()
	if !addr.IsValid() {
		addr = netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port())
	}
	ip := addr.Addr()
	is6 := ip.Is6() && !ip.Is4In6()
	network := "udp4"
	if is6 {
		network = "udp6"
	} else {
		addr = netip.AddrPortFrom(ip.Unmap(), addr.Port())
	}
	var optErr error
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		err := rc.Control(func(fd uintptr) {
			optErr = setOptions(int(fd), is6, &c)
		})
		if err != nil {
			return err
		}
		return optErr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("udp: listen %v: %w", addr, err)
	}
	uc := pc.(*net.UDPConn)
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("udp: listen %v: %w", addr, err)
	}
	s := &Socket{conn: uc, rc: rc, is6: is6, cfg: c}
	s.laddr = uc.LocalAddr().(*net.UDPAddr).AddrPort()
	if !is6 {
		s.laddr = netip.AddrPortFrom(s.laddr.Addr().Unmap(), s.laddr.Port())
	}
	gso, gro := false, false
	rc.Control(func(fd uintptr) {
		gso, gro = probeOffloads(int(fd), &c)
	})
	s.gso.Store(gso)
	s.gro = gro
	s.rd.init(s)
	s.wr.init(s)
	return s, nil
}

// setOptions sets the socket options that must precede bind.
func setOptions(fd int, is6 bool, c *Config) error {
	setBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, c.ReadBuffer)
	setBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, c.WriteBuffer)
	if is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
		// No fragmentation on IPv6 either: oversize sends fail loudly.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return os.NewSyscallError("setsockopt IPV6_MTU_DISCOVER", err)
		}
		if c.TOS != 0 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, c.TOS); err != nil {
				return os.NewSyscallError("setsockopt IPV6_TCLASS", err)
			}
		}
		if c.TTL != 0 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, c.TTL); err != nil {
				return os.NewSyscallError("setsockopt IPV6_UNICAST_HOPS", err)
			}
		}
		return nil
	}
	// DF on an unconnected socket makes the kernel send IP ID 0, which
	// the RoCEv2 ICRC depends on (roce-wire.md §1.2).
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return os.NewSyscallError("setsockopt IP_MTU_DISCOVER", err)
	}
	if c.TOS != 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, c.TOS); err != nil {
			return os.NewSyscallError("setsockopt IP_TOS", err)
		}
	}
	if c.TTL != 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, c.TTL); err != nil {
			return os.NewSyscallError("setsockopt IP_TTL", err)
		}
	}
	return nil
}

// setBuf asks for a socket buffer of size bytes, first with the FORCE
// option (root only, ignores the sysctl maximum), then the normal one.
// Failure is not fatal: the kernel default still works, only slower.
func setBuf(fd, force, normal, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, normal, size)
}

// probeOffloads reports whether UDP GSO is available and enables UDP GRO,
// honouring the Config switches.
func probeOffloads(fd int, c *Config) (gso, gro bool) {
	if !c.DisableGSO {
		// Kernels with UDP_SEGMENT (4.18+) answer the getsockopt.
		_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		gso = err == nil
	}
	if !c.DisableGRO {
		gro = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
	}
	return gso, gro
}

// LocalAddr returns the bound address.
func (s *Socket) LocalAddr() netip.AddrPort { return s.laddr }

// BatchSize returns Config.BatchSize after defaults.
func (s *Socket) BatchSize() int { return s.cfg.BatchSize }

// Close closes the socket; blocked ReadBatch and WriteBatch calls return
// errors wrapping net.ErrClosed.
func (s *Socket) Close() error {
	if s.closed.Swap(true) {
		return errClosed
	}
	return s.conn.Close()
}

// Offloads reports whether UDP GSO (send) and GRO (receive) are in use.
func (s *Socket) Offloads() (gso, gro bool) { return s.gso.Load(), s.gro }

// GSODisabled returns the *GSODisabledError that explains why GSO was
// switched off after a failed send, or nil.
func (s *Socket) GSODisabled() error {
	if e := s.gsoErr.Load(); e != nil {
		return e
	}
	return nil
}

// UDPConn returns the underlying *net.UDPConn, e.g. for SetReadBuffer.
// Reading or writing through it bypasses the batching.
func (s *Socket) UDPConn() *net.UDPConn { return s.conn }

// wrapErr turns a RawConn or syscall error into the error returned to
// callers; closed sockets give an error wrapping net.ErrClosed.
func (s *Socket) wrapErr(op string, err error) error {
	if s.closed.Load() || errors.Is(err, net.ErrClosed) {
		return errClosed
	}
	if errno, ok := err.(syscall.Errno); ok {
		return os.NewSyscallError(op, errno)
	}
	return fmt.Errorf("udp: %s: %w", op, err)
}

// ---- addresses ----

// sockaddr is room for a sockaddr_in or sockaddr_in6.
type sockaddr = unix.RawSockaddrInet6

// putSockaddr encodes ap into sa and returns its length, or 0 if the
// address family does not match the socket.
func putSockaddr(sa *sockaddr, ap netip.AddrPort, is6 bool) uint32 {
	ip := ap.Addr()
	port := ap.Port()
	if !is6 {
		if !ip.Is4() && !ip.Is4In6() {
			return 0
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		sa4.Addr = ip.Unmap().As4()
		sa4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4
	}
	if !ip.Is6() || ip.Is4In6() {
		return 0
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	sa.Flowinfo = 0
	sa.Addr = ip.As16()
	sa.Scope_id = 0
	if z := ip.Zone(); z != "" {
		sa.Scope_id = zoneIndex(z)
	}
	return unix.SizeofSockaddrInet6
}

// getSockaddr decodes a sockaddr filled in by the kernel.
func getSockaddr(sa *sockaddr) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		ip := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			ip = ip.WithZone(zoneName(sa.Scope_id))
		}
		return netip.AddrPortFrom(ip, uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// zoneIndex maps an IPv6 zone (interface name or number) to an index.
func zoneIndex(z string) uint32 {
	if ifi, err := net.InterfaceByName(z); err == nil {
		return uint32(ifi.Index)
	}
	var n uint32
	for _, c := range []byte(z) {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint32(c-'0')
	}
	return n
}

// zoneName maps an interface index to a zone name (link-local sources
// only, so the allocation is off the RoCE data path).
func zoneName(idx uint32) string {
	if ifi, err := net.InterfaceByIndex(int(idx)); err == nil {
		return ifi.Name
	}
	return fmt.Sprint(idx)
}

// ---- control messages ----

var (
	cmsgHdrLen  = unix.CmsgLen(0)
	gsoCmsgSize = unix.CmsgSpace(2) // UDP_SEGMENT carries a uint16
	groCmsgSize = unix.CmsgSpace(4) // UDP_GRO carries an int
)

// putGSOCmsg writes a UDP_SEGMENT control message into b.
func putGSOCmsg(b []byte, segSize uint16) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[cmsgHdrLen])) = segSize
}

// groSize returns the UDP_GRO segment size in control data b, or 0.
// It walks the cmsgs in place (unix.ParseSocketControlMessage allocates).
func groSize(b []byte) int {
	for len(b) >= cmsgHdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < cmsgHdrLen || l > len(b) {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && l >= cmsgHdrLen+4 {
			return int(*(*int32)(unsafe.Pointer(&b[cmsgHdrLen])))
		}
		l = cmsgAlign(l)
		if l > len(b) {
			return 0
		}
		b = b[l:]
	}
	return 0
}

func cmsgAlign(n int) int {
	const a = int(unsafe.Sizeof(uintptr(0)))
	return (n + a - 1) &^ (a - 1)
}

// ---- receive ----

// reader holds the preallocated recvmmsg state; mu serializes ReadBatch.
type reader struct {
	mu    sync.Mutex
	s     *Socket
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	oob   []byte // groCmsgSize per message, when GRO is on
	bufs  [][]byte

	// GRO mode: datagrams received into bufs and not yet handed out are
	// bufs[next:cnt]; off is the offset in bufs[next].
	next, cnt, off int

	// Results of the last syscall, set by the RawConn callbacks.
	n     int
	errno syscall.Errno
	vlen  int

	recvFn, pollFn func(fd uintptr) bool
}

func (r *reader) init(s *Socket) {
	b := s.cfg.BatchSize
	r.s = s
	r.hdrs = make([]unix.Mmsghdr, b)
	r.iovs = make([]unix.Iovec, b)
	r.names = make([]sockaddr, b)
	if s.gro {
		r.oob = make([]byte, b*groCmsgSize)
		r.bufs = make([][]byte, b)
		for i := range r.bufs {
			r.bufs[i] = make([]byte, groBufSize)
		}
	}
	// Method values made once: passing them to RawConn.Read does not
	// allocate per call.
	r.recvFn = r.recv
	r.pollFn = r.poll
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

func (r *reader) syscall(fd uintptr) {
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
	r.vlen = len(msgs)
}

// prepareGRO points the recvmmsg vector at the first n socket buffers.
func (r *reader) prepareGRO(n int) {
	for i := range n {
		iov := &r.iovs[i]
		iov.Base = &r.bufs[i][0]
		iov.SetLen(groBufSize)
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = iov
		h.SetIovlen(1)
		h.Control = &r.oob[i*groCmsgSize]
		h.SetControllen(groCmsgSize)
		h.Flags = 0
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
		msgs[n].Addr = getSockaddr(&r.names[i])
		n++
	}
	r.s.Stats.RxDatagrams.Add(uint64(n))
	return n
}

// drain copies pending GRO-mode datagrams into msgs, splitting
// super-datagrams at their segment size, and returns how many it filled.
func (r *reader) drain(msgs []Message) int {
	n := 0
	for r.next < r.cnt && n < len(msgs) {
		i := r.next
		h := &r.hdrs[i]
		total := int(h.Len)
		seg := total
		if h.Hdr.Flags&unix.MSG_TRUNC == 0 {
			if g := groSize(r.oob[i*groCmsgSize : (i+1)*groCmsgSize]); g > 0 && g < total {
				seg = g
				if r.off == 0 {
					r.s.Stats.RxGROSplit.Inc()
				}
			}
		}
		addr := getSockaddr(&r.names[i])
		for r.off < total && n < len(msgs) {
			l := min(seg, total-r.off)
			m := &msgs[n]
			if l > cap(m.Buf) || h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				r.s.Stats.RxTruncated.Inc()
			} else {
				m.N = copy(m.Buf[:cap(m.Buf)], r.bufs[i][r.off:r.off+l])
				m.Addr = addr
				n++
			}
			r.off += l
		}
		if r.off >= total {
			r.next++
			r.off = 0
		}
	}
	r.s.Stats.RxDatagrams.Add(uint64(n))
	return n
}

// ---- send ----

// writer holds the preallocated sendmmsg state; mu serializes WriteBatch.
type writer struct {
	mu    sync.Mutex
	s     *Socket
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	oob   []byte // gsoCmsgSize per header
	segs  []int  // datagrams carried by each header

	n     int
	errno syscall.Errno
	off   int // first header of the current sendmmsg
	vlen  int // headers in the current sendmmsg

	sendFn func(fd uintptr) bool

	// failGSO, if set by tests, fails GSO sends with this errno, as a
	// kernel or device without GSO support would.
	failGSO syscall.Errno
}

func (w *writer) init(s *Socket) {
	b := s.cfg.BatchSize
	w.s = s
	w.hdrs = make([]unix.Mmsghdr, b)
	w.iovs = make([]unix.Iovec, b)
	w.names = make([]sockaddr, b)
	w.oob = make([]byte, b*gsoCmsgSize)
	w.segs = make([]int, b)
	w.sendFn = w.send
}

func (w *writer) send(fd uintptr) bool {
	if w.failGSO != 0 && w.segs[w.off] > 1 {
		w.n, w.errno = 0, w.failGSO
		return true
	}
	for {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.off])),
			uintptr(w.vlen), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		w.n, w.errno = int(n), e
		return e != unix.EAGAIN
	}
}

// WriteBatch implements Conn. Runs of consecutive messages with the same
// destination and size (a shorter last one allowed) go out as one GSO
// send of up to 64 datagrams while GSO is on. If a GSO send fails, its
// datagrams are resent one by one; if that works, GSO is switched off for
// good and GSODisabled reports why.
func (s *Socket) WriteBatch(msgs []Message) (int, error) {
	w := &s.wr
	w.mu.Lock()
	defer w.mu.Unlock()
	sent := 0
	for sent < len(msgs) {
		if s.closed.Load() {
			return sent, errClosed
		}
		n, err := w.writeChunk(msgs[sent:], s.gso.Load())
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// writeChunk sends up to BatchSize messages from the front of msgs and
// returns how many went out.
func (w *writer) writeChunk(msgs []Message, gso bool) (int, error) {
	s := w.s
	nh, _, err := w.build(msgs, gso)
	defer w.clear(nh)
	if err != nil && nh == 0 {
		return 0, err
	}
	buildErr := err
	sent := 0
	w.off = 0
	for w.off < nh {
		w.vlen = nh - w.off
		if err := s.rc.Write(w.sendFn); err != nil {
			return sent, s.wrapErr("sendmmsg", err)
		}
		if w.errno == 0 {
			s.Stats.TxSyscalls.Inc()
			for _, k := range w.segs[w.off : w.off+w.n] {
				sent += k
				if k > 1 {
					s.Stats.TxGSOBatches.Inc()
				}
			}
			s.Stats.TxDatagrams.Add(uint64(sent))
			w.off += w.n
			continue
		}
		// sendmmsg reports an error only for its first header.
		errno := w.errno
		k := w.segs[w.off]
		if k > 1 {
			s.Stats.TxGSORetry.Inc()
			if err := w.retryNoGSO(msgs[sent:sent+k], errno); err != nil {
				return sent, err
			}
			sent += k
			s.Stats.TxDatagrams.Add(uint64(k))
			w.off++
			continue
		}
		return sent, s.wrapErr("sendmmsg", errno)
	}
	return sent, buildErr
}

// retryNoGSO resends the datagrams of one failed GSO header individually.
// Only when that succeeds is GSO blamed and switched off.
func (w *writer) retryNoGSO(msgs []Message, cause syscall.Errno) error {
	s := w.s
	// The headers after w.off are still needed, so the vector cannot be
	// rebuilt here: send through plain sendto (rare path, may allocate).
	for i := range msgs {
		m := &msgs[i]
		var sa sockaddr
		l := putSockaddr(&sa, m.Addr, s.is6)
		var errno syscall.Errno
		err := s.rc.Write(func(fd uintptr) bool {
			for {
				_, _, e := unix.Syscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(m.Buf))),
					uintptr(m.N), unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&sa)), uintptr(l))
				if e == unix.EINTR {
					continue
				}
				errno = e
				return e != unix.EAGAIN
			}
		})
		if err != nil {
			return s.wrapErr("sendto", err)
		}
		if errno != 0 {
			// If even the first datagram fails alone, GSO was not the
			// problem (e.g. EMSGSIZE for a datagram above the path
			// MTU): report that error and leave GSO on.
			return s.wrapErr("sendto", errno)
		}
	}
	if s.gso.Swap(false) {
		s.gsoErr.Store(&GSODisabledError{Local: s.laddr, Cause: os.NewSyscallError("sendmmsg", cause)})
	}
	return nil
}

// build fills the sendmmsg vector from the front of msgs and returns the
// number of headers and of messages they carry. A message that cannot be
// sent (bad length or address family) ends the vector; its error is
// returned together with the messages before it.
func (w *writer) build(msgs []Message, gso bool) (nh, nm int, err error) {
	s := w.s
	var (
		run      *unix.Msghdr
		runSize  int // segment size of the current run
		runBytes int
		runEnded bool // a shorter tail ended the run
		runAddr  netip.AddrPort
		runGSO   bool // the run's destination may receive GSO
	)
	limit := min(len(msgs), len(w.iovs))
	for nm < limit {
		m := &msgs[nm]
		if m.N < 0 || m.N > cap(m.Buf) {
			return nh, nm, ErrMessageSize
		}
		iov := &w.iovs[nm]
		iov.Base = unsafe.SliceData(m.Buf)
		iov.SetLen(m.N)
		if gso && run != nil && !runEnded && m.Addr == runAddr && m.N > 0 && m.N <= runSize && runGSO &&
			w.segs[nh-1] < maxGSOSegments && runBytes+m.N <= maxDatagram {
			w.segs[nh-1]++
			run.SetIovlen(w.segs[nh-1])
			runBytes += m.N
			if m.N < runSize {
				runEnded = true
			}
			if w.segs[nh-1] == 2 {
				oob := w.oob[(nh-1)*gsoCmsgSize : nh*gsoCmsgSize]
				putGSOCmsg(oob, uint16(runSize))
				run.Control = &oob[0]
				run.SetControllen(gsoCmsgSize)
			}
			nm++
			continue
		}
		h := &w.hdrs[nh].Hdr
		l := putSockaddr(&w.names[nh], m.Addr, s.is6)
		if l == 0 {
			return nh, nm, ErrAddrFamily
		}
		h.Name = (*byte)(unsafe.Pointer(&w.names[nh]))
		h.Namelen = l
		h.Iov = iov
		h.SetIovlen(1)
		h.Control = nil
		h.SetControllen(0)
		h.Flags = 0
		w.segs[nh] = 1
		nh++
		run, runSize, runBytes, runEnded, runAddr = h, m.N, m.N, false, m.Addr
		runGSO = gso && (s.is6 || s.cfg.IPv4GSO || m.Addr.Addr().Unmap().IsLoopback())
		nm++
	}
	return nh, nm, nil
}

// clear drops references to caller buffers after a send.
func (w *writer) clear(nh int) {
	n := 0
	for _, k := range w.segs[:nh] {
		n += k
	}
	for i := range n {
		w.iovs[i].Base = nil
	}
}
