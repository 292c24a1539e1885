package o2iblnd

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"softib/wire/lnetwire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func v2Params(q int) FlowParams {
	return FlowParams{Version: lnetwire.KibVersion2, QueueDepth: q, HighWater: HighWater(lnetwire.KibVersion2, 0, q, q),
		ConcurrentSends: ConcurrentSends(lnetwire.KibVersion2, 0, q, q)}
}

func TestFlowDerived(t *testing.T) {
	for _, tc := range []struct {
		ver               uint16
		hiw, pc, q, want  int
		cs, wantCS, rxbuf int
	}{
		{lnetwire.KibVersion2, 0, 8, 8, 4, 0, 8, 18},
		{lnetwire.KibVersion2, 0, 32, 32, 16, 64, 64, 66},
		{lnetwire.KibVersion2, 16, 32, 8, 7, 100, 16, 18}, // negotiated down: capped at Q-1, sends at 2Q
		{lnetwire.KibVersion2, 40, 32, 32, 31, 1, 16, 66}, // hiw ≥ peer credits: pc-1; cs at least Q/2
		{lnetwire.KibVersion1, 0, 8, 8, 7, 100, 16, 16},
	} {
		if got := HighWater(tc.ver, tc.hiw, tc.pc, tc.q); got != tc.want {
			t.Errorf("HighWater(%#x, %d, %d, %d) = %d, want %d", tc.ver, tc.hiw, tc.pc, tc.q, got, tc.want)
		}
		if got := ConcurrentSends(tc.ver, tc.cs, tc.pc, tc.q); got != tc.wantCS {
			t.Errorf("ConcurrentSends(%#x, %d, %d, %d) = %d, want %d", tc.ver, tc.cs, tc.pc, tc.q, got, tc.wantCS)
		}
		if got := RxBuffers(tc.ver, tc.q); got != tc.rxbuf {
			t.Errorf("RxBuffers(%#x, %d) = %d, want %d", tc.ver, tc.q, got, tc.rxbuf)
		}
	}
}

func TestFlowBasics(t *testing.T) {
	f := NewFlow[int](v2Params(8), t0)
	if f.Credits() != 8 || f.Reserved() != 8 || f.Outstanding() != 0 {
		t.Fatalf("initial %d/%d/%d", f.Credits(), f.Reserved(), f.Outstanding())
	}
	// Eight IMMEDIATEs use the eight credits; the ninth waits.
	for i := range 9 {
		f.Enqueue(i, lnetwire.KibIMMEDIATE)
	}
	for i := range 8 {
		p, ok := f.Next(t0)
		if !ok || p.Tx != i || p.Credits != 0 || p.Noop {
			t.Fatalf("post %d: %+v %v", i, p, ok)
		}
	}
	if _, ok := f.Next(t0); ok || f.Credits() != 0 || f.Queued() != 1 {
		t.Fatalf("no credit left, yet posted (credits %d queued %d)", f.Credits(), f.Queued())
	}
	// Credit-free messages still go, and carry what we owe.
	f.Reposted(RepostPeerCredit)
	f.Reposted(RepostPeerCredit)
	for range 8 {
		f.SendDone(lnetwire.KibIMMEDIATE)
	}
	f.Enqueue(100, lnetwire.KibPUTACK)
	p, ok := f.Next(t0)
	if !ok || p.Tx != 100 || p.Credits != 2 || f.Outstanding() != 0 {
		t.Fatalf("PUT_ACK: %+v %v outstanding %d", p, ok, f.Outstanding())
	}
	f.SendDone(lnetwire.KibPUTACK)
	// The peer returns 3 credits; the queued IMMEDIATE goes.
	if err := f.Received(lnetwire.KibIMMEDIATE, 3); err != nil {
		t.Fatal(err)
	}
	if p, ok := f.Next(t0); !ok || p.Tx != 8 || f.Credits() != 2 {
		t.Fatalf("after credits: %+v %v credits %d", p, ok, f.Credits())
	}
	// Overflow is a protocol error and changes nothing.
	if err := f.Received(lnetwire.KibNOOP, 7); !errors.Is(err, ErrCreditOverflow) || f.Credits() != 2 {
		t.Fatalf("overflow: %v credits %d", err, f.Credits())
	}
}

