package lnet_test

import (
	"errors"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

func TestIdentityAndDist(t *testing.T) {
	p := newPair(t, lnd.Tunables{})
	a := p.a
	if id, err := a.GetID(0); err != nil || id.NID != lnetwire.NIDLo0 || id.PID != lnetwire.PIDLustre {
		t.Fatalf("GetID(0) %v %v", id, err)
	}
	if id, err := a.GetID(1); err != nil || id.NID != nidA {
		t.Fatalf("GetID(1) %v %v", id, err)
	}
	if _, err := a.GetID(2); !errors.Is(err, lnet.ErrNoEnt) {
		t.Fatalf("GetID(2) %v", err)
	}
	cases := []struct {
		nid         lnetwire.NID
		dist, order int
		src         lnetwire.NID
		err         error
	}{
		{lnetwire.NIDLo0, 0, 0, lnetwire.NIDLo0, nil},
		{nidA, 0, 1, nidA, nil},
		{nidB, 1, 3, nidA, nil},
		{lnetwire.MustParseNID("10.0.0.1@o2ib"), 0, 0, 0, lnet.ErrNoRoute},
	}
	for _, c := range cases {
		d, src, o, err := a.Dist(c.nid)
		if !errors.Is(err, c.err) || (err == nil && (d != c.dist || o != c.order || src != c.src)) {
			t.Errorf("Dist(%v) = %d %v %d %v, want %d %v %d %v", c.nid, d, src, o, err, c.dist, c.src, c.order, c.err)
		}
	}
	a.SetGlobals(lnet.Globals{LocalNIDDistZero: false})
	if d, _, _, _ := a.Dist(nidA); d != 1 {
		t.Errorf("local dist with LocalNIDDistZero off: %d", d)
	}
	if !a.IsPeerLocal(nidA) || a.IsPeerLocal(nidB) || !a.IsPeerLocal(lnetwire.NIDLo0) {
		t.Error("IsPeerLocal wrong")
	}
	if a.PrimaryNID(nidB) != nidB {
		t.Error("PrimaryNID of an unknown peer must be itself")
	}
	if nids := a.NIDs(); len(nids) != 2 || nids[0] != lnetwire.NIDLo0 || nids[1] != nidA {
		t.Errorf("NIDs %v", nids)
	}
}

func TestNetAdmin(t *testing.T) {
	p := newPair(t, lnd.Tunables{PeerCredits: 4, Credits: 16})
	a := p.a
	nets := a.Nets()
	if len(nets) != 2 || nets[0].LND != "lo" || nets[1].NID != nidA || nets[1].LND != "tcp" || nets[1].Status != "up" ||
		nets[1].Tunables.PeerCredits != 4 || nets[1].MaxTxCredits != 16 {
		t.Fatalf("nets %+v", nets)
	}
	if err := a.AddNet(lnet.NetConfig{Net: nidA.Net(), Addr: nidA.Addr()}); !errors.Is(err, lnet.ErrNetExists) {
		t.Fatalf("duplicate NID: %v", err)
	}
	if err := a.AddNet(lnet.NetConfig{Net: lnetwire.MakeNet(lnetwire.O2IBLND, 0), Addr: 1}); !errors.Is(err, lnet.ErrNoLND) {
		t.Fatalf("no LND: %v", err)
	}
	if err := a.DelNet(lnetwire.MakeNet(lnetwire.LOLND, 0)); !errors.Is(err, lnet.ErrInvalid) {
		t.Fatalf("del lo: %v", err)
	}
	// Traffic, then the counters and peer table.
	var got []uint64
	sink(t, p.b, 5, &got)
	sendN(t, a, p.eqA, p.idB(), 5, 1, 2)
	st := a.Stats()
	if st.SendCount != 2 || st.SendLength != 20 || st.MsgsAlloc != 0 || st.MsgsMax == 0 {
		t.Fatalf("stats %+v", st)
	}
	if bs := p.b.Stats(); bs.RecvCount != 2 || bs.RecvLength != 20 {
		t.Fatalf("target stats %+v", bs)
	}
	pi := peerInfo(t, a, nidB)
	if pi.State != "up" || pi.MaxTxCredits != 4 || pi.TxCredits != 4 || pi.NI != nidA {
		t.Fatalf("peer %+v", pi)
	}
	a.ResetStats()
	if st := a.Stats(); st.SendCount != 0 {
		t.Fatalf("reset %+v", st)
	}
	if err := a.DelPeer(nidB); err != nil {
		t.Fatal(err)
	}
	if err := a.DelPeer(nidB); !errors.Is(err, lnet.ErrNoEnt) {
		t.Fatal(err)
	}
	// DelNet: the NID goes away, sends find no route.
	if err := a.DelNet(nidA.Net()); err != nil {
		t.Fatal(err)
	}
	if len(a.Nets()) != 1 || a.IsPeerLocal(nidA) {
		t.Fatalf("nets after del %+v", a.Nets())
	}
	sendN(t, a, p.eqA, p.idB(), 5, 3)
	evs := drain(t, p.eqA)
	if last := evs[len(evs)-1]; !errors.Is(last.Status, lnet.ErrNoRoute) {
		t.Fatalf("send after DelNet: %s", evStr(last))
	}
	if err := a.DelNet(nidA.Net()); !errors.Is(err, lnet.ErrNoEnt) {
		t.Fatalf("second DelNet %v", err)
	}
	// And back.
	if err := a.AddNet(lnet.NetConfig{Net: nidA.Net(), Addr: nidA.Addr()}); err != nil {
		t.Fatal(err)
	}
	sendN(t, a, p.eqA, p.idB(), 5, 4)
	if evs := drain(t, p.eqA); len(evs) != 1 || evs[0].Status != nil {
		t.Fatalf("send after re-add: %v", types(evs))
	}
	// Close is final.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MDBind(lnet.MD{Threshold: 1}, lnet.Retain); !errors.Is(err, lnet.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := a.Close(); !errors.Is(err, lnet.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}
