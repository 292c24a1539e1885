package socklnd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"softib/internal/testenv"
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Tests that play the other end by hand, as a kernel ksocklnd (or a
// broken peer) would.

func rawHdr(from, to lnetwire.NID, n int) *lnetwire.Header {
	return &lnetwire.Header{DestNID: to, SrcNID: from, DestPID: 12345, SrcPID: 12345, Type: lnetwire.MsgPUT,
		PayloadLength: uint32(n), MatchBits: 42, WMD: lnetwire.WireHandleNone}
}

func TestRawHandshakeVersions(t *testing.T) {
	for _, v := range []uint32{lnetwire.SockProtoV1, lnetwire.SockProtoV2, lnetwire.SockProtoV3} {
		ips := testIPs(2)
		b := startNode(t, ips[0], baseConfig())
		r := dialRaw(t, b, ips[1])
		h := r.handshake(b.nid, v, lnetwire.SockConnBulkOut, 77)
		if h.Version != v || lnetwire.NID(h.SrcNID) != b.nid || h.ConnType != lnetwire.SockConnBulkIn {
			t.Fatalf("v%d: reply %+v", v, h)
		}
		if v >= 2 && (h.DstIncarnation != 77 || lnetwire.NID(h.DstNID) != r.nid || h.SrcIncarnation != b.d.Incarnation()) {
			t.Fatalf("v%d: reply %+v", v, h)
		}
		payload := pattern(5000, 1)
		var frame []byte
		if v == lnetwire.SockProtoV1 {
			frame = append(rawHdr(r.nid, b.nid, len(payload)).Append(nil), payload...)
		} else {
			frame = lnetFrame(lnetwire.SockMsg{}, rawHdr(r.nid, b.nid, len(payload)), payload)
		}
		r.write(frame)
		got := b.waitRx(t)
		if got.from != r.nid || !bytes.Equal(got.data, payload) {
			t.Fatalf("v%d: bad delivery", v)
		}
		// b answers over the same connection in the same framing.
		if err := b.send(t, putMsg(b.nid, r.nid, []byte("pong"), 1)); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		var p []byte
		if v == lnetwire.SockProtoV1 {
			var hb [lnetwire.HdrSize + 4]byte
			if _, err := io.ReadFull(r.br, hb[:]); err != nil {
				t.Fatal(err)
			}
			p = hb[lnetwire.HdrSize:]
		} else {
			_, _, p, _ = r.readMsg()
		}
		if string(p) != "pong" {
			t.Fatalf("v%d: reply payload %q", v, p)
		}
	}
}

// TestVersionFallback: a passive peer that speaks only V2 answers our V3
// HELLO with a V2 HELLO; the driver reconnects with V2.
func TestVersionFallback(t *testing.T) {
	ips := testIPs(2)
	a := startNode(t, ips[0], baseConfig())
	peerNID := tcpNID(ips[1])
	ln := mustListen(t, ips[1]+":"+strconv.Itoa(testPort()))
	defer ln.Close()
	versions := make(chan uint32, 4)
	go func() {
		for i := 0; ; i++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			var req [16]byte
			io.ReadFull(nc, req[:])
			c := newConn(nil, nc)
			h, err := c.readHello()
			if err != nil {
				nc.Close()
				continue
			}
			versions <- h.Version
			reply := lnetwire.SockHello{Version: 2, SrcNID: uint64(peerNID), DstNID: h.SrcNID, SrcPID: 12345,
				DstPID: h.SrcPID, SrcIncarnation: 9, DstIncarnation: h.SrcIncarnation, ConnType: h.ConnType.Invert()}
			if h.Version != 2 {
				reply.ConnType = lnetwire.SockConnNone
			}
			nc.Write(reply.Append(nil))
			if h.Version != 2 {
				nc.Close()
				continue
			}
			go io.Copy(io.Discard, nc)
		}
	}()
	if err := a.send(t, putMsg(a.nid, peerNID, []byte("x"), 1)); err != nil {
		t.Fatal(err)
	}
	if v1, v2 := <-versions, <-versions; v1 != 3 || v2 != 2 {
		t.Fatalf("proposed %d then %d, want 3 then 2", v1, v2)
	}
}

