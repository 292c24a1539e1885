//go:build !linux

package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Socket is a UDP socket. This portable version moves one datagram per
// syscall (ReadBatch returns one datagram per call); the batched
// sendmmsg/recvmmsg version with GSO/GRO is Linux-only.
type Socket struct {
	conn   *net.UDPConn
	laddr  netip.AddrPort
	is6    bool
	cfg    Config
	closed atomic.Bool
	rmu    sync.Mutex
	wmu    sync.Mutex

	// Stats counts socket events.
	Stats Stats
}

// Listen opens a UDP socket bound to addr; see the Linux version.
func Listen(addr netip.AddrPort, cfg *Config) (*Socket, error) {
	c := cfg.withDefaults()
	if c.RecvTOS {
		return nil, errors.New("udp: Config.RecvTOS is supported on Linux only")
	}
	if !addr.IsValid() {
		addr = netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port())
	}
	is6 := addr.Addr().Is6() && !addr.Addr().Is4In6()
	network := "udp4"
	if is6 {
		network = "udp6"
	} else {
		addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	}
	pc, err := (&net.ListenConfig{}).ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("udp: listen %v: %w", addr, err)
	}
	uc := pc.(*net.UDPConn)
	uc.SetReadBuffer(c.ReadBuffer)
	uc.SetWriteBuffer(c.WriteBuffer)
	s := &Socket{conn: uc, is6: is6, cfg: c}
	s.laddr = uc.LocalAddr().(*net.UDPAddr).AddrPort()
	if !is6 {
		s.laddr = netip.AddrPortFrom(s.laddr.Addr().Unmap(), s.laddr.Port())
	}
	return s, nil
}

// LocalAddr returns the bound address.
func (s *Socket) LocalAddr() netip.AddrPort { return s.laddr }

// BatchSize returns Config.BatchSize after defaults.
func (s *Socket) BatchSize() int { return s.cfg.BatchSize }

// Close closes the socket.
func (s *Socket) Close() error {
	if s.closed.Swap(true) {
		return errClosed
	}
	return s.conn.Close()
}

// Offloads reports that no offloads are used.
func (s *Socket) Offloads() (gso, gro bool) { return false, false }

// GSODisabled returns nil: GSO is never used here.
func (s *Socket) GSODisabled() error { return nil }

// UDPConn returns the underlying *net.UDPConn.
func (s *Socket) UDPConn() *net.UDPConn { return s.conn }

// ReadBatch implements Conn with one datagram per call.
func (s *Socket) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for {
		m := &msgs[0]
		n, flags, _, from, err := s.conn.ReadMsgUDPAddrPort(m.Buf[:cap(m.Buf)], nil)
		if err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return 0, errClosed
			}
			return 0, fmt.Errorf("udp: read: %w", err)
		}
		if flags&msgTrunc != 0 || n > cap(m.Buf) {
			s.Stats.RxTruncated.Inc()
			continue
		}
		m.N = n
		m.Addr = from
		if !s.is6 {
			m.Addr = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		}
		s.Stats.RxSyscalls.Inc()
		s.Stats.RxDatagrams.Inc()
		return 1, nil
	}
}

// WriteBatch implements Conn with one syscall per datagram.
func (s *Socket) WriteBatch(msgs []Message) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for i := range msgs {
		m := &msgs[i]
		if m.N < 0 || m.N > cap(m.Buf) {
			return i, ErrMessageSize
		}
		dst := m.Addr
		if a := dst.Addr(); s.is6 != (a.Is6() && !a.Is4In6()) {
			return i, ErrAddrFamily
		}
		if !s.is6 {
			dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
		}
		if _, err := s.conn.WriteToUDPAddrPort(m.Buf[:m.N], dst); err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return i, errClosed
			}
			return i, fmt.Errorf("udp: write: %w", err)
		}
		s.Stats.TxSyscalls.Inc()
		s.Stats.TxDatagrams.Inc()
	}
	return len(msgs), nil
}
