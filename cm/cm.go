// Package cm is the InfiniBand Communication Manager (IBTA Vol 1 chapter
// 12) over an abstract MAD transport, wire-compatible with the Linux
// kernel's ib_cm (drivers/infiniband/core/cm.c) on RoCEv2.
//
// The API follows ib_cm.h as Linux shipped it: a [CM] per local port
// creates IDs ([CM.CreateID]) with a [Handler] and a context; an ID
// listens on a service ID and mask, or sends REQ, REP, RTU, REJ, MRA,
// DREQ, DREP, LAP, APR, SIDR_REQ and SIDR_REP; [ID.Establish] is
// cm_establish; [ID.InitQPAttr] computes the INIT/RTR/RTS attributes from
// the exchanged parameters (ib_cm_init_qp_attr). QP transitions stay with
// the caller.
//
// Flow:
//
//	owner of QP1 ──HandleMAD(mad, from)──▶ CM (decode, match ID, step state
//	                                         table, queue event)
//	CM ──Port.Send(mad, to)──▶ QP1            (requests keep a copy for
//	                                         retransmission)
//	timer goroutine: one time.Timer reset to the earliest deadline
//	  (retransmissions, MRA extensions, timewait expiry)
//	dispatch goroutine: calls handlers one at a time, outside the lock
//
// Receive side: the owner of the port (the GSI agent, or a test) calls
// [CM.HandleMAD] for every received CM-class MAD with the sender's
// address. Port.Send is called with the CM lock held and must not call
// back into the CM synchronously.
package cm

import (
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"sync"
	"time"

	"softib/internal/stats"
	"softib/verbs"
	"softib/wire/mad"
)

// Addr is the address of a remote GSI endpoint: where to send a CM MAD
// and where one came from.
type Addr struct {
	// AH routes the MAD: AH.GRH.DGID is the remote port GID (its IP
	// address on RoCEv2), AH.GRH.SGIDIndex the local GID index, AH.DPort
	// the remote UDP port (0 = 4791).
	AH verbs.AHAttr
	// QPN is the remote QP number, 1 (GSI) for CM MADs.
	QPN uint32
	// QKey is the remote Q_Key, mad.GSIQKey for CM MADs.
	QKey uint32
	// PKeyIndex is the local P_Key table index to send with.
	PKeyIndex uint16
}

// GID returns the remote GID.
func (a *Addr) GID() verbs.GID { return a.AH.GRH.DGID }

// Port sends CM MADs for one local port (QP1 / GSI). Received MADs are
// delivered by the port's owner through [CM.HandleMAD].
type Port interface {
	// Send transmits one 256-byte MAD. It must not block for long and
	// must not call into the CM. The CM does not touch m after Send
	// returns.
	Send(m []byte, to Addr) error
	// LocalGID returns the GID of the port.
	LocalGID() verbs.GID
}

// Config tunes a CM. The zero value gives the Linux defaults.
type Config struct {
	// CAGUID is the LocalCAGUID put into REQ and REP; 0 derives one from
	// the port GID.
	CAGUID uint64
	// HiTID is the upper 32 bits of the transaction IDs this CM forms
	// (the MAD agent's hi_tid); 0 means 1.
	HiTID uint32
	// MaxCMRetries bounds retransmissions of requests whose parameters
	// do not carry their own count (SIDR_REQ); 0 means 15.
	MaxCMRetries int
	// ResponseTimeout is the CM response timeout this CM advertises in
	// the REQs it sends when the caller gives none; 0 means 20
	// (CMA_CM_RESPONSE_TIMEOUT, about 4.3 s).
	ResponseTimeout mad.Timeout
	// PacketLifeTime is the path packet life time used for timeouts when
	// the caller gives none; 0 means 16 (CMA_IBOE_PACKET_LIFETIME).
	PacketLifeTime mad.Timeout
	// Timewait overrides the timewait duration; 0 derives it from the
	// connection's local ACK timeout as Linux does.
	Timewait time.Duration
	// FirstCommID is the first local communication ID handed out; 0
	// picks a random one.
	FirstCommID uint32
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// Tracer, if set, observes the CM (tests, qlog-style tracing).
	Tracer Tracer
	// DropSend, if set, is asked about every outgoing MAD; returning true
	// drops it as if the network had lost it (fault injection for tests).
	DropSend func(m []byte, to Addr) bool
	// Attached, if set, is called by [Attach] once the CM runs on a
	// device's QP1, with the CM and its GSI agent (g.Device() is the
	// device). It is how an upper layer reaches the QP1 of devices it
	// did not attach itself (those of an rdmacm.Manager, configured
	// through its Config.CM) to register MAD class agents
	// ([GSI.Register]) and IB CM listeners, the way an ib_client's add
	// callback does in Linux. It runs before Attach returns and must
	// not block.
	Attached func(c *CM, g *GSI)
}

