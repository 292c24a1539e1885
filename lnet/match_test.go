package lnet_test

import (
	"bytes"
	"errors"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

type matchOp struct {
	get     bool // GET instead of PUT
	bits    uint64
	roffset int
	length  int
}

type matchWant struct {
	matched  bool
	mlen     int
	offset   int
	unlinked bool
}

type matchCase struct {
	name     string
	match    lnetwire.ProcessID // ME match id; zero = ProcessIDAny
	bits     uint64
	ignore   uint64
	mdLen    int
	opts     lnet.MDOptions
	thresh   int
	maxSize  int
	unlink   lnet.Unlink
	ops      []matchOp
	want     []matchWant
	dropMore bool // after ops, a further PUT must not match
}

func put(bits uint64, n int) matchOp        { return matchOp{bits: bits, length: n} }
func putAt(bits uint64, off, n int) matchOp { return matchOp{bits: bits, roffset: off, length: n} }
func get(bits uint64, off, n int) matchOp {
	return matchOp{get: true, bits: bits, roffset: off, length: n}
}
func ok(mlen, off int) matchWant         { return matchWant{matched: true, mlen: mlen, offset: off} }
func okUnlinked(mlen, off int) matchWant { return matchWant{true, mlen, off, true} }

var miss = matchWant{}

const (
	opPut = lnet.MDOpPut
	opGet = lnet.MDOpGet
	opPG  = lnet.MDOpPut | lnet.MDOpGet
	trunc = lnet.MDTruncate
	mrem  = lnet.MDManageRemote
	maxsz = lnet.MDMaxSize
	inf   = lnet.ThreshInf
)

func TestMatchRules(t *testing.T) {
	pidA := lnetwire.PIDLustre
	cases := []matchCase{
		{name: "exact bits", bits: 0x10, mdLen: 100, opts: opPut, thresh: 1, ops: []matchOp{put(0x10, 100)}, want: []matchWant{ok(100, 0)}},
		{name: "bits mismatch", bits: 0x10, mdLen: 100, opts: opPut, thresh: 1, ops: []matchOp{put(0x11, 10)}, want: []matchWant{miss}},
		{name: "ignore bits match", bits: 0x10, ignore: 0x0F, mdLen: 100, opts: opPut, thresh: inf, ops: []matchOp{put(0x1F, 1), put(0x13, 1), put(0x20, 1)}, want: []matchWant{ok(1, 0), ok(1, 1), miss}},
		{name: "ignore all bits", bits: 0, ignore: ^uint64(0), mdLen: 10, opts: opPut, thresh: inf, ops: []matchOp{put(0xdeadbeef, 1)}, want: []matchWant{ok(1, 0)}},
		{name: "nid wildcard pid exact", match: lnetwire.ProcessID{NID: lnetwire.NIDAny, PID: pidA}, mdLen: 10, opts: opPut, thresh: 1, ops: []matchOp{put(0, 5)}, want: []matchWant{ok(5, 0)}},
		{name: "nid exact pid wildcard", match: lnetwire.ProcessID{NID: nidA, PID: lnetwire.PIDAny}, mdLen: 10, opts: opPut, thresh: 1, ops: []matchOp{put(0, 5)}, want: []matchWant{ok(5, 0)}},
		{name: "nid exact pid exact", match: lnetwire.ProcessID{NID: nidA, PID: pidA}, mdLen: 10, opts: opPut, thresh: 1, ops: []matchOp{put(0, 5)}, want: []matchWant{ok(5, 0)}},
		{name: "nid mismatch", match: lnetwire.ProcessID{NID: lnetwire.MustParseNID("10.0.0.9@tcp"), PID: lnetwire.PIDAny}, mdLen: 10, opts: opPut, thresh: 1, ops: []matchOp{put(0, 5)}, want: []matchWant{miss}},
		{name: "pid mismatch", match: lnetwire.ProcessID{NID: lnetwire.NIDAny, PID: 999}, mdLen: 10, opts: opPut, thresh: 1, ops: []matchOp{put(0, 5)}, want: []matchWant{miss}},
		{name: "GET-only MD refuses PUT", mdLen: 10, opts: opGet, thresh: inf, ops: []matchOp{put(0, 5), get(0, 0, 5)}, want: []matchWant{miss, ok(5, 0)}},
		{name: "PUT-only MD refuses GET", mdLen: 10, opts: opPut, thresh: inf, ops: []matchOp{get(0, 0, 5), put(0, 5)}, want: []matchWant{miss, ok(5, 0)}},
		{name: "oversize dropped", mdLen: 50, opts: opPut, thresh: inf, ops: []matchOp{put(0, 100), put(0, 50)}, want: []matchWant{miss, ok(50, 0)}},
		{name: "oversize truncated", mdLen: 50, opts: opPut | trunc, thresh: inf, ops: []matchOp{put(0, 100), put(0, 10)}, want: []matchWant{ok(50, 0), ok(0, 50)}},
		{name: "local offset advances", mdLen: 100, opts: opPut, thresh: inf, ops: []matchOp{put(0, 30), put(0, 30), put(0, 50), put(0, 40)}, want: []matchWant{ok(30, 0), ok(30, 30), miss, ok(40, 60)}},
		{name: "manage remote", mdLen: 100, opts: opPut | mrem, thresh: inf, ops: []matchOp{putAt(0, 20, 10), putAt(0, 0, 5), putAt(0, 95, 10)}, want: []matchWant{ok(10, 20), ok(5, 0), miss}},
		{name: "manage remote truncate", mdLen: 100, opts: opPut | mrem | trunc, thresh: inf, ops: []matchOp{putAt(0, 95, 10), putAt(0, 200, 10)}, want: []matchWant{ok(5, 95), ok(0, 200)}},
		{name: "max size", mdLen: 100, opts: opPut | maxsz, maxSize: 40, thresh: inf, ops: []matchOp{put(0, 30), put(0, 50), put(0, 40), put(0, 1)}, want: []matchWant{ok(30, 0), miss, ok(40, 30), miss}},
		{name: "max size truncate auto-unlink", mdLen: 100, opts: opPut | maxsz | trunc, maxSize: 40, thresh: inf, unlink: lnet.AutoUnlink, ops: []matchOp{put(0, 50), put(0, 50)}, want: []matchWant{ok(40, 0), okUnlinked(40, 40)}, dropMore: true},
		{name: "threshold counts", mdLen: 100, opts: opPut, thresh: 2, ops: []matchOp{put(0, 1), put(0, 1), put(0, 1)}, want: []matchWant{ok(1, 0), ok(1, 1), miss}},
		{name: "threshold with GETs", mdLen: 100, opts: opPG | mrem, thresh: 2, ops: []matchOp{get(0, 0, 10), put(0, 1), get(0, 0, 1)}, want: []matchWant{ok(10, 0), ok(1, 0), miss}},
		{name: "threshold inf", mdLen: 10, opts: opPut | mrem, thresh: inf, ops: []matchOp{put(0, 10), put(0, 10), put(0, 10), put(0, 10)}, want: []matchWant{ok(10, 0), ok(10, 0), ok(10, 0), ok(10, 0)}},
		{name: "threshold zero", mdLen: 10, opts: opPut, thresh: 0, ops: []matchOp{put(0, 1)}, want: []matchWant{miss}},
		{name: "auto-unlink at threshold", mdLen: 10, opts: opPut, thresh: 1, unlink: lnet.AutoUnlink, ops: []matchOp{put(0, 4)}, want: []matchWant{okUnlinked(4, 0)}, dropMore: true},
		{name: "retain keeps exhausted MD", mdLen: 10, opts: opPut, thresh: 1, unlink: lnet.Retain, ops: []matchOp{put(0, 4), put(0, 4)}, want: []matchWant{ok(4, 0), miss}},
		{name: "GET truncated", mdLen: 50, opts: opGet | trunc, thresh: inf, ops: []matchOp{get(0, 0, 100)}, want: []matchWant{ok(50, 0)}},
		{name: "GET oversize dropped", mdLen: 50, opts: opGet, thresh: inf, ops: []matchOp{get(0, 0, 100)}, want: []matchWant{miss}},
		{name: "GET manage remote", mdLen: 100, opts: opGet | mrem, thresh: inf, ops: []matchOp{get(0, 60, 40), get(0, 10, 5)}, want: []matchWant{ok(40, 60), ok(5, 10)}},
		{name: "zero-length PUT", mdLen: 0, opts: opPut, thresh: 1, ops: []matchOp{put(0, 0)}, want: []matchWant{ok(0, 0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runMatchCase(t, c) })
	}
}

func runMatchCase(t *testing.T, c matchCase) {
	const portal = 12
	p := newPair(t, lnd.Tunables{})
	match := c.match
	if match == (lnetwire.ProcessID{}) {
		match = lnetwire.ProcessIDAny
	}
	me, err := p.b.MEAttach(portal, match, c.bits, c.ignore, lnet.AutoUnlink, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	mem := pattern(c.mdLen, 100)
	if _, err := p.b.MDAttach(me, lnet.MD{Start: mem, Threshold: c.thresh, MaxSize: c.maxSize, Options: c.opts, EQ: p.eqB}, c.unlink); err != nil {
		t.Fatal(err)
	}
	ops := c.ops
	wants := c.want
	if c.dropMore {
		ops = append(ops, put(c.bits, 1))
		wants = append(wants, miss)
	}
	for i, op := range ops {
		want := wants[i]
		before := p.b.Stats().DropCount
		var data []byte
		if op.get {
			sink := make([]byte, op.length)
			h, _ := p.a.MDBind(lnet.MD{Start: sink, Threshold: 2, Options: lnet.MDTruncate, EQ: p.eqA}, lnet.AutoUnlink)
			if err := p.a.Get(lnetwire.NIDAny, h, p.idB(), portal, op.bits, op.roffset); err != nil {
				t.Fatal(err)
			}
			data = sink
		} else {
			data = pattern(op.length, byte(i+1))
			h, _ := p.a.MDBind(lnet.MD{Start: data, Threshold: 1, EQ: p.eqA}, lnet.AutoUnlink)
			if err := p.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, p.idB(), portal, op.bits, op.roffset, 0); err != nil {
				t.Fatal(err)
			}
		}
		evB := drain(t, p.eqB)
		evA := drain(t, p.eqA)
		if !want.matched {
			if len(evB) != 0 {
				t.Errorf("op %d: want no match, target got %v", i, types(evB))
			}
			if p.b.Stats().DropCount != before+1 {
				t.Errorf("op %d: drop not counted", i)
			}
			for _, e := range evA {
				if e.Type != lnet.EventSend {
					t.Errorf("op %d: initiator got %s for a dropped request", i, evStr(e))
				}
			}
			continue
		}
		if len(evB) != 1 {
			t.Fatalf("op %d: target events %v", i, types(evB))
		}
		e := evB[0]
		wantType := lnet.EventPut
		if op.get {
			wantType = lnet.EventGet
		}
		if e.Type != wantType || e.Status != nil || e.MLength != want.mlen || e.Offset != want.offset || e.RLength != op.length || e.Unlinked != want.unlinked {
			t.Errorf("op %d: event %s, want mlen %d off %d unlinked %v", i, evStr(e), want.mlen, want.offset, want.unlinked)
		}
		if e.Initiator != p.idA() || e.Target != p.idB() || e.Sender != nidA || e.MatchBits != op.bits || e.Portal != portal {
			t.Errorf("op %d: event ids %s", i, evStr(e))
		}
		if op.get {
			var rep *lnet.Event
			for k := range evA {
				if evA[k].Type == lnet.EventReply {
					rep = &evA[k]
				}
			}
			if rep == nil || rep.MLength != want.mlen || rep.Status != nil {
				t.Fatalf("op %d: initiator events %v", i, types(evA))
			}
			if !bytes.Equal(data[:want.mlen], mem[want.offset:want.offset+want.mlen]) {
				t.Errorf("op %d: GET data mismatch", i)
			}
		} else if want.mlen > 0 && !bytes.Equal(mem[want.offset:want.offset+want.mlen], data[:want.mlen]) {
			t.Errorf("op %d: PUT data not at offset %d", i, want.offset)
		}
	}
}

// TestInsertPositions checks which of several matching MEs wins.
func TestInsertPositions(t *testing.T) {
	const portal = 3
	p := newPair(t, lnd.Tunables{})
	var order []string
	attach := func(me *lnet.ME, name string) {
		t.Helper()
		_, err := p.b.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: 1, Options: opPut, UserPtr: name,
			Handler: func(ev *lnet.Event) { order = append(order, ev.MD.UserPtr.(string)) }}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
	}
	any := lnetwire.ProcessIDAny
	m1, _ := p.b.MEAttach(portal, any, 1, 0, lnet.AutoUnlink, lnet.InsAfter)  // [m1]
	m2, _ := p.b.MEAttach(portal, any, 1, 0, lnet.AutoUnlink, lnet.InsAfter)  // [m1 m2]
	m3, _ := p.b.MEAttach(portal, any, 1, 0, lnet.AutoUnlink, lnet.InsBefore) // [m3 m1 m2]
	m4, _ := p.b.MEInsert(m1, any, 1, 0, lnet.AutoUnlink, lnet.InsAfter)      // [m3 m1 m4 m2]
	m5, _ := p.b.MEInsert(m3, any, 1, 0, lnet.AutoUnlink, lnet.InsBefore)     // [m5 m3 m1 m4 m2]
	m6, _ := p.b.MEAttach(portal, any, 1, 0, lnet.AutoUnlink, lnet.InsLocal)  // [... m2 m6]
	m7, _ := p.b.MEInsert(m2, any, 1, 0, lnet.AutoUnlink, lnet.InsBefore)     // [m5 m3 m1 m4 m7 m2 m6]
	for _, x := range []struct {
		me   *lnet.ME
		name string
	}{{m1, "m1"}, {m2, "m2"}, {m3, "m3"}, {m4, "m4"}, {m5, "m5"}, {m6, "m6"}, {m7, "m7"}} {
		attach(x.me, x.name)
	}
	for range 8 {
		h, _ := p.a.MDBind(lnet.MD{Start: []byte{1}, Threshold: 1}, lnet.AutoUnlink)
		p.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, p.idB(), portal, 1, 0, 0)
	}
	want := []string{"m5", "m3", "m1", "m4", "m7", "m2", "m6"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	if p.b.Stats().DropCount != 1 {
		t.Errorf("8th PUT should drop: %+v", p.b.Stats())
	}
	// An ME without an MD is skipped.
	bare, _ := p.b.MEAttach(portal, any, 1, 0, lnet.Retain, lnet.InsBefore)
	m8, _ := p.b.MEAttach(portal, any, 1, 0, lnet.AutoUnlink, lnet.InsAfter)
	attach(m8, "m8")
	h, _ := p.a.MDBind(lnet.MD{Start: []byte{1}, Threshold: 1}, lnet.AutoUnlink)
	p.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, p.idB(), portal, 1, 0, 0)
	if order[len(order)-1] != "m8" {
		t.Errorf("bare ME not skipped: %v", order)
	}
	if err := p.b.MEUnlink(bare); err != nil {
		t.Fatal(err)
	}
	if err := p.b.MEUnlink(bare); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("double unlink: %v", err)
	}
}

