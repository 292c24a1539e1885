package lnet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// Two-rail nodes on one net: a has A1, A2; b has B1, B2 (all tcp).
var (
	selA1 = lnetwire.MustParseNID("10.1.0.1@tcp")
	selA2 = lnetwire.MustParseNID("10.1.1.1@tcp")
	selB1 = lnetwire.MustParseNID("10.1.0.2@tcp")
	selB2 = lnetwire.MustParseNID("10.1.1.2@tcp")
)

// fakeClock is a settable time source for Instance.mr.clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// mrNode starts an instance with one NI per NID on the lndtest network,
// discovery off: selection tests configure their peers, and their first
// messages leave at once rather than after a discovery round.
func mrNode(t *testing.T, n *lndtest.Network, clk *fakeClock, nids ...lnetwire.NID) *Instance {
	t.Helper()
	cfg := Config{LNDs: []lnd.LND{n.LND()}}
	for _, nid := range nids {
		cfg.Nets = append(cfg.Nets, NetConfig{Net: nid.Net(), Addr: nid.Addr(), Tunables: lnd.Tunables{PeerCredits: 8, Credits: 64}})
	}
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		in.mu.Lock()
		in.mr.clock = clk.now
		in.mu.Unlock()
	}
	t.Cleanup(func() { in.Close() })
	in.SetDiscovery(false)
	return in
}

// sink accepts PUTs on portal 9 and counts them by (local NID, from).
type sinkCounts struct {
	mu  sync.Mutex
	got map[[2]lnetwire.NID]int
}