func TestRawUnknownVersion(t *testing.T) {
	ips := testIPs(2)
	b := startNode(t, ips[0], baseConfig())
	r := dialRaw(t, b, ips[1])
	req := lnetwire.AcceptorRequest{Version: 1, Target: b.nid}
	h := lnetwire.SockHello{Version: 4, SrcNID: uint64(r.nid), ConnType: lnetwire.SockConnControl}
	r.write(h.Append(req.Append(nil)))
	reply := r.readHello()
	if reply.Version != lnetwire.SockProtoV3 || reply.ConnType != lnetwire.SockConnNone {
		t.Fatalf("reply %+v, want V3 with ctype NONE", reply)
	}
	r.expectClosed()
	eventually(t, "refusal counted", func() bool { return b.d.Stats().AcceptRefused.Load() == 1 })
}

func TestRawAcceptorChecks(t *testing.T) {
	ips := testIPs(2)
	b := startNode(t, ips[0], baseConfig())
	magicReply := lnetwire.AppendAcceptorMagic(nil)
	cases := []struct {
		name  string
		bytes []byte
		reply []byte
	}{
		{"hello without request", (&lnetwire.SockHello{Version: 3}).Append(nil), magicReply},
		{"acceptor version 3", le.AppendUint64(le.AppendUint32(le.AppendUint32(nil, lnetwire.AcceptorMagic), 3), 0), magicReply},
		{"wrong target", (&lnetwire.AcceptorRequest{Version: 1, Target: tcpNID("127.0.0.99")}).Append(nil), nil},
		{"garbage", []byte("GET / HTTP/1.0\r\n\r\n"), nil},
	}
	for i, c := range cases {
		r := dialRaw(t, b, ips[1])
		r.write(c.bytes)
		r.nc.SetReadDeadline(time.Now().Add(hangGuard))
		got, _ := io.ReadAll(r.br)
		if !bytes.Equal(got, c.reply) {
			t.Fatalf("%s: reply %x, want %x", c.name, got, c.reply)
		}
		eventually(t, c.name+" counted", func() bool { return b.d.Stats().AcceptRefused.Load() == uint64(i+1) })
	}
}

// TestRawMalformed injects broken messages on established connections:
// each is counted, its connection closed, and the node keeps working.
func TestRawMalformed(t *testing.T) {
	ips := testIPs(3)
	b := startNode(t, ips[0], baseConfig())
	a := startNode(t, ips[2], baseConfig())
	badType := lnetFrame(lnetwire.SockMsg{}, rawHdr(0, 0, 0), nil)
	binary.LittleEndian.PutUint32(badType, 0xC7)
	badLNet := lnetFrame(lnetwire.SockMsg{}, rawHdr(0, 0, 0), nil)
	binary.LittleEndian.PutUint32(badLNet[lnetwire.SockMsgHdrLen+24:], 9)
	hello := lnetFrame(lnetwire.SockMsg{}, &lnetwire.Header{Type: lnetwire.MsgHELLO}, nil)
	cases := []struct {
		name      string
		frame     func(r *rawPeer) []byte
		oversized bool
	}{
		{"ksock type", func(*rawPeer) []byte { return badType }, false},
		{"lnet type", func(*rawPeer) []byte { return badLNet }, false},
		{"hello in stream", func(*rawPeer) []byte { return hello }, false},
		{"oversized", func(r *rawPeer) []byte {
			return lnetFrame(lnetwire.SockMsg{}, rawHdr(r.nid, b.nid, 2<<20), nil)
		}, true},
		{"max+1", func(r *rawPeer) []byte {
			return lnetFrame(lnetwire.SockMsg{}, rawHdr(r.nid, b.nid, lnd.MaxPayload+1), nil)
		}, true},
	}
	rawNID := tcpNID(ips[1])
	idle := func() {
		eventually(t, "old raw connection gone", func() bool { return len(b.d.Conns(rawNID)) == 0 })
	}
	for i, c := range cases {
		idle()
		r := dialRaw(t, b, ips[1])
		if h := r.handshake(b.nid, 3, lnetwire.SockConnAny, 1); h.ConnType != lnetwire.SockConnAny {
			t.Fatalf("%s: handshake answered %v", c.name, h.ConnType)
		}
		r.write(c.frame(r))
		r.expectClosed()
		st := b.d.Stats()
		eventually(t, c.name+" counted", func() bool { return st.Malformed.Load() == uint64(i+1) })
		if c.oversized && st.Oversized.Load() == 0 {
			t.Fatalf("%s: not counted as oversized", c.name)
		}
	}
	// Header the core refuses: closed too, counted as a reject.
	b.host.reject.Store(true)
	idle()
	r := dialRaw(t, b, ips[1])
	r.handshake(b.nid, 3, lnetwire.SockConnAny, 1)
	r.write(lnetFrame(lnetwire.SockMsg{}, rawHdr(r.nid, b.nid, 3), []byte("abc")))
	r.expectClosed()
	if b.d.Stats().ParseRejects.Load() != 1 {
		t.Fatal("parse reject not counted")
	}
	b.host.reject.Store(false)
	// The node still works.
	if err := a.send(t, putMsg(a.nid, b.nid, []byte("still alive"), 1)); err != nil {
		t.Fatal(err)
	}
	if got := b.waitRx(t); string(got.data) != "still alive" {
		t.Fatal("no delivery after malformed input")
	}
}

