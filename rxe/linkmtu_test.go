//go:build linux

package rxe_test

import (
	"net/netip"
	"testing"

	"softib/internal/e2etest"
	"softib/internal/netns"
	"softib/internal/testaddr"
	"softib/rxe"
	"softib/verbs"
)

// TestLinkMTU: with NetMTU unset the port's active MTU follows the link
// of the device address as on rdma_rxe: loopback and a 9000-byte veth
// give 4096, a 1500-byte veth 1024; NetMTU overrides it; a simulated
// network, which has no link, gives 1500's 1024.
func TestLinkMTU(t *testing.T) {
	active := func(d *rxe.Device) verbs.MTU {
		t.Helper()
		pa, err := d.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		return pa.ActiveMTU
	}
	if m := active(openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next()}})); m != verbs.MTU4096 {
		t.Errorf("loopback: active MTU %v, want 4096", m)
	}
	if m := active(openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: testaddr.Next(), NetMTU: 1500}})); m != verbs.MTU1024 {
		t.Errorf("loopback with NetMTU 1500: active MTU %v, want 1024", m)
	}
	for _, c := range []struct {
		link int
		want verbs.MTU
	}{{1500, verbs.MTU1024}, {9000, verbs.MTU4096}, {4000, verbs.MTU2048}} {
		p := netns.NewPair(t, netns.PairConfig{MTU: c.link, NoIPv6: true})
		s := e2etest.ListenUDP(t, p.A.Do, netip.AddrPortFrom(p.A.Addr, rxe.RoCEv2Port))
		if m := active(openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: p.A.Addr}, Conn: s})); m != c.want {
			t.Errorf("veth MTU %d: active MTU %v, want %v", c.link, m, c.want)
		}
	}
}