func TestFlowNoopAtHighWater(t *testing.T) {
	f := NewFlow[int](v2Params(8), t0)
	for range 3 {
		f.Reposted(RepostPeerCredit)
	}
	if _, ok := f.Next(t0); ok {
		t.Fatal("NOOP below the high-water mark")
	}
	f.Reposted(RepostPeerCredit) // 4 = hiw
	p, ok := f.Next(t0)
	if !ok || !p.Noop || p.Type != lnetwire.KibNOOP || p.Credits != 4 || f.Credits() != 8 {
		t.Fatalf("NOOP: %+v %v credits %d", p, ok, f.Credits())
	}
	// A queued IMMEDIATE carries the credits instead of a NOOP.
	f.SendDone(lnetwire.KibNOOP)
	for range 4 {
		f.Reposted(RepostPeerCredit)
	}
	f.Enqueue(1, lnetwire.KibIMMEDIATE)
	if p, ok := f.Next(t0); !ok || p.Noop || p.Tx != 1 || p.Credits != 4 {
		t.Fatalf("piggyback: %+v %v", p, ok)
	}
	// Keepalive: a NOOP after the idle time even with nothing owed.
	f.SendDone(lnetwire.KibIMMEDIATE)
	k := NewFlow[int](FlowParams{Version: lnetwire.KibVersion2, QueueDepth: 8, HighWater: 4, ConcurrentSends: 8, Keepalive: 100 * time.Second}, t0)
	if _, ok := k.Next(t0.Add(99 * time.Second)); ok {
		t.Fatal("keepalive too early")
	}
	if p, ok := k.Next(t0.Add(100 * time.Second)); !ok || !p.Noop || p.Credits != 0 {
		t.Fatalf("keepalive: %+v %v", p, ok)
	}
	if _, ok := k.Next(t0.Add(101 * time.Second)); ok {
		t.Fatal("second keepalive right after the first")
	}
}

func TestFlowReservedAndConcurrent(t *testing.T) {
	p := v2Params(2)
	p.ConcurrentSends = 2
	f := NewFlow[int](p, t0)
	f.Enqueue(1, lnetwire.KibPUTREQ)
	f.Enqueue(2, lnetwire.KibGETREQ)
	f.Enqueue(3, lnetwire.KibPUTREQ)
	a, _ := f.Next(t0)
	b, _ := f.Next(t0)
	if a.Tx != 1 || b.Tx != 2 || f.Reserved() != 0 {
		t.Fatalf("posted %v %v reserved %d", a.Tx, b.Tx, f.Reserved())
	}
	if _, ok := f.Next(t0); ok {
		t.Fatal("third request without a reserved credit")
	}
	// The reply to 1 frees its reserved credit, the sends complete, the
	// peer returns a credit: 3 goes.
	f.Reposted(RepostReservedCredit)
	if _, ok := f.Next(t0); ok {
		t.Fatal("posted beyond concurrent_sends / credits")
	}
	f.SendDone(lnetwire.KibPUTREQ)
	f.SendDone(lnetwire.KibGETREQ)
	if err := f.Received(lnetwire.KibPUTDONE, 1); err != nil {
		t.Fatal(err)
	}
	if c, ok := f.Next(t0); !ok || c.Tx != 3 {
		t.Fatalf("third: %+v %v", c, ok)
	}
	// Unpost restores the charge.
	cr, out := f.Credits(), f.Outstanding()
	f.Reposted(RepostPeerCredit)
	f.Enqueue(4, lnetwire.KibPUTDONE)
	d, _ := f.Next(t0)
	f.Unpost(d)
	if f.Credits() != cr || f.Outstanding() != out+1 || f.Posted() != 1 {
		t.Fatalf("unpost: credits %d outstanding %d posted %d", f.Credits(), f.Outstanding(), f.Posted())
	}
	if got := f.Drain(nil); len(got) != 0 {
		t.Fatalf("drain %v", got)
	}
}

