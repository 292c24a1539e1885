package o2iblnd_test

import (
	"bytes"
	"testing"

	"softib/lnet"
	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// rawConn is a hand-driven o2iblnd connection from a rawPeer to a node.
type rawConn struct {
	t      *testing.T
	r      *rawPeer
	x      *node
	id     *rdmacm.ID
	cq     verbs.CQ
	stamp  uint64 // ours
	xStamp uint64 // the node's
}

func (r *rawPeer) dial(t *testing.T, x *node, stamp uint64) *rawConn {
	t.Helper()
	ev, id, cq := r.connectQP(t, x, r.connReq(x, func(f *lnetwire.KibMsgFields) { f.SrcStamp = stamp }))
	if ev.Type != rdmacm.EventEstablished {
		t.Fatalf("connect: %v", ev.Type)
	}
	ack, err := lnetwire.UnpackKibMsg(append([]byte(nil), ev.Conn.PrivateData...))
	if err != nil {
		t.Fatal(err)
	}
	return &rawConn{t: t, r: r, x: x, id: id, cq: cq, stamp: stamp, xStamp: ack.SrcStamp()}
}

// send posts one kib_msg built from f (header fields filled in unless
// set) on the raw QP and waits for its completion.
func (c *rawConn) send(f lnetwire.KibMsgFields) {
	t := c.t
	t.Helper()
	if f.Version == 0 {
		f.Version = lnetwire.KibVersion2
	}
	if f.SrcNID == 0 {
		f.SrcNID, f.SrcStamp, f.DstNID, f.DstStamp = c.r.nid, c.stamp, c.x.nid, c.xStamp
	}
	b := f.Append(nil)
	mr, err := c.id.PD().RegMR(b, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	if _, err := c.id.QP().PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{mr.SGE(0, len(b))}}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 1)
	waitFor(t, "send completion", func() bool {
		n, _ := c.cq.Poll(wcs)
		return n == 1
	})
	if wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("raw send: %v", wcs[0].Err())
	}
}

// TestRawPeer talks to a node from a hand-driven connection: an
// IMMEDIATE PUT built by hand lands in the node's MD; a message with a
// stale destination stamp, and one returning more credits than the queue
// depth, each make the node close the connection (-ESTALE, -EPROTO).
func TestRawPeer(t *testing.T) { sim(t, 106, testRawPeer) }

func testRawPeer(t *testing.T) {
	r := newRawPeer(t)
	x := newNode(t, o2iblnd.Config{})
	buf := make([]byte, 64)
	sink(t, x, 9, [][]byte{buf})
	c := r.dial(t, x, 0x1111)
	payload := []byte("hand-made IMMEDIATE PUT")
	c.send(lnetwire.KibMsgFields{KibMsgHdr: lnetwire.KibMsgHdr{Type: lnetwire.KibIMMEDIATE},
		LNet: lnetwire.Header{Type: lnetwire.MsgPUT, DestNID: x.nid, SrcNID: r.nid, DestPID: x.in.PID(), SrcPID: 12345,
			PayloadLength: uint32(len(payload)), WMD: lnetwire.WireHandleNone, MatchBits: 9, Portal: uint32(e2ePortal)},
		Payload: payload})
	if ev := poll(t, x); ev.Type != lnet.EventPut || ev.Status != nil || ev.Initiator.NID != r.nid {
		t.Fatalf("node event %v %v from %v", ev.Type, ev.Status, ev.Initiator)
	}
	if !bytes.HasPrefix(buf, payload) {
		t.Fatalf("payload %q", buf[:len(payload)])
	}
	st := x.drv().Stats()
	c.send(lnetwire.KibMsgFields{KibMsgHdr: lnetwire.KibMsgHdr{Type: lnetwire.KibNOOP, Version: lnetwire.KibVersion2,
		SrcNID: r.nid, SrcStamp: c.stamp, DstNID: x.nid, DstStamp: c.xStamp + 1}})
	waitFor(t, "stale close", func() bool { return st.Stale.Load() == 1 && x.drv().Conns(r.nid) == 0 })

	c2 := r.dial(t, x, 0x1111)
	c2.send(lnetwire.KibMsgFields{KibMsgHdr: lnetwire.KibMsgHdr{Type: lnetwire.KibNOOP, Credits: 200}})
	waitFor(t, "overflow close", func() bool { return st.CreditOverflow.Load() == 1 && x.drv().Conns(r.nid) == 0 })
}
