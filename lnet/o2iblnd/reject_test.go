package o2iblnd_test

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/verbs"
	"softib/wire/lnetwire"
	"softib/wire/mad"
)

// rawPeer is a bare RDMA CM endpoint that speaks o2iblnd's connection
// setup by hand.
type rawPeer struct {
	m    *rdmacm.Manager
	addr netip.Addr
	nid  lnetwire.NID
}

func newRawPeer(t *testing.T) *rawPeer {
	_, m, a := newDevice(t)
	b := a.As4()
	return &rawPeer{m: m, addr: a, nid: lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.O2IBLND, 0), binary.BigEndian.Uint32(b[:]))}
}

func nextEvent(t *testing.T, ch *rdmacm.EventChannel) *rdmacm.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// connect sends pd as the CONNREQ private data to x's service and
// returns the final event (ESTABLISHED or REJECTED).
func (r *rawPeer) connect(t *testing.T, x *node, pd []byte) *rdmacm.Event {
	t.Helper()
	ev, _, _ := r.connectQP(t, x, pd)
	return ev
}

// connectQP is connect that also returns the ID and its CQ.
func (r *rawPeer) connectQP(t *testing.T, x *node, pd []byte) (*rdmacm.Event, *rdmacm.ID, verbs.CQ) {
	t.Helper()
	ch := rdmacm.NewEventChannel()
	t.Cleanup(func() { ch.Close() })
	id, err := r.m.CreateID(ch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { id.Destroy() })
	xa := x.nid.Addr()
	dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(xa >> 24), byte(xa >> 16), byte(xa >> 8), byte(xa)}), o2iblnd.DefaultService)
	if err := id.ResolveAddr(netip.AddrPortFrom(r.addr, 0), dst, time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != rdmacm.EventAddrResolved {
		t.Fatalf("resolve: %v", ev.Type)
	}
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != rdmacm.EventRouteResolved {
		t.Fatalf("route: %v", ev.Type)
	}
	cq, err := id.Device().CreateCQ(verbs.CQAttr{CQE: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(&rdmacm.ConnParam{PrivateData: pd, RetryCount: 5, RNRRetryCount: 6}); err != nil {
		t.Fatal(err)
	}
	return nextEvent(t, ch), id, cq
}

// connReq builds a CONNREQ from r to x; mod adjusts the fields.
func (r *rawPeer) connReq(x *node, mod func(f *lnetwire.KibMsgFields)) []byte {
	f := lnetwire.KibMsgFields{
		KibMsgHdr: lnetwire.KibMsgHdr{Version: lnetwire.KibVersion2, Type: lnetwire.KibCONNREQ,
			SrcNID: r.nid, SrcStamp: 0xABCDEF, DstNID: x.nid},
		ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096},
	}
	if mod != nil {
		mod(&f)
	}
	return f.Append(nil)
}

// expectRej checks a REJECTED event carries a kib_rej with reason why
// and the node's parameters.
func expectRej(t *testing.T, ev *rdmacm.Event, x *node, why lnetwire.KibRejReason) {
	t.Helper()
	if ev.Type != rdmacm.EventRejected || ev.Status != int(mad.RejConsumerDefined) {
		t.Fatalf("%v status %d, want a consumer-defined REJ (%v)", ev.Type, ev.Status, why)
	}
	rej, err := lnetwire.ParseKibRej(ev.Conn.PrivateData)
	if err != nil {
		t.Fatal(err)
	}
	want := lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: lnetwire.KibVersion2, Why: why,
		Incarnation: x.drv().Incarnation(), HasParams: true,
		ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096}}
	if rej != want {
		t.Fatalf("reject %+v, want %+v", rej, want)
	}
}

// TestPassiveChecks drives kiblnd_passive_connect's checks with hand-made
// CONNREQs and checks every kib_rej (lnet-wire.md §6.6, §6.7).
func TestPassiveChecks(t *testing.T) { sim(t, 107, testPassiveChecks) }

