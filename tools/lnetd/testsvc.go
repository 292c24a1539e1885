package lnetd

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// The echo test service: lnetd keeps test_slots buffers of 1 MiB on
// test_portal (default 60). Match bits N (< test_slots) select slot N;
// any peer may PUT into a slot (ACKed) and GET it back, offsets taken
// from the initiator. `softib lnetctl test put/get` drive transfers from a
// running lnetd and verify them with CRC32s; `test show` prints what each
// slot holds. `test md` and `test lazy` attach MDs with chosen thresholds
// and options and toggle lazy portals, to watch MD semantics end to end.

// testService is the echo service plus user-attached test MDs.
type testService struct {
	in     *lnet.Instance
	portal int

	mu     sync.Mutex
	slots  []*echoSlot
	mds    map[int]*testMD
	nextID int
}

// echoSlot is one echo buffer. Counters are guarded by testService.mu.
type echoSlot struct {
	buf    []byte
	me     *lnet.ME
	puts   uint64
	gets   uint64
	length int
	crc    uint32
}

// testMD is an MD attached by test.md.add.
type testMD struct {
	id      int
	portal  int
	bits    uint64
	buf     []byte
	h       lnet.MDHandle
	me      *lnet.ME
	events  []EventInfo
	unlinkd bool
}

// EventInfo is an LNet event as reported over the control socket.
type EventInfo struct {
	Type      string `json:"type"`
	Status    string `json:"status,omitempty"` // empty: success
	Initiator string `json:"initiator,omitempty"`
	MLength   int    `json:"mlength"`
	RLength   int    `json:"rlength"`
	Offset    int    `json:"offset"`
	Unlinked  bool   `json:"unlinked,omitempty"`
}

func eventInfo(ev *lnet.Event) EventInfo {
	e := EventInfo{Type: ev.Type.String(), MLength: ev.MLength, RLength: ev.RLength, Offset: ev.Offset,
		Unlinked: ev.Unlinked, Initiator: ev.Initiator.String()}
	if ev.Status != nil {
		e.Status = ev.Status.Error()
	}
	return e
}

const echoSlotSize = lnet.MTU

func startTestService(in *lnet.Instance, portal, nslots int) (*testService, error) {
	if portal == lnet.ReservedPortal {
		return nil, fmt.Errorf("portal %d is reserved for ping", portal)
	}
	s := &testService{in: in, portal: portal, mds: map[int]*testMD{}, nextID: 1}
	for i := range nslots {
		sl := &echoSlot{buf: make([]byte, echoSlotSize)}
		me, err := in.MEAttach(portal, lnetwire.ProcessIDAny, uint64(i), 0, lnet.Retain, lnet.InsAfter)
		if err != nil {
			s.stop()
			return nil, err
		}
		sl.me = me
		_, err = in.MDAttach(me, lnet.MD{Start: sl.buf, Threshold: lnet.ThreshInf,
			Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote | lnet.MDTruncate,
			Handler: func(ev *lnet.Event) { s.slotEvent(sl, ev) }}, lnet.Retain)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.slots = append(s.slots, sl)
	}
	return s, nil
}

// slotEvent records a PUT or GET on a slot. It runs on the completing
// goroutine; the CRC is computed here, after the data landed.
func (s *testService) slotEvent(sl *echoSlot, ev *lnet.Event) {
	if ev.Status != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.Type {
	case lnet.EventPut:
		sl.puts++
		sl.length = ev.Offset + ev.MLength
		sl.crc = crc32.ChecksumIEEE(sl.buf[:sl.length])
	case lnet.EventGet:
		sl.gets++
	}
}

func (s *testService) stop() {
	s.mu.Lock()
	slots := s.slots
	mds := s.mds
	s.slots, s.mds = nil, map[int]*testMD{}
	s.mu.Unlock()
	for _, sl := range slots {
		_ = s.in.MEUnlink(sl.me)
	}
	for _, m := range mds {
		_ = s.in.MDUnlink(m.h)
	}
}

