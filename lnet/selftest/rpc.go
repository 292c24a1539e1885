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

// counters are the live selftest counters of an endpoint.
type counters struct {
	rpcsSent, rpcsRcvd, rpcsDropped, rpcsExpired, errors atomic.Uint64
	bulkGet, bulkPut, brwErrors, pingErrors              atomic.Uint64
	testRPCs, testBytes                                  atomic.Uint64
}

func (c *counters) reset() {
	for _, p := range []*atomic.Uint64{&c.rpcsSent, &c.rpcsRcvd, &c.rpcsDropped, &c.rpcsExpired, &c.errors,
		&c.bulkGet, &c.bulkPut, &c.brwErrors, &c.pingErrors, &c.testRPCs, &c.testBytes} {
		p.Store(0)
	}
}

func (c *counters) snapshot(in *lnet.Instance) Counters {
	st := in.Stats()
	return Counters{
		RPCsSent: c.rpcsSent.Load(), RPCsRcvd: c.rpcsRcvd.Load(), RPCsDropped: c.rpcsDropped.Load(),
		RPCsExpired: c.rpcsExpired.Load(), Errors: c.errors.Load(), BulkGet: c.bulkGet.Load(),
		BulkPut: c.bulkPut.Load(), BRWErrors: c.brwErrors.Load(), PingErrors: c.pingErrors.Load(),
		TestRPCs: c.testRPCs.Load(), TestBytes: c.testBytes.Load(),
		LNetMsgsAlloc: st.MsgsAlloc, LNetErrors: st.Errors, LNetSendCount: st.SendCount,
		LNetRecvCount: st.RecvCount, LNetDropCount: st.DropCount, LNetSendLength: st.SendLength,
		LNetRecvLength: st.RecvLength, LNetDropLength: st.DropLength,
	}
}

// endpoint is the SRPC machinery on one LNet instance: client calls
// (request PUT, reply and bulk MDs on RDMAPortal) and, for nodes, the
// request buffers.
type endpoint struct {
	in  *lnet.Instance
	log *slog.Logger
	ids atomic.Uint64
	cnt counters
	// replyH is replySent bound once (a method value allocates).
	replyH func(*lnet.Event)
}

func newEndpoint(in *lnet.Instance, log *slog.Logger) *endpoint {
	e := &endpoint{in: in, log: log}
	e.replyH = e.replySent
	// Start ids from the clock so a restarted requester does not reuse
	// the match bits of replies still in flight to its previous run.
	e.ids.Store(uint64(time.Now().UnixNano()) >> 1)
	return e
}

