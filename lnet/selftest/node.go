package selftest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// Config configures a Service. The zero value is usable.
type Config struct {
	// Log receives diagnostics; nil means slog.Default().
	Log *slog.Logger
	// RPCTimeout bounds each test RPC and bulk transfer (default 64 s,
	// the kernel's rpc_timeout).
	RPCTimeout time.Duration
	// SessionTimeout ends a session no framework RPC touched for that
	// long (default 100 s, the kernel's session_timeout; negative:
	// never). The node reports it in MKSN and DEBUG replies; Lustre's
	// console pings every node at half of it.
	SessionTimeout time.Duration
}

// Service is the lnet_selftest node of one LNet instance, as Lustre's
// kernel module: it answers console requests (session, test, batch,
// stat, debug) on FrameworkPortal and test requests (brw, ping) on
// RequestPortal, and runs the client side of the tests it was given.
// lnetd starts one on its instance.
type Service struct {
	in       *lnet.Instance
	ep       *endpoint // the node's srpc layer (its counters go in STAT)
	con      *endpoint // console RPCs sent for a local lst (ProxyCall)
	log      *slog.Logger
	timeout  time.Duration
	sessTime time.Duration
	fw, tst  *reqBuffers
	bulkBuf  sync.Pool // *[]byte of lnet.MTU bytes for server-side bulk
	ctx      context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup // request handlers and test units
	pingSeq  atomic.Uint32

	// fwMu serialises the framework handlers (the kernel runs one at a
	// time). Lock order: fwMu, then mu.
	fwMu sync.Mutex
	// mu guards the fields below and every session, batch and test
	// instance's mutable state.
	mu      sync.Mutex
	sess    *session
	zombies int // ended sessions whose tests are still stopping
	closed  bool

	// corruptRead, if set (tests only), damages brw read data after
	// the pattern is written, before it leaves.
	corruptRead func([]byte)
}

// session is the node's session (sfw_session).
type session struct {
	sid     SID
	name    string
	feats   uint32
	timeout time.Duration
	started time.Time
	refs    int // MKSNs of its console not yet matched by an RMSN
	timer   *time.Timer
	batches []*batch
	ended   bool

	brwErrors, pingErrors atomic.Uint32
}

// batch is one batch of tests on this node (sfw_batch).
type batch struct {
	id      uint64
	tests   []*testInst
	nactive int // client test instances with units running
}

// NewService starts the selftest service on in: it posts the request
// buffers on FrameworkPortal and RequestPortal (making both lazy).
func NewService(in *lnet.Instance, cfg Config) (*Service, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = 64 * time.Second
	}
	switch {
	case cfg.SessionTimeout == 0:
		cfg.SessionTimeout = 100 * time.Second
	case cfg.SessionTimeout < 0:
		cfg.SessionTimeout = 0
	}
	ids := newMatchIDs()
	s := &Service{in: in, ep: newEndpoint(in, log, ids), con: newEndpoint(in, log, ids), log: log,
		timeout: cfg.RPCTimeout, sessTime: cfg.SessionTimeout}
	s.bulkBuf.New = func() any { b := make([]byte, lnet.MTU); return &b }
	s.ctx, s.stop = context.WithCancel(context.Background())
	var err error
	if s.fw, err = s.ep.postBuffers(FrameworkPortal, 64, s.dispatch); err != nil {
		return nil, err
	}
	if s.tst, err = s.ep.postBuffers(RequestPortal, 4096, s.dispatch); err != nil {
		s.fw.close()
		return nil, err
	}
	return s, nil
}

// Close ends the session (aborting its tests) and removes the request
// buffers. In-flight requests are abandoned.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.deactivateLocked()
	s.mu.Unlock()
	s.fw.close()
	s.tst.close()
	s.stop()
	s.wg.Wait()
}