// XferArgs are the arguments of test.put and test.get.
type XferArgs struct {
	NID string `json:"nid"`
	// Portal defaults (when negative or absent) to the test portal.
	Portal *int   `json:"portal,omitempty"`
	Bits   uint64 `json:"bits"`
	Size   int    `json:"size"`
	Offset int    `json:"offset,omitempty"`
	// Seed selects the data pattern of a PUT.
	Seed    uint64        `json:"seed,omitempty"`
	NoAck   bool          `json:"noack,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	// Count repeats the operation, stopping at the first failure.
	Count int `json:"count,omitempty"`
}

// XferResult reports test.put / test.get: how many operations completed
// (ACKed PUTs, REPLYed GETs), the CRC32 of the data sent or received, the
// events of the last operation, and the first failure.
type XferResult struct {
	OK      int           `json:"ok"`
	Bytes   int64         `json:"bytes"`
	CRC     uint32        `json:"crc32"`
	Events  []EventInfo   `json:"events"`
	Error   string        `json:"error,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Pattern fills b with the deterministic test pattern of seed.
func Pattern(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 1
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(w[:], x)
		copy(b[i:], w[:])
	}
}

func (s *testService) handle(ctx context.Context, op string, dec func(any) *OpError) (any, *OpError) {
	switch op {
	case "test.put", "test.get":
		var a XferArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return s.xfer(ctx, op == "test.put", a)
	case "test.show":
		return s.showDoc(), nil
	case "test.md.add":
		var a MDArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return s.mdAdd(a)
	case "test.md.del":
		var a MDArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		s.mu.Lock()
		m := s.mds[a.ID]
		s.mu.Unlock()
		if m == nil {
			return nil, opErr("del", "md", errnoNoEnt, "no test MD %d", a.ID)
		}
		if err := s.in.MDUnlink(m.h); err != nil {
			return nil, coreErr("del", "md", fmt.Sprintf("cannot unlink MD %d", a.ID), err)
		}
		return nil, nil
	case "test.lazy":
		var a MDArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		var err error
		if a.Clear {
			err = s.in.ClearLazyPortal(a.Portal)
		} else {
			err = s.in.SetLazyPortal(a.Portal)
		}
		if err != nil {
			return nil, coreErr("set", "lazy", fmt.Sprintf("portal %d", a.Portal), err)
		}
		return nil, nil
	}
	return nil, opErr("manage", op, errnoNoSys, "unknown test operation %q", op)
}

