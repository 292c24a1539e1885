package lnet_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// faultRig is a pair with a PUT sink on portals 5 and 6 of B.
type faultRig struct {
	*pair
	t *testing.T
}

func newFaultRig(t *testing.T) *faultRig {
	p := newPair(t, lnd.Tunables{})
	for _, portal := range []int{5, 6} {
		me, err := p.b.MEAttach(portal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf,
			Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDTruncate, EQ: p.eqB, UserPtr: portal}, lnet.Retain); err != nil {
			t.Fatal(err)
		}
	}
	return &faultRig{pair: p, t: t}
}

// puts sends n PUTs (no ACK) from A to B's portal and waits until the
// network is idle; it returns how many B received.
func (r *faultRig) puts(n, portal int) int {
	r.t.Helper()
	for i := range n {
		h, err := r.a.MDBind(lnet.MD{Start: []byte{byte(i)}, Threshold: 1}, lnet.AutoUnlink)
		if err != nil {
			r.t.Fatal(err)
		}
		if err := r.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.idB(), portal, uint64(i), 0, 0); err != nil {
			r.t.Fatal(err)
		}
	}
	synctest.Wait()
	got := 0
	for _, ev := range drain(r.t, r.eqB) {
		if ev.Type == lnet.EventPut && ev.Portal == portal {
			got++
		}
	}
	return got
}

func (r *faultRig) rules(in *lnet.Instance, k lnet.FaultKind) []lnet.FaultRuleInfo {
	return in.FaultRules(k)
}

// TestFaultDropRate: a 1-in-N drop rule drops exactly one of every N
// messages it matches, and only those: other portals, types and sources
// pass, and the counters say what happened.
func TestFaultDropRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFaultRig(t)
		// On B: drop PUTs to portal 5 from any tcp address to B, 1 in 4.
		if err := r.b.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDrop, Src: lnet.FaultNetWildcard(nidA.Net()), Dst: nidB,
			PortalMask: 1 << 5, Rate: 4}); err != nil {
			t.Fatal(err)
		}
		if got := r.puts(40, 5); got != 30 {
			t.Fatalf("portal 5: %d of 40 PUTs arrived, want 30", got)
		}
		if got := r.puts(10, 6); got != 10 {
			t.Fatalf("portal 6: %d of 10 arrived, want all", got)
		}
		rs := r.rules(r.b, lnet.FaultDrop)
		if len(rs) != 1 || rs[0].Stats.Count != 40 || rs[0].Stats.Fired != 10 || rs[0].Stats.Put != 10 ||
			rs[0].MsgMask != lnet.FaultPUT|lnet.FaultGET {
			t.Fatalf("rule %+v", rs)
		}
		if st := r.b.Stats(); st.DropCount != 10 {
			t.Fatalf("B drop count %d, want 10", st.DropCount)
		}
		// Reset zeroes the counters; the rule keeps dropping 1 in 4.
		r.b.ResetFaultRules(lnet.FaultDrop)
		if got := r.puts(8, 5); got != 6 {
			t.Fatalf("after reset: %d of 8 arrived, want 6", got)
		}
		if rs := r.rules(r.b, lnet.FaultDrop); rs[0].Stats.Count != 8 || rs[0].Stats.Fired != 2 {
			t.Fatalf("after reset %+v", rs[0].Stats)
		}
		// A rule for another source net matches nothing.
		if n := r.b.DelFaultRules(lnet.FaultDrop, lnetwire.NIDAny, lnetwire.NIDAny); n != 1 {
			t.Fatalf("deleted %d rules", n)
		}
		if err := r.b.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDrop, Src: lnet.FaultNetWildcard(lnetwire.MustParseNID("1.1.1.1@o2ib").Net()), Rate: 1}); err != nil {
			t.Fatal(err)
		}
		if got := r.puts(5, 5); got != 5 {
			t.Fatalf("o2ib rule dropped tcp messages: %d of 5 arrived", got)
		}
	})
}