func newSink(t *testing.T, in *Instance) *sinkCounts {
	t.Helper()
	s := &sinkCounts{got: map[[2]lnetwire.NID]int{}}
	me, err := in.MEAttach(9, lnetwire.ProcessIDAny, 0, ^uint64(0), Retain, InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.MDAttach(me, MD{Start: make([]byte, 64), Threshold: ThreshInf,
		Options: MDOpPut | MDManageRemote | MDTruncate | MDAckDisable,
		Handler: func(ev *Event) {
			s.mu.Lock()
			s.got[[2]lnetwire.NID{ev.Target.NID, ev.Sender}]++
			s.mu.Unlock()
		}}, Retain)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *sinkCounts) count(local, from lnetwire.NID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[[2]lnetwire.NID{local, from}]
}

// put sends one PUT from in to dst (NIDAny source) and returns the SEND
// status (lndtest delivers synchronously).
func put(t *testing.T, in *Instance, dst lnetwire.NID) error {
	t.Helper()
	var status error
	done := false
	h, err := in.MDBind(MD{Start: []byte{1, 2, 3}, Threshold: 1, Handler: func(ev *Event) {
		if ev.Type == EventSend {
			status, done = ev.Status, true
		}
	}}, AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Put(lnetwire.NIDAny, h, AckReqNo, lnetwire.ProcessID{NID: dst, PID: lnetwire.PIDLustre}, 9, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Fatal("no SEND event")
	}
	return status
}

// TestSelectMRRoundRobin: to a Multi-Rail peer with two NIDs, from two
// local NIs on the same net, equal health and credits: round robin uses
// every local NI and every peer NI.
func TestSelectMRRoundRobin(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := mrNode(t, n, nil, selA1, selA2)
	b := mrNode(t, n, nil, selB1, selB2)
	s := newSink(t, b)
	if err := a.AddPeer(PeerConfig{Primary: selB1, NIDs: []lnetwire.NID{selB2}}); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if err := put(t, a, selB1); err != nil {
			t.Fatal(err)
		}
	}
	// Local and peer round robin advance together (lnet_handle_send
	// bumps both), so A1 pairs with B1 and A2 with B2: each rail carries
	// half.
	if s.count(selB1, selA1) != 20 || s.count(selB2, selA2) != 20 {
		t.Errorf("counts %v, want 20 A1→B1 and 20 A2→B2", s.got)
	}
	total := 0
	for _, c := range s.got {
		total += c
	}
	if total != 40 {
		t.Errorf("%d PUTs arrived, want 40", total)
	}
	// Each local NI carried half.
	for _, ni := range a.Nets() {
		if ni.NID == selA1 || ni.NID == selA2 {
			if ni.SendCount != 20 {
				t.Errorf("%v sent %d, want 20", ni.NID, ni.SendCount)
			}
		}
	}
}

// TestSelectNonMRKeepsSource: a peer that is not Multi-Rail (created by
// traffic) always gets the NID asked for, from the local NI used first.
func TestSelectNonMRKeepsSource(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := mrNode(t, n, nil, selA1, selA2)
	b := mrNode(t, n, nil, selB1, selB2)
	s := newSink(t, b)
	for range 10 {
		if err := put(t, a, selB2); err != nil {
			t.Fatal(err)
		}
	}
	first := selA1
	if s.count(selB2, selA2) > 0 {
		first = selA2
	}
	if c := s.count(selB2, first); c != 10 {
		t.Errorf("non-MR peer: %d of 10 from %v, counts %v", c, first, s.got)
	}
	d, _ := a.PeerOf(selB2)
	if d.MultiRail || len(d.NIs) != 1 || len(d.NIs[0].PrefNIDs) != 1 || d.NIs[0].PrefNIDs[0] != first {
		t.Errorf("peer %+v, want non-MR with preferred NID %v", d, first)
	}
}

// TestSelectHealthFirst: a local NI or peer NI with lower health is not
// used while a healthier one exists, whatever the credits.
func TestSelectHealthFirst(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := mrNode(t, n, nil, selA1, selA2)
	b := mrNode(t, n, nil, selB1, selB2)
	s := newSink(t, b)
	if err := a.AddPeer(PeerConfig{Primary: selB1, NIDs: []lnetwire.NID{selB2}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetNIHealth(selA1, 900); err != nil {
		t.Fatal(err)
	}
	if err := a.SetPeerNIHealth(selB2, 500); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := put(t, a, selB2); err != nil {
			t.Fatal(err)
		}
	}
	if c := s.count(selB1, selA2); c != 10 {
		t.Errorf("want all 10 A2→B1, counts %v", s.got)
	}
	// Success raises the health of the NI used, never past the maximum.
	for _, ni := range a.Nets() {
		if ni.NID == selA2 && ni.Health != MaxHealthValue {
			t.Errorf("A2 health %d", ni.Health)
		}
	}
}

// TestResendOtherPeerNI: with B1 unreachable, PUTs to the Multi-Rail
// peer are resent to B2: every SEND succeeds, B1's health drops, the
// resend and remote-dropped counters move.
func TestResendOtherPeerNI(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	clk := &fakeClock{t: time.Now()}
	a := mrNode(t, n, clk, selA1)
	b := mrNode(t, n, nil, selB1, selB2)
	s := newSink(t, b)
	if err := a.AddPeer(PeerConfig{Primary: selB1, NIDs: []lnetwire.NID{selB2}}); err != nil {
		t.Fatal(err)
	}
	// B1 was heard from once (so it is worth recovering).
	if _, err := a.Ping(context.Background(), lnetwire.ProcessID{NID: selB1, PID: lnetwire.PIDLustre}, time.Second); err != nil {
		t.Fatal(err)
	}
	n.SetDown(selB1, true)
	for i := range 20 {
		if err := put(t, a, selB1); err != nil {
			t.Fatalf("PUT %d: %v", i, err)
		}
	}
	if got := s.count(selB1, selA1) + s.count(selB2, selA1); got != 20 {
		t.Errorf("%d of 20 arrived: %v", got, s.got)
	}
	st := a.HealthStats()
	if st.ResendCount == 0 || st.RemoteDroppedCount == 0 || st.SuccessfulResends == 0 || st.FailedResends != 0 {
		t.Errorf("health stats %+v", st)
	}
	d, _ := a.PeerOf(selB1)
	for _, ni := range d.NIs {
		switch ni.NID {
		case selB1:
			if ni.Health >= MaxHealthValue || ni.Dropped == 0 {
				t.Errorf("B1 %+v: want health below max and drops", ni)
			}
		case selB2:
			if ni.Health != MaxHealthValue {
				t.Errorf("B2 health %d", ni.Health)
			}
		}
	}
	// The link comes back: a recovery ping (due after 1 s of the fake
	// clock) succeeds and the REPLY from B1 raises its health.
	n.SetDown(selB1, false)
	for range 20 {
		clk.advance(time.Minute)
		a.mu.Lock()
		pings := a.recoveryPassLocked()
		a.mu.Unlock()
		for _, rp := range pings {
			a.sendRecoveryPing(rp)
		}
		if d, _ := a.PeerOf(selB1); d.NIs[0].Health == MaxHealthValue {
			return
		}
	}
	d, _ = a.PeerOf(selB1)
	t.Errorf("B1 did not recover: %+v", d.NIs)
}

// TestResendGivesUp: when every peer NI fails, the message fails after
// retry_count resends; with retry_count 0 it is not resent.
func TestResendGivesUp(t *testing.T) {
	for _, retries := range []int{0, 2} {
		n := lndtest.New(lnetwire.SOCKLND)
		a := mrNode(t, n, nil, selA1, selA2)
		mrNode(t, n, nil, selB1, selB2)
		g := a.Globals()
		g.RetryCount = retries
		a.SetGlobals(g)
		if err := a.AddPeer(PeerConfig{Primary: selB1, NIDs: []lnetwire.NID{selB2}}); err != nil {
			t.Fatal(err)
		}
		n.SetDown(selB1, true)
		n.SetDown(selB2, true)
		err := put(t, a, selB1)
		if !errors.Is(err, ErrPeerDown) {
			t.Errorf("retries %d: status %v, want ErrPeerDown", retries, err)
		}
		st := a.HealthStats()
		if st.ResendCount != uint64(retries) {
			t.Errorf("retries %d: %d resends", retries, st.ResendCount)
		}
		if retries > 0 && st.FailedResends != 1 {
			t.Errorf("retries %d: failed resends %d", retries, st.FailedResends)
		}
	}
}

// TestResendDeadline: past transaction_timeout a failed message is not
// resent.
func TestResendDeadline(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	clk := &fakeClock{t: time.Now()}
	a := mrNode(t, n, clk, selA1)
	mrNode(t, n, nil, selB1, selB2)
	if err := a.AddPeer(PeerConfig{Primary: selB1, NIDs: []lnetwire.NID{selB2}}); err != nil {
		t.Fatal(err)
	}
	n.Hold(true)
	h, _ := a.MDBind(MD{Start: []byte{1}, Threshold: 1}, AutoUnlink)
	if err := a.Put(lnetwire.NIDAny, h, AckReqNo, lnetwire.ProcessID{NID: selB1, PID: lnetwire.PIDLustre}, 9, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	clk.advance(a.Globals().TransactionTimeout + time.Second)
	n.SetDown(selB1, true)
	n.SetDown(selB2, true)
	n.Release(-1)
	if st := a.HealthStats(); st.ResendCount != 0 {
		t.Errorf("resent past the deadline: %+v", st)
	}
}

// TestHealthArithmetic: failures take health_sensitivity off (not below
// 0), successes add it back (not past the maximum); the recovery ping
// interval doubles up to max_recovery_ping_interval.
func TestHealthArithmetic(t *testing.T) {
	in := &Instance{globals: DefaultGlobals()}
	in.globals.HealthSensitivity = 300
	h := int32(MaxHealthValue)
	for _, want := range []int32{700, 400, 100, 0, 0} {
		in.decHealth(&h)
		if h != want {
			t.Fatalf("dec: %d, want %d", h, want)
		}
	}
	for _, want := range []int32{300, 600, 900, 1000, 1000} {
		in.incHealth(&h)
		if h != want {
			t.Fatalf("inc: %d, want %d", h, want)
		}
	}
	in.globals.MaxRecoveryPingInterval = 100 * time.Second
	for count, want := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 100, 100, 100, 100, 100} {
		if got := time.Duration(in.nextRecoveryPing(uint32(count), 0)); got != want*time.Second {
			t.Errorf("ping %d: next after %v, want %v", count, got, want*time.Second)
		}
	}
}

// TestClassify maps LND errors onto health statuses as Lustre's LNDs do.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want healthStatus
	}{
		{nil, hsOK},
		{lnd.ErrPeerDown, hsRemoteDropped},
		{lnd.ErrTimeout, hsNetworkTimeout},
		{lnd.ErrShutdown, hsLocalDropped},
		{lnd.ErrProto, hsLocalError},
		{ErrNoRoute, hsLocalNoRoute},
		{errors.New("other"), hsLocalError},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestUDSPSteers: UDSP priorities steer selection after health: a --src
// rule picks the local NI, a --dst rule the peer NI, a NID pair makes a
// local NID preferred; deleting the rules brings round robin back.
func TestUDSPSteers(t *testing.T) {
	n := lndtest.New(lnetwire.SOCKLND)
	a := mrNode(t, n, nil, selA1, selA2)
	b := mrNode(t, n, nil, selB1, selB2)
	s := newSink(t, b)
	if err := a.AddPeer(PeerConfig{Primary: selB1, NIDs: []lnetwire.NID{selB2}}); err != nil {
		t.Fatal(err)
	}
	send := func(k int) {
		t.Helper()
		for range k {
			if err := put(t, a, selB1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.AddUDSP(UDSPRule{Src: "10.1.1.[1-5]@tcp", Priority: 0}, -1); err != nil {
		t.Fatal(err)
	}
	if err := a.AddUDSP(UDSPRule{Dst: "10.1.0.2@tcp", Priority: 1}, -1); err != nil {
		t.Fatal(err)
	}
	send(10)
	if c := s.count(selB1, selA2); c != 10 {
		t.Errorf("src A2 + dst B1 rules: counts %v, want all 10 A2→B1", s.got)
	}
	// A NID pair: B2 prefers A1; with no other rule, the peer NI that
	// prefers the local NI chosen wins.
	if err := a.DelUDSP(-1); err != nil {
		t.Fatal(err)
	}
	if err := a.AddUDSP(UDSPRule{Src: "10.1.0.1@tcp", Dst: "*@tcp", Priority: 0}, 0); err != nil {
		t.Fatal(err)
	}
	if r := a.UDSPs(); len(r) != 1 || r[0].Src != "10.1.0.1@tcp" {
		t.Fatalf("rules %+v", r)
	}
	d, _ := a.PeerOf(selB2)
	for _, ni := range d.NIs {
		if len(ni.PrefNIDs) != 1 || ni.PrefNIDs[0] != selA1 {
			t.Errorf("%v preferred %v, want [%v]", ni.NID, ni.PrefNIDs, selA1)
		}
	}
	if err := a.DelUDSP(0); err != nil {
		t.Fatal(err)
	}
	if err := a.DelUDSP(0); !errors.Is(err, ErrNoEnt) {
		t.Errorf("deleting a missing rule: %v", err)
	}
	toB2, fromA1 := s.count(selB2, selA1)+s.count(selB2, selA2), s.count(selB1, selA1)+s.count(selB2, selA1)
	send(10)
	if s.count(selB2, selA1)+s.count(selB2, selA2) == toB2 || s.count(selB1, selA1)+s.count(selB2, selA1) == fromA1 {
		t.Errorf("without rules round robin should use A1 and B2 again: %v", s.got)
	}
	for _, bad := range []UDSPRule{{Src: "10.1.0.[5-1]@tcp"}, {Dst: "1.2.3@tcp"}, {Rte: "10.0.0.1@tcp"}, {}, {Src: "nonet"}} {
		if err := a.AddUDSP(bad, -1); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddUDSP(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}