// Tracer observes a CM. Its methods are called with the CM lock held and
// must not call back into the CM.
type Tracer interface {
	// StateChanged is called after every state transition of an ID.
	StateChanged(id *ID, from, to State)
}

func (c Config) withDefaults(gid verbs.GID) Config {
	if c.CAGUID == 0 {
		c.CAGUID = binary.BigEndian.Uint64(gid[8:]) | 0x0200000000000000
	}
	if c.HiTID == 0 {
		c.HiTID = 1
	}
	if c.MaxCMRetries <= 0 {
		c.MaxCMRetries = mad.CMAMaxCMRetries
	}
	c.MaxCMRetries = min(c.MaxCMRetries, 15)
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = mad.CMAResponseTimeout
	}
	if c.PacketLifeTime == 0 {
		c.PacketLifeTime = mad.CMAIBoEPacketLifeTime
	}
	if c.FirstCommID == 0 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.FirstCommID = binary.BigEndian.Uint32(b[:]) | 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Stats are the CM counters (named after the Linux CM sysfs counters).
type Stats struct {
	Sent         [mad.AttrAPR + 1]stats.Counter // per attribute ID
	Received     [mad.AttrAPR + 1]stats.Counter
	Retransmits  stats.Counter // requests sent again after a timeout
	Duplicates   stats.Counter // duplicate messages answered or dropped
	Malformed    stats.Counter // undecodable MADs dropped
	Unmatched    stats.Counter // messages for no known ID dropped
	Dropped      stats.Counter // messages not valid in the ID's state
	SendErrors   stats.Counter // Port.Send failures
	StaleConns   stats.Counter // stale connections detected
	Timeouts     stats.Counter // requests given up after MaxCMRetries
	BadTransitns stats.Counter // internal transitions refused by the state table
}

// CM is the connection manager of one local port.
type CM struct {
	port Port
	cfg  Config
	st   Stats

	mu         sync.Mutex // guards everything below
	closed     bool
	nextID     uint32
	ids        map[uint32]*ID
	remoteIDs  map[remoteKey]uint32 // (remote comm ID, CA GUID, GID) → local comm ID
	remoteQPNs map[qpnKey]uint32    // (remote GID, remote QPN) → local comm ID
	listeners  []*ID
	timewait   map[uint32]*twRecord // by local comm ID
	sidrSeen   map[sidrKey]uint32   // pending SIDR_REQs by (request ID, GID)
	events     []pending
	scratch    mad.Scratch
	cbID       *ID // ID whose handler is running

	owned interface{ Close() error } // closed with the CM (Attach's GSI)

	kickTimer    chan struct{}
	kickDispatch chan struct{}
	done         chan struct{}
	wg           sync.WaitGroup
}

type remoteKey struct {
	commID uint32
	guid   uint64
	gid    verbs.GID
}

type qpnKey struct {
	gid verbs.GID
	qpn uint32
}

