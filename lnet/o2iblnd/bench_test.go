package o2iblnd_test

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// BenchmarkO2ibPut1M measures LNet PUTs of 1 MiB over o2iblnd (PUT_REQ →
// PUT_ACK → RDMA WRITE → PUT_DONE), one at a time: each iteration waits
// for the sender's SEND event, which comes once the PUT_DONE completed,
// i.e. the data is in the peer's memory. Compare with BenchmarkRCWrite1M.
func BenchmarkO2ibPut1M(b *testing.B) {
	const size = 1 << 20
	s, r := newNode(b, o2iblnd.Config{}), newNode(b, o2iblnd.Config{})
	buf := make([]byte, size)
	sink(b, r, 1, [][]byte{buf})
	src := pattern(size, 1)
	put := func() {
		h, err := s.in.MDBind(lnet.MD{Start: src, Threshold: 1, EQ: s.eq}, lnet.AutoUnlink)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.id(), e2ePortal, 1, 0, 0); err != nil {
			b.Fatal(err)
		}
		if ev := poll(b, s); ev.Status != nil {
			b.Fatal(ev.Status)
		}
		poll(b, r)
	}
	put() // connect, register
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		put()
	}
}

// BenchmarkO2ibPut1MPages is BenchmarkO2ibPut1M with the source as 256
// separate 4 KiB pages (Lustre's kiov shape), moved by RDMA WRITEs that
// gather wrq_sge pages each (1: one WRITE per page; 16: the default),
// into a sink of pages too (registered through a fast-reg MR, no copy)
// or, for comparison, of three pieces that do not map onto pages (staged
// through a bounce buffer and copied).
func BenchmarkO2ibPut1MPages(b *testing.B) {
	const size = 1 << 20
	pages := func() [][]byte {
		var p [][]byte
		for range size / 4096 {
			p = append(p, make([]byte, 4096))
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		wrq    int
		bounce bool
	}{{"wrq_sge=1", 1, false}, {"wrq_sge=16", 16, false}, {"wrq_sge=16/bounce", 16, true}} {
		b.Run(tc.name, func(b *testing.B) {
			s, r := newNode(b, o2iblnd.Config{WrqSGE: tc.wrq}), newNode(b, o2iblnd.Config{WrqSGE: tc.wrq})
			if tc.bounce {
				sink(b, r, 1, split(make([]byte, size), 3))
			} else {
				sink(b, r, 1, pages())
			}
			src := pages()
			put := func() {
				h, err := s.in.MDBind(lnet.MD{IOV: src, Threshold: 1, EQ: s.eq}, lnet.AutoUnlink)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.id(), e2ePortal, 1, 0, 0); err != nil {
					b.Fatal(err)
				}
				if ev := poll(b, s); ev.Status != nil {
					b.Fatal(ev.Status)
				}
				poll(b, r)
			}
			put()
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				put()
			}
			b.StopTimer()
			if st := r.drv().Stats(); (st.Bounced.Load() != 0) != tc.bounce || (st.FastRegs.Load() == 0) != tc.bounce {
				b.Fatalf("sink: %d bounced, %d fast-reg", st.Bounced.Load(), st.FastRegs.Load())
			}
		})
	}
}

// BenchmarkO2ibPut1MConcurrent keeps 8 PUTs of 1 MiB in flight from one
// node to another over conns_per_peer connections (1: one QP; 4: four,
// spread over the devices' receive shards), each PUT waiting for its
// SEND event as in BenchmarkO2ibPut1M.
func BenchmarkO2ibPut1MConcurrent(b *testing.B) {
	const size, inflight = 1 << 20, 8
	for _, cpp := range []int{1, 4} {
		b.Run(fmt.Sprintf("conns_per_peer=%d", cpp), func(b *testing.B) {
			s, r := newNode(b, o2iblnd.Config{ConnsPerPeer: cpp}), newNode(b, o2iblnd.Config{ConnsPerPeer: cpp})
			for i := range inflight {
				sink(b, r, uint64(1+i), [][]byte{make([]byte, size)})
			}
			srcs := make([][]byte, inflight)
			for i := range srcs {
				srcs[i] = pattern(size, byte(i))
			}
			put := func(i int) {
				h, err := s.in.MDBind(lnet.MD{Start: srcs[i%inflight], Threshold: 1, EQ: s.eq}, lnet.AutoUnlink)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, r.id(), e2ePortal, uint64(1+i%inflight), 0, 0); err != nil {
					b.Fatal(err)
				}
			}
			wait := func() {
				if ev := poll(b, s); ev.Status != nil {
					b.Fatal(ev.Status)
				}
			}
			for i := range inflight { // connect, register
				put(i)
				wait()
			}
			for deadline := time.Now().Add(hangGuard); s.drv().Conns(r.nid) < cpp; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("%d connections up, want %d", s.drv().Conns(r.nid), cpp)
				}
			}
			b.SetBytes(size)
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range min(b.N, inflight) {
				put(i)
			}
			for i := inflight; i < b.N; i++ {
				wait()
				put(i)
			}
			for range min(b.N, inflight) {
				wait()
			}
			b.StopTimer()
			// Both nodes are in this process: the CPU of the whole transfer.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/MiB")
			if n := s.drv().Conns(r.nid); n != cpp {
				b.Fatalf("%d connections, want %d", n, cpp)
			}
		})
	}
}

