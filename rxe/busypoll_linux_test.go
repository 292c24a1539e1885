package rxe

import (
	"net/netip"
	"testing"

	"softib/udp"
)

// TestNewPollSock: a GRO-less udp.Socket gets the non-blocking reader,
// a GRO socket and other Conns keep the plain receive loop.
func TestNewPollSock(t *testing.T) {
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	s, err := udp.Listen(netip.AddrPortFrom(lo, 0), &udp.Config{DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if newPollSock(s, 4) == nil {
		t.Error("no reader for a GRO-less socket")
	}
	g, err := udp.Listen(netip.AddrPortFrom(lo, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, gro := g.Offloads(); gro && newPollSock(g, 4) != nil {
		t.Error("reader for a GRO socket")
	}
}
