package selftest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// Errors of RPCs, matched with errors.Is.
var (
	// ErrRPCTimeout: the reply did not come within the RPC timeout.
	ErrRPCTimeout = errors.New("selftest: RPC timed out")
	// ErrDataMismatch: brw data failed its check.
	ErrDataMismatch = errors.New("selftest: bulk data mismatch")
	// ErrClosed: the service or console is closed.
	ErrClosed = errors.New("selftest: closed")
)

// StatusError is a non-zero status in a reply: the remote side refused or
// failed the request. Errno is a Linux errno.
type StatusError struct {
	Errno syscall.Errno
	Type  MsgType
}

// Error names the reply and the errno.
func (e *StatusError) Error() string {
	return fmt.Sprintf("%v status %d (%v)", e.Type, int(e.Errno), e.Errno)
}

// Is matches ErrDataMismatch for EBADMSG.
func (e *StatusError) Is(target error) bool {
	return target == ErrDataMismatch && e.Errno == syscall.EBADMSG
}

// rpcCounters are the live srpc_counters of an endpoint.
type rpcCounters struct {
	errors, rpcsSent, rpcsRcvd, rpcsDropped, rpcsExpired atomic.Uint32
	bulkGet, bulkPut                                     atomic.Uint64
}

func (c *rpcCounters) snapshot() RPCCounters {
	return RPCCounters{Errors: c.errors.Load(), RPCsSent: c.rpcsSent.Load(), RPCsRcvd: c.rpcsRcvd.Load(),
		RPCsDropped: c.rpcsDropped.Load(), RPCsExpired: c.rpcsExpired.Load(), BulkGet: c.bulkGet.Load(), BulkPut: c.bulkPut.Load()}
}

// lnetCounters converts the instance's counters to lnet_counters_common.
func lnetCounters(in *lnet.Instance) LNetCounters {
	st := in.Stats()
	return LNetCounters{MsgsAlloc: uint32(st.MsgsAlloc), MsgsMax: uint32(st.MsgsMax), Errors: uint32(st.Errors),
		SendCount: uint32(st.SendCount), RecvCount: uint32(st.RecvCount), RouteCount: uint32(st.RouteCount),
		DropCount: uint32(st.DropCount), SendLength: st.SendLength, RecvLength: st.RecvLength,
		RouteLength: st.RouteLength, DropLength: st.DropLength}
}

// matchIDs hands out the match bits of reply and bulk buffers
// (srpc_next_id); endpoints of one instance share one.
type matchIDs struct{ n atomic.Uint64 }

func newMatchIDs() *matchIDs {
	m := &matchIDs{}
	// Start from the clock so a restarted requester does not reuse
	// the match bits of replies still in flight to its previous run.
	m.n.Store(uint64(time.Now().UnixNano()) >> 1)
	return m
}

func (m *matchIDs) next() uint64 { return m.n.Add(1) }

// endpoint is the SRPC machinery on one LNet instance: client calls
// (request PUT, reply and bulk MDs on RDMAPortal) and, for nodes, the
// request buffers.
type endpoint struct {
	in  *lnet.Instance
	log *slog.Logger
	ids *matchIDs
	cnt rpcCounters
	// replyH is replySent bound once (a method value allocates).
	replyH func(*lnet.Event)
}

func newEndpoint(in *lnet.Instance, log *slog.Logger, ids *matchIDs) *endpoint {
	if ids == nil {
		ids = newMatchIDs()
	}
	e := &endpoint{in: in, log: log, ids: ids}
	e.replyH = e.replySent
	return e
}

// MD tags (UserPtr) telling a call's events apart.
const (
	tagReq = iota + 1
	tagReply
	tagBulk
)

// call collects the events of one RPC's MDs. Handlers never block: the
// channel has room for every event the MDs can produce. Calls are pooled
// with their channel, handler, timer and request buffer; a call goes back
// to the pool only when every MD it created has completed, so no late
// event can reach its next user.
type call struct {
	ch    chan lnet.Event
	h     func(*lnet.Event)
	timer *time.Timer
	mds   [3]lnet.MDHandle
	n     int
	qbuf  []byte
}