// newIDs returns fresh reply and bulk match bits.
func (e *endpoint) newIDs() (rpy, bulk uint64) {
	id := e.ids.Add(2)
	return id, id + 1
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

// call sends req to `to` and waits for the reply, decoded into rep. req's
// RpyID (and BulkID when bulk != nil) must be set from newIDs. With bulk,
// the remote side GETs it (bulkOp BRWWrite) or PUTs into it (BRWRead),
// and call returns only after that transfer completed. rbuf receives the
// reply (≥ the reply's size). Timeout or ctx ending unlinks the MDs.
func (e *endpoint) call(ctx context.Context, to lnetwire.ProcessID, req *Msg, bulk []byte, bulkOp uint32, timeout time.Duration, rep *Msg, rbuf []byte) error {
	c := getCall(timeout)
	clean := false
	defer func() { e.release(c, clean) }()
	if bulk != nil {
		me, err := e.in.MEAttach(RDMAPortal, to, req.BulkID, 0, lnet.AutoUnlink, lnet.InsAfter)
		if err != nil {
			return err
		}
		opt := lnet.MDOpGet
		if bulkOp == BRWRead {
			opt = lnet.MDOpPut
		}
		h, err := e.in.MDAttach(me, lnet.MD{Start: bulk, Threshold: 1, Options: opt, Handler: c.h, UserPtr: tagBulk}, lnet.AutoUnlink)
		if err != nil {
			_ = e.in.MEUnlink(me)
			return err
		}
		c.mds[c.n], c.n = h, c.n+1
	}
	me, err := e.in.MEAttach(RDMAPortal, to, req.RpyID, 0, lnet.AutoUnlink, lnet.InsAfter)
	if err != nil {
		return err
	}
	rh, err := e.in.MDAttach(me, lnet.MD{Start: rbuf, Threshold: 1, Options: lnet.MDOpPut | lnet.MDTruncate | lnet.MDAckDisable,
		Handler: c.h, UserPtr: tagReply}, lnet.AutoUnlink)
	if err != nil {
		_ = e.in.MEUnlink(me)
		return err
	}
	c.mds[c.n], c.n = rh, c.n+1
	c.qbuf = req.Append(c.qbuf[:0])
	qh, err := e.in.MDBind(lnet.MD{Start: c.qbuf, Threshold: 1, Handler: c.h, UserPtr: tagReq}, lnet.AutoUnlink)
	if err != nil {
		return err
	}
	c.mds[c.n], c.n = qh, c.n+1
	svc := req.Type.Service()
	e.cnt.rpcsSent.Add(1)
	if err := e.in.Put(lnetwire.NIDAny, qh, lnet.AckReqNo, to, svc.Portal(), uint64(svc), 0, 0); err != nil {
		return err
	}
	sent, replied, bulkDone := false, false, bulk == nil
	var status error
	for !(sent && replied && bulkDone) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.timer.C:
			e.cnt.rpcsExpired.Add(1)
			return fmt.Errorf("%w: %v to %v after %v", ErrRPCTimeout, req.Type, to, timeout)
		case ev := <-c.ch:
			tag, _ := ev.MD.UserPtr.(int)
			if ev.Status != nil {
				return fmt.Errorf("%v to %v: %v failed: %w", req.Type, to, ev.Type, ev.Status)
			}
			switch {
			case tag == tagReq && ev.Type == lnet.EventSend:
				sent = true
			case tag == tagReply && ev.Type == lnet.EventPut:
				replied = true
				if err := ParseMsg(rbuf[:ev.MLength], rep); err != nil {
					return fmt.Errorf("reply from %v: %w", to, err)
				}
				if rep.Type != req.Type.ReplyType() {
					return fmt.Errorf("reply from %v: %w: %v to a %v", to, ErrBadType, rep.Type, req.Type)
				}
				if rep.Status != 0 {
					// No bulk will come: wait only for the request's SEND.
					status = &StatusError{Errno: syscall.Errno(rep.Status), Type: rep.Type}
					if !bulkDone {
						return status
					}
				}
			case tag == tagBulk && (ev.Type == lnet.EventGet || ev.Type == lnet.EventPut):
				if ev.MLength != len(bulk) {
					return fmt.Errorf("bulk from %v: %d bytes of %d", to, ev.MLength, len(bulk))
				}
				bulkDone = true
			}
		}
	}
	clean = true
	return status
}

// replyBufs recycles reply encodings once their SEND event says the LND
// is done with them.
var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// sendReply PUTs rep to the requester's reply buffer. Failures are
// counted; nobody waits for them.
func (e *endpoint) sendReply(to lnetwire.ProcessID, rpyID uint64, rep *Msg) {
	bp := replyBufs.Get().(*[]byte)
	*bp = rep.Append((*bp)[:0])
	h, err := e.in.MDBind(lnet.MD{Start: *bp, Threshold: 1, Handler: e.replyH, UserPtr: bp}, lnet.AutoUnlink)
	if err == nil {
		err = e.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, to, RDMAPortal, rpyID, 0, 0)
	}
	if err != nil {
		e.cnt.errors.Add(1)
		e.log.Debug("selftest: reply not sent", "to", to, "err", err)
	}
}

// replySent is the handler of reply MDs (bound once in newEndpoint).
func (e *endpoint) replySent(ev *lnet.Event) {
	if ev.Status != nil {
		e.cnt.errors.Add(1)
		e.log.Debug("selftest: reply failed", "to", ev.Target, "err", ev.Status)
	}
	if bp, ok := ev.MD.UserPtr.(*[]byte); ok && ev.Unlinked {
		replyBufs.Put(bp)
	}
}