func TestRawChecksum(t *testing.T) {
	ips := testIPs(2)
	b := startNode(t, ips[0], baseConfig())
	payload := pattern(3000, 5)
	frame := func(r *rawPeer, corrupt bool) []byte {
		f := lnetFrame(lnetwire.SockMsg{}, rawHdr(r.nid, b.nid, len(payload)), payload)
		h := lnetwire.SockMsgHdr(f)
		sum := lnetwire.SockCsum(0).UpdateHdr(h).Update(f[lnetwire.SockMsgHdrLen:])
		if corrupt {
			f[len(f)-1] ^= 1
		}
		h.SetCsum(sum.Sum())
		return f
	}
	r := dialRaw(t, b, ips[1])
	r.handshake(b.nid, 2, lnetwire.SockConnAny, 1)
	r.write(frame(r, false))
	if got := b.waitRx(t); !bytes.Equal(got.data, payload) {
		t.Fatal("checksummed message not delivered")
	}
	// A checksummed NOOP is accepted too.
	noop := (&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP}).Append(nil)
	lnetwire.SockMsgHdr(noop).SetCsum(lnetwire.SockCsum(0).UpdateHdr(lnetwire.SockMsgHdr(noop)).Sum())
	r.write(noop)
	r.write(frame(r, true))
	r.expectClosed()
	if b.d.Stats().CsumErrors.Load() != 1 || b.d.Stats().RxNoops.Load() != 1 {
		t.Fatalf("csum errors %d noops %d", b.d.Stats().CsumErrors.Load(), b.d.Stats().RxNoops.Load())
	}
	select {
	case <-b.host.rxs:
		t.Fatal("corrupt message delivered")
	default:
	}
}

// TestRawZCAckAsReceiver: a peer asks for a zero-copy ACK; the driver
// returns the cookie in zc_cookies[1] of a NOOP.
func TestRawZCAckAsReceiver(t *testing.T) {
	for _, v := range []uint32{2, 3} {
		ips := testIPs(2)
		b := startNode(t, ips[0], baseConfig())
		r := dialRaw(t, b, ips[1])
		r.handshake(b.nid, v, lnetwire.SockConnBulkOut, 1)
		payload := pattern(20000, 1)
		r.write(lnetFrame(lnetwire.SockMsg{ZCReq: 7}, rawHdr(r.nid, b.nid, len(payload)), payload))
		b.waitRx(t)
		m, _, _, err := r.readMsg()
		if err != nil {
			t.Fatal(err)
		}
		if m.Type != lnetwire.SockMsgNOOP || m.ZCAck != 7 || m.ZCReq != 0 {
			t.Fatalf("v%d: got %+v, want NOOP acking 7", v, m)
		}
	}
}

