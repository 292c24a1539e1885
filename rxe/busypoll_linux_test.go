package rxe

import (
	"net/netip"
	"testing"

	"softib/internal/testaddr"
	"softib/udp"
	"softib/udp/udptest"
)

// TestNewPollSock: every udp.Socket gets the non-blocking reader, with
// or without GRO, and so does a udptest endpoint (udp.PollConn).
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
	// The simulated network offers the same seam, so the deterministic
	// suite runs the receive token's path.
	if newPollSock(udptest.NewNetwork(1).Endpoint(netip.AddrPortFrom(lo, 4791)), 4) == nil {
		t.Error("no reader for a udptest endpoint")
	}
}