// bulk moves buf between this node and the requester's bulk MD: GET it
// (a brw write: the data comes to us) or PUT it (a brw read).
func (e *endpoint) bulk(ctx context.Context, to lnetwire.ProcessID, bulkID uint64, buf []byte, op uint32, timeout time.Duration) error {
	c := getCall(timeout)
	clean := false
	defer func() { e.release(c, clean) }()
	thresh := 1
	if op == BRWWrite {
		thresh = 2 // SEND + REPLY
	}
	h, err := e.in.MDBind(lnet.MD{Start: buf, Threshold: thresh, Handler: c.h}, lnet.AutoUnlink)
	if err != nil {
		return err
	}
	c.mds[0], c.n = h, 1
	if op == BRWWrite {
		err = e.in.Get(lnetwire.NIDAny, h, to, RDMAPortal, bulkID, 0)
	} else {
		err = e.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, to, RDMAPortal, bulkID, 0, 0)
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
				return fmt.Errorf("bulk %v with %v: %w", ev.Type, to, ev.Status)
			}
			if ev.Type == lnet.EventReply && ev.MLength != len(buf) {
				return fmt.Errorf("bulk GET from %v: %d bytes of %d", to, ev.MLength, len(buf))
			}
			if ev.Unlinked { // the MD's last event: SEND (and REPLY) done
				clean = true
				return nil
			}
		}
	}
}

// reqBuffers are the request buffers of one portal: two MEs matching any
// initiator and any match bits, each with an MD of slots×maxSize bytes
// that takes requests at a running offset. An exhausted MD unlinks itself
// and is attached again at once; its requests were copied out by then.
// The portal is lazy, so a request arriving in between waits.
type reqBuffers struct {
	e       *endpoint
	portal  int
	maxSize int
	mes     [2]*lnet.ME
	bufs    [2][]byte
	handle  func(req []byte, from lnetwire.ProcessID)
	mu      sync.Mutex
	closed  bool
	handles [2]lnet.MDHandle
}

func (e *endpoint) postBuffers(portal, slots, maxSize int, handle func([]byte, lnetwire.ProcessID)) (*reqBuffers, error) {
	rb := &reqBuffers{e: e, portal: portal, maxSize: maxSize, handle: handle}
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
		rb.bufs[i] = make([]byte, slots*maxSize)
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
	h, err := rb.e.in.MDAttach(rb.mes[i], lnet.MD{Start: rb.bufs[i], Threshold: lnet.ThreshInf, MaxSize: rb.maxSize,
		Options: lnet.MDOpPut | lnet.MDMaxSize | lnet.MDTruncate | lnet.MDAckDisable, UserPtr: i, Handler: rb.event}, lnet.AutoUnlink)
	rb.handles[i] = h
	return err
}

func (rb *reqBuffers) event(ev *lnet.Event) {
	i, _ := ev.MD.UserPtr.(int)
	if ev.Type == lnet.EventPut {
		if ev.Status != nil || ev.MLength < ev.RLength {
			rb.e.cnt.rpcsDropped.Add(1)
		} else {
			var bp *[]byte
			if ev.MLength <= MaxTestMsg {
				bp = smallReqs.Get().(*[]byte)
			} else {
				b := make([]byte, ev.MLength)
				bp = &b
			}
			req := (*bp)[:ev.MLength]
			copy(req, ev.MD.Start[ev.Offset:ev.Offset+ev.MLength])
			go rb.serve(bp, req, ev.Initiator)
		}
	}
	if ev.Unlinked {
		if err := rb.attach(i); err != nil && !errors.Is(err, ErrClosed) {
			rb.e.log.Warn("selftest: cannot repost request buffer", "portal", rb.portal, "err", err)
		}
	}
}

// smallReqs recycles the copies of test requests.
var smallReqs = sync.Pool{New: func() any { b := make([]byte, MaxTestMsg); return &b }}

// serve handles one request copy, then recycles it.
func (rb *reqBuffers) serve(bp *[]byte, req []byte, from lnetwire.ProcessID) {
	rb.handle(req, from)
	if cap(*bp) == MaxTestMsg {
		smallReqs.Put(bp)
	}
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