func testPassiveChecks(t *testing.T) {
	r := newRawPeer(t)
	x := newNode(t, o2iblnd.Config{})
	for _, tc := range []struct {
		name string
		pd   []byte
		why  lnetwire.KibRejReason
	}{
		{"bad version", r.connReq(x, func(f *lnetwire.KibMsgFields) { f.Version = 0x13 }), lnetwire.KibRejConnUncompat},
		{"garbage", []byte("not an o2iblnd CONNREQ at all, sorry"), lnetwire.KibRejFatal},
		{"CONNACK", r.connReq(x, func(f *lnetwire.KibMsgFields) { f.Type = lnetwire.KibCONNACK }), lnetwire.KibRejFatal},
		{"wrong dstnid", r.connReq(x, func(f *lnetwire.KibMsgFields) { f.DstNID++ }), lnetwire.KibRejFatal},
		{"stale dststamp", r.connReq(x, func(f *lnetwire.KibMsgFields) { f.DstStamp = 12345 }), lnetwire.KibRejConnStale},
		{"queue depth", r.connReq(x, func(f *lnetwire.KibMsgFields) { f.ConnParams.QueueDepth = 9 }), lnetwire.KibRejMsgQueueSize},
		{"rdma frags", r.connReq(x, func(f *lnetwire.KibMsgFields) { f.ConnParams.MaxFrags = 258 }), lnetwire.KibRejRDMAFrags},
		{"msg size", r.connReq(x, func(f *lnetwire.KibMsgFields) { f.ConnParams.MaxMsgSize = 8192 }), lnetwire.KibRejFatal},
	} {
		t.Log(tc.name) // (no subtests in a bubble)
		expectRej(t, r.connect(t, x, tc.pd), x, tc.why)
	}
	// A byte-swapped (big-endian) CONNREQ is accepted; the CONNACK comes
	// in the acceptor's order with the negotiated parameters.
	sw := r.connReq(x, func(f *lnetwire.KibMsgFields) { f.ConnParams.QueueDepth = 4 })
	lnetwire.SwapKibMsg(sw)
	ev := r.connect(t, x, sw)
	if ev.Type != rdmacm.EventEstablished {
		t.Fatalf("swapped CONNREQ: %v (%v)", ev.Type, ev.Err)
	}
	ack, err := lnetwire.UnpackKibMsg(append([]byte(nil), ev.Conn.PrivateData...))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Type() != lnetwire.KibCONNACK || ack.SrcNID() != x.nid || ack.DstNID() != r.nid || ack.DstStamp() != 0xABCDEF ||
		ack.SrcStamp() != x.drv().Incarnation() || ack.ConnParams() != (lnetwire.KibConnParams{QueueDepth: 4, MaxFrags: 257, MaxMsgSize: 4096}) {
		t.Fatalf("CONNACK %+v %+v", ack.Hdr(), ack.ConnParams())
	}
	// The same peer with another incarnation: its old connection is
	// closed and the request rejected STALE.
	expectRej(t, r.connect(t, x, r.connReq(x, func(f *lnetwire.KibMsgFields) { f.SrcStamp = 0xABCDF0 })), x, lnetwire.KibRejConnStale)
	waitFor(t, "stale connection closed", func() bool { return x.drv().Conns(r.nid) == 0 })
	// Once it is gone, the new incarnation gets in.
	if ev := r.connect(t, x, r.connReq(x, func(f *lnetwire.KibMsgFields) { f.SrcStamp = 0xABCDF0 })); ev.Type != rdmacm.EventEstablished {
		t.Fatalf("after STALE: %v", ev.Type)
	}
	// V1 requests are served with V1.
	r1 := newRawPeer(t)
	ev = r1.connect(t, x, r1.connReq(x, func(f *lnetwire.KibMsgFields) { f.Version = lnetwire.KibVersion1 }))
	if ev.Type != rdmacm.EventEstablished {
		t.Fatalf("V1 CONNREQ: %v", ev.Type)
	}
	if ack, err := lnetwire.UnpackKibMsg(append([]byte(nil), ev.Conn.PrivateData...)); err != nil || ack.Version() != lnetwire.KibVersion1 {
		t.Fatalf("V1 CONNACK %v", err)
	}
	for why, n := range map[lnetwire.KibRejReason]uint64{lnetwire.KibRejFatal: 4, lnetwire.KibRejConnStale: 2,
		lnetwire.KibRejConnUncompat: 1, lnetwire.KibRejMsgQueueSize: 1, lnetwire.KibRejRDMAFrags: 1} {
		if got := x.drv().Stats().RejectsSent[why].Load(); got != n {
			t.Errorf("%v rejects sent: %d, want %d", why, got, n)
		}
	}
}

