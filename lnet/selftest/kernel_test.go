package selftest

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// rawCall sends a hand-made request (already in its final byte order)
// from the console's instance and returns the parsed reply.
func rawCall(t *testing.T, c *cluster, to lnetwire.NID, req Msg, bulk []byte) (Msg, error) {
	t.Helper()
	ep := newEndpoint(c.conIn, quietLog(t), nil)
	var bid uint64
	op := bulkNone
	if bulk != nil {
		bid, op = le.Uint64(req.Body()[8:]), bulkGet
		if req.Magic() != Magic {
			bid = swap64(bid)
		}
	}
	return ep.call(ctxT(t), lnetwire.ProcessID{NID: to, PID: lnetwire.PIDLustre}, req, bid, bulk, op, 10*time.Second, make([]byte, MsgSize))
}

// TestSwappedConsole drives a node from a console of the other byte
// order: every request is swabbed (its destination list too); the node
// converts them, joins the session, fetches the destinations and runs
// the test.
func TestSwappedConsole(t *testing.T) {
	c := newCluster(t, 2)
	sid := SID{NID: lnetwire.MustParseNID("10.0.0.1@tcp"), Stamp: 99}
	send := func(m Msg, bulk []byte) Msg {
		t.Helper()
		m.SetReqSID(sid)
		m.SetRpyID(1000 + uint64(m.Type()))
		m.Swab()
		rep, err := rawCall(t, c, c.nids[0], m, bulk)
		if err != nil {
			t.Fatalf("%v: %v", m.Type(), err)
		}
		return rep
	}
	m := NewMsg(MsgMakeSessReq, FeatsMask)
	m.MksnReq().SetName("swapped")
	if rep := send(m, nil); rep.ReplySID() != sid || rep.Feats() != FeatsMask || rep.MksnRep().Timeout() != 100 {
		t.Fatalf("MKSN reply sid %v feats %d timeout %d", rep.ReplySID(), rep.Feats(), rep.MksnRep().Timeout())
	}
	if _, name := c.nodes[0].Session(); name != "swapped" {
		t.Fatalf("session name %q", name)
	}
	m = NewMsg(MsgTestReq, FeatsMask)
	tr := m.TestReq()
	tr.SetBulkID(77)
	tr.SetBID(1)
	tr.SetService(ServiceBRW)
	tr.SetLoop(3)
	tr.SetConcur(2)
	tr.SetIsClient(true)
	tr.SetNDest(1)
	tr.SetBulkV1(BRWWrite, CheckFull, 8192, 0)
	dests := make([]byte, DestListLen(1))
	PutDest(dests, 0, lnetwire.ProcessID{NID: c.nids[1], PID: lnetwire.PIDLustre})
	swabField(dests, 8)
	swabField(dests[8:], 4)
	if rep := send(m, dests); rep.Status() != 0 {
		t.Fatalf("TEST status %d", rep.Status())
	}
	m = NewMsg(MsgBatchReq, FeatsMask)
	m.BatchReq().SetBID(1)
	m.BatchReq().SetOpc(BatchRun)
	send(m, nil)
	deadline := time.Now().Add(hangGuard)
	for c.nodes[0].Counters().RPC.RPCsSent < 6 || c.nodes[0].Counters().FW.ActiveBatches != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("test never finished: %+v", c.nodes[0].Counters())
		}
		time.Sleep(5 * time.Millisecond)
	}
	rep := send(NewMsg(MsgStatReq, FeatsMask), nil)
	if k := rep.StatRep().Counters(); k.RPC.RPCsSent != 6 || k.FW.BRWErrors != 0 {
		t.Fatalf("stat %+v", k)
	}
	if k := c.nodes[1].Counters(); k.RPC.BulkGet != 6*8192 {
		t.Fatalf("server %+v", k)
	}
	if rep := send(NewMsg(MsgRemoveSesReq, FeatsMask), nil); rep.Status() != 0 || rep.ReplySID() != noSID {
		t.Fatalf("RMSN status %d sid %v", rep.Status(), rep.ReplySID())
	}
}

// TestNodeDropsForeignSizes: a request that is not exactly one srpc_msg
// (softib's old 208-byte TEST, a short one) is dropped and counted,
// never answered; a wrong version is answered with EPROTO; a request
// whose features differ from the session's gets EPROTO.
func TestNodeDropsForeignSizes(t *testing.T) {
	c := newCluster(t, 1)
	in := c.conIn
	to := lnetwire.ProcessID{NID: c.nids[0], PID: lnetwire.PIDLustre}
	for _, n := range []int{208, 96} {
		b := make([]byte, n)
		copy(b, NewMsg(MsgMakeSessReq, 0))
		h, err := in.MDBind(lnet.MD{Start: b, Threshold: 1}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, to, FrameworkPortal, uint64(ServiceMakeSess), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(hangGuard)
	for c.nodes[0].Counters().RPC.RPCsDropped < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not dropped: %+v", c.nodes[0].Counters().RPC)
		}
		time.Sleep(time.Millisecond)
	}
	if sid, _ := c.nodes[0].Session(); !sid.IsZero() {
		t.Fatal("a dropped MKSN made a session")
	}
	m := NewMsg(MsgDebugReq, 0)
	m[4] = 2 // version
	m.SetRpyID(5)
	rep, err := rawCall(t, c, c.nids[0], m, nil)
	var se *StatusError
	if !errors.As(err, &se) || se.Errno != syscall.EPROTO || rep == nil {
		t.Fatalf("version 2: %v, want EPROTO", err)
	}
	if _, err := c.console.AddGroup(ctxT(t), "g", c.nids); err != nil {
		t.Fatal(err)
	}
	m = NewMsg(MsgStatReq, 0) // the session has FeatBulkLen
	m.SetReqSID(c.console.SID())
	m.SetRpyID(6)
	if _, err := rawCall(t, c, c.nids[0], m, nil); !errors.As(err, &se) || se.Errno != syscall.EPROTO {
		t.Fatalf("features 0 in a BULK_LEN session: %v, want EPROTO", err)
	}
}