// TestRawZCAckAsSender: the driver's large sends wait for the peer's
// ACK; single, pair and range ACK forms all complete them.
func TestRawZCAckAsSender(t *testing.T) {
	ips := testIPs(2)
	b := startNode(t, ips[0], baseConfig())
	r := dialRaw(t, b, ips[1])
	r.handshake(b.nid, 3, lnetwire.SockConnAny, 1)
	data := pattern(32<<10, 2)
	for i := range 5 {
		m := putMsg(b.nid, r.nid, data, uint64(i))
		if err := b.d.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var cookies []uint64
	for range 5 {
		m, h, p, err := r.readMsg()
		if err != nil || h == nil || !bytes.Equal(p, data) {
			t.Fatalf("read: %v", err)
		}
		cookies = append(cookies, m.ZCReq)
	}
	if cookies[0] != lnetwire.SockFirstZCCookie || cookies[4] != cookies[0]+4 {
		t.Fatalf("cookies %v", cookies)
	}
	select {
	case f := <-b.host.fins:
		t.Fatalf("send finalized before its ACK: %v", f.status)
	default:
	}
	// Range [c0, c2], pair {c4, c3}.
	r.write((&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCReq: cookies[0], ZCAck: cookies[2]}).Append(nil))
	r.write((&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCReq: cookies[4], ZCAck: cookies[3]}).Append(nil))
	done := map[*lnd.Msg]bool{}
	for range 5 {
		f := <-b.host.fins
		if f.status != nil {
			t.Fatal(f.status)
		}
		done[f.msg] = true
	}
	if len(done) != 5 || b.d.Stats().ZCAcksRecv.Load() != 5 {
		t.Fatal("not all ACKed sends completed")
	}
	// A piggybacked ACK on an LNET message, and an unknown cookie.
	m := putMsg(b.nid, r.nid, data, 9)
	if err := b.d.Send(m); err != nil {
		t.Fatal(err)
	}
	sm, _, _, _ := r.readMsg()
	r.write(lnetFrame(lnetwire.SockMsg{ZCAck: sm.ZCReq}, rawHdr(r.nid, b.nid, 0), nil))
	if err := b.waitFin(t, m); err != nil {
		t.Fatal(err)
	}
	r.write((&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCAck: 999}).Append(nil))
	eventually(t, "unknown ACK counted", func() bool { return b.d.Stats().ZCAcksUnknown.Load() == 1 })
	// Closing the connection fails a send still waiting for its ACK.
	m = putMsg(b.nid, r.nid, data, 10)
	if err := b.d.Send(m); err != nil {
		t.Fatal(err)
	}
	r.readMsg()
	r.nc.Close()
	if err := b.waitFin(t, m); !errors.Is(err, lnd.ErrPeerDown) {
		t.Fatalf("unacked send on closed conn: %v", err)
	}
}

func TestAckNoopPacking(t *testing.T) {
	d := &Driver{txPool: make(chan *tx, 8)}
	for _, tc := range []struct {
		v    uint32
		acks []uint64
		want [][2]uint64 // {zc_cookies[0], zc_cookies[1]}
	}{
		{3, []uint64{5}, [][2]uint64{{0, 5}}},
		{3, []uint64{5, 6, 7, 8}, [][2]uint64{{5, 8}}},
		{3, []uint64{5, 9}, [][2]uint64{{9, 5}}},
		{3, []uint64{9, 5, 6}, [][2]uint64{{9, 5}, {0, 6}}},
		{3, []uint64{2, 3, 10, 12, 13}, [][2]uint64{{2, 3}, {12, 10}, {0, 13}}},
		{2, []uint64{5, 6}, [][2]uint64{{0, 5}, {0, 6}}},
	} {
		c := &conn{d: d, version: tc.v}
		c.buildAckNoops(tc.acks)
		var got [][2]uint64
		var covered []uint64
		for _, t := range c.noops {
			h := lnetwire.SockMsgHdr(t.buf[:lnetwire.SockMsgHdrLen])
			got = append(got, [2]uint64{h.ZCReq(), h.ZCAck()})
			a, _ := h.ZCAcks()
			for _, k := range tc.acks {
				if a.Contains(k) {
					covered = append(covered, k)
				}
			}
		}
		if len(got) != len(tc.want) {
			t.Fatalf("v%d %v: got %v want %v", tc.v, tc.acks, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("v%d %v: got %v want %v", tc.v, tc.acks, got, tc.want)
			}
		}
		if len(covered) != len(tc.acks) {
			t.Fatalf("v%d %v: decoded ACKs cover %v", tc.v, tc.acks, covered)
		}
	}
}

