package lnet_test

import (
	"slices"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

func peerInfo(t *testing.T, in *lnet.Instance, nid lnetwire.NID) lnet.PeerInfo {
	t.Helper()
	ps := in.Peers()
	i := slices.IndexFunc(ps, func(p lnet.PeerInfo) bool { return p.NID == nid })
	if i < 0 {
		t.Fatalf("no peer %v in %v", nid, ps)
	}
	return ps[i]
}

func netInfo(t *testing.T, in *lnet.Instance, nid lnetwire.NID) lnet.NetInfo {
	t.Helper()
	for _, n := range in.Nets() {
		if n.NID == nid {
			return n
		}
	}
	t.Fatalf("no NI %v", nid)
	return lnet.NetInfo{}
}

// sink attaches an ME/MD on portal that accepts any number of PUTs and
// records the match bits of each arrival.
func sink(t *testing.T, in *lnet.Instance, portal int, got *[]uint64) {
	t.Helper()
	me, _ := in.MEAttach(portal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	_, err := in.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf,
		Options: lnet.MDOpPut | lnet.MDManageRemote | lnet.MDTruncate,
		Handler: func(ev *lnet.Event) { *got = append(*got, ev.MatchBits) }}, lnet.Retain)
	if err != nil {
		t.Fatal(err)
	}
}

func sendN(t *testing.T, from *lnet.Instance, eq *lnet.EQ, to lnetwire.ProcessID, portal int, bits ...uint64) {
	t.Helper()
	for _, b := range bits {
		h, _ := from.MDBind(lnet.MD{Start: make([]byte, 10), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
		if err := from.Put(lnetwire.NIDAny, h, lnet.AckReqNo, to, portal, b, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPeerCredits: with 2 peer credits, 5 PUTs put 2 on the wire and
// queue 3 (credits -3); completions release them FIFO.
func TestPeerCredits(t *testing.T) {
	p := newPair(t, lnd.Tunables{PeerCredits: 2, Credits: 3})
	var got []uint64
	sink(t, p.b, 5, &got)
	p.net.Hold(true)
	sendN(t, p.a, p.eqA, p.idB(), 5, 0, 1, 2, 3, 4)
	if h := p.net.Held(); h != 2 {
		t.Fatalf("%d messages on the wire, want 2", h)
	}
	pi := peerInfo(t, p.a, nidB)
	if pi.TxCredits != -3 || pi.MinTxCredits != -3 || pi.MaxTxCredits != 2 || pi.QueueLen != 3 || pi.QueueBytes != 50 || pi.Refs != 6 {
		t.Fatalf("peer row %+v", pi)
	}
	ni := netInfo(t, p.a, nidA)
	if ni.TxCredits != 1 || ni.MinTxCredits != 1 || ni.MaxTxCredits != 3 || ni.Queued != 0 {
		t.Fatalf("NI row %+v", ni)
	}
	for p.net.Held() > 0 {
		p.net.Release(1)
	}
	if !slices.Equal(got, []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("arrival order %v", got)
	}
	pi = peerInfo(t, p.a, nidB)
	if pi.TxCredits != 2 || pi.MinTxCredits != -3 || pi.QueueLen != 0 || pi.QueueBytes != 0 || pi.Refs != 1 {
		t.Fatalf("peer row after %+v", pi)
	}
	for _, ev := range drain(t, p.eqA) {
		if ev.Type != lnet.EventSend || ev.Status != nil {
			t.Fatalf("event %s", evStr(ev))
		}
	}
	if st := p.a.Stats(); st.SendCount != 5 || st.MsgsAlloc != 0 || st.MsgsMax < 5 {
		t.Fatalf("stats %+v", st)
	}
}

// TestNICredits: NI credits are shared by all peers; messages short of one
// wait FIFO on the NI queue.
func TestNICredits(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	nidC := lnetwire.MustParseNID("10.0.0.3@tcp")
	nidD := lnetwire.MustParseNID("10.0.0.4@tcp")
	a := newInstance(t, n, nidA, lnd.Tunables{Credits: 2, PeerCredits: 8})
	var order []string
	for _, x := range []struct {
		nid  lnetwire.NID
		name string
	}{{nidB, "B"}, {nidC, "C"}, {nidD, "D"}} {
		in := newInstance(t, n, x.nid, lnd.Tunables{})
		name := x.name
		me, _ := in.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
		in.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDManageRemote | lnet.MDTruncate,
			Handler: func(ev *lnet.Event) { order = append(order, name) }}, lnet.Retain)
	}
	eq, _ := a.EQAlloc(16, nil)
	n.Hold(true)
	to := func(nid lnetwire.NID) lnetwire.ProcessID { return lnetwire.ProcessID{NID: nid, PID: 12345} }
	sendN(t, a, eq, to(nidB), 5, 0)
	sendN(t, a, eq, to(nidC), 5, 1)
	sendN(t, a, eq, to(nidD), 5, 2)
	sendN(t, a, eq, to(nidB), 5, 3)
	ni := netInfo(t, a, nidA)
	if n.Held() != 2 || ni.TxCredits != -2 || ni.MinTxCredits != -2 || ni.Queued != 2 {
		t.Fatalf("held %d, NI row %+v", n.Held(), ni)
	}
	for n.Held() > 0 {
		n.Release(1)
	}
	if !slices.Equal(order, []string{"B", "C", "D", "B"}) {
		t.Fatalf("order %v", order)
	}
	ni = netInfo(t, a, nidA)
	if ni.TxCredits != 2 || ni.MinTxCredits != -2 || ni.Queued != 0 {
		t.Fatalf("NI row after %+v", ni)
	}
}

// TestCreditsAsync runs many PUTs through small credits with asynchronous
// delivery from several goroutines (a race-detector workout).
func TestCreditsAsync(t *testing.T) {
	p := newPair(t, lnd.Tunables{PeerCredits: 3, Credits: 4})
	p.net.SetAsync(true)
	var got []uint64
	sink(t, p.b, 5, &got)
	const n = 200
	eq, _ := p.a.EQAlloc(n, nil)
	for i := range n {
		sendN(t, p.a, eq, p.idB(), 5, uint64(i))
	}
	for range n {
		ev := poll(t, p.a, eq)
		if ev.Status != nil {
			t.Fatalf("send failed: %v", ev.Status)
		}
	}
	pi := peerInfo(t, p.a, nidB)
	if pi.TxCredits != 3 || pi.QueueLen != 0 {
		t.Fatalf("peer row %+v", pi)
	}
}

// TestShutdownFailsQueued: removing a net fails messages waiting for
// credits and those held by the LND, with SEND events carrying the error.
func TestShutdownFailsQueued(t *testing.T) {
	p := newPair(t, lnd.Tunables{PeerCredits: 1})
	p.net.Hold(true)
	sendN(t, p.a, p.eqA, p.idB(), 5, 1, 2, 3)
	if err := p.a.DelNet(nidA.Net()); err != nil {
		t.Fatal(err)
	}
	evs := drain(t, p.eqA)
	if len(evs) != 3 {
		t.Fatalf("events %v", types(evs))
	}
	for _, ev := range evs {
		if ev.Type != lnet.EventSend || ev.Status == nil {
			t.Fatalf("event %s", evStr(ev))
		}
	}
	if st := p.a.Stats(); st.MsgsAlloc != 0 {
		t.Fatalf("messages leaked: %+v", st)
	}
}