type sidrKey struct {
	reqID uint32
	gid   verbs.GID
}

// twRecord keeps a connection's identifiers reserved during timewait,
// even after its ID is destroyed.
type twRecord struct {
	localID  uint32
	localQPN uint32
	remote   remoteKey
	qpn      qpnKey
	deadline time.Time
	id       *ID // nil once destroyed
}

type pending struct {
	id *ID
	ev *Event
}

// New creates a CM for one port and starts its timer and dispatch
// goroutines; Close stops them.
func New(port Port, cfg Config) *CM {
	c := &CM{
		port:         port,
		cfg:          cfg.withDefaults(port.LocalGID()),
		ids:          make(map[uint32]*ID),
		remoteIDs:    make(map[remoteKey]uint32),
		remoteQPNs:   make(map[qpnKey]uint32),
		timewait:     make(map[uint32]*twRecord),
		sidrSeen:     make(map[sidrKey]uint32),
		kickTimer:    make(chan struct{}, 1),
		kickDispatch: make(chan struct{}, 1),
		done:         make(chan struct{}),
	}
	c.nextID = c.cfg.FirstCommID
	c.wg.Add(2)
	go c.timerLoop()
	go c.dispatchLoop()
	return c
}

// Stats returns the CM counters.
func (c *CM) Stats() *Stats { return &c.st }

// Config returns the effective configuration.
func (c *CM) Config() Config { return c.cfg }

// Close stops the CM without sending anything; IDs become unusable and
// pending events are dropped.
func (c *CM) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	for _, id := range c.ids {
		id.destroyed = true
	}
	c.events = nil
	c.mu.Unlock()
	close(c.done)
	c.wg.Wait()
	if c.owned != nil {
		return c.owned.Close()
	}
	return nil
}

// NumIDs returns how many IDs exist (not destroyed).
func (c *CM) NumIDs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// NumTimewait returns how many connections are in timewait.
func (c *CM) NumTimewait() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timewait)
}

// allocID returns a free, nonzero local comm ID not held by timewait.
func (c *CM) allocID() uint32 {
	for {
		id := c.nextID
		c.nextID++
		if id == 0 {
			continue
		}
		if _, ok := c.ids[id]; ok {
			continue
		}
		if _, ok := c.timewait[id]; ok {
			continue
		}
		return id
	}
}

// formTID returns hi_tid<<32 | local comm ID, as cm_form_tid does.
func (c *CM) formTID(localID uint32) uint64 {
	return uint64(c.cfg.HiTID)<<32 | uint64(localID)
}

// send encodes and transmits one CM MAD and returns the encoding (kept
// by requests for retransmission).
func (c *CM) send(tid uint64, m mad.Message, to Addr) []byte {
	b := mad.AppendCM(make([]byte, 0, mad.MADSize), tid, m)
	c.transmit(b, to)
	return b
}

func (c *CM) transmit(b []byte, to Addr) {
	attr := mad.Header(b).AttrID()
	if attr <= mad.AttrAPR {
		c.st.Sent[attr].Inc()
	}
	if c.cfg.DropSend != nil && c.cfg.DropSend(b, to) {
		return
	}
	if err := c.port.Send(b, to); err != nil {
		c.st.SendErrors.Inc()
		c.cfg.Logger.Debug("cm: send failed", "attr", attr, "err", err)
	}
}

// queue appends an event for id's handler; callers hold c.mu.
func (c *CM) queue(id *ID, ev *Event) {
	c.events = append(c.events, pending{id, ev})
	select {
	case c.kickDispatch <- struct{}{}:
	default:
	}
}

func (c *CM) dispatchLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.kickDispatch:
		}
		for c.dispatchOne() {
		}
	}
}

