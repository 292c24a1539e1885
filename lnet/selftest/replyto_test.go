package selftest

import (
	"sync"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// TestReplyToSource: a node answers a request (its reply PUT and its bulk
// GET) to the NID the request came from and from the NID it was sent to,
// as the kernel's srpc_send_reply and srpc_do_bulk do (srpc_peer =
// ev->source, srpc_self = ev->target.nid). The console is a Multi-Rail
// peer the node knows with primary 10.0.0.1@tcp, and sends from its
// tcp1 NID to the node's tcp1 NID: answers go 10.1.0.2@tcp1 →
// 10.1.0.1@tcp1, not to the primary (which took them over tcp).
func TestReplyToSource(t *testing.T) {
	nw := lndtest.New(lnetwire.SOCKLND)
	tcp, tcp1 := lnetwire.MakeNet(lnetwire.SOCKLND, 0), lnetwire.MakeNet(lnetwire.SOCKLND, 1)
	mk := func(a0, a1 uint32) *lnet.Instance {
		in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{nw.LND()}, Log: quietLog(t),
			Nets: []lnet.NetConfig{{Net: tcp, Addr: a0}, {Net: tcp1, Addr: a1}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		return in
	}
	srvIn, conIn := mk(0x0a000002, 0x0a010002), mk(0x0a000001, 0x0a010001)
	// The console sends every request from its tcp1 NID: without
	// discovery it knows the node only as 10.1.0.2@tcp1.
	conIn.SetDiscovery(false)
	c0, c1 := lnetwire.MakeNID(tcp, 0x0a000001), lnetwire.MakeNID(tcp1, 0x0a010001)
	s1 := lnetwire.MakeNID(tcp1, 0x0a010002)
	if err := srvIn.AddPeer(lnet.PeerConfig{Primary: c0, NIDs: []lnetwire.NID{c1}}); err != nil {
		t.Fatal(err)
	}
	srv, err := NewService(srvIn, Config{Log: quietLog(t), RPCTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)

	var mu sync.Mutex
	var answers []lnetwire.Header // what the node sent to the console's RDMA portal
	nw.SetFilter(func(h *lnetwire.Header) lndtest.Action {
		if (h.Type == lnetwire.MsgPUT || h.Type == lnetwire.MsgGET) && h.Portal == RDMAPortal &&
			(h.SrcNID.Addr() == 0x0a000002 || h.SrcNID.Addr() == 0x0a010002) {
			mu.Lock()
			answers = append(answers, *h)
			mu.Unlock()
		}
		return lndtest.Deliver
	})

	ep := newEndpoint(conIn, quietLog(t), nil)
	to := lnetwire.ProcessID{NID: s1, PID: lnetwire.PIDLustre}
	sid := SID{NID: c0, Stamp: 7}
	send := func(m Msg, bulk []byte) Msg {
		t.Helper()
		m.SetReqSID(sid)
		m.SetRpyID(2000 + uint64(m.Type()))
		var bid uint64
		op := bulkNone
		if bulk != nil {
			bid, op = m.TestReq().BulkID(), bulkGet
		}
		rep, err := ep.call(ctxT(t), to, m, bid, bulk, op, 10*time.Second, make([]byte, MsgSize))
		if err != nil {
			t.Fatalf("%v: %v", m.Type(), err)
		}
		return rep
	}
	m := NewMsg(MsgMakeSessReq, FeatsMask)
	m.MksnReq().SetName("rails")
	if rep := send(m, nil); rep.ReplySID() != sid {
		t.Fatalf("MKSN reply sid %v", rep.ReplySID())
	}
	m = NewMsg(MsgTestReq, FeatsMask)
	tr := m.TestReq()
	tr.SetBulkID(88)
	tr.SetBID(1)
	tr.SetService(ServicePing)
	tr.SetLoop(1)
	tr.SetConcur(1)
	tr.SetIsClient(true)
	tr.SetNDest(1)
	dests := make([]byte, DestListLen(1))
	PutDest(dests, 0, lnetwire.ProcessID{NID: c1, PID: lnetwire.PIDLustre})
	if rep := send(m, dests); rep.Status() != 0 {
		t.Fatalf("TEST status %d", rep.Status())
	}
	mu.Lock()
	defer mu.Unlock()
	var puts, gets int
	for _, h := range answers {
		if h.SrcNID != s1 || h.DestNID != c1 {
			t.Errorf("%v match bits %#x went %v → %v, want %v → %v", h.Type, h.MatchBits, h.SrcNID, h.DestNID, s1, c1)
		}
		switch h.Type {
		case lnetwire.MsgPUT:
			puts++
		case lnetwire.MsgGET:
			gets++
		}
	}
	if puts != 2 || gets != 1 {
		t.Errorf("node sent %d replies and %d bulk GETs, want 2 and 1: %+v", puts, gets, answers)
	}
}