// TestConnRace: while the node is connecting to a lower NID, that NID's
// own request loses the race (higher NID wins).
func TestConnRace(t *testing.T) { sim(t, 108, testConnRace) }

func testConnRace(t *testing.T) {
	r := newRawPeer(t) // created first: the lower address
	x := newNode(t, o2iblnd.Config{})
	if r.nid >= x.nid {
		t.Fatalf("raw peer %v is not below node %v: the race test needs the lower NID first", r.nid, x.nid)
	}
	// The raw peer listens but never answers, so x's attempt stays open
	// (the send's outcome does not matter).
	r.connRequestFrom(t, x, nil)
	expectRej(t, r.connect(t, x, r.connReq(x, nil)), x, lnetwire.KibRejConnRace)
}

// TestActiveRetries: the active side adopts the queue depth and max_frags
// the peer advertises in MSG_QUEUE_SIZE and RDMA_FRAGS rejects and
// retries; mixed V1/V2 nodes talk V1.
func TestActiveRetries(t *testing.T) { sim(t, 109, testActiveRetries) }

func testActiveRetries(t *testing.T) {
	a := newNode(t, o2iblnd.Config{PeerCredits: 16})
	b := newNode(t, o2iblnd.Config{MaxFrags: 16})
	putGet(t, a, b, 200<<10, 1, 1)
	st := a.drv().Stats()
	if st.RejectsRecv[lnetwire.KibRejMsgQueueSize].Load() != 1 || st.RejectsRecv[lnetwire.KibRejRDMAFrags].Load() != 1 {
		t.Fatalf("rejects seen: queue %d frags %d", st.RejectsRecv[lnetwire.KibRejMsgQueueSize].Load(), st.RejectsRecv[lnetwire.KibRejRDMAFrags].Load())
	}
	// V1 rejects carry no parameters, so V1 meets a default node.
	c := newNode(t, o2iblnd.Config{Version: lnetwire.KibVersion1})
	d := newNode(t, o2iblnd.Config{})
	putGet(t, c, d, 100<<10, 2, 2)
	putGet(t, d, c, 1000, 3, 1)
}

// connRequestFrom makes r listen on o2iblnd's service, has x PUT 8 bytes
// to r (events to eq, nil for none) and returns the CONNECT_REQUEST of
// x's connection attempt, for the test to answer.
func (r *rawPeer) connRequestFrom(t *testing.T, x *node, eq *lnet.EQ) *rdmacm.Event {
	t.Helper()
	ch := rdmacm.NewEventChannel()
	t.Cleanup(func() { ch.Close() })
	lis, err := r.m.CreateID(ch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Destroy() })
	if err := lis.BindAddr(netip.AddrPortFrom(r.addr, o2iblnd.DefaultService)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	h, err := x.in.MDBind(lnet.MD{Start: make([]byte, 8), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: r.nid, PID: x.in.PID()}, e2ePortal, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, ch)
	if ev.Type != rdmacm.EventConnectRequest {
		t.Fatalf("listener: %v", ev.Type)
	}
	return ev
}

// putRefused has x PUT to the raw peer r, whose listener rejects the
// connection request with private data pd, and wants the PUT's SEND event
// to carry an error.
func putRefused(t *testing.T, r *rawPeer, x *node, pd []byte) {
	t.Helper()
	ev := r.connRequestFrom(t, x, x.eq)
	if err := ev.ID.Reject(pd); err != nil {
		t.Fatal(err)
	}
	if e := poll(t, x); e.Type != lnet.EventSend || e.Status == nil {
		t.Fatalf("PUT to a refusing peer: %v status %v", e.Type, e.Status)
	}
}