// dispatchOne delivers the oldest queued event; it reports false when
// the queue is empty.
func (c *CM) dispatchOne() bool {
	c.mu.Lock()
	if c.closed || len(c.events) == 0 {
		c.mu.Unlock()
		return false
	}
	p := c.events[0]
	c.events[0] = pending{}
	c.events = c.events[1:]
	id := p.id
	if id.destroyed {
		c.mu.Unlock()
		return true
	}
	if p.ev.Listener != nil && p.ev.Listener.destroyed {
		// The listener went away before the request reached it: refuse
		// as if it had arrived a moment later.
		c.rejectOrphanLocked(id)
		c.mu.Unlock()
		return true
	}
	c.cbID = id
	c.mu.Unlock()

	err := id.handler(id, p.ev)

	c.mu.Lock()
	c.cbID = nil
	if err != nil && !id.destroyed {
		c.destroyLocked(id)
	}
	c.mu.Unlock()
	return true
}

// rejectOrphanLocked refuses a request whose listener was destroyed
// before the request event was delivered.
func (c *CM) rejectOrphanLocked(id *ID) {
	switch id.state {
	case StateREQRcvd:
		c.send(id.tid, &mad.REJ{RemoteCommID: id.remoteID, LocalCommID: id.localID,
			MessageRejected: mad.MsgREQ, Reason: mad.RejInvalidServiceID}, id.remote)
		c.setState(id, StateIdle)
	case StateSIDRREQRcvd:
		c.send(id.tid, &mad.SIDRREP{RequestID: id.remoteID, Status: mad.SIDRUnsupported,
			ServiceID: id.serviceID}, id.remote)
		c.setState(id, StateIdle)
	}
	c.releaseLocked(id)
	c.destroyLocked(id)
}

// setState moves id along the state table. A transition the table does
// not allow is refused and counted: it is an internal error.
func (c *CM) setState(id *ID, next State) bool {
	if !CanTransition(id.state, next) {
		c.st.BadTransitns.Inc()
		c.cfg.Logger.Error("cm: refused transition", "id", id.localID, "from", id.state, "to", next)
		return false
	}
	prev := id.state
	id.state = next
	if c.cfg.Tracer != nil {
		c.cfg.Tracer.StateChanged(id, prev, next)
	}
	return true
}

// arm makes b the outstanding request of id: it is retransmitted every
// timeout until retries run out.
func (c *CM) arm(id *ID, b []byte, timeout time.Duration, retries int) {
	id.out = b
	id.outTimeout = timeout
	id.outRetries = retries
	id.deadline = time.Now().Add(timeout)
	c.kick()
}

func (c *CM) cancel(id *ID) {
	id.out = nil
	id.deadline = time.Time{}
}

func (c *CM) kick() {
	select {
	case c.kickTimer <- struct{}{}:
	default:
	}
}

func (c *CM) timerLoop() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.kickTimer:
		case <-t.C:
		}
		next := c.expire(time.Now())
		t.Stop()
		select {
		case <-t.C:
		default:
		}
		if next.IsZero() {
			t.Reset(time.Hour)
		} else {
			t.Reset(max(time.Until(next), 0))
		}
	}
}

// expire handles every deadline at or before now and returns the
// earliest remaining one.
func (c *CM) expire(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return time.Time{}
	}
	var next time.Time
	for _, id := range c.ids {
		if id.deadline.IsZero() {
			continue
		}
		if !id.deadline.After(now) {
			c.timeoutLocked(id, now)
		}
		if !id.deadline.IsZero() && (next.IsZero() || id.deadline.Before(next)) {
			next = id.deadline
		}
	}
	for lid, tw := range c.timewait {
		if !tw.deadline.After(now) {
			c.timewaitExitLocked(lid, tw)
			continue
		}
		if next.IsZero() || tw.deadline.Before(next) {
			next = tw.deadline
		}
	}
	return next
}