// Counters returns what a STAT reply of the node carries now.
func (s *Service) Counters() Counters {
	c := Counters{RPC: s.ep.cnt.snapshot(), LNet: lnetCounters(s.in)}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.FW.ZombieSessions = uint32(s.zombies)
	if sn := s.sess; sn != nil {
		c.FW.RunningMS = uint32(time.Since(sn.started).Milliseconds())
		c.FW.BRWErrors = sn.brwErrors.Load()
		c.FW.PingErrors = sn.pingErrors.Load()
		for _, b := range sn.batches {
			if b.nactive > 0 {
				c.FW.ActiveBatches++
			}
		}
	}
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

// dispatch handles one request copied out of a request buffer; svc is
// the match bits it came with (the service id).
func (s *Service) dispatch(raw []byte, from rpcPeer, svc uint64) {
	// Add under mu, so that Close (closed, then Wait) never races an Add.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	req, swapped, err := Parse(raw)
	badVersion := errors.Is(err, ErrBadVersion)
	if err == nil || badVersion {
		if t := req.Type(); svc >= uint64(serviceMax) || ServiceID(svc).Request() != t {
			err = ErrBadType
			badVersion = false
		}
	}
	if err != nil && !badVersion {
		s.ep.cnt.rpcsDropped.Add(1)
		s.log.Info("selftest: request dropped", "from", from, "service", svc, "err", err)
		return
	}
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	rep := Msg(*bp)
	rep.Init(req.Type().ReplyType(), FeatsMask)
	drop := false
	switch sv := ServiceID(svc); {
	case badVersion:
		s.log.Info("selftest: request version mismatch", "from", from, "version", req.Version())
		rep.SetStatus(uint32(syscall.EPROTO))
	case sv == ServiceBRW:
		drop = s.serveBRW(req, swapped, from, rep)
	case sv == ServicePing:
		drop = s.servePing(req, rep)
	default:
		drop = s.serveFramework(req, swapped, from, rep)
	}
	if drop {
		s.ep.cnt.rpcsDropped.Add(1)
		return
	}
	s.ep.sendReply(from, req.RpyID(), rep)
}

// serveFramework handles a console request (sfw_handle_server_rpc). It
// reports whether the request is dropped without a reply.
func (s *Service) serveFramework(req Msg, swapped bool, from rpcPeer, rep Msg) bool {
	t := req.Type()
	if t != MsgTestReq {
		// A TEST request may wait for its destination list: it takes
		// the locks it needs itself, as the kernel's bulk happens
		// outside its framework handler.
		s.fwMu.Lock()
		defer s.fwMu.Unlock()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return true
	}
	sn := s.sess
	if sn != nil && sn.timer != nil {
		sn.timer.Stop()
	}
	defer s.rearm()
	if sn != nil {
		rep.SetFeats(sn.feats)
	}
	if t != MsgMakeSessReq && t != MsgDebugReq {
		if sn != nil && sn.feats != req.Feats() {
			s.mu.Unlock()
			s.log.Info("selftest: request features differ from the session's", "from", from, "type", t,
				"feats", req.Feats(), "session", sn.feats)
			rep.SetStatus(uint32(syscall.EPROTO))
			rep.SetReplySID(sn.sid)
			return false
		}
	} else if req.Feats()&^FeatsMask != 0 {
		s.mu.Unlock()
		rep.SetStatus(uint32(syscall.EPROTO))
		return false
	}
	var st syscall.Errno
	drop := false
	switch t {
	case MsgMakeSessReq:
		st = s.makeSessionLocked(req, rep, from)
	case MsgRemoveSesReq:
		st = s.removeSessionLocked(req, rep, from)
	case MsgDebugReq:
		st = s.debugLocked(rep)
	case MsgStatReq:
		rep.SetReplySID(s.oldSIDLocked())
		switch sid := req.ReqSID(); {
		case sid.NID == lnetwire.NIDAny:
			st = syscall.EINVAL
		case sn == nil || sn.sid != sid:
			st = syscall.ESRCH
		default:
			s.mu.Unlock()
			c := s.Counters()
			rep.StatRep().SetCounters(&c)
			s.mu.Lock()
		}
	case MsgBatchReq:
		st, drop = s.batchOpLocked(req, rep)
	case MsgTestReq:
		s.mu.Unlock()
		st = s.addTest(req, swapped, from, rep)
		s.mu.Lock()
	default: // JOIN: not a service of the kernel module either
		drop = true
	}
	if s.sess != nil {
		rep.SetFeats(s.sess.feats)
	}
	s.mu.Unlock()
	rep.SetStatus(uint32(st))
	return drop
}

// rearm restarts the session timer after a framework RPC.
func (s *Service) rearm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sn := s.sess; sn != nil && sn.timeout > 0 {
		if sn.timer == nil {
			sn.timer = time.AfterFunc(sn.timeout, func() { s.expire(sn) })
		} else {
			sn.timer.Reset(sn.timeout)
		}
	}
}