// TestFaultDropTypes: rate 1 drops every matched message; a message-type
// mask limits it to that type (ACKs dropped on A: PUTs still arrive, the
// sender never sees the ACK).
func TestFaultDropTypes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFaultRig(t)
		if err := r.a.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDrop, Src: nidB, Dst: nidA, MsgMask: lnet.FaultACK, Rate: 1}); err != nil {
			t.Fatal(err)
		}
		h, err := r.a.MDBind(lnet.MD{Start: []byte("x"), Threshold: 2, EQ: r.eqA}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, r.idB(), 5, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if evs := drain(t, r.eqB); len(evs) != 1 || evs[0].Type != lnet.EventPut {
			t.Fatalf("B events %v", types(evs))
		}
		if evs := drain(t, r.eqA); len(evs) != 1 || evs[0].Type != lnet.EventSend {
			t.Fatalf("A events %v (the ACK must be dropped)", types(evs))
		}
		rs := r.a.FaultRules(lnet.FaultDrop)
		if rs[0].Stats.Ack != 1 || rs[0].Stats.Put != 0 {
			t.Fatalf("stats %+v", rs[0].Stats)
		}
		_ = r.a.MDUnlink(h)
	})
}

// TestFaultDropInterval: an interval rule drops one message per interval
// window (virtual time).
func TestFaultDropInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFaultRig(t)
		if err := r.b.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDrop, Interval: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
		dropped := 0
		for range 4 {
			dropped += 3 - r.puts(3, 5)
			time.Sleep(5 * time.Second)
		}
		// Each 5 s window fires at most once; sending a burst per window
		// right at its start fires at most once per burst.
		if rs := r.b.FaultRules(lnet.FaultDrop); int(rs[0].Stats.Fired) != dropped || dropped < 1 || dropped > 4 ||
			rs[0].Stats.Count != 12 {
			t.Fatalf("dropped %d, stats %+v", dropped, rs[0].Stats)
		}
	})
}

// TestFaultDelay: a delay rule holds received messages for its latency
// (on B) or sent ones before the LND (on A); nothing is lost, and
// deleting the rule releases what it holds at once.
func TestFaultDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFaultRig(t)
		if err := r.b.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDelay, Src: nidA, Rate: 1, Latency: 3 * time.Second}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if got := r.puts(4, 5); got != 0 {
			t.Fatalf("%d PUTs arrived before the latency", got)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := len(drain(t, r.eqB)); got != 4 || time.Since(start) != 3*time.Second {
			t.Fatalf("%d PUTs after %v", got, time.Since(start))
		}
		if rs := r.b.FaultRules(lnet.FaultDelay); rs[0].Stats.Fired != 4 || rs[0].Stats.Put != 4 {
			t.Fatalf("stats %+v", rs[0].Stats)
		}
		r.b.DelFaultRules(lnet.FaultDelay, lnetwire.NIDAny, lnetwire.NIDAny)

		// Send side: A holds its PUTs to portal 6 only.
		if err := r.a.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDelay, PortalMask: 1 << 6, Rate: 1, Latency: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		if got := r.puts(2, 5); got != 2 {
			t.Fatalf("portal 5 delayed: %d", got)
		}
		if got := r.puts(2, 6); got != 0 {
			t.Fatalf("portal 6 not held: %d arrived", got)
		}
		if n := r.a.DelFaultRules(lnet.FaultDelay, lnetwire.NIDAny, lnetwire.NIDAny); n != 1 {
			t.Fatalf("deleted %d", n)
		}
		synctest.Wait()
		if got := len(drain(t, r.eqB)); got != 2 {
			t.Fatalf("after delete: %d of the held PUTs arrived", got)
		}
		if st := r.a.Stats(); st.MsgsAlloc != 0 || st.Errors != 0 {
			t.Fatalf("A stats %+v", st)
		}
	})
}

// TestFaultDelayNIStop: messages held for an NI that stops fail instead
// of hanging the shutdown.
func TestFaultDelayNIStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFaultRig(t)
		if err := r.b.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDelay, Rate: 1, Latency: time.Hour}); err != nil {
			t.Fatal(err)
		}
		r.puts(3, 5)
		if err := r.b.DelNet(nidB.Net()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := len(drain(t, r.eqB)); got != 0 {
			t.Fatalf("%d PUTs delivered on a stopped NI", got)
		}
		if st := r.b.Stats(); st.MsgsAlloc != 0 || st.DropCount != 3 {
			t.Fatalf("B stats %+v", st)
		}
	})
}