func TestPortalKind(t *testing.T) {
	in := newLo(t)
	exact := lnetwire.ProcessID{NID: nidA, PID: 12345}
	if _, err := in.MEAttach(20, exact, 5, 0, lnet.Retain, lnet.InsAfter); err != nil {
		t.Fatal(err)
	}
	if _, err := in.MEAttach(20, lnetwire.ProcessIDAny, 5, 0, lnet.Retain, lnet.InsAfter); !errors.Is(err, lnet.ErrPortalType) {
		t.Errorf("wildcard ME on unique portal: %v", err)
	}
	if _, err := in.MEAttach(20, exact, 5, 1, lnet.Retain, lnet.InsAfter); !errors.Is(err, lnet.ErrPortalType) {
		t.Errorf("ignore bits on unique portal: %v", err)
	}
	if _, err := in.MEAttach(21, lnetwire.ProcessIDAny, 5, 0, lnet.Retain, lnet.InsAfter); err != nil {
		t.Fatal(err)
	}
	if _, err := in.MEAttach(21, exact, 5, 0, lnet.Retain, lnet.InsAfter); !errors.Is(err, lnet.ErrPortalType) {
		t.Errorf("exact ME on wildcard portal: %v", err)
	}
	for _, bad := range []int{-1, lnet.MaxPortals} {
		if _, err := in.MEAttach(bad, exact, 0, 0, lnet.Retain, lnet.InsAfter); !errors.Is(err, lnet.ErrInvalid) {
			t.Errorf("portal %d: %v", bad, err)
		}
	}
}

