package lnet_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// rawLND lets a test inject arbitrary headers through ni.Parse and see
// what the core asks of the driver.
type rawLND struct {
	// rdma makes Send of a GET behave like o2iblnd: create the REPLY,
	// write rdmaData into the sink and complete both.
	rdma     bool
	rdmaData []byte
	gotReply []byte // data an rdmaReq GET asked the driver to write back

	mu    sync.Mutex
	ni    *lnd.NI
	sent  []lnetwire.Header
	recvs []rawRecv
}

type rawRecv struct {
	dropped bool
	mlen    int
	rlen    int
}

func (r *rawLND) Type() lnetwire.LNDType { return lnetwire.GNILND }
func (r *rawLND) Startup(ni *lnd.NI) (lnd.Driver, error) {
	r.ni = ni
	return r, nil
}
func (r *rawLND) Send(m *lnd.Msg) error {
	if r.rdma && m.Type == lnetwire.MsgGET {
		reply, err := r.ni.CreateReplyMsg(m)
		if err != nil {
			return err
		}
		n := m.Sink.CopyFrom(r.rdmaData)
		r.ni.SetReplyMsgLen(reply, n)
		r.ni.Finalize(m, nil)
		r.ni.Finalize(reply, nil)
		return nil
	}
	r.mu.Lock()
	r.sent = append(r.sent, m.Hdr)
	r.mu.Unlock()
	r.ni.Finalize(m, nil)
	return nil
}
func (r *rawLND) Recv(private any, m *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error {
	r.mu.Lock()
	r.recvs = append(r.recvs, rawRecv{dropped: m == nil, mlen: dst.Len, rlen: rlen})
	r.mu.Unlock()
	if m == nil {
		return nil
	}
	if r.rdma && m.Type == lnetwire.MsgREPLY {
		// rdmaReq GET: "RDMA write" dst back to the requester.
		r.gotReply = make([]byte, dst.Len)
		dst.CopyTo(r.gotReply)
		r.ni.Finalize(m, nil)
		return nil
	}
	if b, ok := private.([]byte); ok {
		dst.CopyFrom(b)
	}
	r.ni.Finalize(m, nil)
	return nil
}
func (r *rawLND) Shutdown() {}

func (r *rawLND) lastRecv(t *testing.T) rawRecv {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recvs) == 0 {
		t.Fatal("no Recv call")
	}
	x := r.recvs[len(r.recvs)-1]
	r.recvs = r.recvs[:0]
	return x
}

// TestParseMyNIDOtherNet: a message that arrives on one of our nets for
// our NID on another is refused (EPROTO: "it's my nid but on a different
// network", lnet_parse), neither delivered nor forwarded.
func TestParseMyNIDOtherNet(t *testing.T) {
	raw := &rawLND{}
	gni, gni1 := lnetwire.MustParseNID("5@gni"), lnetwire.MustParseNID("5@gni1")
	peer := lnetwire.MustParseNID("6@gni1")
	in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{raw}, Nets: []lnet.NetConfig{
		{Net: gni.Net(), Addr: gni.Addr()}, {Net: gni1.Net(), Addr: gni1.Addr()}},
		Router: lnet.RouterConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if raw.ni.NID != gni1 {
		t.Fatalf("the raw LND's last NI is %v, want %v", raw.ni.NID, gni1)
	}
	mee, _ := in.MEAttach(3, lnetwire.ProcessIDAny, 0x77, 0, lnet.Retain, lnet.InsAfter)
	in.MDAttach(mee, lnet.MD{Start: make([]byte, 8), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut}, lnet.Retain)
	h := lnetwire.Header{Type: lnetwire.MsgPUT, DestNID: gni, SrcNID: peer, DestPID: 12345, SrcPID: 12345,
		PayloadLength: 1, WMD: lnetwire.WireHandleNone, MatchBits: 0x77, Portal: 3}
	if err := raw.ni.Parse(&h, peer, nil, false); !errors.Is(err, lnd.ErrProto) {
		t.Fatalf("PUT for %v arriving on %v: Parse = %v, want ErrProto", gni, gni1, err)
	}
	if len(raw.recvs) != 0 {
		t.Fatalf("the refused PUT was received: %+v", raw.recvs)
	}
}

