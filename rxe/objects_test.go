package rxe_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

func TestDeviceAttributes(t *testing.T) {
	addr := testAddr()
	dv, err := verbs.Open(verbs.DeviceConfig{Provider: "rxe", Addr: addr, Name: "rxe7"})
	if err != nil {
		t.Fatal(err)
	}
	defer dv.Close()
	ev := <-dv.Events()
	if ev.Type != verbs.EventPortActive || ev.Port != 1 {
		t.Fatalf("first event %+v", ev)
	}
	a := dv.Query()
	if a.MaxQPWR != 16384 || a.MaxSGE != 32 || a.MaxInlineData != 400 || a.MaxCQE != 32767 || a.MaxQPRdAtom != 128 ||
		a.MaxQPInitRdAtom != 128 || a.MaxMsgSize != 8<<20 || a.LocalCAAckDelay != 15 || a.AtomicCap != verbs.AtomicHCA ||
		a.MaxPKeys != 64 || dv.Name() != "rxe7" {
		t.Fatalf("device attributes %+v", a)
	}
	p, _ := dv.QueryPort(1)
	// Loopback's link MTU (64 KiB) gives the largest IB MTU, as on rdma_rxe (linkmtu.go).
	if p.State != verbs.PortActive || p.ActiveMTU != verbs.MTU4096 || p.MaxMTU != verbs.MTU4096 || p.LinkLayer != verbs.LinkLayerEthernet ||
		p.GIDTblLen != 1024 || p.PKeyTblLen != 64 {
		t.Fatalf("port attributes %+v", p)
	}
	g0, _ := dv.QueryGID(1, 0)
	g1, _ := dv.QueryGID(1, 1)
	if g0 != verbs.LinkLocalGID(a.NodeGUID) || g1 != verbs.GIDFromAddr(addr) || !g1.IsIPv4() {
		t.Fatalf("GIDs %v %v", g0, g1)
	}
	if k, _ := dv.QueryPKey(1, 0); k != 0xFFFF {
		t.Fatalf("pkey[0] %#x", k)
	}
	if _, err := dv.QueryPort(2); err == nil {
		t.Fatal("port 2 exists")
	}
	d2 := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}})
	if p, _ := d2.QueryPort(1); p.ActiveMTU != verbs.MTU4096 {
		t.Fatalf("NetMTU 9000: active MTU %v", p.ActiveMTU)
	}
}

func TestCredits(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{AdvertiseCredits: true}, connOpts{minRNR: 1}, 1<<16)
	postRecv(t, b, verbs.RecvWR{ID: 100}, verbs.RecvWR{ID: 101}, verbs.RecvWR{ID: 102})
	post(t, a, verbs.SendWR{ID: 0, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	waitWC(t, a.cq, 1) // the ACK advertised 2 credits
	var wrs []verbs.SendWR
	for i := 1; i <= 6; i++ {
		wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	}
	post(t, a, wrs...)
	waitWC(t, a.cq, 2) // the two the credits allowed
	// Probes meet RNR NAKs until receives are posted, but the requester
	// never floods the responder: no request arrives out of sequence.
	time.Sleep(20 * time.Millisecond)
	postRecv(t, b, verbs.RecvWR{ID: 103}, verbs.RecvWR{ID: 104}, verbs.RecvWR{ID: 105}, verbs.RecvWR{ID: 106})
	for i, wc := range waitWC(t, a.cq, 4) {
		if wc.WRID != uint64(3+i) || wc.Status != verbs.WCSuccess {
			t.Fatalf("%+v", wc)
		}
	}
	waitWC(t, b.cq, 7)
	if n := b.dev.Stats()["OutOfSeqReq"]; n != 0 {
		t.Fatalf("%d requests beyond the credits reached the responder", n)
	}
}

func TestSRQ(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 1<<16)
	srq, err := b.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := b.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("post recv on SRQ QP: %v", err)
	}
	bs := &end{dev: b.dev, pd: b.pd, cq: b.cq, qp: qp, mr: b.mr, buf: b.buf}
	a2 := newEnd(t, a.dev, verbs.QPTypeRC, 1<<12)
	connect(t, a2, bs, connOpts{})
	connect(t, bs, a2, connOpts{})
	for i := range 4 {
		if _, err := srq.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(verbs.SRQAttr{Limit: 3}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	post(t, a2, verbs.SendWR{ID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("x")},
		verbs.SendWR{ID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("y")})
	waitWC(t, a2.cq, 2)
	wcs := waitWC(t, b.cq, 2)
	if wcs[0].WRID != 0 || wcs[1].WRID != 1 {
		t.Fatalf("%+v", wcs)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-b.dev.Events():
			if ev.Type != verbs.EventSRQLimitReached {
				continue
			}
			if ev.SRQ != srq {
				t.Fatal("event for another SRQ")
			}
			if at, _ := srq.Query(); at.Limit != 0 {
				t.Fatalf("limit still armed: %+v", at)
			}
			return
		case <-deadline:
			t.Fatal("no SRQ_LIMIT_REACHED event")
		}
	}
}

func TestCQOverrunAndNotify(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 1<<12)
	ch := verbs.NewCompChannel(0)
	small, err := b.dev.CreateCQ(verbs.CQAttr{CQE: 2, Channel: ch})
	if err != nil {
		t.Fatal(err)
	}
	qp, _ := b.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.cq, RecvCQ: small, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	bs := &end{dev: b.dev, pd: b.pd, cq: small, qp: qp, mr: b.mr, buf: b.buf}
	a2 := newEnd(t, a.dev, verbs.QPTypeRC, 1<<12)
	connect(t, a2, bs, connOpts{})
	connect(t, bs, a2, connOpts{})
	for i := range 4 {
		postRecv(t, bs, verbs.RecvWR{ID: uint64(i)})
	}
	// Solicited-only arming: an unsolicited message does not signal, a
	// solicited one does.
	small.ReqNotify(true)
	post(t, a2, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	waitWC(t, a2.cq, 1)
	select {
	case <-ch.C():
		t.Fatal("unsolicited completion signalled a solicited-only CQ")
	case <-time.After(20 * time.Millisecond):
	}
	post(t, a2, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendSolicited})
	select {
	case cq := <-ch.C():
		if cq != small {
			t.Fatal("wrong CQ signalled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("solicited completion not signalled")
	}
	// A third completion overflows the 2-entry CQ.
	post(t, a2, verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	waitWC(t, a2.cq, 2)
	for {
		ev := <-b.dev.Events()
		if ev.Type == verbs.EventCQErr {
			if ev.CQ != small {
				t.Fatal("CQ_ERR for another CQ")
			}
			break
		}
	}
	wcs := make([]verbs.WC, 4)
	if n, err := small.Poll(wcs); !errors.Is(err, verbs.ErrCQOverrun) || n != 2 {
		t.Fatalf("poll after overrun: %d, %v", n, err)
	}
	if err := small.Resize(1); err != nil {
		t.Fatal(err)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 3 {
		da := openDev(t, rxe.Config{})
		db := openDev(t, rxe.Config{})
		a := newEnd(t, da, verbs.QPTypeRC, 4096)
		b := newEnd(t, db, verbs.QPTypeRC, 4096)
		connect(t, a, b, connOpts{})
		connect(t, b, a, connOpts{})
		post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
			SGL: []verbs.SGE{a.mr.SGE(0, 100)}})
		waitWC(t, a.cq, 1)
		da.Close()
		db.Close()
	}
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i > 200 {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
