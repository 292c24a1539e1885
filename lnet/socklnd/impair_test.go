//go:build linux

package socklnd_test

import (
	"testing"
	"time"

	"softib/internal/e2etest"
	"softib/internal/netemu"
	"softib/internal/testenv"
	"softib/lnet/socklnd"
)

// TestNetemuImpaired runs two LNet instances over socklnd in two network
// namespaces joined by netemu's userspace router, which delays (5 ms ±
// 2 ms), drops (5%), reorders (10%) and duplicates (2%) the TCP segments
// in both directions: the kernels' TCP recovers and every PUT and GET, up
// to 1 MiB, completes with intact data.
func TestNetemuImpaired(t *testing.T) {
	testenv.RequireRoot(t)
	r := netemu.New(t, netemu.Config{NoIPv6: true, Seed: 988})
	cfgFor := func(h *netemu.Host) socklnd.Config {
		c := socklnd.BaseConfig()
		c.SocketContext = h.Do
		c.AcceptPort = socklnd.DefaultAcceptPort
		return c
	}
	a := newInst(t, r.A.Addr.String(), cfgFor(r.A))
	b := newInst(t, r.B.Addr.String(), cfgFor(r.B))
	putGet(t, a, b, 4096, 1) // clean path first
	r.SetImpairment(netemu.Both, netemu.Impairment{
		Delay: 5 * time.Millisecond, Jitter: 2 * time.Millisecond,
		Loss: 0.05, Reorder: 0.10, Duplicate: 0.02,
	})
	sizes := []int{0, 1000, 64 << 10, 1 << 20}
	for i, size := range sizes {
		putGet(t, a, b, size, uint64(10+i))
		putGet(t, b, a, size, uint64(20+i))
	}
	if a.drv().Stats().Malformed.Load()+b.drv().Stats().Malformed.Load() != 0 {
		t.Fatal("malformed messages counted: TCP should hide the impairment")
	}
	s := r.Stats()
	t.Logf("router A→B %+v", s.AtoB)
	t.Logf("router B→A %+v", s.BtoA)
	for _, d := range []struct {
		name string
		s    netemu.DirStats
	}{{"A→B", s.AtoB}, {"B→A", s.BtoA}} {
		if d.s.Dropped == 0 || d.s.Reordered == 0 || d.s.Duplicated == 0 {
			t.Errorf("%s: impairment did not bite: dropped %d reordered %d duplicated %d",
				d.name, d.s.Dropped, d.s.Reordered, d.s.Duplicated)
		}
	}
	// The loss was real to TCP: the namespaces' kernels retransmitted.
	if re := hostRetransSegs(t, r.A) + hostRetransSegs(t, r.B); re == 0 {
		t.Error("no TCP retransmissions")
	} else {
		t.Logf("TCP retransmitted %d segments", re)
	}
}

// hostRetransSegs reads Tcp RetransSegs inside h.
func hostRetransSegs(t *testing.T, h *netemu.Host) uint64 {
	return e2etest.SNMP(t, h.Do, "Tcp", "RetransSegs")
}
