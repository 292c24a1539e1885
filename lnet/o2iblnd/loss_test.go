//go:build linux

package o2iblnd_test

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"softib/internal/netemu"
	"softib/internal/testenv"
	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/rxe"
	"softib/udp/udptest"
	"softib/wire/lnetwire"
)

// errLossHang marks an operation whose events did not come within the
// hang guard.
var errLossHang = errors.New("no completion event within the hang guard")

// lossOp runs one PUT (with ACK) or GET of size bytes from s to r's
// fresh MD and reports whether it succeeded. A success must carry the
// exact data (checked here: the sink's PUT event and buffer, or the GET
// reply buffer); a failure must be an error event. Buffers are only read
// after the event that says they are final.
func lossOp(t *testing.T, s, r *node, get bool, size int, bits uint64) (bool, error) {
	t.Helper()
	reqEQ, err := r.in.EQAlloc(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	sEQ, err := s.in.EQAlloc(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(size, byte(bits)^0x5a) // the GET source at r
	sinkBuf := make([]byte, size)          // the PUT sink at r
	md := lnet.MD{Start: sinkBuf, Threshold: 1, Options: lnet.MDOpPut, EQ: reqEQ}
	if get {
		md = lnet.MD{Start: data, Threshold: 1, Options: lnet.MDOpGet, EQ: reqEQ}
	}
	me, err := r.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, bits, 0, lnet.AutoUnlink, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	sinkMD, err := r.in.MDAttach(me, md, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	src := pattern(size, byte(bits))
	back := make([]byte, size)
	local := lnet.MD{Start: src, Threshold: 2, EQ: sEQ}
	if get {
		local.Start = back
	}
	h, err := s.in.MDBind(local, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if get {
		err = s.in.Get(lnetwire.NIDAny, h, r.id(), e2ePortal, bits, 0)
	} else {
		err = s.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, r.id(), e2ePortal, bits, 0, 0)
	}
	if err != nil {
		r.in.MDUnlink(sinkMD)
		return false, err
	}
	reply := lnet.EventAck
	if get {
		reply = lnet.EventReply
	}
	var sent, replied bool
	var opErr error
	deadline := time.Now().Add(hangGuard)
	for opErr == nil && !(sent && replied) {
		ev, _, err := s.in.EQPoll([]*lnet.EQ{sEQ}, time.Until(deadline))
		if err != nil {
			return false, errLossHang
		}
		switch {
		case ev.Status != nil:
			opErr = ev.Status
		case ev.Type == lnet.EventSend:
			sent = true
		case ev.Type == reply:
			replied = true
			if ev.MLength != size {
				t.Errorf("%v %d B: success event with mlength %d", ev.Type, size, ev.MLength)
			}
		default:
			t.Errorf("unexpected event %v", ev.Type)
		}
	}
	if opErr != nil {
		r.in.MDUnlink(sinkMD) // no late delivery into a buffer we stop watching
		// A PUT may still have landed: if r says so, it must be intact.
		if ev, _, err := r.in.EQPoll([]*lnet.EQ{reqEQ}, time.Millisecond); err == nil &&
			ev.Type == lnet.EventPut && ev.Status == nil && !bytes.Equal(sinkBuf, src) {
			t.Errorf("PUT %d B: sink reports success with wrong data (initiator saw %v)", size, opErr)
		}
		return false, opErr
	}
	if get {
		if !bytes.Equal(back, data) {
			t.Errorf("GET %d B: REPLY success with wrong data", size)
		}
		return true, nil
	}
	ev, _, err := r.in.EQPoll([]*lnet.EQ{reqEQ}, hangGuard)
	if err != nil {
		t.Errorf("PUT %d B: ACKed but the sink has no event: %v", size, err)
		return true, nil
	}
	if ev.Type != lnet.EventPut || ev.Status != nil || ev.MLength != size {
		t.Errorf("PUT %d B: ACKed but the sink event is %v status %v mlength %d", size, ev.Type, ev.Status, ev.MLength)
	}
	if !bytes.Equal(sinkBuf, src) {
		t.Errorf("PUT %d B: ACK success with wrong data at the sink", size)
	}
	return true, nil
}

// lossCfg and lossTun are the LND config and LNet tunables of the lossy
// runs: short LND and LNet timeouts bound every failure well inside the
// hang guard, and aliveness is off (a failure would report the peer
// down, and LNet would then refuse all but one message a second up
// front; every operation here is meant to try the lossy link).
var (
	lossCfg = o2iblnd.Config{Timeout: 10 * time.Second}
	lossTun = lnd.Tunables{PeerTimeout: -1}
)

// lossRounds runs rounds of PUTs and GETs of each size both ways between
// a and b over a lossy link: each must complete with verified data or
// fail with an error event, never succeed with wrong data, never hang
// (hangGuard). It logs and returns the outcome counts.
func lossRounds(t *testing.T, a, b *node, rounds int, sizes []int) (ok, failed int) {
	t.Helper()
	for _, x := range []*node{a, b} {
		g := lnet.DefaultGlobals()
		g.TransactionTimeout = 20 * time.Second
		x.in.SetGlobals(g)
	}
	errs := map[string]int{}
	bits := uint64(1000)
	for round := range rounds {
		for _, size := range sizes {
			for _, op := range []struct {
				name string
				s, r *node
				get  bool
			}{{"PUT a→b", a, b, false}, {"GET a←b", a, b, true}, {"PUT b→a", b, a, false}, {"GET b←a", b, a, true}} {
				bits++
				done, err := lossOp(t, op.s, op.r, op.get, size, bits)
				if errors.Is(err, errLossHang) {
					t.Fatalf("round %d %s %d B: %v", round, op.name, size, err)
				}
				if done {
					ok++
				} else {
					failed++
					errs[err.Error()]++
					t.Logf("round %d %s %d B failed: %v", round, op.name, size, err)
				}
			}
		}
	}
	t.Logf("%d operations succeeded with verified data, %d failed with an error event", ok, failed)
	for e, n := range errs {
		t.Logf("  %d× %s", n, e)
	}
	return ok, failed
}

// healed checks that, the link healed, the nodes move verified data
// again (a connection that failed under loss is replaced on demand).
func healed(t *testing.T, a, b *node) {
	t.Helper()
	bits := uint64(900000)
	waitFor(t, "a PUT after the link healed", func() bool {
		bits++
		ok, err := lossOp(t, a, b, false, 1<<20, bits)
		if !ok {
			t.Logf("PUT after healing: %v", err)
		}
		return ok
	})
}

// TestSimLossReorder is TestLossReorder on the simulated network: 10%
// loss and 10% reordering both ways (RDMA CM MADs included), three rounds
// of PUTs and GETs of 4 KiB .. 1 MiB both ways, deterministic for the
// seed, with the RC retry and LND timers on the bubble's clock.
func TestSimLossReorder(t *testing.T) {
	sim(t, 987, func(t *testing.T) {
		devA, mA, addrA := newDevice(t)
		devB, mB, addrB := newDevice(t)
		a := newNodeTun(t, devA, mA, addrA, lossCfg, lossTun)
		b := newNodeTun(t, devB, mB, addrB, lossCfg, lossTun)
		putGet(t, a, b, 4096, 1, 1) // clean link first
		nw := netFor(t).Sim
		nw.SetFaults(udptest.Faults{Drop: 0.10, Reorder: 0.10, ReorderGap: 3})
		lossRounds(t, a, b, 3, []int{4096, 16 << 10, 64 << 10, 256 << 10, 1 << 20})
		dropped, reordered := nw.Stats.Dropped.Load(), nw.Stats.Reordered.Load()
		t.Logf("network dropped %d reordered %d; rxe retries %d+%d", dropped, reordered,
			devA.(*rxe.Device).Stats()["CompRetry"], devB.(*rxe.Device).Stats()["CompRetry"])
		if dropped == 0 || reordered == 0 {
			t.Errorf("the impairment did not bite: dropped %d reordered %d", dropped, reordered)
		}
		nw.SetFaults(udptest.Faults{})
		healed(t, a, b)
	})
}

// TestLossReorder runs two o2ib nodes in separate network namespaces
// behind the netemu router with 10% loss and 10% reordering on RoCEv2
// (UDP 4791, so RDMA CM MADs too) both ways, and a series of PUTs and
// GETs of 4 KiB .. 1 MiB both ways. Each must complete with verified data
// or fail with an error event: never a success with wrong data, never a
// hang (hangGuard). Both outcomes are counted and logged; once the link
// heals, transfers succeed again. This is the real-socket tier of
// TestSimLossReorder: the kernel's UDP with GSO/GRO, a userspace router.
func TestLossReorder(t *testing.T) {
	testenv.RequireRoot(t)
	r := netemu.New(t, netemu.Config{NoIPv6: true, Seed: 987})
	devA, mA := nsDevice(t, r.A.Do, r.A.Addr, r.A.MTU)
	devB, mB := nsDevice(t, r.B.Do, r.B.Addr, r.B.MTU)
	a := newNodeTun(t, devA, mA, r.A.Addr, lossCfg, lossTun)
	b := newNodeTun(t, devB, mB, r.B.Addr, lossCfg, lossTun)
	putGet(t, a, b, 4096, 1, 1) // clean link first
	r.SetImpairment(netemu.Both, netemu.Impairment{Loss: 0.10, Reorder: 0.10, Match: netemu.Filter{Proto: 17, Port: 4791}})
	rounds := 1 // about 20 s; O2IB_LOSS_SOAK=N runs N rounds
	if n, err := strconv.Atoi(os.Getenv("O2IB_LOSS_SOAK")); err == nil && n > 0 {
		rounds = n
	}
	lossRounds(t, a, b, rounds, []int{4096, 64 << 10, 1 << 20})
	s := r.Stats()
	t.Logf("router A→B dropped %d reordered %d; B→A dropped %d reordered %d; rxe retries %d+%d",
		s.AtoB.Dropped, s.AtoB.Reordered, s.BtoA.Dropped, s.BtoA.Reordered,
		devA.(*rxe.Device).Stats()["CompRetry"], devB.(*rxe.Device).Stats()["CompRetry"])
	if s.AtoB.Dropped == 0 || s.BtoA.Dropped == 0 || s.AtoB.Reordered+s.BtoA.Reordered == 0 {
		t.Errorf("the impairment did not bite: %+v", s)
	}
	r.SetImpairment(netemu.Both, netemu.Impairment{})
	healed(t, a, b)
}