// oldSIDLocked is the sid replies carry: the node's session, or
// noSID (get_old_sid).
func (s *Service) oldSIDLocked() SID {
	if s.sess == nil {
		return noSID
	}
	return s.sess.sid
}

// makeSessionLocked is sfw_make_session: join the console's session;
// a node in another session refuses with EBUSY unless forced.
func (s *Service) makeSessionLocked(req, rep Msg, from rpcPeer) syscall.Errno {
	mk, mr := req.MksnReq(), rep.MksnRep()
	sid := req.ReqSID()
	rep.SetReplySID(s.oldSIDLocked())
	if sid.NID == lnetwire.NIDAny {
		return syscall.EINVAL
	}
	if sn := s.sess; sn != nil {
		mr.SetTimeout(uint32(sn.timeout / time.Second))
		if sn.sid == sid {
			sn.refs++
			return 0
		}
		if !mk.Force() {
			mr.SetName(sn.name)
			return syscall.EBUSY
		}
	}
	if req.Feats()&^FeatsMask != 0 {
		return syscall.EPROTO
	}
	old := s.sess
	s.deactivateLocked()
	sn := &session{sid: sid, name: mk.Name(), feats: req.Feats(), timeout: s.sessTime, started: time.Now(), refs: 1}
	s.sess = sn
	rep.SetReplySID(sid)
	mr.SetTimeout(uint32(sn.timeout / time.Second))
	if old != nil {
		s.log.Info("selftest: session replaced (forced)", "old", old.name, "new", sn.name, "console", from)
	}
	s.log.Info("selftest: joined session", "session", sn.name, "sid", sid.String(), "console", from, "features", sn.feats)
	return 0
}

// removeSessionLocked is sfw_remove_session.
func (s *Service) removeSessionLocked(req, rep Msg, from rpcPeer) syscall.Errno {
	sid := req.ReqSID()
	sn := s.sess
	rep.SetReplySID(s.oldSIDLocked())
	switch {
	case sid.NID == lnetwire.NIDAny:
		return syscall.EINVAL
	case sn == nil:
		return syscall.ESRCH
	case sn.sid != sid:
		return syscall.EBUSY
	}
	if sn.refs--; sn.refs > 0 {
		return 0
	}
	s.deactivateLocked()
	rep.SetReplySID(noSID)
	s.log.Info("selftest: session ended by console", "session", sn.name, "console", from)
	return 0
}

// debugLocked is sfw_debug_session: the node's session, if any.
func (s *Service) debugLocked(rep Msg) syscall.Errno {
	sn := s.sess
	rep.SetReplySID(s.oldSIDLocked())
	if sn == nil {
		return syscall.ESRCH
	}
	d := rep.DebugRep()
	d.SetTimeout(uint32(sn.timeout / time.Second))
	d.SetNBatch(uint32(len(sn.batches)))
	d.SetName(sn.name)
	return 0
}

// expire ends a session no framework RPC touched for its timeout.
func (s *Service) expire(sn *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != sn {
		return
	}
	s.log.Warn("selftest: session expired, tests stopped", "session", sn.name, "sid", sn.sid.String(), "timeout", sn.timeout)
	s.deactivateLocked()
}

// deactivateLocked ends the current session: its running tests are
// aborted; it stays a zombie until they have stopped.
func (s *Service) deactivateLocked() {
	sn := s.sess
	if sn == nil {
		return
	}
	s.sess = nil
	sn.ended = true
	if sn.timer != nil {
		sn.timer.Stop()
	}
	active := false
	for _, b := range sn.batches {
		if b.nactive > 0 {
			active = true
			s.stopBatchLocked(b, true)
		}
	}
	if active {
		s.zombies++
	}
}

