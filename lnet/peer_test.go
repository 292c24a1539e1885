package lnet_test

import (
	"errors"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// peerNIDs returns the NIDs of a peer, in PeerDetail order.
func peerNIDs(d lnet.PeerDetail) []lnetwire.NID {
	var out []lnetwire.NID
	for _, ni := range d.NIs {
		out = append(out, ni.NID)
	}
	return out
}

func TestPeerAddDel(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := newInstance(t, n, nidA, lnd.Tunables{PeerCredits: 4})
	p1 := lnetwire.MustParseNID("10.0.0.7@tcp")
	p2 := lnetwire.MustParseNID("10.0.1.7@tcp1")
	p3 := lnetwire.MustParseNID("10.0.0.8@tcp")

	if err := a.AddPeer(lnet.PeerConfig{Primary: p1, NIDs: []lnetwire.NID{p2, p3}}); err != nil {
		t.Fatal(err)
	}
	d, ok := a.PeerOf(p2)
	if !ok || d.Primary != p1 || !d.MultiRail || d.State&lnet.PeerConfigured == 0 {
		t.Fatalf("peer of %v: %+v %v", p2, d, ok)
	}
	if got := peerNIDs(d); len(got) != 3 || got[0] != p1 {
		t.Fatalf("NIDs %v, want primary first of 3", got)
	}
	for _, ni := range d.NIs {
		if ni.Health != lnet.MaxHealthValue {
			t.Errorf("%v health %d", ni.NID, ni.Health)
		}
		// Bound to the local tcp NI (credits from its tunables); the
		// tcp1 NID has no local NI yet.
		want := 4
		if ni.NID.Net() != nidA.Net() {
			want = 0
		}
		if ni.MaxTxCredits != want {
			t.Errorf("%v max credits %d, want %d", ni.NID, ni.MaxTxCredits, want)
		}
	}
	// Adding again extends; flipping Multi-Rail is refused; a NID
	// configured for p1 cannot go to another configured peer.
	if err := a.AddPeer(lnet.PeerConfig{Primary: p1}); err != nil {
		t.Errorf("re-add: %v", err)
	}
	if err := a.AddPeer(lnet.PeerConfig{Primary: p1, NonMR: true}); !errors.Is(err, lnet.ErrPerm) {
		t.Errorf("non-MR re-add: %v, want ErrPerm", err)
	}
	q := lnetwire.MustParseNID("10.0.0.9@tcp")
	if err := a.AddPeer(lnet.PeerConfig{Primary: q, NIDs: []lnetwire.NID{p3}}); !errors.Is(err, lnet.ErrPeerExists) {
		t.Errorf("stealing a configured NID: %v, want ErrPeerExists", err)
	}
	// A non-MR peer has one NID per net.
	r1, r2 := lnetwire.MustParseNID("10.0.0.20@tcp"), lnetwire.MustParseNID("10.0.0.21@tcp")
	if err := a.AddPeer(lnet.PeerConfig{Primary: r1, NIDs: []lnetwire.NID{r2}, NonMR: true}); !errors.Is(err, lnet.ErrNotUniq) {
		t.Errorf("two NIDs on one net of a non-MR peer: %v, want ErrNotUniq", err)
	}

	// Deleting: not the primary → ErrNotPrimary; one NID; the primary
	// alone while others remain goes with the whole peer.
	if err := a.DelPeerNI(p2, lnetwire.NIDAny); !errors.Is(err, lnet.ErrNotPrimary) {
		t.Errorf("del by secondary: %v", err)
	}
	if err := a.DelPeerNI(p1, p3); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.PeerOf(p1); len(d.NIs) != 2 {
		t.Fatalf("after del of %v: %v", p3, peerNIDs(d))
	}
	if _, ok := a.PeerOf(p3); ok {
		t.Errorf("%v still known", p3)
	}
	if err := a.DelPeerNI(p1, lnetwire.NIDAny); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.PeerOf(p2); ok {
		t.Errorf("%v still known after the peer was deleted", p2)
	}
	if err := a.DelPeerNI(p1, lnetwire.NIDAny); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("second del: %v", err)
	}
}

// A NID first seen in traffic is a non-MR peer of its own; configuring
// it into a Multi-Rail peer moves the same peer NI (its statistics stay).
func TestPeerTrafficThenConfigured(t *testing.T) {
	p := newPair(t, lnd.Tunables{})
	if err := putStatus(t, p.a, p.eqA, p.idB()); err != nil {
		t.Fatal(err)
	}
	d, ok := p.a.PeerOf(nidB)
	if !ok || d.MultiRail || d.State != 0 || len(d.NIs) != 1 {
		t.Fatalf("traffic peer: %+v", d)
	}
	prim := lnetwire.MustParseNID("10.0.5.2@tcp5")
	if err := p.a.AddPeer(lnet.PeerConfig{Primary: prim, NIDs: []lnetwire.NID{nidB}}); err != nil {
		t.Fatal(err)
	}
	d, _ = p.a.PeerOf(nidB)
	if d.Primary != prim || !d.MultiRail || len(d.NIs) != 2 {
		t.Fatalf("after configuring: %+v", d)
	}
	if len(p.a.PeerList()) != 1 {
		t.Errorf("peer list %+v, want the one configured peer", p.a.PeerList())
	}
	// The old single-NID peer is gone; the flat table still has the NID.
	found := false
	for _, pi := range p.a.Peers() {
		if pi.NID == nidB {
			found = pi.PrimaryNID == prim
		}
	}
	if !found {
		t.Errorf("Peers() lacks %v with primary %v: %+v", nidB, prim, p.a.Peers())
	}
}
