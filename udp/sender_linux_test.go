package udp_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/udp"
)

// readOne reads one datagram from rx.
func readOne(t *testing.T, rx *udp.Socket) udp.Message {
	t.Helper()
	in := []udp.Message{{Buf: make([]byte, 2048)}}
	if n, err := rx.ReadBatch(in); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}
	return in[0]
}

// TestSender checks that send-only sockets send from their own port,
// share it with each other (SO_REUSEADDR) but not with a socket bound
// without SO_REUSEADDR, and inherit the main socket's configuration.
func TestSender(t *testing.T) {
	for _, fam := range []string{"127.0.0.1", "::1"} {
		t.Run(fam, func(t *testing.T) {
			ip := netip.MustParseAddr(fam)
			main, err := udp.Listen(netip.AddrPortFrom(ip, 0), &udp.Config{BatchSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer main.Close()
			rx := listen(t, netip.AddrPortFrom(ip, 0).String(), nil)
			s1, err := main.Sender(netip.AddrPort{}) // own address, a free port
			if err != nil {
				t.Fatal(err)
			}
			defer s1.Close()
			port := s1.LocalAddr().Port()
			if s1.LocalAddr().Addr() != ip || port == 0 || port == main.LocalAddr().Port() {
				t.Fatalf("sender bound to %v (main %v)", s1.LocalAddr(), main.LocalAddr())
			}
			if s1.BatchSize() != 16 {
				t.Fatalf("sender BatchSize %d, want the main socket's 16", s1.BatchSize())
			}
			s2, err := main.Sender(netip.AddrPortFrom(netip.IPv4Unspecified(), port))
			if err != nil {
				t.Fatalf("second sender on port %d: %v", port, err)
			}
			defer s2.Close()
			for i, s := range []*udp.Socket{s1, s2} {
				msg := []udp.Message{{Buf: []byte{byte(i), 1, 2, 3}, N: 4, Addr: rx.LocalAddr()}}
				if n, err := s.WriteBatch(msg); n != 1 || err != nil {
					t.Fatalf("sender %d: WriteBatch = %d, %v", i, n, err)
				}
				m := readOne(t, rx)
				if m.Addr != s.LocalAddr() || m.N != 4 || m.Buf[0] != byte(i) {
					t.Fatalf("sender %d: got %d bytes from %v, want 4 from %v", i, m.N, m.Addr, s.LocalAddr())
				}
			}
			// A socket bound without SO_REUSEADDR keeps others off its
			// port, and cannot join senders on theirs.
			if _, err := udp.OpenSender(main.LocalAddr(), nil); !errors.Is(err, unix.EADDRINUSE) {
				t.Fatalf("sender on the main socket's port: %v, want EADDRINUSE", err)
			}
			if s, err := udp.Listen(s1.LocalAddr(), nil); !errors.Is(err, unix.EADDRINUSE) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Listen on a sender port: %v, want EADDRINUSE", err)
			}
		})
	}
	if _, err := udp.OpenSender(netip.AddrPortFrom(netip.IPv4Unspecified(), 50000), nil); err == nil {
		t.Fatal("sender on 0.0.0.0 opened")
	}
}

// TestSenderWireHeader checks on a veth link that a sender's IPv4
// datagrams carry DF and IP ID 0, as the RoCEv2 ICRC needs (roce-wire.md
// §1.2).
func TestSenderWireHeader(t *testing.T) {
	testenv.RequireRoot(t)
	p := netns.NewPair(t, netns.PairConfig{NoIPv6: true})
	var fd int
	if err := p.B.Do(func() (err error) { fd, err = capture(p.B.Dev); return err }); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var s *udp.Socket
	if err := p.A.Do(func() (err error) {
		s, err = udp.OpenSender(netip.AddrPortFrom(p.A.Addr, 0), &udp.Config{TTL: 33})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sport := s.LocalAddr().Port()
	const n = 5
	msgs := make([]udp.Message, n)
	for i := range msgs {
		// Distinct sizes: one IP packet each, no GSO.
		msgs[i] = udp.Message{Buf: make([]byte, 100+i), N: 100 + i, Addr: netip.AddrPortFrom(p.B.Addr, 4791)}
	}
	if _, err := s.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 70000)
	for seen := 0; seen < n; {
		k, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("capture after %d packets: %v", seen, err)
		}
		ip := buf[:k]
		if len(ip) < 28 || ip[0] != 0x45 || ip[9] != unix.IPPROTO_UDP || binary.BigEndian.Uint16(ip[20:]) != sport {
			continue // ARP-triggered or unrelated traffic
		}
		seen++
		id, flags := binary.BigEndian.Uint16(ip[4:]), binary.BigEndian.Uint16(ip[6:])
		if id != 0 || flags != 0x4000 || ip[8] != 33 {
			t.Fatalf("packet from port %d: id %d flags/frag %#x ttl %d; want id 0, DF, ttl 33", sport, id, flags, ip[8])
		}
	}
}

// TestSenderAllocs checks that a sender's WriteBatch does not allocate.
func TestSenderAllocs(t *testing.T) {
	rx := listen(t, "127.0.0.1:0", nil)
	s, err := udp.OpenSender(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if allocs := roundAllocs(t, s, rx, 8, 1000); allocs != 0 {
		t.Fatalf("%v allocations per send+receive round", allocs)
	}
}

// TestSenderNetns opens a socket in another network namespace and asks
// for a sender from a thread outside it: the sender is created in the
// socket's namespace, bound to its address there.
func TestSenderNetns(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{NoIPv6: true})
	var main, rx *udp.Socket
	if err := p.A.Do(func() (err error) { main, err = udp.Listen(netip.AddrPortFrom(p.A.Addr, 0), nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer main.Close()
	if err := p.B.Do(func() (err error) { rx, err = udp.Listen(netip.AddrPortFrom(p.B.Addr, 0), nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	s, err := main.Sender(netip.AddrPort{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.LocalAddr().Addr() != p.A.Addr {
		t.Fatalf("sender bound to %v", s.LocalAddr())
	}
	msg := []udp.Message{{Buf: []byte("hello"), N: 5, Addr: rx.LocalAddr()}}
	if n, err := s.WriteBatch(msg); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	rx.UDPConn().SetReadDeadline(time.Now().Add(10 * time.Second)) // hang guard
	if m := readOne(t, rx); m.Addr != s.LocalAddr() || string(m.Buf[:m.N]) != "hello" {
		t.Fatalf("got %q from %v", m.Buf[:m.N], m.Addr)
	}
}