var callPool = sync.Pool{New: func() any {
	c := &call{ch: make(chan lnet.Event, 12)}
	c.h = c.handler
	c.timer = time.NewTimer(time.Hour)
	c.timer.Stop()
	return c
}}

func getCall(timeout time.Duration) *call {
	c := callPool.Get().(*call)
	c.n = 0
	c.timer.Reset(timeout)
	return c
}

// release returns a clean call to the pool; otherwise it unlinks the
// MDs still alive and drops the call.
func (e *endpoint) release(c *call, clean bool) {
	c.timer.Stop()
	if clean {
		callPool.Put(c)
		return
	}
	for _, h := range c.mds[:c.n] {
		_ = e.in.MDUnlink(h) // ErrNoEnt once completed: fine
	}
}

func (c *call) handler(ev *lnet.Event) {
	select {
	case c.ch <- *ev:
	default:
	}
}

// Passive bulk MD operations: the remote side GETs the buffer (brw
// write, TEST destination list) or PUTs into it (brw read).
const (
	bulkNone = iota
	bulkGet
	bulkPut
)

// call sends req (a request of MsgSize bytes whose rpyid, and bulkid
// when bulkOp is not bulkNone, the caller set from e.ids) to `to` and
// waits for the reply, received into rbuf (MsgSize bytes) and parsed.
// With bulk, call returns only after the remote side moved it (or
// replied with an error status, which comes back as a *StatusError with
// the reply). Timeout or ctx ending unlinks the MDs.
func (e *endpoint) call(ctx context.Context, to lnetwire.ProcessID, req Msg, bulkID uint64, bulk []byte, bulkOp int, timeout time.Duration, rbuf []byte) (Msg, error) {
	c := getCall(timeout)
	clean := false
	defer func() { e.release(c, clean) }()
	if bulkOp != bulkNone {
		me, err := e.in.MEAttach(RDMAPortal, to, bulkID, 0, lnet.AutoUnlink, lnet.InsAfter)
		if err != nil {
			return nil, err
		}
		opt := lnet.MDOpGet
		if bulkOp == bulkPut {
			opt = lnet.MDOpPut
		}
		h, err := e.in.MDAttach(me, lnet.MD{Start: bulk, Threshold: 1, Options: opt, Handler: c.h, UserPtr: tagBulk}, lnet.AutoUnlink)
		if err != nil {
			_ = e.in.MEUnlink(me)
			return nil, err
		}
		c.mds[c.n], c.n = h, c.n+1
	}
	t, rpyID := req.Type(), req.RpyID()
	if req.Magic() != Magic { // sent as a peer of the other byte order would (tests)
		t, rpyID = MsgType(swap32(uint32(t))), swap64(rpyID)
	}
	me, err := e.in.MEAttach(RDMAPortal, to, rpyID, 0, lnet.AutoUnlink, lnet.InsAfter)
	if err != nil {
		return nil, err
	}
	rbuf = rbuf[:MsgSize]
	rh, err := e.in.MDAttach(me, lnet.MD{Start: rbuf, Threshold: 1, Options: lnet.MDOpPut | lnet.MDTruncate | lnet.MDAckDisable,
		Handler: c.h, UserPtr: tagReply}, lnet.AutoUnlink)
	if err != nil {
		_ = e.in.MEUnlink(me)
		return nil, err
	}
	c.mds[c.n], c.n = rh, c.n+1
	c.qbuf = append(c.qbuf[:0], req[:MsgSize]...)
	qh, err := e.in.MDBind(lnet.MD{Start: c.qbuf, Threshold: 1, Handler: c.h, UserPtr: tagReq}, lnet.AutoUnlink)
	if err != nil {
		return nil, err
	}
	c.mds[c.n], c.n = qh, c.n+1
	svc := t.Service()
	if err := e.in.Put(lnetwire.NIDAny, qh, lnet.AckReqNo, to, svc.Portal(), uint64(svc), 0, 0); err != nil {
		return nil, err
	}
	sent, replied, bulkDone := false, false, bulkOp == bulkNone
	var rep Msg
	// An error status means the peer will not move the bulk: then only
	// the request's SEND is still awaited (release unlinks the bulk MD).
	for !sent || !replied || !bulkDone && rep.Status() == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.timer.C:
			e.cnt.rpcsExpired.Add(1)
			return nil, fmt.Errorf("%w: %v to %v after %v", ErrRPCTimeout, t, to, timeout)
		case ev := <-c.ch:
			tag, _ := ev.MD.UserPtr.(int)
			if ev.Status != nil {
				e.cnt.errors.Add(1)
				return nil, fmt.Errorf("%v to %v: %v failed: %w", t, to, ev.Type, ev.Status)
			}
			switch {
			case tag == tagReq && ev.Type == lnet.EventSend:
				sent = true
				e.cnt.rpcsSent.Add(1)
			case tag == tagReply && ev.Type == lnet.EventPut:
				replied = true
				if ev.RLength != MsgSize {
					return nil, fmt.Errorf("reply from %v: %w: %d bytes", to, ErrShort, ev.RLength)
				}
				var perr error
				if rep, _, perr = Parse(rbuf); perr != nil {
					return nil, fmt.Errorf("reply from %v: %w", to, perr)
				}
				if rep.Type() != t.ReplyType() {
					return nil, fmt.Errorf("reply from %v: %w: %v to a %v", to, ErrBadType, rep.Type(), t)
				}
			case tag == tagBulk && (ev.Type == lnet.EventGet || ev.Type == lnet.EventPut):
				if ev.MLength != len(bulk) {
					return nil, fmt.Errorf("bulk with %v: %d bytes of %d", to, ev.MLength, len(bulk))
				}
				bulkDone = true
			}
		}
	}
	clean = bulkDone
	if rep.Status() != 0 {
		return rep, &StatusError{Errno: syscall.Errno(rep.Status()), Type: rep.Type()}
	}
	return rep, nil
}