// timeoutLocked retransmits id's outstanding request or gives up.
func (c *CM) timeoutLocked(id *ID, now time.Time) {
	if id.out != nil && id.outRetries > 0 {
		id.outRetries--
		c.st.Retransmits.Inc()
		c.transmit(id.out, id.remote)
		id.deadline = now.Add(id.outTimeout)
		return
	}
	c.st.Timeouts.Inc()
	c.cancel(id)
	ev := &Event{Err: ErrTimeout}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		ev.Type = EventREQError
		c.setState(id, StateIdle)
		c.releaseLocked(id)
	case StateREPSent, StateMRAREPRcvd:
		ev.Type = EventREPError
		c.setState(id, StateIdle)
		c.releaseLocked(id)
	case StateDREQSent:
		ev.Type = EventDREQError
		c.enterTimewait(id)
	case StateLAPSent, StateMRALAPRcvd:
		ev.Type = EventLAPError
		c.setState(id, StateEstablished)
	case StateSIDRREQSent:
		ev.Type = EventSIDRREQError
		c.setState(id, StateIdle)
	default:
		return
	}
	c.queue(id, ev)
}

// enterTimewait moves id to TIMEWAIT and reserves its identifiers.
func (c *CM) enterTimewait(id *ID) {
	c.cancel(id)
	if !c.setState(id, StateTimewait) {
		return
	}
	d := c.cfg.Timewait
	if d == 0 {
		d = convertToDuration(id.ackTimeout)
	}
	c.timewait[id.localID] = &twRecord{
		localID:  id.localID,
		localQPN: id.localQPN,
		remote:   id.remoteKey(),
		qpn:      qpnKey{id.remote.GID(), id.remoteQPN},
		deadline: time.Now().Add(d),
		id:       id,
	}
	c.kick()
}

// timewaitExitLocked ends a timewait period.
func (c *CM) timewaitExitLocked(lid uint32, tw *twRecord) {
	delete(c.timewait, lid)
	if c.remoteIDs[tw.remote] == lid {
		delete(c.remoteIDs, tw.remote)
	}
	if c.remoteQPNs[tw.qpn] == lid {
		delete(c.remoteQPNs, tw.qpn)
	}
	id := tw.id
	if id == nil || id.destroyed || id.state != StateTimewait {
		return
	}
	c.setState(id, StateIdle)
	c.queue(id, &Event{Type: EventTimewaitExit})
}

// releaseLocked drops the remote keys of a connection that ended
// without timewait (rejected or timed out before establishment).
func (c *CM) releaseLocked(id *ID) {
	if k := id.remoteKey(); c.remoteIDs[k] == id.localID {
		delete(c.remoteIDs, k)
	}
	if k := (qpnKey{id.remote.GID(), id.remoteQPN}); c.remoteQPNs[k] == id.localID {
		delete(c.remoteQPNs, k)
	}
	if id.sidr != (sidrKey{}) && c.sidrSeen[id.sidr] == id.localID {
		delete(c.sidrSeen, id.sidr)
	}
}

// localQPNInTimewait reports whether a local QPN is still reserved.
func (c *CM) localQPNInTimewait(qpn uint32) bool {
	for _, tw := range c.timewait {
		if tw.localQPN == qpn && qpn != 0 {
			return true
		}
	}
	return false
}

// convertToMS is cm_convert_to_ms: 2^(t-8) ms, at least 1 ms.
func convertToMS(t mad.Timeout) int64 {
	if t <= 8 {
		return 1
	}
	return 1 << (min(t, mad.MaxTimeout) - 8)
}

func convertToDuration(t mad.Timeout) time.Duration {
	return time.Duration(convertToMS(t)) * time.Millisecond
}

// RetransmitInterval is the per-try wait for a REQ (ib-cm.md §7.2):
// 2 × convert(packetLifeTime) + convert(remoteResponseTimeout) ms.
func RetransmitInterval(packetLifeTime, remoteResponseTimeout mad.Timeout) time.Duration {
	return time.Duration(2*convertToMS(packetLifeTime)+convertToMS(remoteResponseTimeout)) * time.Millisecond
}
