package selftest

import (
	"context"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// Config configures a Service. The zero value is usable.
type Config struct {
	// Log receives diagnostics; nil means slog.Default().
	Log *slog.Logger
	// RPCTimeout bounds each test RPC and bulk transfer (default 30 s).
	RPCTimeout time.Duration
}

// Service is the selftest service of one LNet node: it answers console
// requests (session, test, batch, stat) on FrameworkPortal and test
// requests (brw, ping) on RequestPortal, and runs the client side of the
// tests it was given. lnetd starts one on its instance.
type Service struct {
	ep      *endpoint
	log     *slog.Logger
	timeout time.Duration
	fw, tst *reqBuffers
	bulkBuf sync.Pool // *[]byte of lnet.MTU bytes for server-side bulk
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup // request handlers

	mu     sync.Mutex
	sess   *session
	closed bool

	// corruptRead, if set (tests only), damages brw read data after
	// the pattern is written, before it leaves.
	corruptRead func([]byte)
}

// session is the node's view of the session it belongs to (sfw_session).
type session struct {
	sid     SID
	name    string
	timeout time.Duration
	timer   *time.Timer
	batches map[uint64]*batch
}

// batch is one batch of tests on this node.
type batch struct {
	id      uint64
	tests   []TestBody // in Index order
	running bool
	cancel  context.CancelFunc
	done    sync.WaitGroup
	active  int // test instances with workers left (guarded by Service.mu)
}

// NewService starts the selftest service on in: it posts the request
// buffers on FrameworkPortal and RequestPortal (making both lazy).
func NewService(in *lnet.Instance, cfg Config) (*Service, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = 30 * time.Second
	}
	s := &Service{ep: newEndpoint(in, log), log: log, timeout: cfg.RPCTimeout}
	s.bulkBuf.New = func() any { b := make([]byte, lnet.MTU); return &b }
	s.ctx, s.stop = context.WithCancel(context.Background())
	var err error
	if s.fw, err = s.ep.postBuffers(FrameworkPortal, 16, MaxFrameworkMsg, s.dispatch); err != nil {
		return nil, err
	}
	if s.tst, err = s.ep.postBuffers(RequestPortal, 2048, MaxTestMsg, s.dispatch); err != nil {
		s.fw.close()
		return nil, err
	}
	return s, nil
}

// Close ends the session (stopping its tests) and removes the request
// buffers. In-flight requests are abandoned.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	s.fw.close()
	s.tst.close()
	s.stop()
	if sess != nil {
		s.endSession(sess)
	}
	s.wg.Wait()
}

// Counters returns a snapshot of the node's counters.
func (s *Service) Counters() Counters {
	c := s.ep.cnt.snapshot(s.ep.in)
	s.mu.Lock()
	if s.sess != nil {
		for _, b := range s.sess.batches {
			if b.running {
				c.ActiveBatches++
			}
		}
	}
	s.mu.Unlock()
	return c
}

// Session returns the current session id and name (zero SID: none).
func (s *Service) Session() (SID, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		return SID{}, ""
	}
	return s.sess.sid, s.sess.name
}