// replyBufs recycles scratch reply messages (sendReply copies them).
var replyBufs = sync.Pool{New: func() any { b := make([]byte, MsgSize); return &b }}

// replyCtx is one reply in flight: its message and where it goes.
// Pooled; back in the pool once the LND is done with the message.
type replyCtx struct {
	buf    []byte
	to     lnetwire.ProcessID
	rpyID  uint64
	pinned bool // sent from the request's target NID (not yet rerouted)
}

// replyCtxs recycles replies once their SEND event says the LND is done
// with them.
var replyCtxs = sync.Pool{New: func() any { return &replyCtx{buf: make([]byte, MsgSize)} }}

// sendReply PUTs rep (MsgSize bytes, copied) to the requester's reply
// buffer. Failures are counted; nobody waits for them.
func (e *endpoint) sendReply(to rpcPeer, rpyID uint64, rep Msg) {
	r := replyCtxs.Get().(*replyCtx)
	copy(r.buf, rep[:MsgSize])
	r.to, r.rpyID, r.pinned = to.peer, rpyID, to.self != lnetwire.NIDAny
	e.putReply(r, to.self)
}

// putReply PUTs r from self.
func (e *endpoint) putReply(r *replyCtx, self lnetwire.NID) {
	h, err := e.in.MDBind(lnet.MD{Start: r.buf, Threshold: 1, Handler: e.replyH, UserPtr: r}, lnet.AutoUnlink)
	if err == nil {
		err = e.in.Put(self, h, lnet.AckReqNo, r.to, RDMAPortal, r.rpyID, 0, 0)
	}
	if err != nil {
		e.cnt.errors.Add(1)
		e.log.Debug("selftest: reply not sent", "to", r.to, "from", self, "err", err)
	}
}

// replySent is the handler of reply MDs (bound once in newEndpoint). A
// reply that could not leave from the request's target NID (its rail
// failed) is sent once more from any NI: a softib addition, see
// rpcPeer.
func (e *endpoint) replySent(ev *lnet.Event) {
	r, _ := ev.MD.UserPtr.(*replyCtx)
	if ev.Status != nil {
		if r != nil && r.pinned && ev.Unlinked {
			r.pinned = false
			e.log.Info("selftest: reply sent again from any NI: the request's rail failed", "to", r.to, "err", ev.Status)
			go e.putReply(r, lnetwire.NIDAny) // not from inside an event handler
			return
		}
		e.cnt.errors.Add(1)
		e.log.Debug("selftest: reply failed", "to", ev.Target, "err", ev.Status)
	}
	if r != nil && ev.Unlinked {
		replyCtxs.Put(r)
	}
}