func (s *testService) xfer(ctx context.Context, put bool, a XferArgs) (any, *OpError) {
	obj := "get"
	if put {
		obj = "put"
	}
	nid, err := lnetwire.ParseNID(a.NID)
	if err != nil {
		return nil, opErr("test", obj, errnoInval, "bad NID %q: %v", a.NID, err)
	}
	if a.Size < 0 || a.Size > lnet.MTU {
		return nil, opErr("test", obj, errnoInval, "size %d out of range [0, %d]", a.Size, lnet.MTU)
	}
	portal := s.portal
	if a.Portal != nil && *a.Portal >= 0 {
		portal = *a.Portal
	}
	if a.Timeout <= 0 {
		a.Timeout = 30 * time.Second
	}
	count := max(a.Count, 1)
	buf := make([]byte, a.Size)
	var res XferResult
	if put {
		Pattern(buf, a.Seed)
		res.CRC = crc32.ChecksumIEEE(buf)
	}
	start := time.Now()
	target := lnetwire.ProcessID{NID: nid, PID: lnetwire.PIDLustre}
	for range count {
		evs, n, err := s.oneXfer(ctx, put, target, portal, a, buf)
		res.Events = evs
		if err != nil {
			res.Error = err.Error()
			break
		}
		res.OK++
		res.Bytes += int64(n)
		if !put {
			res.CRC = crc32.ChecksumIEEE(buf[:n])
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// oneXfer runs one PUT or GET and waits for its completion events. It
// returns an error unless the whole operation succeeded: a PUT counts
// only once ACKed (or sent, with NoAck), a GET once its REPLY arrived.
func (s *testService) oneXfer(ctx context.Context, put bool, target lnetwire.ProcessID, portal int, a XferArgs, buf []byte) ([]EventInfo, int, error) {
	events := make(chan lnet.Event, 4)
	thresh := 2
	if put && a.NoAck {
		thresh = 1
	}
	h, err := s.in.MDBind(lnet.MD{Start: buf, Threshold: thresh, Handler: func(ev *lnet.Event) {
		select {
		case events <- *ev:
		default:
		}
	}}, lnet.AutoUnlink)
	if err != nil {
		return nil, 0, err
	}
	if put {
		ack := lnet.AckReqYes
		if a.NoAck {
			ack = lnet.AckReqNo
		}
		err = s.in.Put(lnetwire.NIDAny, h, ack, target, portal, a.Bits, a.Offset, 0)
	} else {
		err = s.in.Get(lnetwire.NIDAny, h, target, portal, a.Bits, a.Offset)
	}
	if err != nil {
		_ = s.in.MDUnlink(h)
		return nil, 0, err
	}
	timer := time.NewTimer(a.Timeout)
	defer timer.Stop()
	var evs []EventInfo
	// Done once every event the MD expects arrived: SEND may come after
	// the ACK (the LND completes a large send on the peer's ZC-ACK).
	sent, answered := false, put && a.NoAck
	n := 0
	for {
		select {
		case <-ctx.Done():
			_ = s.in.MDUnlink(h)
			return evs, 0, ctx.Err()
		case <-timer.C:
			_ = s.in.MDUnlink(h)
			want := "ACK"
			if !put {
				want = "REPLY"
			}
			return evs, 0, fmt.Errorf("no %s within %v (events so far: %s)", want, a.Timeout, eventNames(evs))
		case ev := <-events:
			evs = append(evs, eventInfo(&ev))
			if ev.Status != nil {
				return evs, 0, fmt.Errorf("%s failed: %w", ev.Type, ev.Status)
			}
			switch ev.Type {
			case lnet.EventSend:
				sent = true
				if put && a.NoAck {
					n = ev.MLength
				}
			case lnet.EventAck:
				answered, n = true, ev.MLength
			case lnet.EventReply:
				answered, n = true, ev.MLength
			}
			if sent && answered {
				return evs, n, nil
			}
		}
	}
}

func eventNames(evs []EventInfo) string {
	if len(evs) == 0 {
		return "none"
	}
	var s []string
	for _, e := range evs {
		s = append(s, e.Type)
	}
	return strings.Join(s, ",")
}

// MDArgs are the arguments of test.md.add / test.md.del / test.lazy.
type MDArgs struct {
	ID         int    `json:"id,omitempty"`
	Portal     int    `json:"portal"`
	Bits       uint64 `json:"bits"`
	IgnoreBits uint64 `json:"ignore_bits,omitempty"`
	Size       int    `json:"size"`
	// Threshold is the operations allowed; 0 or negative means no limit.
	Threshold int `json:"threshold"`
	// Options: put, get, manage_remote, truncate, ack_disable, max_size.
	Options []string `json:"options,omitempty"`
	MaxSize int      `json:"max_size,omitempty"`
	// Retain keeps the MD after its threshold runs out (else auto unlink).
	Retain bool `json:"retain,omitempty"`
	// Clear turns a lazy portal off (test.lazy).
	Clear bool `json:"clear,omitempty"`
}

var mdOptionNames = map[string]lnet.MDOptions{
	"put": lnet.MDOpPut, "get": lnet.MDOpGet, "manage_remote": lnet.MDManageRemote,
	"truncate": lnet.MDTruncate, "ack_disable": lnet.MDAckDisable, "max_size": lnet.MDMaxSize,
}

func (s *testService) mdAdd(a MDArgs) (any, *OpError) {
	if a.Size < 0 || a.Size > lnet.MTU {
		return nil, opErr("add", "md", errnoInval, "size %d out of range", a.Size)
	}
	var opts lnet.MDOptions
	for _, o := range a.Options {
		v, ok := mdOptionNames[o]
		if !ok {
			return nil, opErr("add", "md", errnoInval, "unknown MD option %q (put, get, manage_remote, truncate, ack_disable, max_size)", o)
		}
		opts |= v
	}
	if opts&(lnet.MDOpPut|lnet.MDOpGet) == 0 {
		opts |= lnet.MDOpPut | lnet.MDOpGet
	}
	thresh := a.Threshold
	if thresh <= 0 {
		thresh = lnet.ThreshInf
	}
	unlink := lnet.AutoUnlink
	if a.Retain {
		unlink = lnet.Retain
	}
	m := &testMD{portal: a.Portal, bits: a.Bits, buf: make([]byte, a.Size)}
	me, err := s.in.MEAttach(a.Portal, lnetwire.ProcessIDAny, a.Bits, a.IgnoreBits, unlink, lnet.InsAfter)
	if err != nil {
		return nil, coreErr("add", "md", "cannot attach ME", err)
	}
	s.mu.Lock()
	m.id = s.nextID
	s.nextID++
	s.mds[m.id] = m
	s.mu.Unlock()
	h, err := s.in.MDAttach(me, lnet.MD{Start: m.buf, Threshold: thresh, Options: opts, MaxSize: a.MaxSize,
		Handler: func(ev *lnet.Event) {
			s.mu.Lock()
			m.events = append(m.events, eventInfo(ev))
			if ev.Unlinked || ev.Type == lnet.EventUnlink {
				m.unlinkd = true
			}
			s.mu.Unlock()
		}}, unlink)
	if err != nil {
		_ = s.in.MEUnlink(me)
		s.mu.Lock()
		delete(s.mds, m.id)
		s.mu.Unlock()
		return nil, coreErr("add", "md", "cannot attach MD", err)
	}
	s.mu.Lock()
	m.h, m.me = h, me
	s.mu.Unlock()
	return map[string]int{"id": m.id}, nil
}

// showDoc renders test show: the echo slots and the test MDs.
func (s *testService) showDoc() Map {
	s.mu.Lock()
	defer s.mu.Unlock()
	slots := List{}
	for i, sl := range s.slots {
		slots = append(slots, Map{}.add("slot", int64(i)).add("length", int64(sl.length)).
			add("crc32", fmt.Sprintf("0x%08x", sl.crc)).add("puts", sl.puts).add("gets", sl.gets))
	}
	ids := make([]int, 0, len(s.mds))
	for id := range s.mds {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	mds := List{}
	for _, id := range ids {
		m := s.mds[id]
		evs := List{}
		for _, e := range m.events {
			em := Map{}.add("type", e.Type).add("mlength", int64(e.MLength)).add("offset", int64(e.Offset))
			if e.Status != "" {
				em = em.add("status", e.Status)
			}
			if e.Unlinked {
				em = em.add("unlinked", true)
			}
			evs = append(evs, em)
		}
		mds = append(mds, Map{}.add("id", int64(id)).add("portal", int64(m.portal)).
			add("bits", int64(m.bits)).add("unlinked", m.unlinkd).
			add("crc32", fmt.Sprintf("0x%08x", crc32.ChecksumIEEE(m.buf))).add("events", evs))
	}
	return Map{}.add("test service", Map{}.add("portal", int64(s.portal)).
		add("delayed_puts", s.in.Stats().Delayed).add("slots", slots).add("mds", mds))
}
