//go:build linux

package udp

import (
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// writer holds the preallocated sendmmsg state; mu serializes WriteBatch.
type writer struct {
	mu    sync.Mutex
	s     *Socket
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	oob   []byte // hdrOOBSize per header (tclass_linux.go)
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
	w.oob = make([]byte, b*hdrOOBSize)
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
			d := 0
			for _, k := range w.segs[w.off : w.off+w.n] {
				d += k
				if k > 1 {
					s.Stats.TxGSOBatches.Inc()
				}
			}
			sent += d
			s.Stats.TxDatagrams.Add(uint64(d))
			w.off += w.n
			continue
		}
		// sendmmsg reports an error only for its first header.
		errno := w.errno
		k := w.segs[w.off]
		if k > 1 {
			s.Stats.TxGSORetry.Inc()
			d, err := w.retryNoGSO(msgs[sent:sent+k], errno)
			sent += d
			s.Stats.TxDatagrams.Add(uint64(d))
			if err != nil {
				return sent, err
			}
			w.off++
			continue
		}
		return sent, s.wrapErr("sendmmsg", errno)
	}
	return sent, buildErr
}

// retryNoGSO resends the datagrams of one failed GSO header individually
// and returns how many went out. Only when all do is GSO blamed and
// switched off.
func (w *writer) retryNoGSO(msgs []Message, cause syscall.Errno) (int, error) {
	s := w.s
	// The headers after w.off are still needed, so the vector cannot be
	// rebuilt here: send one sendmsg each (rare path, may allocate).
	for i := range msgs {
		m := &msgs[i]
		var sa sockaddr
		l := putSockaddr(&sa, m.Addr, s.is6)
		// sendmsg rather than sendto: the datagram keeps its TOS/TTL.
		var oob [64]byte
		iov := unix.Iovec{Base: unsafe.SliceData(m.Buf)}
		iov.SetLen(m.N)
		h := unix.Msghdr{Name: (*byte)(unsafe.Pointer(&sa)), Namelen: l, Iov: &iov}
		h.SetIovlen(1)
		if k := putClassCmsgs(oob[:], m.TOS, m.TTL, s.is6); k > 0 {
			h.Control = &oob[0]
			h.SetControllen(k)
		}
		var errno syscall.Errno
		err := s.rc.Write(func(fd uintptr) bool {
			for {
				_, _, e := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&h)), unix.MSG_DONTWAIT)
				if e == unix.EINTR {
					continue
				}
				errno = e
				return e != unix.EAGAIN
			}
		})
		if err != nil {
			return i, s.wrapErr("sendmsg", err)
		}
		if errno != 0 {
			// If even the first datagram fails alone, GSO was not the
			// problem (e.g. EMSGSIZE for a datagram above the path
			// MTU): report that error and leave GSO on. A run's
			// datagrams share size and destination, so once the first
			// went out alone, GSO was.
			if i > 0 {
				w.disableGSO(cause)
			}
			return i, s.wrapErr("sendmsg", errno)
		}
	}
	w.disableGSO(cause)
	return len(msgs), nil
}

// disableGSO switches GSO off for good and records why.
func (w *writer) disableGSO(cause syscall.Errno) {
	s := w.s
	if s.gso.Swap(false) {
		s.gsoErr.Store(&GSODisabledError{Local: s.laddr, Cause: os.NewSyscallError("sendmmsg", cause)})
	}
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
		runTOS   uint8
		runTTL   uint8
		runCls   int // length of the run's class control messages
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
			m.TOS == runTOS && m.TTL == runTTL &&
			w.segs[nh-1] < maxGSOSegments && runBytes+m.N <= maxDatagram {
			w.segs[nh-1]++
			run.SetIovlen(w.segs[nh-1])
			runBytes += m.N
			if m.N < runSize {
				runEnded = true
			}
			if w.segs[nh-1] == 2 {
				oob := w.oob[(nh-1)*hdrOOBSize : nh*hdrOOBSize]
				putGSOCmsg(oob, uint16(runSize))
				run.Control = &oob[0]
				run.SetControllen(gsoCmsgSize + runCls)
			}
			nm++
			continue
		}
		h := &w.hdrs[nh].Hdr
		l := putSockaddr(&w.names[nh], m.Addr, s.is6)
		if l == 0 {
			iov.Base = nil // not sent: do not keep the buffer alive
			return nh, nm, ErrAddrFamily
		}
		h.Name = (*byte)(unsafe.Pointer(&w.names[nh]))
		h.Namelen = l
		h.Iov = iov
		h.SetIovlen(1)
		oob := w.oob[nh*hdrOOBSize : (nh+1)*hdrOOBSize]
		runCls = putClassCmsgs(oob[gsoCmsgSize:], m.TOS, m.TTL, s.is6)
		if runCls > 0 {
			h.Control = &oob[gsoCmsgSize]
		} else {
			h.Control = nil
		}
		h.SetControllen(runCls)
		h.Flags = 0
		w.segs[nh] = 1
		nh++
		run, runSize, runBytes, runEnded, runAddr = h, m.N, m.N, false, m.Addr
		runTOS, runTTL = m.TOS, m.TTL
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