// errBulkFailed marks a bulk transfer LNet reported failed (not a
// timeout, a cancel or bad data).
var errBulkFailed = errors.New("selftest: bulk transfer failed")

// bulk moves buf between this node and the requester's bulk MD: GET it
// (sink: a brw write or a TEST destination list comes to us) or PUT it
// (a brw read), as srpc_do_bulk: from the request's target NID to its
// source. One that LNet failed there (its rail failed) is moved once more
// from any NI: a softib addition, see rpcPeer. The bytes moved and the
// failures are counted.
func (e *endpoint) bulk(ctx context.Context, to rpcPeer, bulkID uint64, buf []byte, sink bool, timeout time.Duration) error {
	err := e.bulkFrom(ctx, to.self, to.peer, bulkID, buf, sink, timeout)
	if to.self != lnetwire.NIDAny && errors.Is(err, errBulkFailed) {
		e.log.Info("selftest: bulk moved again from any NI: the request's rail failed", "to", to, "err", err)
		err = e.bulkFrom(ctx, lnetwire.NIDAny, to.peer, bulkID, buf, sink, timeout)
	}
	if errors.Is(err, errBulkFailed) {
		e.cnt.errors.Add(1)
	}
	return err
}

// bulkFrom is one attempt of bulk, from self.
func (e *endpoint) bulkFrom(ctx context.Context, self lnetwire.NID, to lnetwire.ProcessID, bulkID uint64, buf []byte, sink bool, timeout time.Duration) error {
	c := getCall(timeout)
	clean := false
	defer func() { e.release(c, clean) }()
	thresh := 1
	if sink {
		thresh = 2 // SEND + REPLY
	}
	h, err := e.in.MDBind(lnet.MD{Start: buf, Threshold: thresh, Handler: c.h}, lnet.AutoUnlink)
	if err != nil {
		return err
	}
	c.mds[0], c.n = h, 1
	if sink {
		err = e.in.Get(self, h, to, RDMAPortal, bulkID, 0)
	} else {
		err = e.in.Put(self, h, lnet.AckReqNo, to, RDMAPortal, bulkID, 0, 0)
	}
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.timer.C:
			return fmt.Errorf("%w: bulk with %v after %v", ErrRPCTimeout, to, timeout)
		case ev := <-c.ch:
			if ev.Status != nil {
				return fmt.Errorf("%w: %v with %v: %w", errBulkFailed, ev.Type, to, ev.Status)
			}
			if ev.Type == lnet.EventReply && ev.MLength != len(buf) {
				return fmt.Errorf("bulk GET from %v: %d bytes of %d", to, ev.MLength, len(buf))
			}
			if ev.Unlinked { // the MD's last event: SEND (and REPLY) done
				clean = true
				if sink {
					e.cnt.bulkGet.Add(uint64(len(buf)))
				} else {
					e.cnt.bulkPut.Add(uint64(len(buf)))
				}
				return nil
			}
		}
	}
}

// reqBuffers are the request buffers of one portal: two MEs matching any
// initiator and any match bits, each with an MD of slots×MsgSize bytes
// that takes requests at a running offset. An exhausted MD unlinks itself
// and is attached again at once; its requests were copied out by then.
// The portal is lazy, so a request arriving in between waits. As the
// kernel's request buffers (one srpc_msg each), they take only
// messages of exactly MsgSize bytes: anything else is dropped.
type reqBuffers struct {
	e       *endpoint
	portal  int
	mes     [2]*lnet.ME
	bufs    [2][]byte
	handle  func(req []byte, from rpcPeer, svc uint64)
	mu      sync.Mutex
	closed  bool
	handles [2]lnet.MDHandle
}

