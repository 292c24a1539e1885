//go:build linux

package udp_test

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"softib/udp"
)

// classReceiver is a plain UDP socket that reports each datagram's
// TOS/traffic class and TTL/hop limit.
func classReceiver(t *testing.T, laddr string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(laddr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		if netip.MustParseAddrPort(laddr).Addr().Is6() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1)
			}
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		if serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return c
}

// readClass reads one datagram and returns its first byte, TOS and TTL.
func readClass(t *testing.T, c *net.UDPConn) (id byte, tos, ttl int) {
	t.Helper()
	buf := make([]byte, 9000)
	oob := make([]byte, 256)
	n, oobn, _, _, err := c.ReadMsgUDPAddrPort(buf, oob)
	if err != nil || n == 0 {
		t.Fatalf("read: %d %v", n, err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	tos, ttl = -1, -1
	for _, m := range msgs {
		var v int
		if len(m.Data) >= 4 {
			v = int(int32(uint32(m.Data[0]) | uint32(m.Data[1])<<8 | uint32(m.Data[2])<<16 | uint32(m.Data[3])<<24))
		} else if len(m.Data) == 1 {
			v = int(m.Data[0])
		}
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS,
			m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS:
			tos = v & 0xFF
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL,
			m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT:
			ttl = v
		}
	}
	return buf[0], tos, ttl
}

// TestMessageClass sends datagrams of equal size and destination whose
// TOS and TTL differ (so the GSO runs must split between them) and
// checks each arrives with its own, ECN bits included, on IPv4 and IPv6,
// with GSO on and off.
func TestMessageClass(t *testing.T) {
	type want struct{ tos, ttl uint8 }
	plan := []want{{0x60, 7}, {0x60, 7}, {0x60, 7}, {0x03, 9}, {0, 0}, {0, 0}, {0xB8, 0}, {0, 33}, {0x61, 7}}
	for _, fam := range []string{"127.0.0.1:0", "[::1]:0"} {
		for _, cfg := range []udp.Config{{}, {DisableGSO: true}} {
			name := fam
			if cfg.DisableGSO {
				name += "/noGSO"
			}
			t.Run(name, func(t *testing.T) {
				r := classReceiver(t, fam)
				s := listen(t, fam, &cfg)
				dst := r.LocalAddr().(*net.UDPAddr).AddrPort()
				msgs := make([]udp.Message, len(plan))
				for i, w := range plan {
					b := payload(i, 1200)
					b[0] = byte(i)
					msgs[i] = udp.Message{Buf: b, N: len(b), Addr: dst, TOS: w.tos, TTL: w.ttl}
				}
				if n, err := s.WriteBatch(msgs); n != len(msgs) || err != nil {
					t.Fatalf("WriteBatch: %d %v", n, err)
				}
				for range plan {
					id, tos, ttl := readClass(t, r)
					w := plan[id]
					wantTTL := int(w.ttl)
					if w.ttl == 0 {
						wantTTL = defaultTTL(t, fam[0] == '[')
					}
					if tos != int(w.tos) || ttl != wantTTL {
						t.Errorf("datagram %d: TOS %#x TTL %d, want %#x %d", id, tos, ttl, w.tos, wantTTL)
					}
				}
			})
		}
	}
}

// defaultTTL is the kernel's default IPv4 TTL or IPv6 hop limit.
func defaultTTL(t *testing.T, v6 bool) int {
	p := "/proc/sys/net/ipv4/ip_default_ttl"
	if v6 {
		p = "/proc/sys/net/ipv6/conf/lo/hop_limit"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMessageClassAllocs: a per-datagram class costs no allocation.
func TestMessageClassAllocs(t *testing.T) {
	r := classReceiver(t, "127.0.0.1:0")
	s := listen(t, "127.0.0.1:0", nil)
	dst := r.LocalAddr().(*net.UDPAddr).AddrPort()
	b := make([]byte, 64)
	msgs := []udp.Message{{Buf: b, N: 64, Addr: dst, TOS: 0x62, TTL: 5}, {Buf: b, N: 64, Addr: dst, TOS: 0x60, TTL: 5}}
	if a := testing.AllocsPerRun(50, func() {
		if _, err := s.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("WriteBatch with TOS/TTL: %v allocs, want 0", a)
	}
}
