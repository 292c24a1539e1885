package socklnd_test

import (
	"io"
	"net"
	"sync/atomic"
	"testing"

	"softib/lnet"
	"softib/lnet/socklnd"
	"softib/wire/lnetwire"
)

// benchWindow is how many PUTs the benchmarks keep in flight; it matches
// the default peer credits (8) twice over so the LNet credit queue, not
// the benchmark, is the limit.
const benchWindow = 16

// benchPut streams b.N PUTs of size bytes from one instance to another
// over socklnd on loopback, keeping benchWindow in flight, and waits until
// the receiver has taken them all.
func benchPut(b *testing.B, size int, ack lnet.AckReq) {
	ips := socklnd.TestIPs(2)
	cfg := socklnd.BaseConfig()
	s := newInst(b, ips[0], cfg)
	r := newInst(b, ips[1], cfg)
	var got atomic.Int64
	done := make(chan struct{}, 1)
	var want atomic.Int64
	me, err := r.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.in.MDAttach(me, lnet.MD{Start: make([]byte, size), Threshold: lnet.ThreshInf,
		Options: lnet.MDOpPut | lnet.MDManageRemote, Handler: func(ev *lnet.Event) {
			if ev.Type == lnet.EventPut && got.Add(1) == want.Load() {
				done <- struct{}{}
			}
		}}, lnet.Retain); err != nil {
		b.Fatal(err)
	}
	h, err := s.in.MDBind(lnet.MD{Start: socklnd.Pattern(size, 1), Threshold: lnet.ThreshInf, EQ: s.eq}, lnet.Retain)
	if err != nil {
		b.Fatal(err)
	}
	completion := lnet.EventSend
	if ack == lnet.AckReqYes {
		completion = lnet.EventAck
	}
	inflight := 0
	reap := func() {
		ev := poll(b, s)
		if ev.Status != nil {
			b.Fatalf("%v: %v", ev.Type, ev.Status)
		}
		if ev.Type == completion {
			inflight--
		}
	}
	run := func(n int) {
		got.Store(0)
		want.Store(int64(n))
		for range n {
			for inflight >= benchWindow {
				reap()
			}
			if err := s.in.Put(lnetwire.NIDAny, h, ack, r.id(), e2ePortal, 0, 0, 0); err != nil {
				b.Fatal(err)
			}
			inflight++
		}
		for inflight > 0 {
			reap()
		}
		<-done
	}
	run(benchWindow) // connect and warm up
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
}

// BenchmarkSocklndPut1M: LNet PUT of 1 MiB (no LNet ACK; each send
// completes on the receiver's zero-copy ACK).
func BenchmarkSocklndPut1M(b *testing.B) { benchPut(b, 1<<20, lnet.AckReqNo) }

// BenchmarkSocklndPut1MAck: as above with an LNet ACK per PUT.
func BenchmarkSocklndPut1MAck(b *testing.B) { benchPut(b, 1<<20, lnet.AckReqYes) }

// BenchmarkSocklndPut0: 0-byte PUT rate without and with an ACK.
func BenchmarkSocklndPut0(b *testing.B) {
	b.Run("noack", func(b *testing.B) { benchPut(b, 0, lnet.AckReqNo) })
	b.Run("ack", func(b *testing.B) { benchPut(b, 0, lnet.AckReqYes) })
}

// BenchmarkRawTCP1M is the baseline: a plain Go TCP stream of 1 MiB
// writes on loopback, read into a 1 MiB buffer.
func BenchmarkRawTCP1M(b *testing.B) {
	ips := socklnd.TestIPs(2)
	ln, err := net.Listen("tcp4", ips[1]+":0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	res := make(chan result, 1)
	total := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{0, err}
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<20)
		want := <-total
		var n int64
		for n < want {
			k, err := io.ReadFull(c, buf[:min(int64(len(buf)), want-n)])
			n += int64(k)
			if err != nil {
				res <- result{n, err}
				return
			}
		}
		res <- result{n, nil}
	}()
	dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ips[0])}}
	c, err := dl.Dial("tcp4", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	src := socklnd.Pattern(1<<20, 1)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	total <- int64(b.N) << 20
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(src); err != nil {
			b.Fatal(err)
		}
	}
	if r := <-res; r.err != nil {
		b.Fatal(r.err)
	}
}
