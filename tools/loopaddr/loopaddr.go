// Package loopaddr hands out loopback addresses for the tools' tests:
// every test binary binds its devices to 127.x.y.z addresses of its own
// (x from the pid), so that packages tested in parallel do not collide on
// UDP port 4791.
package loopaddr

import (
	"net/netip"
	"os"
	"sync/atomic"
)

var seq atomic.Uint32

// Next returns a fresh loopback address unique to this process.
func Next() netip.Addr {
	n := seq.Add(1)
	return netip.AddrFrom4([4]byte{127, byte(200 + os.Getpid()%50), byte(n >> 8), byte(n)})
}