// dispatch handles one request copied out of a request buffer.
func (s *Service) dispatch(raw []byte, from lnetwire.ProcessID) {
	// Add under mu, so that Close (closed, then Wait) never races an Add.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	var req Msg
	if err := ParseMsg(raw, &req); err != nil || req.Type.IsReply() {
		s.ep.cnt.rpcsDropped.Add(1)
		s.log.Debug("selftest: bad request dropped", "from", from, "err", err)
		return
	}
	s.ep.cnt.rpcsRcvd.Add(1)
	rep := Msg{Type: req.Type.ReplyType(), Feats: req.Feats}
	status := syscall.Errno(0)
	switch req.Type {
	case MsgMakeSessReq:
		status = s.makeSession(&req, &rep)
	case MsgRemoveSesReq:
		if status = s.checkSession(req.SID, true); status == 0 {
			s.mu.Lock()
			sess := s.sess
			if sess != nil && sess.sid == req.SID {
				s.sess = nil
			} else {
				sess = nil // ended meanwhile
			}
			s.mu.Unlock()
			if sess != nil {
				s.endSession(sess)
				s.log.Info("selftest: session ended by console", "session", sess.name, "console", from)
			}
		}
	case MsgTestReq:
		status = s.addTest(&req)
	case MsgBatchReq:
		status = s.batchOp(&req, &rep)
	case MsgStatReq:
		if req.SID.IsZero() || s.checkSession(req.SID, true) == 0 {
			rep.Counters = s.Counters()
		} else {
			status = syscall.ESRCH
		}
	case MsgBRWReq:
		status = s.serveBRW(&req, from)
	case MsgPingReq:
		if status = s.checkSession(req.SID, false); status == 0 {
			rep.PingSeq = req.PingSeq
		} else {
			s.ep.cnt.pingErrors.Add(1)
		}
	default:
		status = syscall.EPROTO
	}
	if status != 0 {
		s.ep.cnt.errors.Add(1)
	}
	rep.Status = uint32(status)
	s.mu.Lock()
	if s.sess != nil {
		rep.SID = s.sess.sid
	}
	s.mu.Unlock()
	s.ep.sendReply(from, req.RpyID, &rep)
}

// checkSession says whether sid is the node's session (0) or not
// (ESRCH); touch restarts the session's idle timer.
func (s *Service) checkSession(sid SID, touch bool) syscall.Errno {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil || s.sess.sid != sid {
		return syscall.ESRCH
	}
	if touch && s.sess.timer != nil {
		s.sess.timer.Reset(s.sess.timeout)
	}
	return 0
}

// makeSession joins the node to the console's session (MKSN). A node in
// another session refuses with EBUSY unless forced.
func (s *Service) makeSession(req, rep *Msg) syscall.Errno {
	if req.SID.IsZero() {
		return syscall.EINVAL
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return syscall.ESHUTDOWN
	}
	old := s.sess
	if old != nil && old.sid == req.SID {
		if old.timer != nil {
			old.timer.Reset(old.timeout)
		}
		rep.Name, rep.Timeout = old.name, uint32(old.timeout/time.Second)
		s.mu.Unlock()
		return 0
	}
	if old != nil && !req.Force {
		rep.Name, rep.Timeout = old.name, uint32(old.timeout/time.Second)
		s.mu.Unlock()
		return syscall.EBUSY
	}
	sess := &session{sid: req.SID, name: req.Name, timeout: time.Duration(req.Timeout) * time.Second, batches: map[uint64]*batch{}}
	if sess.timeout > 0 {
		sess.timer = time.AfterFunc(sess.timeout, func() { s.expire(sess) })
	}
	s.sess = sess
	s.mu.Unlock()
	if old != nil {
		s.endSession(old)
		s.log.Info("selftest: session replaced (forced)", "old", old.name, "new", sess.name)
	}
	s.ep.cnt.reset()
	s.ep.cnt.rpcsRcvd.Add(1) // this request
	rep.Name, rep.Timeout = sess.name, req.Timeout
	s.log.Info("selftest: joined session", "session", sess.name, "sid", sess.sid.String(), "timeout", sess.timeout)
	return 0
}

// expire ends a session the console has not touched for its timeout.
func (s *Service) expire(sess *session) {
	s.mu.Lock()
	if s.sess != sess {
		s.mu.Unlock()
		return
	}
	s.sess = nil
	s.mu.Unlock()
	s.log.Warn("selftest: session timed out, tests stopped", "session", sess.name, "timeout", sess.timeout)
	s.endSession(sess)
}

// endSession stops every batch of a session that is no longer current.
func (s *Service) endSession(sess *session) {
	if sess.timer != nil {
		sess.timer.Stop()
	}
	s.mu.Lock()
	var bs []*batch
	for _, b := range sess.batches {
		bs = append(bs, b)
	}
	s.mu.Unlock()
	for _, b := range bs {
		s.stopBatch(b)
	}
}