// TestUniquePortalMatching covers the per-match-bits lists of a unique
// portal, including relative inserts and unlinking.
func TestUniquePortalMatching(t *testing.T) {
	const portal = 30
	p := newPair(t, lnd.Tunables{})
	fromA := p.idA()
	var got []int
	mk := func(bits uint64, tag int, cur *lnet.ME, pos lnet.InsPos) *lnet.ME {
		var me *lnet.ME
		var err error
		if cur == nil {
			me, err = p.b.MEAttach(portal, fromA, bits, 0, lnet.AutoUnlink, pos)
		} else {
			me, err = p.b.MEInsert(cur, fromA, bits, 0, lnet.AutoUnlink, pos)
		}
		if err != nil {
			t.Fatal(err)
		}
		p.b.MDAttach(me, lnet.MD{Start: make([]byte, 4), Threshold: 1, Options: opPut, UserPtr: tag,
			Handler: func(ev *lnet.Event) { got = append(got, ev.MD.UserPtr.(int)) }}, lnet.AutoUnlink)
		return me
	}
	a := mk(100, 1, nil, lnet.InsAfter)
	mk(100, 2, a, lnet.InsBefore)
	mk(200, 3, a, lnet.InsAfter) // other bucket
	mk(100, 4, nil, lnet.InsAfter)
	send := func(bits uint64) {
		h, _ := p.a.MDBind(lnet.MD{Start: []byte{9}, Threshold: 1}, lnet.AutoUnlink)
		p.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, p.idB(), portal, bits, 0, 0)
	}
	for _, b := range []uint64{200, 100, 100, 100, 100, 300} {
		send(b)
	}
	want := []int{3, 2, 1, 4}
	if len(got) != len(want) || got[0] != 3 || got[1] != 2 || got[2] != 1 || got[3] != 4 {
		t.Fatalf("delivery order %v, want %v", got, want)
	}
	if d := p.b.Stats().DropCount; d != 2 {
		t.Fatalf("drops %d, want 2", d)
	}
}

