//go:build linux

package udp

import (
	"bytes"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSockaddrAddr checks the sockaddr decoding (and PollReader's zone
// cache) against what the kernel writes for IPv4 and IPv6 sources.
func TestSockaddrAddr(t *testing.T) {
	var sa unix.RawSockaddrInet6
	sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
	sa4.Family = unix.AF_INET
	p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
	p[0], p[1] = 0x12, 0xB7
	sa4.Addr = [4]byte{127, 0, 0, 9}
	if got, want := getSockaddr(&sa), netip.MustParseAddrPort("127.0.0.9:4791"); got != want {
		t.Errorf("IPv4: %v, want %v", got, want)
	}
	sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: netip.MustParseAddr("2001:db8::7").As16()}
	p = (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = 0x12, 0xB8
	if got, want := getSockaddr(&sa), netip.MustParseAddrPort("[2001:db8::7]:4792"); got != want {
		t.Errorf("IPv6: %v, want %v", got, want)
	}
	sa.Scope_id = 1 // lo
	got := getSockaddr(&sa)
	if got.Addr().Zone() == "" {
		t.Errorf("scoped IPv6: %v has no zone", got)
	}
	var z zoneCache
	for range 2 {
		if c := z.addr(&sa); c != got {
			t.Errorf("cached zone: %v, want %v", c, got)
		}
	}
	if got := getSockaddr(&unix.RawSockaddrInet6{}); got.IsValid() {
		t.Errorf("AF_UNSPEC: %v", got)
	}
}

// TestPollReader reads loopback datagrams, including one longer than
// its buffer, without blocking: the long one comes back with N = -1 in
// its own slot and the others intact.
func TestPollReader(t *testing.T) {
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	s, err := Listen(netip.AddrPortFrom(lo, 0), &Config{DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Listen(netip.AddrPortFrom(lo, 0), &Config{DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := s.PollReader(8)
	if r == nil {
		t.Fatal("no PollReader for a GRO-less socket")
	}
	msgs := make([]Message, 8)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 64)
	}
	if n, err := r.TryRead(msgs); n != 0 || err != nil {
		t.Fatalf("empty socket: %d, %v", n, err)
	}
	out := []Message{
		{Buf: []byte("first"), N: 5, Addr: s.LocalAddr()},
		{Buf: make([]byte, 100), N: 100, Addr: s.LocalAddr()},
		{Buf: []byte("third"), N: 5, Addr: s.LocalAddr()},
	}
	if _, err := c.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	got := 0
	for range 1000 {
		n, err := r.TryRead(msgs[got:])
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
	if s.Stats.RxDatagrams.Load() != 2 || s.Stats.RxTruncated.Load() != 1 {
		t.Errorf("counters: %d datagrams, %d truncated; want 2, 1", s.Stats.RxDatagrams.Load(), s.Stats.RxTruncated.Load())
	}
	// Wait parks until the socket is readable; its callback reads.
	if _, err := c.WriteBatch(out[:1]); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := r.Wait(func() bool {
		k, err := r.ReadNow(msgs)
		if err != nil {
			t.Error(err)
			return true
		}
		n = k
		return k > 0
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 || string(msgs[0].Buf[:msgs[0].N]) != "first" {
		t.Fatalf("Wait read %d: %+v", n, msgs[0])
	}
}

// FuzzSockaddrAddr feeds arbitrary sockaddr bytes to the decoder: it
// must not panic, and a decoded address must come back from the
// sockaddr putSockaddr builds from it (family, port and address).
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
		ap := getSockaddr(&sa)
		if !ap.IsValid() {
			if sa.Family == unix.AF_INET || sa.Family == unix.AF_INET6 {
				t.Fatalf("family %d decoded to %v", sa.Family, ap)
			}
			return
		}
		// The production encoder, for a socket of the decoded family.
		var back sockaddr
		if putSockaddr(&back, ap, sa.Family == unix.AF_INET6) == 0 {
			// Only a mapped IPv4 address in an AF_INET6 sockaddr has no
			// encoding; the sockets are IPV6_V6ONLY, so the kernel never
			// hands one out.
			if sa.Family != unix.AF_INET6 || !ap.Addr().Is4In6() {
				t.Fatalf("putSockaddr refused %v (family %d)", ap, sa.Family)
			}
			return
		}
		if got := getSockaddr(&back); got != ap {
			t.Fatalf("round trip %v → %v", ap, got)
		}
	})
}

// TestPollReaderGROControlTruncated: a GRO datagram whose control data
// the kernel truncated (MSG_CTRUNC) takes its slot with N = -1 and is
// counted, as ReadBatch drops it; the plain datagram after it comes out
// intact. Both are pending in the reader, so TryRead hands them out
// without a syscall.
func TestPollReaderGROControlTruncated(t *testing.T) {
	s := listenGROInternal(t)
	r := s.PollReader(4)
	v := &r.v
	v.hdrs[0].Len = 40
	v.hdrs[0].Hdr.Flags = unix.MSG_CTRUNC
	v.hdrs[0].Hdr.SetControllen(0)
	v.hdrs[1].Len = 20
	v.hdrs[1].Hdr.Flags = 0
	v.hdrs[1].Hdr.SetControllen(0)
	copy(v.bufs[1], "twenty bytes exactly")
	v.next, v.cnt, v.off = 0, 2, 0
	if !r.Pending() {
		t.Fatal("nothing pending")
	}
	msgs := []Message{{Buf: make([]byte, 64)}, {Buf: make([]byte, 64)}, {Buf: make([]byte, 64)}}
	n, err := r.TryRead(msgs)
	if err != nil || n != 2 || msgs[0].N != -1 || string(msgs[1].Buf[:msgs[1].N]) != "twenty bytes exactly" {
		t.Fatalf("TryRead = %d, %v: %+v", n, err, msgs[:2])
	}
	st := &s.Stats
	if st.RxTruncated.Load() != 1 || st.RxDatagrams.Load() != 1 || st.RxSyscalls.Load() != 0 {
		t.Fatalf("counters: %d truncated, %d datagrams, %d syscalls; want 1, 1, 0",
			st.RxTruncated.Load(), st.RxDatagrams.Load(), st.RxSyscalls.Load())
	}
	if r.Pending() {
		t.Fatal("still pending")
	}
	// No msgs: nothing is read (the datagram stays queued).
	c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteBatch([]Message{{Buf: []byte("x"), N: 1, Addr: s.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if n, err := r.TryRead(nil); n != 0 || err != nil {
		t.Fatalf("TryRead(nil) = %d, %v", n, err)
	}
	if st.RxSyscalls.Load() != 0 {
		t.Fatal("TryRead(nil) read the socket")
	}
}

// FuzzGROSplit feeds split arbitrary received datagrams (length, flags,
// control data) and message buffer sizes, in both modes. It must not
// panic; every call while the datagram is pending must fill a message
// (PollReader mode) or finish the datagram (ReadBatch mode); a message
// holds N = -1 (PollReader mode only) or a length within its buffer;
// and an intact datagram whose segments all fit comes out whole, in
// order.
func FuzzGROSplit(f *testing.F) {
	f.Add(uint16(5600), uint8(0), groCmsg(1000), uint16(1024), uint8(3), true)
	f.Add(uint16(5600), uint8(0), groCmsg(1000), uint16(512), uint8(2), false)
	f.Add(uint16(40), uint8(1), []byte{}, uint16(64), uint8(1), true)
	f.Add(uint16(0), uint8(0), groCmsg(0), uint16(64), uint8(1), true)
	f.Add(uint16(300), uint8(2), groCmsg(100), uint16(64), uint8(4), false)
	f.Fuzz(func(t *testing.T, total uint16, flags uint8, ctl []byte, bufCap uint16, nmsg uint8, keep bool) {
		var g groRecv
		g.init(1, true)
		var st Stats
		h := &g.hdrs[0]
		h.Len = uint32(total)
		switch flags % 4 {
		case 1:
			h.Hdr.Flags = unix.MSG_TRUNC
		case 2:
			h.Hdr.Flags = unix.MSG_CTRUNC
		case 3:
			h.Hdr.Flags = unix.MSG_TRUNC | unix.MSG_CTRUNC
		}
		h.Hdr.SetControllen(copy(g.oob, ctl))
		for i := range int(total) {
			g.bufs[0][i] = byte(i*7 + i>>8)
		}
		g.names[0].Family = unix.AF_INET
		g.next, g.cnt = 0, 1
		msgs := make([]Message, 1+int(nmsg)%8)
		for i := range msgs {
			msgs[i].Buf = make([]byte, int(bufCap)%2048)
		}
		var out []byte
		slots := 0
		for g.pending() {
			n := g.split(&st, msgs, keep)
			if n == 0 && (keep || g.pending()) {
				// (ReadBatch mode drops what does not fit without a
				// slot, but finishes the datagram.)
				t.Fatalf("no progress after %d bytes of %d", len(out), total)
			}
			for _, m := range msgs[:n] {
				slots++
				switch {
				case m.N == -1 && keep:
				case m.N >= 0 && m.N <= cap(m.Buf):
					out = append(out, m.Buf[:m.N]...)
				default:
					t.Fatalf("message of %d bytes in a %d-byte buffer (keep %v)", m.N, cap(m.Buf), keep)
				}
			}
		}
		intact := flags%4 == 0
		if intact && st.RxTruncated.Load() == 0 && !bytes.Equal(out, g.bufs[0][:total]) {
			t.Fatalf("intact datagram of %d bytes came out as %d bytes", total, len(out))
		}
		if keep && slots == 0 {
			t.Fatal("datagram without a slot")
		}
	})
}

// TestPollReaderReadNowOne checks that ReadNowOne takes one datagram per
// call from a plain socket, and one super-datagram (all its segments)
// from a GRO socket, leaving the rest for ReadNow.
func TestPollReaderReadNowOne(t *testing.T) {
	for _, gro := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gro"}[gro], func(t *testing.T) {
			s, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), &Config{DisableGRO: !gro})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := s.PollReader(8)
			msgs := make([]Message, 8)
			for i := range msgs {
				msgs[i].Buf = make([]byte, 64)
			}
			// Three 10-byte datagrams (one GSO run: one super-datagram
			// on a GRO socket), then a 20-byte one.
			var out []Message
			for _, p := range []string{"aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc", "dddddddddddddddddddd"} {
				out = append(out, Message{Buf: []byte(p), N: len(p), Addr: s.LocalAddr()})
			}
			if _, err := c.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			// waitRead waits with r and reads once with read, returning
			// the payloads.
			waitRead := func(read func([]Message) (int, error)) (got []string) {
				if err := r.Wait(func() bool {
					k, err := read(msgs)
					if err != nil {
						t.Error(err)
						return true
					}
					for _, m := range msgs[:k] {
						got = append(got, string(m.Buf[:m.N]))
					}
					return k > 0
				}); err != nil {
					t.Fatal(err)
				}
				return got
			}
			first := waitRead(r.ReadNowOne)
			var rest []string
			for tries := 0; len(first)+len(rest) < 4 && tries < 10; tries++ {
				rest = append(rest, waitRead(r.ReadNow)...)
			}
			want := 1
			if gro {
				want = 3
			}
			if len(first) != want || first[0] != "aaaaaaaaaa" {
				t.Fatalf("ReadNowOne gave %q, want the first %d datagrams", first, want)
			}
			if all := append(first, rest...); len(all) != 4 || all[3] != "dddddddddddddddddddd" {
				t.Fatalf("datagrams %q", all)
			}
		})
	}
}