// TestEmptyConsumerReject: a peer whose RDMA CM refuses the request with
// a consumer-defined REJ and no kib_rej (zero private data) is a plain
// refusal: the send fails with an error event, nothing is counted
// malformed and no reconnect is planned.
func TestEmptyConsumerReject(t *testing.T) { sim(t, 110, testEmptyConsumerReject) }

func testEmptyConsumerReject(t *testing.T) {
	r := newRawPeer(t)
	x := newNode(t, o2iblnd.Config{})
	putRefused(t, r, x, nil)
	st := x.drv().Stats()
	if st.Malformed.Load() != 0 || st.ConnectFailures.Load() != 1 || st.Reconnects.Load() != 0 {
		t.Errorf("malformed %d, connect failures %d, reconnects %d; want 0, 1, 0",
			st.Malformed.Load(), st.ConnectFailures.Load(), st.Reconnects.Load())
	}
}

// TestStaleRejectClosesOldConns: while the node's own connection attempt
// to a peer is pending, the peer's connection (incarnation 0xABCDEF) wins
// the race and is established; then the peer answers the pending attempt
// with a kib_rej STALE naming incarnation 0x1234. The node closes the
// connection to the old incarnation at once instead of waiting for its
// timeouts.
func TestStaleRejectClosesOldConns(t *testing.T) { sim(t, 111, testStaleRejectClosesOldConns) }

func testStaleRejectClosesOldConns(t *testing.T) {
	x := newNode(t, o2iblnd.Config{})
	r := newRawPeer(t) // created second: the higher NID wins races
	if r.nid <= x.nid {
		t.Fatalf("raw peer %v is not above node %v", r.nid, x.nid)
	}
	req := r.connRequestFrom(t, x, nil)
	if ev := r.connect(t, x, r.connReq(x, nil)); ev.Type != rdmacm.EventEstablished {
		t.Fatalf("peer's connection: %v", ev.Type)
	}
	waitFor(t, "the peer's connection up", func() bool { return x.drv().Conns(r.nid) == 1 })
	rej := lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: lnetwire.KibVersion2, Why: lnetwire.KibRejConnStale,
		Incarnation: 0x1234, ConnParams: lnetwire.KibConnParams{QueueDepth: 8, MaxFrags: 257, MaxMsgSize: 4096}}
	if err := req.ID.Reject(rej.Append(nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old incarnation's connection to close", func() bool { return x.drv().Conns(r.nid) == 0 })
	if x.drv().Stats().Stale.Load() == 0 {
		t.Error("stale connection not counted")
	}
}

// TestFatalRejectFailsTx: a peer refusing our CONNREQ with a kib_rej
// FATAL (as a Linux peer does for a CONNREQ it cannot accept) fails the
// queued send with an error event at once: no retry, no wait for the tx
// timeout. Likewise a reject the active side cannot act on (a queue-size
// reject without parameters).
func TestFatalRejectFailsTx(t *testing.T) {
	for _, tc := range []struct {
		name string
		rej  lnetwire.KibRej
	}{
		{"fatal", lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: lnetwire.KibVersion2, Why: lnetwire.KibRejFatal}},
		{"queue size without params", lnetwire.KibRej{Magic: lnetwire.KibMagic, Version: lnetwire.KibVersion2, Why: lnetwire.KibRejMsgQueueSize}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim(t, 201, func(t *testing.T) {
				r := newRawPeer(t)
				x := newNode(t, o2iblnd.Config{})
				rej := tc.rej
				putRefused(t, r, x, rej.Append(nil))
				st := x.drv().Stats()
				if st.RejectsRecv[tc.rej.Why].Load() != 1 || st.Reconnects.Load() != 0 || st.Malformed.Load() != 0 {
					t.Errorf("rejects %d, reconnects %d, malformed %d; want 1, 0, 0",
						st.RejectsRecv[tc.rej.Why].Load(), st.Reconnects.Load(), st.Malformed.Load())
				}
			})
		})
	}
}