// TestUnlinkEvents: UNLINK events for idle explicit unlinks, Unlinked on
// the completion event of a busy MD, none for exhausted auto-unlink.
func TestUnlinkEvents(t *testing.T) {
	p := newPair(t, lnd.Tunables{})
	// Idle MD attached to an ME: MDUnlink gives UNLINK, and the AutoUnlink
	// ME goes too.
	me, _ := p.b.MEAttach(7, lnetwire.ProcessIDAny, 0, 0, lnet.AutoUnlink, lnet.InsAfter)
	h, _ := p.b.MDAttach(me, lnet.MD{Start: make([]byte, 4), Threshold: inf, Options: opPut, EQ: p.eqB, UserPtr: "u"}, lnet.Retain)
	if err := p.b.MDUnlink(h); err != nil {
		t.Fatal(err)
	}
	evs := drain(t, p.eqB)
	if len(evs) != 1 || evs[0].Type != lnet.EventUnlink || !evs[0].Unlinked || evs[0].MDHandle != h || evs[0].MD.UserPtr != "u" {
		t.Fatalf("events %v", types(evs))
	}
	if err := p.b.MDUnlink(h); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("second unlink: %v", err)
	}
	if err := p.b.MEUnlink(me); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("ME should be gone with its MD: %v", err)
	}
	// MEUnlink of an ME holding an idle MD: UNLINK event.
	me2, _ := p.b.MEAttach(7, lnetwire.ProcessIDAny, 0, 0, lnet.Retain, lnet.InsAfter)
	p.b.MDAttach(me2, lnet.MD{Start: make([]byte, 4), Threshold: inf, Options: opPut, EQ: p.eqB}, lnet.Retain)
	p.b.MEUnlink(me2)
	if evs := drain(t, p.eqB); len(evs) != 1 || evs[0].Type != lnet.EventUnlink {
		t.Fatalf("MEUnlink events %v", types(evs))
	}
	// Retain ME survives its MD's unlink and accepts a new MD.
	me3, _ := p.b.MEAttach(7, lnetwire.ProcessIDAny, 0, 0, lnet.Retain, lnet.InsAfter)
	h3, _ := p.b.MDAttach(me3, lnet.MD{Start: make([]byte, 4), Threshold: inf, Options: opPut}, lnet.Retain)
	p.b.MDUnlink(h3)
	if _, err := p.b.MDAttach(me3, lnet.MD{Start: make([]byte, 4), Threshold: inf, Options: opPut}, lnet.Retain); err != nil {
		t.Fatalf("retained ME: %v", err)
	}
	if _, err := p.b.MDAttach(me3, lnet.MD{Start: make([]byte, 4), Threshold: inf, Options: opPut}, lnet.Retain); !errors.Is(err, lnet.ErrBusy) {
		t.Fatalf("second MD on ME: %v", err)
	}

	// Busy MD: unlink while the send is held in the network. No UNLINK
	// event; the SEND completion carries Unlinked.
	p.net.Hold(true)
	sh, _ := p.a.MDBind(lnet.MD{Start: make([]byte, 16), Threshold: inf, EQ: p.eqA}, lnet.Retain)
	p.a.Put(lnetwire.NIDAny, sh, lnet.AckReqNo, p.idB(), 7, 0, 0, 0)
	if err := p.a.MDUnlink(sh); err != nil {
		t.Fatal(err)
	}
	if evs := drain(t, p.eqA); len(evs) != 0 {
		t.Fatalf("events before completion: %v", types(evs))
	}
	p.net.Release(-1)
	evs = drain(t, p.eqA)
	if len(evs) != 1 || evs[0].Type != lnet.EventSend || !evs[0].Unlinked || evs[0].Status != nil {
		t.Fatalf("events %v", types(evs))
	}
	// Exhausted auto-unlink: the last event is flagged, no UNLINK.
	p.net.Hold(false)
	ah, _ := p.a.MDBind(lnet.MD{Start: make([]byte, 4), Threshold: 1, EQ: p.eqA}, lnet.AutoUnlink)
	p.a.Put(lnetwire.NIDAny, ah, lnet.AckReqNo, p.idB(), 7, 0, 0, 0)
	evs = drain(t, p.eqA)
	if len(evs) != 1 || !evs[0].Unlinked {
		t.Fatalf("auto-unlink events %v", types(evs))
	}
	if err := p.a.MDUnlink(ah); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("auto-unlinked MD still there: %v", err)
	}
	// Threshold-0 MDs cannot be used to send.
	zh, _ := p.a.MDBind(lnet.MD{Start: make([]byte, 4), Threshold: 0}, lnet.Retain)
	if err := p.a.Put(lnetwire.NIDAny, zh, lnet.AckReqNo, p.idB(), 7, 0, 0, 0); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("Put on exhausted MD: %v", err)
	}
}

