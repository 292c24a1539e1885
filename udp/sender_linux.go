//go:build linux

package udp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// senderReadBuffer is the SO_RCVBUF a send-only socket asks for: the
// kernel rounds it up to its minimum (a few KiB), so datagrams that
// somebody sends to the port cost almost nothing before they are dropped.
const senderReadBuffer = 1

// OpenSender opens a send-only Socket bound to laddr with SO_REUSEADDR,
// for sending datagrams from a chosen source port (such as the per-QP
// source port of RoCEv2) while another socket receives. Sockets of one
// process or of cooperating processes that all set SO_REUSEADDR may bind
// the same laddr; a socket bound without it (a foreign receiver) makes
// OpenSender fail with EADDRINUSE.
//
// The socket sends exactly as a Listen socket with the same Config does
// (IPv4 DF with IP ID 0, GSO, TOS/TTL, IPV6_V6ONLY), so the IPv4 header
// is predictable and RoCEv2 ICRCs stay valid. It is never meant to be
// read: its receive buffer is the kernel minimum, GRO is off and its
// reader holds a single slot, so it costs about BatchSize × 150 bytes of
// Go heap (the sendmmsg vector) plus the file descriptor. ReadBatch
// works but sees only datagrams addressed to the port, which then
// compete with every other socket bound to it.
func OpenSender(laddr netip.AddrPort, cfg *Config) (*Socket, error) {
	c := cfg.withDefaults()
	c.DisableGRO = true
	c.BusyPoll = false
	c.ReadBuffer = senderReadBuffer
	ip := laddr.Addr()
	if !ip.IsValid() || ip.IsUnspecified() {
		return nil, fmt.Errorf("udp: open sender %v: %w", laddr, unix.EADDRNOTAVAIL)
	}
	is6 := ip.Is6() && !ip.Is4In6()
	network := "udp4"
	if is6 {
		network = "udp6"
	} else {
		laddr = netip.AddrPortFrom(ip.Unmap(), laddr.Port())
	}
	var optErr error
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		err := rc.Control(func(fd uintptr) {
			if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); e != nil {
				optErr = os.NewSyscallError("setsockopt SO_REUSEADDR", e)
				return
			}
			optErr = setOptions(int(fd), is6, &c)
		})
		if err != nil {
			return err
		}
		return optErr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, laddr.String())
	if err != nil {
		return nil, fmt.Errorf("udp: open sender %v: %w", laddr, err)
	}
	uc := pc.(*net.UDPConn)
	rc, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("udp: open sender %v: %w", laddr, err)
	}
	s := &Socket{conn: uc, rc: rc, is6: is6, cfg: c}
	s.laddr = uc.LocalAddr().(*net.UDPAddr).AddrPort()
	if !is6 {
		s.laddr = netip.AddrPortFrom(s.laddr.Addr().Unmap(), s.laddr.Port())
	}
	gso := false
	rc.Control(func(fd uintptr) {
		gso, _ = probeOffloads(int(fd), &c)
	})
	s.gso.Store(gso)
	// A one-slot reader: the socket is not read, and the receive vector
	// would otherwise cost as much as the send vector.
	s.cfg.BatchSize = 1
	s.rd.init(s)
	s.cfg.BatchSize = c.BatchSize
	s.wr.init(s)
	return s, nil
}

// Sender opens a send-only socket (OpenSender) bound to laddr,
// configured as s is (batch size, send buffer, GSO, TOS, TTL). An
// invalid or unspecified laddr address means s's own address.
func (s *Socket) Sender(laddr netip.AddrPort) (*Socket, error) {
	c := s.cfg
	return OpenSender(senderAddr(s.laddr, laddr), &c)
}