func TestFaultRuleValidation(t *testing.T) {
	n := lnetwire.MustParseNID("10.0.0.9@tcp")
	for _, c := range []lnet.FaultRule{
		{Kind: lnet.FaultDrop},                                    // neither rate nor interval
		{Kind: lnet.FaultDrop, Rate: 1, Interval: time.Second},    // both
		{Kind: lnet.FaultDrop, Interval: 1500 * time.Millisecond}, // not whole seconds
		{Kind: lnet.FaultDrop, Rate: 1, Random: true},             // random needs an interval
		{Kind: lnet.FaultDelay, Rate: 1},                          // no latency
		{Kind: lnet.FaultDelay, Rate: 1, Latency: time.Second, Local: n},
		{Kind: lnet.FaultDrop, Rate: 1, PortalMask: 1, MsgMask: lnet.FaultACK}, // portal: PUT/GET only
		{Kind: lnet.FaultDrop, Rate: 1, MsgMask: 1 << 4},                       // HELLO
	} {
		in := newInstance(t, newPair(t, lnd.Tunables{}).net, lnetwire.MustParseNID("10.0.0.3@tcp"), lnd.Tunables{})
		if err := in.AddFaultRule(c); !errors.Is(err, lnet.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", c, err)
		}
	}
	for s, want := range map[string]lnetwire.NID{
		"*":            lnetwire.NIDAny,
		"*@tcp":        lnet.FaultNetWildcard(nidA.Net()),
		"10.0.0.9@tcp": n,
	} {
		if got, err := lnet.ParseFaultNID(s); err != nil || got != want {
			t.Errorf("ParseFaultNID(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := lnet.ParseFaultNID("*@nonet"); err == nil {
		t.Error("*@nonet parsed")
	}
}

// TestFaultNoRulesNoAllocs: with no rules the hooks cost nothing on the
// data path.
func TestFaultNoRulesNoAllocs(t *testing.T) {
	p := newPair(t, lnd.Tunables{})
	if err := p.a.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDrop, Rate: 1, Src: lnetwire.MustParseNID("1.2.3.4@tcp")}); err != nil {
		t.Fatal(err)
	}
	me, err := p.b.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut}, lnet.Retain); err != nil {
		t.Fatal(err)
	}
	buf := []byte("x")
	h, err := p.a.MDBind(lnet.MD{Start: buf, Threshold: lnet.ThreshInf}, lnet.Retain)
	if err != nil {
		t.Fatal(err)
	}
	put := func() {
		if err := p.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, p.idB(), 5, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	put()
	if n := testing.AllocsPerRun(200, put); n > 0 {
		t.Fatalf("%v allocations per PUT with a non-matching drop rule", n)
	}
}

