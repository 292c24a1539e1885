package o2iblnd_test

import (
	"sync"
	"testing"
	"testing/synctest"

	"softib/internal/verbstest"
)

// Tiers. Most tests here run on the simulated network (udp/udptest)
// inside a synctest bubble: no sockets, and the LND's timers (transmit
// timeouts, keepalives, reconnect back-off, the reaper) run on the
// bubble's fake clock, so they take no wall-clock time and cannot be
// delayed by a loaded machine. The real-socket tier (loopback devices on
// testaddr addresses) and the netns/netemu tier keep a few tests each:
// the default device configuration over the kernel's UDP (GSO/GRO), lossy
// links, the tshark capture and the guest interop.

// simNets maps the t of a sim bubble to its network; newDevice and
// newDeviceAt open their devices there.
var simNets sync.Map // testing.TB → *verbstest.Net

// loopback is the real-socket network.
var loopback = verbstest.Loopback()

// netFor returns the network t's devices live on.
func netFor(t testing.TB) *verbstest.Net {
	if n, ok := simNets.Load(t); ok {
		return n.(*verbstest.Net)
	}
	return loopback
}

// sim runs f in a synctest bubble whose devices (newNode, newDevice) are
// on a simulated network seeded with seed. f must not call t.Run (a
// bubble's t cannot); give each case its own sim instead.
func sim(t *testing.T, seed uint64, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		simNets.Store(t, verbstest.Sim(t, seed))
		t.Cleanup(func() { simNets.Delete(t) })
		f(t)
	})
}