func TestMDValidation(t *testing.T) {
	in := newLo(t)
	other := newLo(t)
	eq, _ := other.EQAlloc(1, nil)
	bad := []lnet.MD{
		{IOV: make([][]byte, lnet.MaxIOV+1), Threshold: 1},
		{Start: make([]byte, 10), Options: lnet.MDMaxSize, MaxSize: 11, Threshold: 1},
		{Start: make([]byte, 10), Options: lnet.MDMaxSize, MaxSize: -1, Threshold: 1},
		{Start: make([]byte, 10), Options: 1 << 3, Threshold: 1},
		{Start: make([]byte, 10), Threshold: -2},
		{Start: make([]byte, 10), Threshold: 1, EQ: eq},
	}
	for i, md := range bad {
		if _, err := in.MDBind(md, lnet.Retain); !errors.Is(err, lnet.ErrInvalid) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	big, _ := in.MDBind(lnet.MD{Start: make([]byte, lnet.MTU+1), Threshold: 1}, lnet.Retain)
	if err := in.Put(lnetwire.NIDAny, big, lnet.AckReqNo, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: 12345}, 1, 0, 0, 0); !errors.Is(err, lnet.ErrTooBig) {
		t.Errorf("PUT > MTU: %v", err)
	}
	if err := in.Put(lnetwire.NIDAny, lnet.MDHandle{Cookie: 999}, lnet.AckReqNo, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: 12345}, 1, 0, 0, 0); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("bad handle: %v", err)
	}
	// An MD attached to an ME cannot be a Put source.
	me, _ := in.MEAttach(2, lnetwire.ProcessIDAny, 0, 0, lnet.Retain, lnet.InsAfter)
	h, _ := in.MDAttach(me, lnet.MD{Start: make([]byte, 1), Threshold: 1, Options: opPut}, lnet.Retain)
	if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: 12345}, 1, 0, 0, 0); !errors.Is(err, lnet.ErrNoEnt) {
		t.Errorf("attached MD as source: %v", err)
	}
	// An EQ in use cannot be freed.
	eq2, _ := in.EQAlloc(4, nil)
	h2, _ := in.MDBind(lnet.MD{Start: nil, Threshold: 1, EQ: eq2}, lnet.Retain)
	if err := in.EQFree(eq2); !errors.Is(err, lnet.ErrBusy) {
		t.Errorf("EQFree busy: %v", err)
	}
	in.MDUnlink(h2)
	if err := in.EQFree(eq2); err != nil {
		t.Errorf("EQFree: %v", err)
	}
	if _, err := in.MDBind(lnet.MD{Threshold: 1, EQ: eq2}, lnet.Retain); !errors.Is(err, lnet.ErrInvalid) {
		t.Errorf("MD on a freed EQ: %v", err)
	}
	if _, _, err := in.EQPoll([]*lnet.EQ{eq}, 0); !errors.Is(err, lnet.ErrInvalid) {
		t.Errorf("EQPoll on another instance's EQ: %v", err)
	}
}