// addTest records a test of a batch (TEST request).
func (s *Service) addTest(req *Msg) syscall.Errno {
	if st := s.checkSession(req.SID, true); st != 0 {
		return st
	}
	t := req.Test
	switch {
	case t.Service != ServiceBRW && t.Service != ServicePing,
		t.Service == ServiceBRW && (t.BRWOp != BRWRead && t.BRWOp != BRWWrite || t.Size == 0 || t.Size > lnet.MTU || t.Check > CheckFull),
		t.Client && (len(t.Servers) == 0 || t.Concurrency == 0 || t.Concurrency > 1024),
		t.Index == 0:
		return syscall.EINVAL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		return syscall.ESRCH
	}
	b := s.sess.batches[req.BID]
	if b == nil {
		b = &batch{id: req.BID}
		s.sess.batches[req.BID] = b
	}
	if b.running {
		return syscall.EBUSY
	}
	for i := range b.tests {
		if b.tests[i].Index == t.Index {
			b.tests[i] = t // re-sent by a console: replace
			return 0
		}
	}
	b.tests = append(b.tests, t)
	return 0
}

// batchOp runs, stops or queries a batch (BATCH request).
func (s *Service) batchOp(req, rep *Msg) syscall.Errno {
	if st := s.checkSession(req.SID, true); st != 0 {
		return st
	}
	s.mu.Lock()
	var b *batch
	var sid SID
	if s.sess != nil {
		b = s.sess.batches[req.BID]
		sid = s.sess.sid
	}
	if b == nil {
		s.mu.Unlock()
		if req.Opc == BatchQuery || req.Opc == BatchStop {
			return 0 // nothing of it here: not running
		}
		return syscall.ENOENT
	}
	switch req.Opc {
	case BatchRun:
		if !b.running {
			s.runBatchLocked(b, sid)
		}
		rep.Active = uint32(b.active)
		s.mu.Unlock()
	case BatchStop:
		s.mu.Unlock()
		s.stopBatch(b)
	case BatchQuery:
		rep.Active = uint32(b.active)
		s.mu.Unlock()
	default:
		s.mu.Unlock()
		return syscall.EINVAL
	}
	return 0
}

// runBatchLocked starts the client workers of b's tests.
func (s *Service) runBatchLocked(b *batch, sid SID) {
	ctx, cancel := context.WithCancel(s.ctx)
	b.running, b.cancel = true, cancel
	for i := range b.tests {
		t := b.tests[i]
		if !t.Client {
			continue
		}
		b.active++
		b.done.Add(1)
		go func() {
			defer b.done.Done()
			s.runTest(ctx, sid, &t)
			s.mu.Lock()
			b.active--
			if b.active == 0 {
				b.running = false
			}
			s.mu.Unlock()
		}()
	}
	if b.active == 0 {
		b.running = false // servers only: nothing runs here
	}
}

// stopBatch stops b's workers and waits for them.
func (s *Service) stopBatch(b *batch) {
	s.mu.Lock()
	cancel := b.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	b.done.Wait()
	s.mu.Lock()
	b.running = false
	s.mu.Unlock()
}

// stopGrace is how long a stopped test waits for its RPCs in flight.
const stopGrace = 3 * time.Second

// runTest is the client side of one test: Concurrency workers issuing
// RPCs to the servers round robin until Loop RPCs are done or ctx ends.
func (s *Service) runTest(ctx context.Context, sid SID, t *TestBody) {
	var left struct {
		sync.Mutex
		n int64
	}
	left.n = int64(t.Loop)
	take := func() bool {
		if t.Loop < 0 {
			return true
		}
		left.Lock()
		defer left.Unlock()
		if left.n <= 0 {
			return false
		}
		left.n--
		return true
	}
	// Stopping lets RPCs in flight finish for stopGrace before they are
	// abandoned: an abandoned RPC leaves its server waiting on a bulk
	// that never comes, to fail later as a spurious error.
	actx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	stopWatch := context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, abort) })
	defer stopWatch()
	var wg sync.WaitGroup
	for w := range int(t.Concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var bulk []byte
			if t.Service == ServiceBRW {
				bulk = make([]byte, t.Size)
			}
			rbuf := make([]byte, 512)
			for i := w; ctx.Err() == nil && take(); i += int(t.Concurrency) {
				srv := t.Servers[i%len(t.Servers)]
				err := s.testRPC(actx, sid, t, srv, bulk, rbuf, uint32(i))
				if err != nil && ctx.Err() != nil && actx.Err() == nil {
					return // stopped: an RPC cut short is not an error
				}
				if err != nil && actx.Err() != nil {
					// Still unanswered stopGrace after the stop: the
					// server is gone or stuck; report it.
					s.ep.cnt.rpcsExpired.Add(1)
				}
				if err != nil {
					s.ep.cnt.errors.Add(1)
					if t.Service == ServiceBRW {
						s.ep.cnt.brwErrors.Add(1)
					} else {
						s.ep.cnt.pingErrors.Add(1)
					}
					s.log.Debug("selftest: test RPC failed", "server", srv, "err", err)
					// Do not spin on a dead server.
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				s.ep.cnt.testRPCs.Add(1)
				if t.Service == ServiceBRW {
					s.ep.cnt.testBytes.Add(uint64(t.Size))
				}
			}
		}()
	}
	wg.Wait()
}