func TestParseValidation(t *testing.T) {
	raw := &rawLND{}
	me := lnetwire.MustParseNID("5@gni")
	peer := lnetwire.MustParseNID("6@gni")
	in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{raw}, Nets: []lnet.NetConfig{{Net: me.Net(), Addr: me.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	eq, _ := in.EQAlloc(16, nil)
	mee, _ := in.MEAttach(3, lnetwire.ProcessIDAny, 0x77, 0, lnet.Retain, lnet.InsAfter)
	buf := make([]byte, 32)
	in.MDAttach(mee, lnet.MD{Start: buf, Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote | lnet.MDTruncate, EQ: eq}, lnet.Retain)

	put := func(dst lnetwire.NID, portal uint32, n uint32) lnetwire.Header {
		return lnetwire.Header{Type: lnetwire.MsgPUT, DestNID: dst, SrcNID: peer, DestPID: 12345, SrcPID: 12345,
			PayloadLength: n, WMD: lnetwire.WireHandleNone, MatchBits: 0x77, Portal: portal}
	}
	refused := []struct {
		name string
		h    lnetwire.Header
	}{
		{"payload over MTU", put(me, 3, lnet.MTU+1)},
		{"HELLO", lnetwire.Header{Type: lnetwire.MsgHELLO, DestNID: me}},
		{"GET with payload", lnetwire.Header{Type: lnetwire.MsgGET, DestNID: me, PayloadLength: 1}},
		{"GET sink over MTU", lnetwire.Header{Type: lnetwire.MsgGET, DestNID: me, SinkLength: lnet.MTU + 1}},
		{"ACK with payload", lnetwire.Header{Type: lnetwire.MsgACK, DestNID: me, PayloadLength: 1}},
		{"bad type", lnetwire.Header{Type: 9, DestNID: me}},
		{"other NID on my net", put(lnetwire.MustParseNID("7@gni"), 3, 1)},
		{"my loopback NID over the network", put(lnetwire.NIDLo0, 3, 1)},
	}
	for _, c := range refused {
		if err := raw.ni.Parse(&c.h, peer, nil, false); !errors.Is(err, lnd.ErrProto) {
			t.Errorf("%s: Parse = %v, want ErrProto", c.name, err)
		}
	}
	raw.recvs = nil

	dropped := []struct {
		name string
		h    lnetwire.Header
	}{
		{"not for us, no routing", put(lnetwire.MustParseNID("1.2.3.4@tcp"), 3, 8)},
		{"portal out of range", put(me, lnet.MaxPortals, 8)},
		{"no match", func() lnetwire.Header { h := put(me, 3, 8); h.MatchBits = 1; return h }()},
		{"ACK with foreign handle", lnetwire.Header{Type: lnetwire.MsgACK, DestNID: me, SrcNID: peer, WMD: lnetwire.WireHandle{InterfaceCookie: 1, ObjectCookie: 1}}},
		{"REPLY with stale handle", lnetwire.Header{Type: lnetwire.MsgREPLY, DestNID: me, SrcNID: peer, PayloadLength: 4, WMD: lnetwire.WireHandle{InterfaceCookie: 0, ObjectCookie: 2}}},
	}
	for i, c := range dropped {
		if err := raw.ni.Parse(&c.h, peer, []byte("payload!"), false); err != nil {
			t.Errorf("%s: Parse = %v, want nil (dropped)", c.name, err)
			continue
		}
		r := raw.lastRecv(t)
		if !r.dropped || r.rlen != int(c.h.PayloadLength) {
			t.Errorf("%s: Recv %+v, want a drop of %d bytes", c.name, r, c.h.PayloadLength)
		}
		if st := in.Stats(); st.DropCount != uint64(i+1) {
			t.Errorf("%s: DropCount %d", c.name, st.DropCount)
		}
	}
	if evs := drain(t, eq); len(evs) != 0 {
		t.Fatalf("events for dropped messages: %v", types(evs))
	}

	// A good PUT with an ACK request: Recv places the data, the PUT event
	// follows, and an ACK goes back to the sender through Send.
	h := put(me, 3, 8)
	h.Offset = 4
	h.WMD = lnetwire.WireHandle{InterfaceCookie: 5, ObjectCookie: 6}
	h.HdrData = 0xabc
	if err := raw.ni.Parse(&h, peer, []byte("payload!"), false); err != nil {
		t.Fatal(err)
	}
	if r := raw.lastRecv(t); r.dropped || r.mlen != 8 || r.rlen != 8 {
		t.Fatalf("Recv %+v", r)
	}
	if !bytes.Equal(buf[4:12], []byte("payload!")) {
		t.Fatalf("buffer %q", buf)
	}
	evs := drain(t, eq)
	if len(evs) != 1 || evs[0].Type != lnet.EventPut || evs[0].HdrData != 0xabc || evs[0].Offset != 4 || evs[0].Sender != peer {
		t.Fatalf("events %v", types(evs))
	}
	if len(raw.sent) != 1 {
		t.Fatalf("sent %v", raw.sent)
	}
	ack := raw.sent[0]
	if ack.Type != lnetwire.MsgACK || ack.DestNID != peer || ack.SrcNID != me || ack.WMD != h.WMD || ack.MLength != 8 || ack.MatchBits != 0x77 {
		t.Fatalf("ACK header %+v", ack)
	}
	// A GET is answered with a REPLY carrying the MD's bytes.
	g := lnetwire.Header{Type: lnetwire.MsgGET, DestNID: me, SrcNID: peer, DestPID: 12345, SrcPID: 99,
		WMD: lnetwire.WireHandle{InterfaceCookie: 7, ObjectCookie: 8}, MatchBits: 0x77, Portal: 3, Offset: 4, SinkLength: 100}
	if err := raw.ni.Parse(&g, peer, nil, false); err != nil {
		t.Fatal(err)
	}
	if r := raw.lastRecv(t); !r.dropped || r.rlen != 0 {
		t.Fatalf("GET request Recv %+v", r)
	}
	rep := raw.sent[1]
	if rep.Type != lnetwire.MsgREPLY || rep.DestPID != 99 || rep.WMD != g.WMD || rep.PayloadLength != 28 {
		t.Fatalf("REPLY header %+v", rep)
	}
	evs = drain(t, eq)
	if len(evs) != 1 || evs[0].Type != lnet.EventGet || evs[0].MLength != 28 || evs[0].RLength != 100 || evs[0].Status != nil {
		t.Fatalf("GET events %v", types(evs))
	}
}

// TestInjectedResponses feeds REPLY and ACK headers for real MDs through
// Parse: oversize REPLYs are truncated or dropped per MDTruncate, and an
// ACK lands once.
func TestInjectedResponses(t *testing.T) {
	raw := &rawLND{}
	me := lnetwire.MustParseNID("5@gni")
	peer := lnetwire.ProcessID{NID: lnetwire.MustParseNID("6@gni"), PID: 12345}
	in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{raw}, Nets: []lnet.NetConfig{{Net: me.Net(), Addr: me.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	in.SetDiscovery(false) // the raw LND answers no discovery ping: the GETs go at once
	eq, _ := in.EQAlloc(16, nil)
	lastSent := func() lnetwire.Header {
		raw.mu.Lock()
		defer raw.mu.Unlock()
		return raw.sent[len(raw.sent)-1]
	}
	reply := func(get lnetwire.Header, n uint32) {
		h := lnetwire.Header{Type: lnetwire.MsgREPLY, DestNID: me, SrcNID: peer.NID, DestPID: 12345, SrcPID: 12345, PayloadLength: n, WMD: get.WMD}
		if err := raw.ni.Parse(&h, peer.NID, []byte("12345678"), false); err != nil {
			t.Fatal(err)
		}
	}
	for _, truncate := range []bool{false, true} {
		opts := lnet.MDOptions(0)
		if truncate {
			opts = lnet.MDTruncate
		}
		sink := make([]byte, 4)
		h, _ := in.MDBind(lnet.MD{Start: sink, Threshold: 2, Options: opts, EQ: eq}, lnet.AutoUnlink)
		in.Get(lnetwire.NIDAny, h, peer, 3, 1, 0)
		get := lastSent()
		if get.Type != lnetwire.MsgGET || get.SinkLength != 4 {
			t.Fatalf("GET header %+v", get)
		}
		reply(get, 8)
		r := raw.lastRecv(t)
		evs := drain(t, eq)
		if !truncate {
			if !r.dropped || len(evs) != 1 || evs[0].Type != lnet.EventSend {
				t.Fatalf("oversize REPLY without truncate: %+v %v", r, types(evs))
			}
			in.MDUnlink(h)
			drain(t, eq)
			continue
		}
		if r.dropped || r.mlen != 4 || r.rlen != 8 || string(sink) != "1234" {
			t.Fatalf("truncated REPLY: %+v %q", r, sink)
		}
		if len(evs) != 2 || evs[1].Type != lnet.EventReply || evs[1].MLength != 4 || evs[1].RLength != 8 || !evs[1].Unlinked {
			t.Fatalf("events %v", types(evs))
		}
		// A duplicate REPLY finds the MD gone.
		reply(get, 4)
		if r := raw.lastRecv(t); !r.dropped {
			t.Fatalf("duplicate REPLY accepted: %+v", r)
		}
	}
	// ACK for a PUT.
	h, _ := in.MDBind(lnet.MD{Start: []byte("x"), Threshold: 2, EQ: eq}, lnet.AutoUnlink)
	in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, peer, 3, 9, 0, 0)
	put := lastSent()
	if put.WMD.IsNone() {
		t.Fatal("PUT with ACK request carries no handle")
	}
	ack := lnetwire.Header{Type: lnetwire.MsgACK, DestNID: me, SrcNID: peer.NID, WMD: put.WMD, MatchBits: 9, MLength: 1}
	for i := range 2 {
		if err := raw.ni.Parse(&ack, peer.NID, nil, false); err != nil {
			t.Fatal(err)
		}
		if r := raw.lastRecv(t); r.dropped != (i == 1) {
			t.Fatalf("ACK %d: %+v", i, r)
		}
	}
	evs := drain(t, eq)
	if len(evs) != 2 || evs[1].Type != lnet.EventAck || evs[1].MatchBits != 9 || evs[1].MLength != 1 || !evs[1].Unlinked {
		t.Fatalf("events %v", types(evs))
	}
}

// TestRDMAPaths exercises the o2iblnd-style entry points: a GET served by
// the driver itself (Parse with rdmaReq) and a GET whose REPLY the driver
// creates and completes (CreateReplyMsg/SetReplyMsgLen).
func TestRDMAPaths(t *testing.T) {
	raw := &rawLND{rdma: true, rdmaData: []byte("remote bytes")}
	me := lnetwire.MustParseNID("5@gni")
	peer := lnetwire.ProcessID{NID: lnetwire.MustParseNID("6@gni"), PID: 12345}
	in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{raw}, Nets: []lnet.NetConfig{{Net: me.Net(), Addr: me.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	in.SetDiscovery(false) // the raw LND answers no discovery ping: the GET goes at once
	eq, _ := in.EQAlloc(16, nil)

	// Passive side: GET with rdmaReq.
	mee, _ := in.MEAttach(3, lnetwire.ProcessIDAny, 1, 0, lnet.Retain, lnet.InsAfter)
	src := []byte("0123456789abcdef")
	in.MDAttach(mee, lnet.MD{Start: src, Threshold: lnet.ThreshInf, Options: lnet.MDOpGet | lnet.MDManageRemote, EQ: eq}, lnet.Retain)
	g := lnetwire.Header{Type: lnetwire.MsgGET, DestNID: me, SrcNID: peer.NID, DestPID: 12345, SrcPID: 12345,
		WMD: lnetwire.WireHandle{InterfaceCookie: 1, ObjectCookie: 2}, MatchBits: 1, Portal: 3, Offset: 10, SinkLength: 4}
	if err := raw.ni.Parse(&g, peer.NID, nil, true); err != nil {
		t.Fatal(err)
	}
	if string(raw.gotReply) != "abcd" {
		t.Fatalf("driver asked to write %q", raw.gotReply)
	}
	evs := drain(t, eq)
	if len(evs) != 1 || evs[0].Type != lnet.EventGet || evs[0].Status != nil || evs[0].MLength != 4 || evs[0].Offset != 10 {
		t.Fatalf("GET events %v", types(evs))
	}

	// Active side: the driver completes the REPLY itself.
	sink := make([]byte, 32)
	h, _ := in.MDBind(lnet.MD{Start: sink, Threshold: 2, EQ: eq}, lnet.AutoUnlink)
	if err := in.Get(lnetwire.NIDAny, h, peer, 3, 1, 0); err != nil {
		t.Fatal(err)
	}
	evs = drain(t, eq)
	if len(evs) != 2 || evs[0].Type != lnet.EventSend || evs[1].Type != lnet.EventReply || evs[1].MLength != 12 || !evs[1].Unlinked || evs[1].Initiator.NID != peer.NID {
		t.Fatalf("events %v", types(evs))
	}
	if string(sink[:12]) != "remote bytes" {
		t.Fatalf("sink %q", sink)
	}
	if st := in.Stats(); st.MsgsAlloc != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLazyWithoutEagerRecv: a driver without EagerRecv keeps the payload;
// Recv comes later with delayed=true, or as a drop when the NI goes away.
func TestLazyWithoutEagerRecv(t *testing.T) {
	raw := &rawLND{}
	me := lnetwire.MustParseNID("5@gni")
	peer := lnetwire.MustParseNID("6@gni")
	in, err := lnet.New(lnet.Config{LNDs: []lnd.LND{raw}, Nets: []lnet.NetConfig{{Net: me.Net(), Addr: me.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	in.SetLazyPortal(4)
	h := lnetwire.Header{Type: lnetwire.MsgPUT, DestNID: me, SrcNID: peer, DestPID: 12345, SrcPID: 12345,
		PayloadLength: 5, WMD: lnetwire.WireHandleNone, MatchBits: 1, Portal: 4}
	for range 2 {
		if err := raw.ni.Parse(&h, peer, []byte("hello"), false); err != nil {
			t.Fatal(err)
		}
	}
	if len(raw.recvs) != 0 {
		t.Fatalf("Recv before an ME: %+v", raw.recvs)
	}
	me1, _ := in.MEAttach(4, lnetwire.ProcessIDAny, 1, 0, lnet.AutoUnlink, lnet.InsAfter)
	buf := make([]byte, 8)
	in.MDAttach(me1, lnet.MD{Start: buf, Threshold: 1, Options: lnet.MDOpPut}, lnet.AutoUnlink)
	if r := raw.lastRecv(t); r.dropped || r.mlen != 5 || string(buf[:5]) != "hello" {
		t.Fatalf("delayed Recv %+v, buf %q", r, buf)
	}
	// The second one is still waiting; removing the net drops it.
	if err := in.DelNet(me.Net()); err != nil {
		t.Fatal(err)
	}
	if r := raw.lastRecv(t); !r.dropped || r.rlen != 5 {
		t.Fatalf("shutdown Recv %+v", r)
	}
	if st := in.Stats(); st.MsgsAlloc != 0 || st.Delayed != 2 || st.DropCount != 1 {
		t.Fatalf("stats %+v", st)
	}
}