// TestFaultHealthError: a drop rule with a health error mask acts on the
// send side: A's PUT fails before its LND with the simulated status (its
// SEND event carries the failure, B sees nothing), and the rule never
// drops on receipt.
func TestFaultHealthError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFaultRig(t)
		mask, err := lnet.ParseFaultHealthError("remote_error", 0)
		if err != nil || mask != lnet.FaultRemoteError {
			t.Fatalf("ParseFaultHealthError: %#x %v", mask, err)
		}
		if _, err := lnet.ParseFaultHealthError("bogus", 0); !errors.Is(err, lnet.ErrInvalid) {
			t.Fatalf("bogus health error: %v", err)
		}
		for _, in := range []*lnet.Instance{r.a, r.b} {
			if err := in.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDrop, Src: nidA, Dst: nidB, MsgMask: lnet.FaultPUT,
				Rate: 1, HealthError: mask}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := r.a.MDBind(lnet.MD{Start: []byte("x"), Threshold: 2, EQ: r.eqA}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, r.idB(), 5, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		evs := drain(t, r.eqA)
		if len(evs) != 1 || evs[0].Type != lnet.EventSend || !errors.Is(evs[0].Status, lnet.ErrDropped) {
			t.Fatalf("A events %v %v", types(evs), evs)
		}
		if got := len(drain(t, r.eqB)); got != 0 {
			t.Fatalf("B got %d events", got)
		}
		if rs := r.a.FaultRules(lnet.FaultDrop); rs[0].Stats.Fired != 1 || rs[0].Stats.Put != 1 {
			t.Fatalf("A rule %+v", rs[0].Stats)
		}
		// B's copy (send side only) never fired on the PUTs it received:
		// send one from A with A's rule gone.
		r.a.DelFaultRules(lnet.FaultDrop, lnetwire.NIDAny, lnetwire.NIDAny)
		if got := r.puts(3, 5); got != 3 {
			t.Fatalf("B's health-error rule dropped received PUTs: %d of 3 arrived", got)
		}
		if rs := r.b.FaultRules(lnet.FaultDrop); rs[0].Stats.Fired != 0 {
			t.Fatalf("B rule fired on receipt: %+v", rs[0].Stats)
		}
		if err := r.a.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDelay, Rate: 1, Latency: time.Second, HealthError: mask}); !errors.Is(err, lnet.ErrInvalid) {
			t.Fatalf("delay rule with health error: %v", err)
		}
	})
}

// TestFaultHealthErrorResend: with two rails to a Multi-Rail peer, a
// local_dropped rule on the sender for the peer's tcp NID fails every
// message selection sends that way; health resends each on the other
// rail, so all arrive and none is reported failed, and the resend and
// local-dropped counters move.
func TestFaultHealthErrorResend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := lndtest.New(lnetwire.SOCKLND)
		a := newDiscInstance(t, n, nidA, lnd.Tunables{})
		b := newInstance(t, n, nidB, lnd.Tunables{})
		nidA2, nidB2 := lnetwire.MustParseNID("10.0.1.1@tcp1"), lnetwire.MustParseNID("10.0.1.2@tcp1")
		if err := a.AddNet(lnet.NetConfig{Net: nidA2.Net(), Addr: nidA2.Addr()}); err != nil {
			t.Fatal(err)
		}
		if err := b.AddNet(lnet.NetConfig{Net: nidB2.Net(), Addr: nidB2.Addr()}); err != nil {
			t.Fatal(err)
		}
		if r, err := a.Discover(context.Background(), nidB, false); err != nil || !r.MultiRail {
			t.Fatalf("discover %+v %v", r, err)
		}
		if err := a.AddFaultRule(lnet.FaultRule{Kind: lnet.FaultDrop, Dst: nidB, MsgMask: lnet.FaultPUT, Rate: 1,
			HealthError: lnet.FaultLocalDropped}); err != nil {
			t.Fatal(err)
		}
		eqA, _ := a.EQAlloc(64, nil)
		eqB, _ := b.EQAlloc(64, nil)
		me, err := b.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDTruncate, EQ: eqB}, lnet.Retain); err != nil {
			t.Fatal(err)
		}
		const n4 = 6
		for i := range n4 {
			h, err := a.MDBind(lnet.MD{Start: []byte{byte(i)}, Threshold: 1, EQ: eqA}, lnet.AutoUnlink)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: nidB, PID: b.PID()}, 5, uint64(i), 0, 0); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		for _, ev := range drain(t, eqA) {
			if ev.Status != nil {
				t.Fatalf("a send failed: %s", evStr(ev))
			}
		}
		if got := len(drain(t, eqB)); got != n4 {
			t.Fatalf("%d of %d PUTs arrived", got, n4)
		}
		rs := a.FaultRules(lnet.FaultDrop)
		hs := a.HealthStats()
		if rs[0].Stats.Fired == 0 || hs.ResendCount != rs[0].Stats.Fired || hs.LocalDroppedCount != rs[0].Stats.Fired || hs.FailedResends != 0 {
			t.Fatalf("rule %+v, health %+v", rs[0].Stats, hs)
		}
		t.Logf("%d of %d PUTs failed on the tcp rail by the rule and were resent; health %+v", rs[0].Stats.Fired, n4, hs)
	})
}