func TestFlowV1(t *testing.T) {
	p := FlowParams{Version: lnetwire.KibVersion1, QueueDepth: 8, HighWater: 7, ConcurrentSends: 16}
	f := NewFlow[int](p, t0)
	for i := range 8 {
		f.Enqueue(i, lnetwire.KibIMMEDIATE)
	}
	n := 0
	for {
		if _, ok := f.Next(t0); !ok {
			break
		}
		n++
	}
	if n != 7 || f.Credits() != 1 {
		t.Fatalf("V1 posted %d, credits %d: the last credit is for NOOPs", n, f.Credits())
	}
	for range 7 {
		f.Reposted(RepostPeerCredit)
	}
	// Outstanding at 7, one credit, a queued IMMEDIATE: the NOOP takes the
	// last credit (V1 NOOPs consume credits).
	np, ok := f.Next(t0)
	if !ok || !np.Noop || np.Credits != 7 || f.Credits() != 0 {
		t.Fatalf("V1 NOOP: %+v %v credits %d", np, ok, f.Credits())
	}
	if RepostFor(lnetwire.KibVersion1, lnetwire.KibNOOP, false, 0) != RepostPeerCredit ||
		RepostFor(lnetwire.KibVersion1, lnetwire.KibNOOP, false, 3) != RepostNoCredit ||
		RepostFor(lnetwire.KibVersion2, lnetwire.KibNOOP, false, 0) != RepostNoCredit {
		t.Fatal("V1 NOOP reposts")
	}
	// A received NOOP with credits hands back the credit it consumed.
	if err := f.Received(lnetwire.KibNOOP, 2); err != nil || f.Outstanding() != 1 {
		t.Fatalf("V1 NOOP receive: %v outstanding %d", err, f.Outstanding())
	}
}

// simMsg is a message on the simulated wire.
type simMsg struct {
	typ     lnetwire.KibMsgType
	credits uint8
	token   bool // carries one of the sender's credits
	id      int
}

// simSide is one end of a simulated connection.
type simSide struct {
	f       *Flow[int]
	q       int
	rxFree  int
	wire    []simMsg // towards the other side, in order (RC)
	sending []lnetwire.KibMsgType
	cq      []simMsg // received, completion not processed yet
	// peerDone counts this side's messages whose receive completion the
	// peer processed; sendDone the send completions seen. Model: the
	// receiver's completion handler runs before the sender sees its send
	// completion (an RC ACK round trip), which the two out-of-band NOOP
	// buffers rely on.
	peerDone, sendDone int
	pending            []simMsg // processed, waiting for Recv
	// awaitDone counts acked PUT_REQs whose credit rides on the PUT_DONE.
	awaitDone   int
	reqs        int // PUT_REQ/GET_REQ enqueued
	repliesDone int // replies whose buffer gave back a reserved credit
	txs         map[int]lnetwire.KibMsgType
	nextID      int
	delivered   int
}

