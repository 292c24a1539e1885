package rxe

import (
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"testing"
	"time"

	"softib/verbs"
	"softib/wire/roce"
)

const us = int64(time.Microsecond)

func ecnDefaults(t *testing.T) *ECNConfig {
	t.Helper()
	c := &ECNConfig{Enable: true}
	if err := c.withDefaults(); err != nil {
		t.Fatal(err)
	}
	return c
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// TestECNConfig: off is the zero value, parameters without Enable and
// values out of range are refused, and Enable fills mlx5's defaults.
func TestECNConfig(t *testing.T) {
	var off ECNConfig
	if err := off.withDefaults(); err != nil || off != (ECNConfig{}) {
		t.Fatalf("zero config: %v %+v", err, off)
	}
	if err := (&ECNConfig{MinRate: 5}).withDefaults(); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("parameter without Enable: %v", err)
	}
	c := ecnDefaults(t)
	if c.MinTimeBetweenCNPs != 4*time.Microsecond || c.MaxRate != 100e9 || c.MinRate != 1e6 || c.AlphaG != 1019.0/1024 ||
		c.TimeReset != 300*time.Microsecond || c.ByteReset != 32767 || c.AIRate != 5e6 || c.HAIRate != 50e6 || c.Threshold != 1 {
		t.Fatalf("defaults: %+v", *c)
	}
	for _, bad := range []ECNConfig{
		{Enable: true, MinRate: -1},
		{Enable: true, MaxRate: 1e6, MinRate: 2e6},
		{Enable: true, AlphaG: 1},
		{Enable: true, MinDecFactor: 1.5},
		{Enable: true, MinTimeBetweenCNPs: -time.Second},
		{Enable: true, FirstCNPRate: 1e12},
		{Enable: true, AIRate: math.Inf(1)},
		{Enable: true, Burst: -1},
	} {
		if err := bad.withDefaults(); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestRateLimiterCut: the first CNP activates the limiter at MaxRate and
// cuts it by alpha/2; a CNP within RateReducePeriod does not cut again;
// alpha follows the AlphaG recurrence per AlphaPeriod; the rate never
// goes below MinRate.
func TestRateLimiterCut(t *testing.T) {
	c := ecnDefaults(t)
	r := rateLimiter{cfg: c}
	r.onCNP(0)
	a := c.InitialAlpha
	if !r.active || !near(r.rt, c.MaxRate) || !near(r.rc, c.MaxRate*(1-a/2)) || r.cuts != 1 {
		t.Fatalf("after the first CNP: %+v", r)
	}
	r.onCNP(2 * us) // within RateReducePeriod (4 µs)
	if r.cuts != 1 {
		t.Fatalf("cut again within the reduce period: %d cuts", r.cuts)
	}
	// At 10 µs: the period [0,1µs) had CNPs (alpha rises once), the
	// period [1,2) too (the CNP at 2 µs is in [2,3): rises at 3), then
	// decays for every period without.
	rc := r.rc
	r.onCNP(10 * us)
	g := c.AlphaG
	a = g*a + (1 - g) // period ending at 1 µs
	a *= g            // period ending at 2 µs: no CNP
	a = g*a + (1 - g) // period ending at 3 µs: the CNP at 2 µs
	a *= math.Pow(g, 7)
	if !near(r.alpha, a) {
		t.Fatalf("alpha %v, want %v", r.alpha, a)
	}
	// No rate-increase timer expiry since the first cut (TimeReset is
	// 300 µs): the target stays where it was (ConnectX's default,
	// clamp_tgt_rate off; TestRateLimiterClamp has the rest).
	if r.cuts != 2 || !near(r.rc, rc*(1-a/2)) || !near(r.rt, c.MaxRate) {
		t.Fatalf("second cut: rc %v rt %v, want %v %v", r.rc, r.rt, rc*(1-a/2), c.MaxRate)
	}
	for i := range 1000 {
		r.onCNP(20*us + int64(i)*5*us)
	}
	if r.rc != c.MinRate || r.minRate != c.MinRate {
		t.Fatalf("after 1000 CNPs: rate %v (min %v), want MinRate %v", r.rc, r.minRate, c.MinRate)
	}
}

// TestRateLimiterRecovery: without CNPs the timer raises the rate:
// additive increase while the byte counter is idle, hyper increase once
// both counters passed Threshold, until the limiter switches off at
// MaxRate; the whole path is a function of the times given.
func TestRateLimiterRecovery(t *testing.T) {
	c := ecnDefaults(t)
	c.MaxRate = 10e9
	c.ClampTargetRate = true
	r := rateLimiter{cfg: c}
	r.onCNP(0)
	r.onCNP(10 * us) // a second cut, clamped: the target is below MaxRate now
	rc, rt := r.rc, r.rt
	T := int64(c.TimeReset)
	base := 10 * us
	// Timer expiries only (no sends): additive increase each time.
	for k := int64(1); k <= 3; k++ {
		r.advance(base + k*T)
		rt += c.AIRate
		rc = (rt + rc) / 2
		if !near(r.rt, rt) || !near(r.rc, rc) || r.tCount != int(k) {
			t.Fatalf("timer expiry %d: rt %v rc %v, want %v %v", k, r.rt, r.rc, rt, rc)
		}
	}
	// Sends: every ByteReset bytes is an expiry of the byte counter;
	// with both counts above Threshold the target grows by HAIRate ×
	// (min count − Threshold).
	now := base + 3*T
	r.tokens = 1e12 // pacing is another test's
	for range 3 {
		if !r.admit(now, c.ByteReset) {
			t.Fatal("not admitted")
		}
	}
	// Byte expiries 1, 2, 3 with tCount 3: bCount 1 is additive
	// (min 1 is not > 1), 2 and 3 are hyper (min−F = 1, 2).
	rt += c.AIRate
	rc = (rt + rc) / 2
	rt += 1 * c.HAIRate
	rc = (rt + rc) / 2
	rt += 2 * c.HAIRate
	rc = (rt + rc) / 2
	if !near(r.rt, rt) || !near(r.rc, rc) || r.bCount != 3 {
		t.Fatalf("byte expiries: rt %v rc %v bCount %d, want %v %v 3", r.rt, r.rc, r.bCount, rt, rc)
	}
	// Sending at its rate for long enough, the QP recovers to MaxRate
	// and the limiter switches off.
	for i := 0; r.active; i++ {
		if i > 1e6 {
			t.Fatalf("no recovery: %+v", r)
		}
		now += 10 * us
		r.admit(now, 64<<10)
	}
	if r.rc != c.MaxRate || r.deadline() != 0 || !r.admit(now, 1<<30) {
		t.Fatalf("recovered: %+v", r)
	}
	t.Logf("recovered from %.3g to %.3g b/s in %v of sending", r.minRate, c.MaxRate, time.Duration(now-base-3*T))
}

// TestRateLimiterClamp: with ClampTargetRate off (ConnectX's default),
// a cut sets the target to the current rate only when the
// rate-increase timer expired since the previous cut
// (clamp_tgt_rate_after_time_inc); a byte-counter increase alone does
// not clamp. With it on, every cut clamps, as in the DCQCN paper.
func TestRateLimiterClamp(t *testing.T) {
	c := ecnDefaults(t)
	c.MaxRate = 10e9
	T := int64(c.TimeReset)
	r := rateLimiter{cfg: c}
	r.onCNP(0)
	r.onCNP(10 * us)
	if !near(r.rt, c.MaxRate) {
		t.Fatalf("cut without a timer expiry: target %v, want MaxRate", r.rt)
	}
	// A byte-counter expiry (sends), then a cut: still no clamp.
	r.tokens = 1e12
	r.admit(20*us, c.ByteReset)
	if r.bCount != 1 || r.tCount != 0 {
		t.Fatalf("counts %d/%d", r.bCount, r.tCount)
	}
	r.onCNP(30 * us)
	if !near(r.rt, c.MaxRate) {
		t.Fatalf("cut after a byte-counter increase: target %v, want MaxRate", r.rt)
	}
	// A timer expiry, then a cut: the target becomes the current rate.
	r.advance(30*us + T)
	if r.tCount != 1 {
		t.Fatalf("tCount %d", r.tCount)
	}
	rc := r.rc
	r.onCNP(30*us + T + us)
	if !near(r.rt, rc) || r.rc >= rc {
		t.Fatalf("cut after a timer expiry: target %v rate %v, want target %v", r.rt, r.rc, rc)
	}

	c.ClampTargetRate = true
	r = rateLimiter{cfg: c}
	r.onCNP(0)
	rc = r.rc
	r.onCNP(10 * us)
	if !near(r.rt, rc) {
		t.Fatalf("ClampTargetRate: target %v, want %v", r.rt, rc)
	}
}

// TestRateLimiterPacing: a throttled QP sends Burst bytes at once, then
// one packet per deadline, at the current rate.
func TestRateLimiterPacing(t *testing.T) {
	c := ecnDefaults(t)
	c.MaxRate, c.FirstCNPRate = 10e9, 80e6 // 10 MB/s
	c.TimeReset = time.Hour                // no increase during the test
	c.ByteReset = 0
	r := rateLimiter{cfg: c}
	r.onCNP(0)
	if !near(r.rc, 80e6) {
		t.Fatalf("FirstCNPRate: rc %v", r.rc)
	}
	const pkt = 4096 + 16
	n := 0
	for r.admit(0, pkt) {
		n++
	}
	if want := c.Burst/pkt + 1; n != want {
		t.Fatalf("burst: %d packets, want %d", n, want)
	}
	// Then the deadline paces: over one simulated second the QP sends
	// 10 MB (plus the burst).
	sent := n * pkt
	now := int64(0)
	for now < int64(time.Second) {
		dl := r.deadline()
		if dl <= now {
			t.Fatalf("deadline %d not after %d", dl, now)
		}
		if r.admit(dl-1, pkt) {
			t.Fatalf("admitted before the deadline")
		}
		now = dl
		for r.admit(now, pkt) {
			sent += pkt
		}
	}
	rate := float64(sent-c.Burst) * 8 / (float64(now) / 1e9)
	if math.Abs(rate-80e6)/80e6 > 0.01 {
		t.Fatalf("paced at %.4g b/s, want 80e6", rate)
	}
}

// TestCNPPacing: the notification point sends at most one CNP per
// MinTimeBetweenCNPs per QP.
func TestCNPPacing(t *testing.T) {
	c := ecnDefaults(t)
	var cc congestion
	gap := int64(c.MinTimeBetweenCNPs)
	var sent []int64
	for now := int64(0); now < 20*us; now += us / 2 {
		if cc.cnpDue(now, gap) {
			sent = append(sent, now)
		}
	}
	want := []int64{0, 4 * us, 8 * us, 12 * us, 16 * us}
	if len(sent) != len(want) {
		t.Fatalf("CNPs at %v, want %v", sent, want)
	}
	for i := range want {
		if sent[i] != want[i] {
			t.Fatalf("CNPs at %v, want %v", sent, want)
		}
	}
}

// TestRateLimiterAllocs: the gate and CNP handling allocate nothing.
func TestRateLimiterAllocs(t *testing.T) {
	c := ecnDefaults(t)
	r := rateLimiter{cfg: c}
	now := int64(0)
	if a := testing.AllocsPerRun(1000, func() {
		now += us
		if now%(50*us) == 0 {
			r.onCNP(now)
		}
		r.admit(now, 4096)
		r.deadline()
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

// feedClass is fuzzRig.feed with the datagram's received traffic class.
func (r *fuzzRig) feedClass(b []byte, tos uint8) {
	p := r.dev.getPacket()
	p.n = copy(p.buf[:], b)
	p.addr = r.peer
	p.cls = ipClass{tos: tos}
	if q := r.dev.recv(p, &r.enc); q != nil {
		q.mu.Lock()
		q.process()
		q.mu.Unlock()
	} else {
		r.dev.putPacket(p)
	}
}

// statsDelta returns the counters that changed between two snapshots.
func statsDelta(before, after map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after {
		// SentPkts: the rig's QPs answer the peer (NAKs, ACKs) as the
		// round finds them; not what these tests count.
		if v != before[k] && k != "SentPkts" {
			d[k] = v - before[k]
		}
	}
	return d
}

// TestRecvCNP: a CNP for an RC QP is counted and ignored with ECN off
// (as Linux rxe drops it) and feeds the QP's rate limiter with ECN on,
// as it does a UD QP's; the GSI QP refuses it; a CE-marked packet (RC or
// UD) sends one CNP per MinTimeBetweenCNPs with ECN on and none with it
// off.
func TestRecvCNP(t *testing.T) {
	rig := newFuzzRig(t)
	cnp := make([]byte, 64)
	n, _ := roceBuildCNP(cnp, 0x11)
	cnp = cnp[:n]
	want := func(what string, got map[string]uint64, w map[string]uint64) {
		t.Helper()
		if len(got) != len(w) {
			t.Errorf("%s: counters %v, want %v", what, got, w)
			return
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("%s: counters %v, want %v", what, got, w)
				return
			}
		}
	}
	before := rig.dev.Stats()
	rig.feed(cnp)
	want("ECN off", statsDelta(before, rig.dev.Stats()), map[string]uint64{"RcvdPkts": 1, "RPCNPIgnored": 1})
	// A CE-marked request with ECN off: processed as any other, no CNP.
	send := seedPacket(roce.RCSendOnly, 0x11, 0, 8, nil)
	before = rig.dev.Stats()
	rig.feedClass(send, ecnCE)
	if d := statsDelta(before, rig.dev.Stats()); d["NPECNMarked"] != 0 || d["NPCNPSent"] != 0 {
		t.Errorf("ECN off, CE: %v", d)
	}

	rig.dev.cfg.ECN = ECNConfig{Enable: true}
	if err := rig.dev.cfg.ECN.withDefaults(); err != nil {
		t.Fatal(err)
	}
	before = rig.dev.Stats()
	rig.feed(cnp)
	want("ECN on", statsDelta(before, rig.dev.Stats()), map[string]uint64{"RcvdPkts": 1, "RPCNPHandled": 1})
	q := rig.dev.lookupQP(0x11)
	q.mu.Lock()
	active := q.cc != nil && q.cc.rp.active
	q.mu.Unlock()
	if !active {
		t.Fatal("CNP did not start the rate limiter")
	}
	udQPN := uint32(0)
	for _, qpn := range []uint32{0x13, 0x14} {
		if qq := rig.dev.lookupQP(qpn); qq != nil && qq.typ == verbs.QPTypeUD {
			udQPN = qpn
		}
	}
	if udQPN == 0 {
		t.Fatal("the rig has no UD QP")
	}
	// A UD QP's limiter takes CNPs too; the GSI QP's does not.
	c := make([]byte, 64)
	n, _ = roceBuildCNP(c, udQPN)
	before = rig.dev.Stats()
	rig.feed(c[:n])
	want("UD", statsDelta(before, rig.dev.Stats()), map[string]uint64{"RcvdPkts": 1, "RPCNPHandled": 1})
	if active, _, _, _ := QPRate(rig.dev.lookupQP(udQPN)); !active {
		t.Fatal("CNP did not start the UD QP's rate limiter")
	}
	n, _ = roceBuildCNP(c, 1)
	before = rig.dev.Stats()
	rig.feed(c[:n])
	want("GSI", statsDelta(before, rig.dev.Stats()), map[string]uint64{"BadQPType": 1})
	// A CE-marked UD datagram: one CNP (to its DETH source QP: the
	// loopback test TestECNLoopbackUD sees where it goes).
	ud := seedPacket(roce.UDSendOnly, udQPN, 0, 8, func(b []byte) {
		roce.DETH(b[roce.BTHSize:]).Encode(&roce.DETHFields{QKey: 0x1234, SrcQP: 0x55})
	})
	before = rig.dev.Stats()
	rig.feedClass(ud, ecnCE)
	if d := statsDelta(before, rig.dev.Stats()); d["NPECNMarked"] != 1 || d["NPCNPSent"] != 1 {
		t.Fatalf("CE-marked UD datagram: %v", d)
	}
	// CE-marked packets: the first sends a CNP; the next ones, fed within
	// the same microseconds, are only counted. (The requests themselves
	// are out of sequence or duplicates: only the CE counters matter.)
	before = rig.dev.Stats()
	rig.feedClass(seedPacket(roce.RCSendOnly, 0x11, 1, 8, nil), ecnCE)
	d := statsDelta(before, rig.dev.Stats())
	if d["NPECNMarked"] != 1 || d["NPCNPSent"] != 1 {
		t.Fatalf("first CE: %v", d)
	}
	q.mu.Lock()
	q.cc.lastCNP = q.dev.now() + int64(time.Hour) // the next CE is "within" the gap
	q.mu.Unlock()
	before = rig.dev.Stats()
	rig.feedClass(seedPacket(roce.RCSendOnly, 0x11, 2, 8, nil), ecnCE)
	rig.feedClass(seedPacket(roce.RCSendOnly, 0x11, 3, 8, nil), ecnECT0)
	d = statsDelta(before, rig.dev.Stats())
	if d["NPECNMarked"] != 1 || d["NPCNPSent"] != 0 {
		t.Fatalf("CE within MinTimeBetweenCNPs, then ECT(0): %v", d)
	}
}

// roceBuildCNP builds a CNP for qpn from the rig's peer, ICRC included.
func roceBuildCNP(b []byte, qpn uint32) (int, error) {
	n, err := roce.BuildCNP(b, qpn, roce.DefaultPKey)
	if err != nil {
		return 0, err
	}
	binary.LittleEndian.PutUint32(b[n-4:], roce.ICRCFor(fuzzPeer, fuzzLocal, b[:n]))
	return n, nil
}

// TestCongestionResetWithQP: a QP reset forgets its rate limiter, so a
// new connection starts at full rate.
func TestCongestionResetWithQP(t *testing.T) {
	rig := newFuzzRig(t)
	rig.dev.cfg.ECN = ECNConfig{Enable: true}
	if err := rig.dev.cfg.ECN.withDefaults(); err != nil {
		t.Fatal(err)
	}
	cnp := make([]byte, 64)
	n, _ := roceBuildCNP(cnp, 0x11)
	rig.feed(cnp[:n])
	q := rig.dev.lookupQP(0x11)
	// The limiter's state as the CNP left it, read without advancing it
	// to the wall clock (QPRate does): on a loaded machine the limiter
	// may already have recovered by the time the test reads it, and
	// nothing here sends, so nothing else advances it.
	q.mu.Lock()
	active := q.cc != nil && q.cc.rp.active
	q.mu.Unlock()
	if !active {
		t.Fatal("CNP did not start the rate limiter")
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	cc := q.cc
	q.mu.Unlock()
	if cc != nil {
		t.Fatal("congestion state kept across a reset")
	}
}

// TestMcastNotCE: a multicast datagram is never CE for the notification
// point (the group sockets read no traffic class), even when the pooled
// packet its copy is made in last carried CE: no mark is counted and no
// CNP goes to the sender's UD QP.
func TestMcastNotCE(t *testing.T) {
	rig := newFuzzRig(t)
	rig.dev.cfg.ECN = ECNConfig{Enable: true}
	if err := rig.dev.cfg.ECN.withDefaults(); err != nil {
		t.Fatal(err)
	}
	ud := rig.dev.lookupQP(0x13)
	if ud == nil || ud.typ != verbs.QPTypeUD {
		t.Fatal("the rig has no UD QP 0x13")
	}
	group := netip.MustParseAddrPort("239.1.2.4:4791")
	mgid := verbs.GIDFromAddr(group.Addr())
	if err := verbs.AttachMcast(ud, mgid, 0); err != nil {
		t.Fatal(err)
	}
	rig.dev.mcast.mu.Lock()
	g := rig.dev.mcast.groups[mgid]
	rig.dev.mcast.mu.Unlock()
	b := seedPacket(roce.UDSendOnly, verbs.MulticastQPN, 0, 8, func(b []byte) {
		roce.DETH(b[roce.BTHSize:]).Encode(&roce.DETHFields{QKey: 0x1234, SrcQP: 0x55})
	})
	binary.LittleEndian.PutUint32(b[len(b)-4:], roce.ICRCFor(fuzzPeer, group, b))
	before := rig.dev.Stats()
	for range 4 {
		p := rig.dev.getPacket()
		p.n, p.addr, p.cls = copy(p.buf[:], b), fuzzPeer, ipClass{tos: ecnCE}
		stale := rig.dev.getPacket() // the copy's buffer, most likely
		stale.cls = ipClass{tos: ecnCE}
		rig.dev.putPacket(stale)
		rig.dev.mcastInput(g, p, &rig.enc)
		rig.dev.putPacket(p)
		ud.mu.Lock()
		ud.process()
		ud.mu.Unlock()
	}
	d := statsDelta(before, rig.dev.Stats())
	if d["RcvdPkts"] != 4 || d["NPECNMarked"] != 0 || d["NPCNPSent"] != 0 {
		t.Fatalf("multicast datagrams: %v", d)
	}
}
