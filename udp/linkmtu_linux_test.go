package udp_test

import (
	"net/netip"
	"testing"

	"softib/internal/testaddr"
)

// TestLinkMTULoopback: a socket on a 127/8 address reports the loopback
// interface's MTU; one on 0.0.0.0 has no single link.
func TestLinkMTULoopback(t *testing.T) {
	s := listen(t, netip.AddrPortFrom(testaddr.Next(), 0).String(), nil)
	mtu, err := s.LinkMTU()
	if err != nil || mtu < 1500 {
		t.Fatalf("loopback link MTU %d, %v", mtu, err)
	}
	any := listen(t, "0.0.0.0:0", nil)
	if _, err := any.LinkMTU(); err == nil {
		t.Fatal("link MTU of a socket on 0.0.0.0")
	}
}
