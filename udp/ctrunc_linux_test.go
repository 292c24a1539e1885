package udp

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGROControlTruncated checks that a datagram whose control data the
// kernel truncated (MSG_CTRUNC: its UDP_GRO size may be lost) is dropped
// and counted rather than handed up whole, and that a datagram after it
// in the same batch still comes out.
func TestGROControlTruncated(t *testing.T) {
	s := listenGROInternal(t)
	r := &s.rd
	r.alloc()
	// Two received slots as recvmmsg would leave them: a 2-segment
	// super-datagram whose UDP_GRO cmsg was cut off, then a plain one.
	r.hdrs[0].Len = 40
	r.hdrs[0].Hdr.Flags = unix.MSG_CTRUNC
	r.hdrs[0].Hdr.SetControllen(0)
	r.hdrs[1].Len = 20
	r.hdrs[1].Hdr.Flags = 0
	r.hdrs[1].Hdr.SetControllen(0)
	copy(r.bufs[1], "twenty bytes exactly")
	r.next, r.cnt, r.off = 0, 2, 0
	msgs := []Message{{Buf: make([]byte, 64)}, {Buf: make([]byte, 64)}}
	n := r.drain(msgs)
	if n != 1 || string(msgs[0].Buf[:msgs[0].N]) != "twenty bytes exactly" {
		t.Fatalf("drain gave %d datagrams, first %q", n, msgs[0].Buf[:msgs[0].N])
	}
	if got := s.Stats.RxTruncated.Load(); got != 1 {
		t.Fatalf("RxTruncated = %d, want 1", got)
	}
}

// listenGROInternal opens a loopback socket that must receive with UDP
// GRO, closed when t ends (the internal tests' twin of listenGRO).
func listenGROInternal(t *testing.T) *Socket {
	t.Helper()
	s, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, gro := s.Offloads(); !gro {
		t.Fatal("no UDP GRO")
	}
	return s
}
