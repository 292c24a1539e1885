package lnet_test

import (
	"fmt"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

var (
	nidA = lnetwire.MustParseNID("10.0.0.1@tcp")
	nidB = lnetwire.MustParseNID("10.0.0.2@tcp")
)

// pair is two instances joined by an in-memory network.
type pair struct {
	net  *lndtest.Network
	a, b *lnet.Instance
	eqA  *lnet.EQ
	eqB  *lnet.EQ
}

func (p *pair) idA() lnetwire.ProcessID { return lnetwire.ProcessID{NID: nidA, PID: p.a.PID()} }
func (p *pair) idB() lnetwire.ProcessID { return lnetwire.ProcessID{NID: nidB, PID: p.b.PID()} }

// newInstance starts an instance with one NI on n and discovery off:
// the tests built on it check what one PUT or GET does, and with
// discovery on a first message to a peer waits for a discovery round
// (ping, push) before it leaves. Tests of discovery use newDiscInstance.
func newInstance(t testing.TB, n *lndtest.Network, nid lnetwire.NID, tun lnd.Tunables) *lnet.Instance {
	t.Helper()
	in := newDiscInstance(t, n, nid, tun)
	in.SetDiscovery(false)
	return in
}

// newDiscInstance is newInstance with discovery on (the default).
func newDiscInstance(t testing.TB, n *lndtest.Network, nid lnetwire.NID, tun lnd.Tunables) *lnet.Instance {
	t.Helper()
	in, err := lnet.New(lnet.Config{
		LNDs: []lnd.LND{n.LND()},
		Nets: []lnet.NetConfig{{Net: nid.Net(), Addr: nid.Addr(), Tunables: tun}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

func newPair(t testing.TB, tun lnd.Tunables) *pair {
	t.Helper()
	n := lndtest.New(lnetwire.SOCKLND)
	p := &pair{net: n, a: newInstance(t, n, nidA, tun), b: newInstance(t, n, nidB, tun)}
	var err error
	if p.eqA, err = p.a.EQAlloc(1024, nil); err != nil {
		t.Fatal(err)
	}
	if p.eqB, err = p.b.EQAlloc(1024, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// drain returns every event queued on eq without waiting.
func drain(t testing.TB, eq *lnet.EQ) []lnet.Event {
	t.Helper()
	var out []lnet.Event
	for {
		ev, ok, err := eq.Get()
		if err != nil {
			t.Fatalf("EQ Get: %v", err)
		}
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

func types(evs []lnet.Event) []lnet.EventType {
	out := make([]lnet.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// evStr formats an event without its MD's buffers.
func evStr(ev lnet.Event) string {
	return fmt.Sprintf("{%v status=%v init=%v tgt=%v ptl=%d bits=%#x rlen=%d mlen=%d off=%d unlinked=%v seq=%d}",
		ev.Type, ev.Status, ev.Initiator, ev.Target, ev.Portal, ev.MatchBits, ev.RLength, ev.MLength, ev.Offset, ev.Unlinked, ev.Sequence)
}

// lastUnlinked checks that exactly the last event (by sequence) of evs is
// flagged Unlinked.
func lastUnlinked(t testing.TB, evs ...lnet.Event) {
	t.Helper()
	last := 0
	for i, e := range evs {
		if e.Sequence > evs[last].Sequence {
			last = i
		}
	}
	for i, e := range evs {
		if e.Unlinked != (i == last) {
			t.Errorf("event %s: Unlinked=%v, want it only on the last event", evStr(e), e.Unlinked)
		}
	}
}