// testRPC performs one brw or ping RPC against srv.
func (s *Service) testRPC(ctx context.Context, sid SID, t *TestBody, srv lnetwire.ProcessID, bulk, rbuf []byte, seq uint32) error {
	var rep Msg
	if t.Service == ServicePing {
		rpy, _ := s.ep.newIDs()
		req := Msg{Type: MsgPingReq, RpyID: rpy, SID: sid, PingSeq: seq, PingTime: uint64(time.Now().UnixNano())}
		return s.ep.call(ctx, srv, &req, nil, 0, s.timeout, &rep, rbuf)
	}
	rpy, bid := s.ep.newIDs()
	req := Msg{Type: MsgBRWReq, RpyID: rpy, BulkID: bid, SID: sid, BRWOp: t.BRWOp, BulkLen: t.Size, Check: t.Check}
	if t.BRWOp == BRWWrite {
		FillPattern(bulk, bid, t.Check)
	}
	if err := s.ep.call(ctx, srv, &req, bulk, t.BRWOp, s.timeout, &rep, rbuf); err != nil {
		return err
	}
	if t.BRWOp == BRWRead {
		if off := VerifyPattern(bulk, bid, t.Check); off >= 0 {
			s.log.Warn("selftest: brw read data mismatch", "server", srv, "offset", off, "check", CheckName(t.Check))
			return ErrDataMismatch
		}
	}
	return nil
}

// serveBRW is the server side of a brw RPC: GET the client's data and
// check it (write), or fill and PUT it (read).
func (s *Service) serveBRW(req *Msg, from lnetwire.ProcessID) syscall.Errno {
	if st := s.checkSession(req.SID, false); st != 0 {
		s.ep.cnt.brwErrors.Add(1)
		return st
	}
	if req.BulkLen == 0 || req.BulkLen > lnet.MTU || (req.BRWOp != BRWRead && req.BRWOp != BRWWrite) || req.Check > CheckFull {
		s.ep.cnt.brwErrors.Add(1)
		return syscall.EINVAL
	}
	bp := s.bulkBuf.Get().(*[]byte)
	defer s.bulkBuf.Put(bp)
	buf := (*bp)[:req.BulkLen]
	if req.BRWOp == BRWRead {
		FillPattern(buf, req.BulkID, req.Check)
		if s.corruptRead != nil {
			s.corruptRead(buf)
		}
	}
	if err := s.ep.bulk(s.ctx, from, req.BulkID, buf, req.BRWOp, s.timeout); err != nil {
		s.ep.cnt.brwErrors.Add(1)
		s.log.Debug("selftest: brw bulk failed", "client", from, "err", err)
		return syscall.EIO
	}
	if req.BRWOp == BRWRead {
		s.ep.cnt.bulkPut.Add(uint64(req.BulkLen))
		return 0
	}
	s.ep.cnt.bulkGet.Add(uint64(req.BulkLen))
	if off := VerifyPattern(buf, req.BulkID, req.Check); off >= 0 {
		s.ep.cnt.brwErrors.Add(1)
		s.log.Warn("selftest: brw write data mismatch", "client", from, "offset", off, "check", CheckName(req.Check))
		return syscall.EBADMSG
	}
	return 0
}
