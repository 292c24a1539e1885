package lnet_test

import (
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// TestDistRouteOrder: LNetDist's order for a routed NID is the one
// Lustre's LNetDist gives: 2 + the number of local NIs, plus the net's
// place among the remote nets of its own bucket of the remote-net hash
// (lnet_net2rnethash: (net number + LND type) mod 64 at the default
// rnet_htable_size), not among all remote nets. tcp1 and tcp2 hash to
// different buckets and share an order; tcp65 shares tcp1's bucket and
// comes after it. Deleting tcp1's route moves tcp65 up.
func TestDistRouteOrder(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := rtNode(t, []lnd.LND{n.LND()}, lnet.RouterConfig{}, noChecker(), lnd.Tunables{}, rtA)
	for _, net := range []string{"tcp1", "tcp2", "tcp65"} {
		addRoute(t, a, mustNet(net), rtR0, 1, 0)
	}
	order := func(nid string) int {
		t.Helper()
		d, src, o, err := a.Dist(lnetwire.MustParseNID(nid))
		if err != nil || d != 2 || src != rtA {
			t.Fatalf("Dist(%s) = %d %v %d %v, want 2 %v", nid, d, src, o, err, rtA)
		}
		return o
	}
	// 0@lo and tcp: orders 2 and 3; remote nets start at 4.
	if o1, o2, o65 := order("10.9.0.1@tcp1"), order("10.9.0.1@tcp2"), order("10.9.0.1@tcp65"); o1 != 4 || o2 != 4 || o65 != 5 {
		t.Fatalf("orders tcp1 %d tcp2 %d tcp65 %d, want 4 4 5", o1, o2, o65)
	}
	if err := a.DelRoute(mustNet("tcp1"), lnetwire.NIDAny); err != nil {
		t.Fatal(err)
	}
	if o := order("10.9.0.1@tcp65"); o != 4 {
		t.Fatalf("order of tcp65 after tcp1's route went: %d, want 4", o)
	}
}