func TestRawKeepalive(t *testing.T) {
	ips := testIPs(2)
	cfg := baseConfig()
	cfg.Keepalive = 20 * time.Millisecond
	b := startNode(t, ips[0], cfg)
	r := dialRaw(t, b, ips[1])
	r.handshake(b.nid, 3, lnetwire.SockConnAny, 1)
	m, _, _, err := r.readMsg()
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != lnetwire.SockMsgNOOP || m.ZCAck != lnetwire.SockKeepalivePing || m.ZCReq != 0 {
		t.Fatalf("got %+v, want keepalive NOOP", m)
	}
	// A keepalive from the peer is taken quietly.
	r.write((&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCAck: lnetwire.SockKeepalivePing}).Append(nil))
	eventually(t, "keepalive received", func() bool { return b.d.Stats().RxNoops.Load() == 1 })
	if b.d.Stats().ZCAcksUnknown.Load() != 0 {
		t.Fatal("keepalive taken as an ACK")
	}
	// V2 connections get no keepalive NOOPs.
	b.d.ClosePeer(r.nid)
	r2 := dialRaw(t, b, ips[1])
	r2.handshake(b.nid, 2, lnetwire.SockConnAny, 1)
	r2.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if m, _, _, err := r2.readMsg(); err == nil {
		t.Fatalf("V2 peer got %+v", m)
	}
}

func TestRawSwappedPeer(t *testing.T) {
	ips := testIPs(2)
	b := startNode(t, ips[0], baseConfig())
	r := dialRaw(t, b, ips[1])
	be := binary.BigEndian
	req := be.AppendUint64(be.AppendUint32(be.AppendUint32(nil, lnetwire.AcceptorMagic), 1), uint64(b.nid))
	hb := make([]byte, lnetwire.SockHelloV2Len)
	be.PutUint32(hb[0:], lnetwire.ProtoMagic)
	be.PutUint32(hb[4:], 3)
	be.PutUint64(hb[8:], uint64(r.nid))
	be.PutUint64(hb[16:], uint64(b.nid))
	be.PutUint32(hb[24:], 12345)
	be.PutUint32(hb[28:], 12345)
	be.PutUint64(hb[32:], 3)
	be.PutUint32(hb[48:], uint32(lnetwire.SockConnAny))
	r.write(append(req, hb...))
	if h := r.readHello(); h.ConnType != lnetwire.SockConnAny || h.DstIncarnation != 3 {
		t.Fatalf("reply %+v", h)
	}
	f := lnetFrame(lnetwire.SockMsg{}, rawHdr(r.nid, b.nid, 4), []byte("swap"))
	lnetwire.SwapSockMsgHdr(f)
	r.write(f)
	if got := b.waitRx(t); string(got.data) != "swap" {
		t.Fatalf("got %q", got.data)
	}
}

func TestAcceptSecure(t *testing.T) {
	ips := testIPs(3)
	cfg := baseConfig()
	cfg.Accept = AcceptSecure
	b := startNode(t, ips[0], cfg)
	r := dialRaw(t, b, ips[1]) // ephemeral port > 1023
	r.handshake0(b.nid)
	r.expectClosed()
	eventually(t, "refusal counted", func() bool { return b.d.Stats().AcceptRefused.Load() == 1 })

	// A node dialling from an ephemeral port sees only the reset; its
	// error names the likely refusal and the fixes.
	ucfg := baseConfig()
	ucfg.SourcePort = SourcePortAny
	u := startNode(t, testIPs(1)[0], ucfg)
	if err := u.send(t, putMsg(u.nid, b.nid, []byte("x"), 1)); err == nil || !strings.Contains(err.Error(), "accepts only privileged source ports") {
		t.Fatalf("send from an unprivileged port: %v", err)
	}

	testenv.RequireRoot(t)
	acfg := baseConfig()
	acfg.SourcePort = SourcePortPrivileged
	a := startNode(t, ips[2], acfg)
	if err := a.send(t, putMsg(a.nid, b.nid, []byte("secure"), 1)); err != nil {
		t.Fatal(err)
	}
	if got := b.waitRx(t); string(got.data) != "secure" {
		t.Fatal("no delivery over a privileged port")
	}
	a.d.mu.Lock()
	for _, c := range a.d.peers[b.nid].conns {
		if port := c.nc.LocalAddr().(*net.TCPAddr).Port; port > maxReservedPort || port < minReservedPort {
			t.Errorf("source port %d not privileged", port)
		}
	}
	a.d.mu.Unlock()
}

// handshake0 sends only the acceptor request and a HELLO, without
// waiting for a reply.
func (r *rawPeer) handshake0(target lnetwire.NID) {
	req := lnetwire.AcceptorRequest{Version: 1, Target: target}
	h := lnetwire.SockHello{Version: 3, SrcNID: uint64(r.nid), DstNID: uint64(target), ConnType: lnetwire.SockConnAny}
	r.nc.Write(h.Append(req.Append(nil)))
}
