package selftest

import (
	"context"
	"fmt"
	"math/bits"
	"syscall"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// testInst is one test of a batch on this node (sfw_test_instance): a
// server instance only records that the test exists (the brw and ping
// services answer anyone); a client instance runs concur units per
// destination, each issuing loop RPCs (-1: until stopped) one after the
// other to its destination, as framework.c does.
type testInst struct {
	sess      *session
	service   ServiceID
	client    bool
	loop      int32
	concur    uint32
	stopOnErr bool
	dests     []lnetwire.ProcessID
	// brw parameters (test_bulk_req or _v1).
	opc, flags uint32
	length     int
	offset     int

	// Guarded by Service.mu.
	nactive  int  // units running
	stopping bool // units finish their RPC in flight, then stop
	abort    context.CancelFunc
}

// params reads the test parameters of a client instance (brw_client_init).
func (ti *testInst) params(req Msg, tr TestReq) syscall.Errno {
	if ti.service != ServiceBRW {
		return 0
	}
	if req.Feats()&FeatBulkLen == 0 {
		opc, npg, flags := tr.BulkV0()
		ti.opc, ti.flags, ti.length = opc, flags, int(npg)*pageSize
	} else {
		opc, flags, length, off := tr.BulkV1()
		ti.opc, ti.flags, ti.length, ti.offset = uint32(opc), uint32(flags), int(length), int(off%pageSize)
	}
	switch {
	case ti.offset%wordSize != 0, ti.length <= 0, ti.length > lnet.MTU,
		ti.opc != BRWRead && ti.opc != BRWWrite,
		ti.flags != CheckNone && ti.flags != CheckSimple && ti.flags != CheckFull:
		return syscall.EINVAL
	}
	return 0
}

// runBatchLocked is sfw_run_batch: start the units of b's client tests.
func (s *Service) runBatchLocked(sn *session, b *batch) {
	if b.nactive > 0 {
		return // already running
	}
	for _, ti := range b.tests {
		if !ti.client {
			continue
		}
		b.nactive++
		ctx, cancel := context.WithCancel(s.ctx)
		ti.abort, ti.stopping = cancel, false
		for _, dst := range ti.dests {
			for range ti.concur {
				ti.nactive++
				s.wg.Add(1)
				go s.runUnit(ctx, b, ti, dst)
			}
		}
	}
}

// stopBatchLocked is sfw_stop_batch: units stop after their RPC in
// flight; with force, those RPCs are aborted.
func (s *Service) stopBatchLocked(b *batch, force bool) {
	for _, ti := range b.tests {
		if !ti.client || ti.nactive == 0 || ti.stopping {
			continue
		}
		ti.stopping = true
		if force && ti.abort != nil {
			ti.abort()
		}
	}
}

// unitDone is sfw_test_unit_done.
func (s *Service) unitDone(b *batch, ti *testInst) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ti.nactive--; ti.nactive > 0 {
		return
	}
	ti.stopping = false
	if ti.abort != nil {
		ti.abort()
	}
	if b.nactive--; b.nactive > 0 || !ti.sess.ended {
		return
	}
	for _, x := range ti.sess.batches {
		if x.nactive > 0 {
			return
		}
	}
	s.zombies-- // the ended session's last test stopped
}

// unit is one test unit's reusable state.
type unit struct {
	req, rep []byte
	bulk     []byte
}

// runUnit is a test unit (sfw_run_test and sfw_test_rpc_done): RPCs to
// dst until its loop is done, the test stops, or an RPC fails and the
// test stops on errors.
func (s *Service) runUnit(ctx context.Context, b *batch, ti *testInst, dst lnetwire.ProcessID) {
	defer s.wg.Done()
	defer s.unitDone(b, ti)
	u := &unit{req: make([]byte, MsgSize), rep: make([]byte, MsgSize)}
	if ti.service == ServiceBRW {
		u.bulk = make([]byte, ti.length)
	}
	loop := ti.loop
	for {
		s.mu.Lock()
		stopping := ti.stopping
		if !stopping && loop > 0 {
			loop--
		}
		s.mu.Unlock()
		if stopping {
			return
		}
		err := s.testRPC(ctx, ti, dst, u)
		if err != nil {
			s.mu.Lock()
			stopping = ti.stopping
			s.mu.Unlock()
			if !stopping { // an aborted RPC is no error
				if ti.service == ServiceBRW {
					ti.sess.brwErrors.Add(1)
				} else {
					ti.sess.pingErrors.Add(1)
				}
				s.log.Debug("selftest: test RPC failed", "server", dst, "err", err)
			}
			if ti.stopOnErr || ctx.Err() != nil {
				return
			}
			// Do not spin on a dead server.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		if loop == 0 {
			return
		}
	}
}