func (e *endpoint) postBuffers(portal, slots int, handle func([]byte, rpcPeer, uint64)) (*reqBuffers, error) {
	rb := &reqBuffers{e: e, portal: portal, handle: handle}
	if err := e.in.SetLazyPortal(portal); err != nil {
		return nil, err
	}
	for i := range rb.mes {
		me, err := e.in.MEAttach(portal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
		if err != nil {
			rb.close()
			return nil, err
		}
		rb.mes[i] = me
		rb.bufs[i] = make([]byte, slots*MsgSize)
		if err := rb.attach(i); err != nil {
			rb.close()
			return nil, err
		}
	}
	return rb, nil
}

func (rb *reqBuffers) attach(i int) error {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.closed {
		return ErrClosed
	}
	h, err := rb.e.in.MDAttach(rb.mes[i], lnet.MD{Start: rb.bufs[i], Threshold: lnet.ThreshInf, MaxSize: MsgSize,
		Options: lnet.MDOpPut | lnet.MDMaxSize | lnet.MDTruncate | lnet.MDAckDisable, UserPtr: i, Handler: rb.event}, lnet.AutoUnlink)
	rb.handles[i] = h
	return err
}

func (rb *reqBuffers) event(ev *lnet.Event) {
	i, _ := ev.MD.UserPtr.(int)
	if ev.Type == lnet.EventPut {
		rb.e.cnt.rpcsRcvd.Add(1)
		if ev.Status != nil || ev.MLength != MsgSize || ev.RLength != MsgSize {
			rb.e.cnt.rpcsDropped.Add(1)
			rb.e.log.Info("selftest: request dropped: not one srpc_msg", "from", source(ev),
				"portal", rb.portal, "service", ev.MatchBits, "length", ev.RLength, "err", ev.Status)
		} else {
			bp := reqCopies.Get().(*[]byte)
			copy(*bp, ev.MD.Start[ev.Offset:ev.Offset+MsgSize])
			go rb.serve(bp, rpcPeer{peer: source(ev), self: ev.Target.NID}, ev.MatchBits)
		}
	}
	if ev.Unlinked {
		if err := rb.attach(i); err != nil && !errors.Is(err, ErrClosed) {
			rb.e.log.Warn("selftest: cannot repost request buffer", "portal", rb.portal, "err", err)
		}
	}
}

// rpcPeer is where a server RPC's reply and bulk transfers go, as the
// kernel's srpc_server_rpc keeps them (srpc_lnet_ev_handler fills them
// from the request's event; srpc_send_reply and srpc_do_bulk use them):
// the process that sent the request (srpc_peer, ev->source: the
// header's source NID, Event.Source, not the Multi-Rail primary that
// ev->initiator and Event.Initiator carry) and the local NID the request was
// sent to (srpc_self, ev->target.nid), which the reply and bulk leave
// from. Where that NID's rail has failed (a Multi-Rail link down) the
// kernel's reply or bulk fails with it; softib's is sent once more from
// any NI (and logged), so the RPC survives the rail as the request did.
type rpcPeer struct {
	peer lnetwire.ProcessID
	self lnetwire.NID
}

// String is the peer's, for logs.
func (p rpcPeer) String() string { return p.peer.String() }

// source is the kernel's ev->source of a received request: the
// initiator's process, at the NID it sent the request from (one of its
// NIDs, not necessarily the Multi-Rail primary Initiator carries).
func source(ev *lnet.Event) lnetwire.ProcessID {
	src := ev.Initiator
	if ev.Source != lnetwire.NIDAny && ev.Source != 0 {
		src.NID = ev.Source
	}
	return src
}

// reqCopies recycles the copies of requests.
var reqCopies = sync.Pool{New: func() any { b := make([]byte, MsgSize); return &b }}

// serve handles one request copy, then recycles it.
func (rb *reqBuffers) serve(bp *[]byte, from rpcPeer, svc uint64) {
	rb.handle(*bp, from, svc)
	reqCopies.Put(bp)
}

func (rb *reqBuffers) close() {
	rb.mu.Lock()
	rb.closed = true
	rb.mu.Unlock()
	for _, me := range rb.mes {
		if me != nil {
			_ = rb.e.in.MEUnlink(me)
		}
	}
}
