//go:build linux

package rxe

import (
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"softib/udp"
)

// TestSockaddrAddr checks the sockaddr decoding of the busy-poll reader
// against what the kernel writes for IPv4 and IPv6 sources.
func TestSockaddrAddr(t *testing.T) {
	var sa unix.RawSockaddrInet6
	sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
	sa4.Family = unix.AF_INET
	p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
	p[0], p[1] = 0x12, 0xB7
	sa4.Addr = [4]byte{127, 0, 0, 9}
	if got, want := sockaddrAddr(&sa), netip.MustParseAddrPort("127.0.0.9:4791"); got != want {
		t.Errorf("IPv4: %v, want %v", got, want)
	}
	sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: netip.MustParseAddr("2001:db8::7").As16()}
	p = (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = 0x12, 0xB8
	if got, want := sockaddrAddr(&sa), netip.MustParseAddrPort("[2001:db8::7]:4792"); got != want {
		t.Errorf("IPv6: %v, want %v", got, want)
	}
	sa.Scope_id = 1 // lo
	got := sockaddrAddr(&sa)
	if got.Addr().Zone() == "" {
		t.Errorf("scoped IPv6: %v has no zone", got)
	}
	var z zoneCache
	for range 2 {
		if c := z.addr(&sa); c != got {
			t.Errorf("cached zone: %v, want %v", c, got)
		}
	}
	if got := sockaddrAddr(&unix.RawSockaddrInet6{}); got.IsValid() {
		t.Errorf("AF_UNSPEC: %v", got)
	}
}

// TestSockReader reads loopback datagrams, including one longer than its
// buffer, through the busy-poll reader: the long one comes back with
// N = -1 in its own slot and the others intact.
func TestSockReader(t *testing.T) {
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	s, err := udp.Listen(netip.AddrPortFrom(lo, 0), &udp.Config{DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if newPollSock(s, 1) == nil {
		t.Fatal("no busy-poll reader for a GRO-less socket")
	}
	g, err := udp.Listen(netip.AddrPortFrom(lo, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, gro := g.Offloads(); gro && newPollSock(g, 1) != nil {
		t.Error("busy-poll reader for a GRO socket")
	}
	c, err := udp.Listen(netip.AddrPortFrom(lo, 0), &udp.Config{DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := newPollSock(s, 8)
	msgs := make([]udp.Message, 8)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 64)
	}
	if n, err := r.tryRead(msgs); n != 0 || err != nil {
		t.Fatalf("empty socket: %d, %v", n, err)
	}
	out := []udp.Message{
		{Buf: []byte("first"), N: 5, Addr: s.LocalAddr()},
		{Buf: make([]byte, 100), N: 100, Addr: s.LocalAddr()},
		{Buf: []byte("third"), N: 5, Addr: s.LocalAddr()},
	}
	if _, err := c.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	got := 0
	for range 1000 {
		n, err := r.tryRead(msgs[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
		if got == 3 {
			break
		}
	}
	if got != 3 || string(msgs[0].Buf[:msgs[0].N]) != "first" || msgs[1].N != -1 || string(msgs[2].Buf[:msgs[2].N]) != "third" {
		t.Fatalf("got %d: %+v", got, msgs[:3])
	}
	if msgs[0].Addr != c.LocalAddr() {
		t.Errorf("source %v, want %v", msgs[0].Addr, c.LocalAddr())
	}
}

// FuzzSockaddrAddr feeds arbitrary sockaddr bytes to the decoder: it
// must not panic, and a decoded address must come back from the
// sockaddr built from it (family, port and address).
func FuzzSockaddrAddr(f *testing.F) {
	var sa unix.RawSockaddrInet6
	b := (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&sa))
	sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
	sa4.Family, sa4.Port, sa4.Addr = unix.AF_INET, 0xB712, [4]byte{127, 0, 0, 1}
	f.Add(b[:])
	sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Port: 0xB712, Addr: netip.IPv6Loopback().As16()}
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		var sa unix.RawSockaddrInet6
		b := (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&sa))
		copy(b[:], in)
		sa.Scope_id = 0 // zones need interface lookups; TestSockaddrAddr covers them
		ap := sockaddrAddr(&sa)
		if !ap.IsValid() {
			if sa.Family == unix.AF_INET || sa.Family == unix.AF_INET6 {
				t.Fatalf("family %d decoded to %v", sa.Family, ap)
			}
			return
		}
		var back unix.RawSockaddrInet6
		p := (*[2]byte)(unsafe.Pointer(&back.Port))
		p[0], p[1] = byte(ap.Port()>>8), byte(ap.Port())
		if ap.Addr().Is4() {
			bk4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&back))
			bk4.Family, bk4.Addr = unix.AF_INET, ap.Addr().As4()
		} else {
			back.Family, back.Addr = unix.AF_INET6, ap.Addr().As16()
		}
		if got := sockaddrAddr(&back); got != ap {
			t.Fatalf("round trip %v → %v", ap, got)
		}
	})
}
