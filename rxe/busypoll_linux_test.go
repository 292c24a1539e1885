package rxe

import (
	"net/netip"
	"testing"

	"softib/internal/testaddr"
	"softib/udp"
	"softib/udp/udptest"
)

// TestNewPollSock: every udp.Socket gets the non-blocking reader, with
// or without GRO; other Conns keep the plain receive loop.
func TestNewPollSock(t *testing.T) {
	lo := testaddr.Next()
	for _, noGRO := range []bool{true, false} {
		s, err := udp.Listen(netip.AddrPortFrom(lo, 0), &udp.Config{DisableGRO: noGRO})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, gro := s.Offloads(); gro == noGRO {
			t.Fatalf("GRO %v with DisableGRO %v", gro, noGRO)
		}
		if newPollSock(s, 4) == nil {
			t.Errorf("no reader for a udp.Socket (DisableGRO %v)", noGRO)
		}
	}
	if newPollSock(udptest.NewNetwork(1).Endpoint(netip.AddrPortFrom(lo, 4791)), 4) != nil {
		t.Error("reader for a udptest endpoint")
	}
}
