//go:build linux

package rdmacm_test

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"

	"softib/internal/verbstest"
	"softib/rdmacm"
	"softib/rxe"
	"softib/udp/udptest"
)

// sim runs f in a synctest bubble on an env whose devices are on the
// simulated network: deterministic, no sockets, and the CM's timers
// (retransmissions, timewait) run on the bubble's fake clock.
func sim(t *testing.T, seed uint64, f func(t *testing.T, e *env)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		f(t, newEnvOn(t, verbstest.Sim(t, seed)))
	})
}

func TestSimConnectAcceptDisconnect(t *testing.T) { sim(t, 1, connectAcceptDisconnect) }

// TestSimConnectCycles is TestConnectCycles on the simulated network: 200
// connect/disconnect cycles between two managers whose links drop 10%,
// duplicate 5% and reorder 5% of the MADs, either side disconnecting in
// turn, with the CM's retransmission timers on the bubble's clock.
// Deterministic for its seed, and it needs neither root nor a second
// process; TestConnectCycles keeps a shorter run of the same cycles over
// veth and a relay between processes.
func TestSimConnectCycles(t *testing.T) {
	cycles := 200
	if testing.Short() {
		cycles = 50
	}
	synctest.Test(t, func(t *testing.T) {
		n := verbstest.Sim(t, 7)
		open := func() (*rdmacm.Manager, netip.Addr) {
			d := n.Open(t, rxe.Config{})
			m := rdmacm.NewManager(scaleCfg)
			t.Cleanup(func() { m.Close() })
			if err := m.AddDevice(d); err != nil {
				t.Fatal(err)
			}
			return m, d.Addr().Addr()
		}
		client, _ := open()
		server, saddr := open()
		n.Sim.SetFaults(udptest.Faults{Drop: 0.1, Duplicate: 0.05, Reorder: 0.05, ReorderGap: 3})
		dst := netip.AddrPortFrom(saddr, 7174)
		ctx, cancel := context.WithCancel(t.Context())
		served := make(chan struct{})
		ready := make(chan struct{})
		go serveCycles(ctx, t, server, dst, func() { close(ready) }, func(accepted, disconnected int) {
			t.Logf("server: %d accepted, %d disconnected", accepted, disconnected)
			close(served)
		})
		<-ready
		runCycles(t, client, dst, cycles)
		cancel()
		<-served
	})
}
