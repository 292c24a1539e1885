//go:build linux

package o2iblnd_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"softib/internal/e2etest"
	"softib/internal/netns"
	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
)

// nsDevice opens an rxe device in its default configuration whose UDP
// socket lives in the network namespace do runs in (netns.Node.Do,
// netemu.Host.Do), on addr with the link's mtu, with an RDMA CM on it.
func nsDevice(t *testing.T, do e2etest.Do, addr netip.Addr, mtu int) (verbs.Device, *rdmacm.Manager) {
	t.Helper()
	conn := e2etest.ListenUDP(t, do, netip.AddrPortFrom(addr, rxe.RoCEv2Port))
	dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr, NetMTU: mtu}, Conn: conn})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	t.Cleanup(func() { m.Close(); dev.Close() })
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	return dev, m
}

// TestNetnsLossy runs two nodes in separate network namespaces joined by
// a veth that delays and drops packets: RC retransmission (and CM MAD
// retries) recover and every PUT/GET completes with intact data. The
// loss rate is kept at 0.2%: at 1% a 1 MiB RDMA WRITE (over a thousand
// packets) can exhaust retry_count 5 in rxe's go-back-N.
func TestNetnsLossy(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{NoIPv6: true})
	devA, mA := nsDevice(t, p.A.Do, p.A.Addr, p.A.MTU)
	devB, mB := nsDevice(t, p.B.Do, p.B.Addr, p.B.MTU)
	a := newNodeOn(t, devA, mA, p.A.Addr, o2iblnd.Config{})
	b := newNodeOn(t, devB, mB, p.B.Addr, o2iblnd.Config{})
	putGet(t, a, b, 4096, 1, 1) // clean link first
	imp := netns.Netem{Delay: 2 * time.Millisecond, Loss: 0.2}
	for _, s := range []netns.Side{netns.A, netns.B} {
		err := p.SetNetem(s, imp)
		if errors.Is(err, netns.ErrNetemUnsupported) {
			imp = netns.Netem{Loss: 0.2}
			err = p.SetNetem(s, imp)
		}
		if err != nil {
			t.Fatalf("netem: %v", err)
		}
	}
	t.Logf("impairment %+v", imp)
	sizes := []int{0, 3000, 64 << 10, 1 << 20}
	if testing.Short() {
		sizes = sizes[:3]
	}
	for i, size := range sizes {
		putGet(t, a, b, size, uint64(10+i), 1)
		putGet(t, b, a, size, uint64(20+i), 1)
	}
	retries := func() uint64 {
		return devA.(*rxe.Device).Stats()["CompRetry"] + devB.(*rxe.Device).Stats()["CompRetry"]
	}
	// The loss was real: keep transferring (bounded) until rxe retried.
	for i := 0; retries() == 0 && i < 30; i++ {
		putGet(t, a, b, 1<<20, uint64(100+i), 1)
	}
	if retries() == 0 {
		t.Fatal("no retransmissions: the impairment did not bite")
	}
	t.Logf("rxe retransmissions: %d", retries())
	for _, x := range []*node{a, b} {
		if st := x.drv().Stats(); st.Malformed.Load()+st.CreditOverflow.Load() != 0 {
			t.Fatalf("%s: malformed %d overflow %d", x.nid, st.Malformed.Load(), st.CreditOverflow.Load())
		}
	}
}
