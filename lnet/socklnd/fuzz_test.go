package socklnd

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"softib/wire/lnetwire"
)

// Fuzz targets for the two stream decoders: the established-connection
// reader (ksock_msg framing, lnet_hdr, payload, checksums, ZC-ACKs) and
// the passive handshake (acceptor request, HELLO). Bad input must never
// panic or hang; it closes the connection.

var fuzzPeer atomic.Uint32

func fuzzDriver(f *testing.F) *Driver {
	cfg := baseConfig()
	cfg.Accept = AcceptNone
	cfg.Keepalive = -1
	n := startNode(f, "127.0.0.1", cfg)
	// Drain what the stub host records: its channels are bounded, and a
	// fuzz worker that received thousands of valid messages would block
	// in Finalize and look hung to the fuzzing coordinator.
	done := make(chan struct{})
	f.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-n.host.rxs:
			case <-n.host.fins:
			case <-done:
				return
			}
		}
	}()
	return n.d
}

func FuzzReadLoop(f *testing.F) {
	h := rawHdr(tcpNID("10.0.0.1"), tcpNID("127.0.0.1"), 5)
	f.Add(uint8(3), false, lnetFrame(lnetwire.SockMsg{}, h, []byte("hello")))
	f.Add(uint8(3), false, lnetFrame(lnetwire.SockMsg{ZCReq: 9, ZCAck: 4}, h, []byte("hello")))
	f.Add(uint8(2), false, (&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCAck: 3}).Append(nil))
	f.Add(uint8(3), false, (&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCReq: 2, ZCAck: 1 << 40}).Append(nil))
	f.Add(uint8(1), false, append(h.Append(nil), "hello"...))
	sum := lnetFrame(lnetwire.SockMsg{}, h, []byte("hello"))
	sh := lnetwire.SockMsgHdr(sum)
	sh.SetCsum(lnetwire.SockCsum(0).UpdateHdr(sh).Update(sum[lnetwire.SockMsgHdrLen:]).Sum())
	f.Add(uint8(2), false, sum)
	sw := lnetFrame(lnetwire.SockMsg{}, h, []byte("hello"))
	lnetwire.SwapSockMsgHdr(sw)
	f.Add(uint8(3), true, sw)
	d := fuzzDriver(f)
	f.Fuzz(func(t *testing.T, v uint8, swapped bool, data []byte) {
		version := uint32(v%3) + 1
		client, server := net.Pipe()
		defer client.Close()
		go io.Copy(io.Discard, client) // the writer's ZC-ACKs
		peer := lnetwire.MakeNID(d.nid.Net(), 0x0a000000+fuzzPeer.Add(1))
		c := newConn(d, server)
		hello := lnetwire.SockHello{Version: version, SrcNID: uint64(peer), SrcIncarnation: 1, ConnType: lnetwire.SockConnAny}
		if err := d.admit(c, &hello, lnetwire.SockConnAny, false); err != nil {
			t.Fatal(err)
		}
		c.swapped = swapped && version > 1
		c.start()
		go func() {
			client.Write(data)
			client.Close()
		}()
		select {
		case <-c.closing:
		case <-time.After(hangGuard):
			t.Fatal("hang guard: reader did not finish")
		}
		d.ClosePeer(peer)
	})
}

func FuzzPassiveHandshake(f *testing.F) {
	target := tcpNID("127.0.0.1")
	for _, v := range []uint32{1, 2, 3, 4} {
		req := lnetwire.AcceptorRequest{Version: 1, Target: target}
		h := lnetwire.SockHello{Version: v, SrcNID: uint64(tcpNID("10.0.0.2")), DstNID: uint64(target), SrcIncarnation: 7, ConnType: lnetwire.SockConnControl}
		f.Add(h.Append(req.Append(nil)))
	}
	f.Add((&lnetwire.AcceptorRequest{Version: 2, TargetLarge: lnetwire.LargeFromNID(target)}).Append(nil))
	f.Add((&lnetwire.SockHello{Version: 3}).Append(nil))
	f.Add([]byte{0x00, 0x71, 0xce, 0xac, 0, 0, 0, 1})
	d := fuzzDriver(f)
	d.cfg.Accept = AcceptAll
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		go io.Copy(io.Discard, client)
		go func() {
			client.Write(data)
			client.Close()
		}()
		done := make(chan struct{})
		go func() {
			if err := d.passiveHandshake(server); err != nil {
				server.Close()
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(hangGuard):
			t.Fatal("hang guard: handshake did not finish")
		}
		d.mu.Lock()
		var peers []lnetwire.NID
		for nid := range d.peers {
			peers = append(peers, nid)
		}
		d.mu.Unlock()
		for _, p := range peers {
			d.ClosePeer(p)
		}
	})
}