// findBatchLocked returns the session's batch id, creating it if asked.
func (sn *session) findBatch(id uint64, create bool) *batch {
	for _, b := range sn.batches {
		if b.id == id {
			return b
		}
	}
	if !create {
		return nil
	}
	b := &batch{id: id}
	sn.batches = append(sn.batches, b)
	return b
}

// batchOpLocked is sfw_control_batch; an unknown opcode is dropped.
func (s *Service) batchOpLocked(req, rep Msg) (syscall.Errno, bool) {
	br := req.BatchReq()
	sn := s.sess
	rep.SetReplySID(s.oldSIDLocked())
	if sn == nil || sn.sid != req.ReqSID() {
		return syscall.ESRCH, false
	}
	b := sn.findBatch(br.BID(), false)
	if b == nil {
		return syscall.ENOENT, false
	}
	switch br.Opc() {
	case BatchRun:
		s.runBatchLocked(sn, b)
	case BatchStop:
		s.stopBatchLocked(b, br.Arg() != 0)
	case BatchQuery:
		idx := br.TestIdx()
		if idx == 0 {
			rep.BatchRep().SetActive(uint32(b.nactive))
			break
		}
		if int(idx) > len(b.tests) {
			return syscall.ENOENT, false
		}
		rep.BatchRep().SetActive(uint32(b.tests[idx-1].nactive))
	default:
		return 0, true
	}
	return 0, false
}

// addTest is sfw_add_test: record a test instance of a batch. A client
// instance first GETs its destination list from the console.
func (s *Service) addTest(req Msg, swapped bool, from rpcPeer, rep Msg) syscall.Errno {
	tr := req.TestReq()
	s.mu.Lock()
	rep.SetReplySID(s.oldSIDLocked())
	s.mu.Unlock()
	sid, ndest, svc := req.ReqSID(), tr.NDest(), tr.Service()
	if tr.Loop() == 0 || tr.Concur() == 0 || sid.NID == lnetwire.NIDAny || ndest > MaxDests ||
		tr.IsClient() && ndest == 0 || tr.Concur() > MaxConcurrency || svc >= serviceMax || svc <= serviceFwMax {
		return syscall.EINVAL
	}
	check := func() (*session, syscall.Errno) {
		sn := s.sess
		if sn == nil || sn.sid != sid || svc != ServiceBRW && svc != ServicePing {
			return nil, syscall.ENOENT
		}
		if b := sn.findBatch(tr.BID(), false); b != nil && b.nactive > 0 {
			return nil, syscall.EBUSY
		}
		return sn, 0
	}
	s.mu.Lock()
	_, st := check()
	s.mu.Unlock()
	if st != 0 {
		return st
	}
	ti := &testInst{service: svc, client: tr.IsClient(), loop: tr.Loop(), concur: tr.Concur(), stopOnErr: tr.StopOnErr()}
	if ti.client {
		// The destinations: ndest packed ids the console's MD holds.
		list := make([]byte, int(ndest)*ProcessIDSize)
		if err := s.ep.bulk(s.ctx, from, tr.BulkID(), list, true, s.timeout); err != nil {
			s.log.Info("selftest: TEST destination list not fetched", "console", from, "err", err)
			return syscall.EIO
		}
		for i := range int(ndest) {
			id, ok := Dest(list, i, swapped)
			if !ok {
				return syscall.EINVAL
			}
			ti.dests = append(ti.dests, id)
		}
		if st := ti.params(req, tr); st != 0 {
			return st
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, st := check()
	if st != 0 {
		return st
	}
	ti.sess = sn
	b := sn.findBatch(tr.BID(), true)
	b.tests = append(b.tests, ti)
	role := "server"
	if ti.client {
		role = "client"
	}
	s.log.Debug("selftest: test added", "batch", b.id, "service", svc, "role", role, "loop", ti.loop,
		"concurrency", ti.concur, "dests", len(ti.dests))
	return 0
}
