//go:build linux

package socklnd_test

import (
	"errors"
	"testing"
	"time"

	"softib/internal/e2etest"
	"softib/internal/netns"
	"softib/lnet/socklnd"
)

// TestNetnsNetem runs two instances in separate network namespaces joined
// by a veth whose traffic is delayed and lossy (tc netem); TCP recovers
// and every PUT/GET completes with intact data.
func TestNetnsNetem(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{NoIPv6: true})
	cfgFor := func(n *netns.Node) socklnd.Config {
		c := socklnd.BaseConfig()
		c.SocketContext = n.Do
		c.AcceptPort = socklnd.DefaultAcceptPort
		return c
	}
	a := newInst(t, p.A.Addr.String(), cfgFor(p.A))
	b := newInst(t, p.B.Addr.String(), cfgFor(p.B))
	putGet(t, a, b, 4096, 1) // clean link first
	imp := netns.Netem{Delay: 10 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 2}
	for _, s := range []netns.Side{netns.A, netns.B} {
		err := p.SetNetem(s, imp)
		if errors.Is(err, netns.ErrNetemUnsupported) {
			// No sch_netem in this kernel: loss and duplication only
			// (emulated with nftables).
			imp = netns.Netem{Loss: 2, Duplicate: 1}
			err = p.SetNetem(s, imp)
		}
		if err != nil {
			t.Fatalf("netem: %v", err)
		}
	}
	t.Logf("impairment %+v", imp)
	sizes := []int{0, 1000, 64 << 10, 1 << 20}
	if testing.Short() {
		sizes = sizes[:3]
	}
	for i, size := range sizes {
		putGet(t, a, b, size, uint64(10+i))
		putGet(t, b, a, size, uint64(20+i))
	}
	if a.drv().Stats().Malformed.Load()+b.drv().Stats().Malformed.Load() != 0 {
		t.Fatal("malformed counted on a lossy link")
	}
	// The loss was real: TCP in the namespaces retransmitted. Loss hits
	// whole GSO super-packets, so a short run may draw none: keep
	// transferring (bounded) until it does.
	re := retransSegs(t, p.A) + retransSegs(t, p.B)
	for i := 0; re == 0 && i < 50; i++ {
		putGet(t, a, b, 1<<20, uint64(100+i))
		re = retransSegs(t, p.A) + retransSegs(t, p.B)
	}
	if re == 0 {
		t.Fatal("no TCP retransmissions: the impairment did not bite")
	}
	t.Logf("TCP retransmitted %d segments", re)
}

// retransSegs reads Tcp RetransSegs inside n.
func retransSegs(t *testing.T, n *netns.Node) uint64 {
	return e2etest.SNMP(t, n.Do, "Tcp", "RetransSegs")
}