// processCPU returns the user and system CPU time this process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRCWrite1M is the baseline: 1 MiB RDMA WRITEs on a softib RC
// QP pair (rxe on loopback, connected through the RDMA CM), one at a
// time, each waiting for its completion.
func BenchmarkRCWrite1M(b *testing.B) {
	const size = 1 << 20
	_, mA, addrA := newDevice(b)
	_, mB, addrB := newDevice(b)
	sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
	defer sch.Close()
	defer cch.Close()
	get := func(ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		ev, err := ch.GetEvent(ctx)
		if err != nil || ev.Type != want {
			b.Fatalf("want %v: %v %v", want, ev, err)
		}
		return ev
	}
	lis, _ := mB.CreateID(sch, nil, rdmacm.PSTCP)
	defer lis.Destroy()
	if err := lis.BindAddr(netip.AddrPortFrom(addrB, 7471)); err != nil {
		b.Fatal(err)
	}
	if err := lis.Listen(1); err != nil {
		b.Fatal(err)
	}
	cid, _ := mA.CreateID(cch, nil, rdmacm.PSTCP)
	defer cid.Destroy()
	cid.ResolveAddr(netip.AddrPortFrom(addrA, 0), netip.AddrPortFrom(addrB, 7471), time.Second)
	get(cch, rdmacm.EventAddrResolved)
	cid.ResolveRoute(time.Second)
	get(cch, rdmacm.EventRouteResolved)
	qpCap := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}
	cch2 := verbs.NewCompChannel(1)
	ccq, _ := cid.Device().CreateCQ(verbs.CQAttr{CQE: 128, Channel: cch2})
	if _, err := cid.CreateQP(nil, &verbs.QPInitAttr{SendCQ: ccq, RecvCQ: ccq, Cap: qpCap}); err != nil {
		b.Fatal(err)
	}
	if err := cid.Connect(&rdmacm.ConnParam{RetryCount: 5, RNRRetryCount: 6}); err != nil {
		b.Fatal(err)
	}
	req := get(sch, rdmacm.EventConnectRequest)
	scq, _ := req.ID.Device().CreateCQ(verbs.CQAttr{CQE: 128})
	if _, err := req.ID.CreateQP(nil, &verbs.QPInitAttr{SendCQ: scq, RecvCQ: scq, Cap: qpCap}); err != nil {
		b.Fatal(err)
	}
	if err := req.ID.Accept(&rdmacm.ConnParam{RNRRetryCount: 6}); err != nil {
		b.Fatal(err)
	}
	get(cch, rdmacm.EventEstablished)
	get(sch, rdmacm.EventEstablished)
	dst, _ := req.ID.PD().RegMR(make([]byte, size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	srcMR, _ := cid.PD().RegMR(pattern(size, 2), verbs.AccessLocalWrite)
	wr := []verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{srcMR.SGE(0, size)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}}
	wcs := make([]verbs.WC, 4)
	write := func() {
		if _, err := cid.QP().PostSend(wr); err != nil {
			b.Fatal(err)
		}
		// Wait as o2iblnd's CQ worker does: poll, arm, poll, sleep on the
		// completion channel.
		for {
			n, err := ccq.Poll(wcs)
			if err == nil && n == 0 {
				if err = ccq.ReqNotify(false); err == nil {
					if n, err = ccq.Poll(wcs); err == nil && n == 0 {
						<-cch2.C()
						continue
					}
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			if wcs[0].Status != verbs.WCSuccess {
				b.Fatal(wcs[0].Err())
			}
			return
		}
	}
	write()
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		write()
	}
}