// TestFlowProperty runs two connected Flows under random interleavings
// of application sends, posts, send completions, deliveries, receive
// completions, delayed Recv and buffer reposts, checking at every step that credits stay
// in range, are conserved, never overflow, that no message ever arrives
// without a posted receive buffer (2Q+2), and that everything drains
// (no deadlock).
func TestFlowProperty(t *testing.T) {
	for _, ver := range []uint16{lnetwire.KibVersion2, lnetwire.KibVersion1} {
		for seed := range uint64(40) {
			rng := rand.New(rand.NewPCG(seed, uint64(ver)))
			q := []int{1, 2, 3, 8, 16}[seed%5]
			if ver == lnetwire.KibVersion1 {
				q = lnetwire.KibQueueDepthV1
			}
			hiw := HighWater(ver, rng.IntN(q+1), q, q)
			cs := ConcurrentSends(ver, rng.IntN(3*q+1), q, q)
			var ka time.Duration
			if seed%3 == 0 {
				ka = 5 * time.Second
			}
			p := FlowParams{Version: ver, QueueDepth: q, HighWater: hiw, ConcurrentSends: cs, Keepalive: ka}
			simRun(t, rng, p, seed)
		}
	}
}

func simRun(t *testing.T, rng *rand.Rand, p FlowParams, seed uint64) {
	now := t0
	mk := func() *simSide {
		return &simSide{f: NewFlow[int](p, now), q: p.QueueDepth, rxFree: RxBuffers(p.Version, p.QueueDepth), txs: map[int]lnetwire.KibMsgType{}}
	}
	sides := [2]*simSide{mk(), mk()}
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("v%#x seed %d Q %d hiw %d cs %d: "+format,
			append([]any{p.Version, seed, p.QueueDepth, p.HighWater, p.ConcurrentSends}, a...)...)
	}
	pump := func(s *simSide) {
		for {
			post, ok := s.f.Next(now)
			if !ok {
				return
			}
			m := simMsg{typ: post.Type, credits: post.Credits, id: post.Tx}
			switch post.Type {
			case lnetwire.KibIMMEDIATE, lnetwire.KibPUTREQ, lnetwire.KibGETREQ:
				m.token = true
			case lnetwire.KibNOOP:
				m.token = p.Version == lnetwire.KibVersion1
			}
			s.wire = append(s.wire, m)
			s.sending = append(s.sending, post.Type)
		}
	}
	enqueue := func(s *simSide, typ lnetwire.KibMsgType) {
		s.nextID++
		s.txs[s.nextID] = typ
		if typ == lnetwire.KibPUTREQ || typ == lnetwire.KibGETREQ {
			s.reqs++
		}
		s.f.Enqueue(s.nextID, typ)
	}
	repost := func(s *simSide, k RxRepost) {
		s.rxFree++
		s.f.Reposted(k)
	}
	check := func() {
		for i, s := range sides {
			o := sides[1-i]
			f := s.f
			if f.credits < 0 || f.credits > p.QueueDepth || f.outstanding < 0 || f.reserved < 0 ||
				f.reserved > p.QueueDepth || f.posted < 0 || f.posted > p.ConcurrentSends {
				fail("side %d out of range: credits %d outstanding %d reserved %d posted %d", i, f.credits, f.outstanding, f.reserved, f.posted)
			}
			// Send credits of s: held, owed by o, riding back, or tied up
			// in s's messages at o.
			tokens := f.credits + o.f.outstanding + o.awaitDone
			for _, m := range s.wire {
				if m.token {
					tokens++
				}
			}
			for _, m := range append(o.pending, o.cq...) {
				if m.token {
					tokens++
				}
			}
			for _, m := range o.wire {
				tokens += int(m.credits)
			}
			if tokens != p.QueueDepth {
				fail("side %d credit tokens %d != Q", i, tokens)
			}
			// Reserved credits: held, or taken by a request whose reply
			// buffer is not reposted yet.
			if taken := s.reqs - f.rsrvdq.len() - s.repliesDone; f.reserved+taken != p.QueueDepth {
				fail("side %d reserved %d + taken %d != Q", i, f.reserved, taken)
			}
		}
	}
	handle := func(s *simSide, m simMsg) {
		acked := false
		switch m.typ {
		case lnetwire.KibPUTREQ:
			if rng.IntN(4) == 0 {
				enqueue(s, lnetwire.KibPUTNAK)
			} else {
				acked = true
				enqueue(s, lnetwire.KibPUTACK)
			}
		case lnetwire.KibGETREQ:
			enqueue(s, lnetwire.KibGETDONE)
		case lnetwire.KibPUTACK:
			enqueue(s, lnetwire.KibPUTDONE)
		}
		k := RepostFor(p.Version, m.typ, acked, m.credits)
		switch {
		case acked:
			s.awaitDone++ // the PUT_REQ's credit now rides on its PUT_DONE
		case m.typ == lnetwire.KibPUTDONE:
			s.awaitDone--
		}
		switch m.typ {
		case lnetwire.KibPUTACK, lnetwire.KibPUTNAK, lnetwire.KibGETDONE:
			s.repliesDone++
		}
		s.delivered++
		repost(s, k)
	}
	deliver := func(from, to *simSide) {
		m := from.wire[0]
		from.wire = from.wire[1:]
		if to.rxFree == 0 {
			var held []string
			for _, x := range append(to.cq, to.pending...) {
				held = append(held, x.typ.String())
			}
			fail("message %v arrived with no receive buffer posted; held %v", m.typ, held)
		}
		to.rxFree--
		if err := to.f.Received(m.typ, m.credits); err != nil {
			fail("receive %v: %v", m.typ, err)
		}
		if m.typ == lnetwire.KibNOOP && p.Version == lnetwire.KibVersion1 && m.credits != 0 {
			m.token = false // Received already owes it back
		}
		to.cq = append(to.cq, m)
	}
	// complete runs the receive completion handler on the oldest
	// received message (kiblnd_handle_rx).
	complete := func(s, from *simSide) {
		m := s.cq[0]
		s.cq = s.cq[1:]
		from.peerDone++
		switch m.typ {
		case lnetwire.KibIMMEDIATE, lnetwire.KibPUTREQ, lnetwire.KibGETREQ:
			// Held until the core's Recv (lnet_parse may delay it).
			s.pending = append(s.pending, m)
		default:
			// Reposted at once.
			handle(s, m)
		}
	}
	budget := 300 + rng.IntN(300)
	for step := 0; ; step++ {
		check()
		quiet := true
		for _, s := range sides {
			if len(s.wire) > 0 || len(s.sending) > 0 || len(s.pending) > 0 || len(s.cq) > 0 || s.f.Queued() > 0 {
				quiet = false
			}
		}
		if budget == 0 && quiet {
			break
		}
		if step > 200000 {
			fail("no progress (deadlock): queued %d/%d", sides[0].f.Queued(), sides[1].f.Queued())
		}
		i := rng.IntN(2)
		s, o := sides[i], sides[1-i]
		switch rng.IntN(8) {
		case 6, 7:
			if len(s.cq) > 0 {
				complete(s, o)
			}
		case 0:
			if budget > 0 {
				budget--
				enqueue(s, []lnetwire.KibMsgType{lnetwire.KibIMMEDIATE, lnetwire.KibPUTREQ, lnetwire.KibGETREQ}[rng.IntN(3)])
			}
		case 1:
			if len(s.sending) > 0 && s.sendDone < s.peerDone {
				s.sendDone++
				s.f.SendDone(s.sending[0])
				s.sending = s.sending[1:]
			}
		case 2:
			if len(s.wire) > 0 {
				deliver(s, o)
			}
		case 3, 4:
			if len(s.pending) > 0 {
				j := rng.IntN(len(s.pending)) // Recv may be delayed and reordered
				m := s.pending[j]
				s.pending = append(s.pending[:j], s.pending[j+1:]...)
				handle(s, m)
			}
		case 5:
			now = now.Add(time.Duration(rng.IntN(3)) * time.Second)
		}
		pump(sides[0])
		pump(sides[1])
	}
	for i, s := range sides {
		if s.reqs != s.repliesDone {
			fail("side %d: %d requests, %d replies", i, s.reqs, s.repliesDone)
		}
	}
}