// testRPC performs one brw or ping RPC against dst (the tso_prep_rpc
// and tso_done_rpc of brw_test.c and ping_test.c).
func (s *Service) testRPC(ctx context.Context, ti *testInst, dst lnetwire.ProcessID, u *unit) error {
	feats := ti.sess.feats
	req := Msg(u.req)
	if ti.service == ServicePing {
		req.Init(MsgPingReq, feats)
		req.SetRpyID(s.ep.ids.next())
		seq := s.pingSeq.Add(1) - 1
		now := time.Now()
		req.PingReq().Set(PingMagic, seq, uint64(now.Unix()), uint64(now.Nanosecond()))
		rep, err := s.ep.call(ctx, dst, req, 0, nil, bulkNone, s.timeout, u.rep)
		if err != nil {
			return err
		}
		if pr := rep.PingRep(); pr.Magic() != PingMagic || pr.Seq() != seq {
			return fmt.Errorf("%w: ping reply from %v: magic %#x seq %d, want %d", ErrDataMismatch, dst, pr.Magic(), pr.Seq(), seq)
		}
		return nil
	}
	op := bulkGet
	if ti.opc == BRWWrite {
		FillPattern(u.bulk, ti.offset, ti.flags, BRWMagic)
	} else {
		op = bulkPut
		FillPattern(u.bulk, ti.offset, ti.flags, BRWPoison)
	}
	req.Init(MsgBRWReq, feats)
	req.SetRpyID(s.ep.ids.next())
	bid := s.ep.ids.next()
	br := req.BRWReq()
	br.SetBulkID(bid)
	br.Set(ti.opc, uint32(ti.length), ti.flags)
	if _, err := s.ep.call(ctx, dst, req, bid, u.bulk, op, s.timeout, u.rep); err != nil {
		return err
	}
	if ti.opc == BRWRead {
		if off := VerifyPattern(u.bulk, ti.offset, ti.flags, BRWMagic); off >= 0 {
			s.log.Warn("selftest: brw read data mismatch", "server", dst, "offset", off, "check", CheckName(ti.flags))
			return ErrDataMismatch
		}
	}
	return nil
}

// serveBRW is the brw test service (brw_server_handle, brw_bulk_ready):
// GET the client's data and check it (write), or fill and PUT it (read).
// A failed bulk transfer drops the RPC (no reply), as the kernel does.
func (s *Service) serveBRW(req Msg, swapped bool, from rpcPeer, rep Msg) bool {
	br := req.BRWReq()
	rep.SetFeats(0)
	rw, length, flags := br.RW(), br.Len(), br.Flags()
	switch {
	case rw != BRWRead && rw != BRWWrite, flags != CheckNone && flags != CheckSimple && flags != CheckFull:
		rep.SetStatus(uint32(syscall.EINVAL))
		return false
	case req.Feats()&^FeatsMask != 0:
		rep.SetFeats(FeatsMask)
		rep.SetStatus(uint32(syscall.EPROTO))
		return false
	case req.Feats()&FeatBulkLen == 0 && length%pageSize != 0:
		rep.SetStatus(uint32(syscall.EINVAL))
		return false
	}
	rep.SetFeats(req.Feats())
	if length == 0 || length > lnet.MTU {
		rep.SetStatus(uint32(syscall.EINVAL))
		return false
	}
	bp := s.bulkBuf.Get().(*[]byte)
	defer s.bulkBuf.Put(bp)
	buf := (*bp)[:length]
	if rw == BRWRead {
		FillPattern(buf, 0, flags, BRWMagic)
		if s.corruptRead != nil {
			s.corruptRead(buf)
		}
	} else {
		FillPattern(buf, 0, flags, BRWPoison)
	}
	if err := s.ep.bulk(s.ctx, from, br.BulkID(), buf, rw == BRWWrite, s.timeout); err != nil {
		s.log.Info("selftest: brw bulk failed", "client", from, "err", err)
		return true
	}
	if rw == BRWRead {
		return false
	}
	magic := uint64(BRWMagic)
	if swapped {
		magic = bits.ReverseBytes64(magic)
	}
	if off := VerifyPattern(buf, 0, flags, magic); off >= 0 {
		s.log.Warn("selftest: brw write data mismatch", "client", from, "offset", off, "check", CheckName(flags))
		rep.SetStatus(uint32(syscall.EBADMSG))
	}
	return false
}

// servePing is the ping test service (ping_server_handle); a request
// without the ping magic is dropped.
func (s *Service) servePing(req Msg, rep Msg) bool {
	pr := req.PingReq()
	if pr.Magic() != PingMagic {
		return true
	}
	rep.PingRep().Set(PingMagic, pr.Seq())
	if req.Feats()&^FeatsMask != 0 {
		rep.SetFeats(FeatsMask)
		rep.SetStatus(uint32(syscall.EPROTO))
		return false
	}
	rep.SetFeats(req.Feats())
	return false
}
