//go:build linux

package rdmacm_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"softib/cm"
	"softib/internal/tsharktest"
	"softib/interop/vmtest"
	"softib/rdmacm"
	"softib/verbs"
	"softib/wire/mad"
)

// TestInteropLinuxKernel connects softib's RDMA CM with the Linux 6.1
// kernel rdma_cm (rdma_rxe in a QEMU guest, rdmacm-utils' rdma_server
// and rdma_client, ucmatose, udaddy) in both directions and checks the
// capture with
// tshark. It runs when SOFTIB_INTEROP_IMAGE names an image made by
// interop/image.sh (it boots a VM: minutes under TCG).
func TestInteropLinuxKernel(t *testing.T) {
	ctx, v := vmtest.Boot(t, "kernel interop", "sibcm", 15*time.Minute)
	if v == nil {
		return
	}
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	pcapPath := filepath.Join(t.TempDir(), "cm-interop.pcap")
	if p := os.Getenv("SOFTIB_INTEROP_PCAP"); p != "" {
		pcapPath = p
	}
	capt, err := v.Capture(ctx, pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	// dropOnce names a MAD attribute whose next transmission is lost.
	var dropOnce atomic.Uint32
	m := rdmacm.NewManager(rdmacm.Config{CM: cm.Config{DropSend: func(b []byte, _ cm.Addr) bool {
		a := uint32(mad.Header(b).AttrID())
		return a == dropOnce.Load() && dropOnce.CompareAndSwap(a, 0)
	}}})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}

	for _, drop := range []mad.AttrID{0, mad.AttrRTU} {
		name := "kernel server"
		if drop != 0 {
			name += " (our first RTU lost)"
		}
		t.Run(name, func(t *testing.T) {
			dropOnce.Store(uint32(drop))
			job, err := v.Go("rdma_server", fmt.Sprintf("rdma_server -s %s -p 7471", guest), 120*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ch := rdmacm.NewEventChannel()
			var id *rdmacm.ID
			var cq verbs.CQ
			var qp verbs.QP
			var mr verbs.MR
			// rdma_cm listens without a TCP socket: retry while the kernel
			// CM still rejects with "invalid service ID".
			for try := 0; ; try++ {
				id, err = m.CreateID(ch, nil, rdmacm.PSTCP)
				if err != nil {
					t.Fatal(err)
				}
				if err := id.ResolveAddr(netip.AddrPortFrom(host, 0), netip.AddrPortFrom(guest, 7471), time.Second); err != nil {
					t.Fatal(err)
				}
				expect(t, ch, rdmacm.EventAddrResolved)
				if err := id.ResolveRoute(time.Second); err != nil {
					t.Fatal(err)
				}
				expect(t, ch, rdmacm.EventRouteResolved)
				cq = newCQ(t, id)
				if qp, err = id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: qpCap}); err != nil {
					t.Fatal(err)
				}
				if mr, err = id.PD().RegMR(make([]byte, 32), verbs.AccessLocalWrite); err != nil {
					t.Fatal(err)
				}
				if _, err := qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mr.SGE(16, 16)}}}); err != nil {
					t.Fatal(err)
				}
				if err := id.Connect(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
					t.Fatal(err)
				}
				ev, err := ch.GetEvent(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ev.Type == rdmacm.EventEstablished {
					break
				}
				if ev.Type != rdmacm.EventRejected || ev.Status != int(mad.RejInvalidServiceID) || try > 100 || job.Done() {
					r, _ := job.Wait(ctx)
					t.Fatalf("connect: %v status %d (%v); guest: %s %s", ev.Type, ev.Status, ev.Err, r.Stdout, r.Stderr)
				}
				id.DestroyQP()
				id.Destroy()
				time.Sleep(300 * time.Millisecond)
			}
			copy(mr.Buf(), "softib to linux!")
			if _, err := qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{mr.SGE(0, 16)}}}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess {
					t.Fatalf("wc %+v", wc)
				}
			}
			expect(t, ch, rdmacm.EventDisconnected)
			if err := id.Disconnect(); err != nil {
				t.Fatal(err)
			}
			r, err := job.Wait(ctx)
			if err != nil || r.Code != 0 {
				t.Fatalf("rdma_server: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
			}
			t.Logf("rdma_server: %s", r.Stdout)
			id.DestroyQP()
			id.Destroy()
		})
	}

	for _, drop := range []mad.AttrID{0, mad.AttrREP} {
		name := "kernel client"
		if drop != 0 {
			name += " (our first REP lost)"
		}
		t.Run(name, func(t *testing.T) {
			dropOnce.Store(uint32(drop))
			ch := rdmacm.NewEventChannel()
			lis, err := m.CreateID(ch, nil, rdmacm.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Destroy()
			if err := lis.BindAddr(netip.AddrPortFrom(host, 7471)); err != nil {
				t.Fatal(err)
			}
			if err := lis.Listen(0); err != nil {
				t.Fatal(err)
			}
			job, err := v.Go("rdma_client", fmt.Sprintf("rdma_client -s %s -p 7471", host), 120*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ectx, ecancel := context.WithTimeout(ctx, 3*time.Minute)
			defer ecancel()
			req, err := ch.GetEvent(ectx)
			if err != nil || req.Type != rdmacm.EventConnectRequest {
				r, _ := job.Wait(ctx)
				t.Fatalf("no CONNECT_REQUEST (%v %v); guest: %s %s", req, err, r.Stdout, r.Stderr)
			}
			id := req.ID
			t.Logf("CONNECT_REQUEST from %v: %+v", id.RemoteAddr(), req.Conn)
			cq := newCQ(t, id)
			qp, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: qpCap})
			if err != nil {
				t.Fatal(err)
			}
			mr, err := id.PD().RegMR(make([]byte, 32), verbs.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{mr.SGE(16, 16)}}}); err != nil {
				t.Fatal(err)
			}
			if err := id.Accept(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
				t.Fatal(err)
			}
			expect(t, ch, rdmacm.EventEstablished)
			if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv {
				t.Fatalf("recv %+v", wc)
			}
			copy(mr.Buf(), "linux, hi back!!")
			if _, err := qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{mr.SGE(0, 16)}}}); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess {
				t.Fatalf("send %+v", wc)
			}
			expect(t, ch, rdmacm.EventDisconnected)
			if err := id.Disconnect(); err != nil {
				t.Fatal(err)
			}
			r, err := job.Wait(ctx)
			if err != nil || r.Code != 0 {
				t.Fatalf("rdma_client: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
			}
			t.Logf("rdma_client: %s", r.Stdout)
			id.DestroyQP()
			id.Destroy()
		})
	}

	// ucmatose as client: our server sends first and disconnects first
	// (our DREQ, the kernel's DREP).
	t.Run("kernel ucmatose client", func(t *testing.T) {
		const count, size = 10, 100
		ch := rdmacm.NewEventChannel()
		lis, err := m.CreateID(ch, nil, rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Destroy()
		if err := lis.BindAddr(netip.AddrPortFrom(host, 7471)); err != nil {
			t.Fatal(err)
		}
		if err := lis.Listen(0); err != nil {
			t.Fatal(err)
		}
		job, err := v.Go("ucmatose_client", fmt.Sprintf("ucmatose -s %s", host), 120*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ectx, ecancel := context.WithTimeout(ctx, 3*time.Minute)
		defer ecancel()
		req, err := ch.GetEvent(ectx)
		if err != nil || req.Type != rdmacm.EventConnectRequest {
			r, _ := job.Wait(ctx)
			t.Fatalf("no CONNECT_REQUEST (%v %v); guest: %s %s", req, err, r.Stdout, r.Stderr)
		}
		id := req.ID
		cq := newCQ(t, id)
		qp, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: count, MaxRecvWR: count, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := id.PD().RegMR(make([]byte, (count+1)*size), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		for i := range count {
			if _, err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*size, size)}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := id.Accept(nil); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, rdmacm.EventEstablished)
		for i := range count {
			if _, err := qp.PostSend([]verbs.SendWR{{ID: uint64(100 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{mr.SGE(count*size, size)}}}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 * count {
			if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess {
				t.Fatalf("wc %+v", wc)
			}
		}
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		expect(t, ch, rdmacm.EventDisconnected)
		r, err := job.Wait(ctx)
		if err != nil || r.Code != 0 {
			t.Fatalf("ucmatose: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
		}
		id.DestroyQP()
		id.Destroy()
	})

	// UD through SIDR: udaddy (10 messages of 100 bytes each way, the
	// immediate data carrying the sender's QPN).
	const udCount, udSize = 10, 100
	udSetup := func(t *testing.T, id *rdmacm.ID) (verbs.CQ, verbs.QP, verbs.MR) {
		t.Helper()
		cq := newCQ(t, id)
		qp, err := id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: udCount, MaxRecvWR: udCount, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := id.PD().RegMR(make([]byte, (udCount+1)*(udSize+40)), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		for i := range udCount {
			if _, err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*(udSize+40), udSize+40)}}}); err != nil {
				t.Fatal(err)
			}
		}
		return cq, qp, mr
	}
	udSend := func(t *testing.T, id *rdmacm.ID, qp verbs.QP, mr verbs.MR, ud rdmacm.UDParam) {
		t.Helper()
		ah, err := id.PD().CreateAH(&ud.AH)
		if err != nil {
			t.Fatal(err)
		}
		for i := range udCount {
			if _, err := qp.PostSend([]verbs.SendWR{{ID: uint64(100 + i), Opcode: verbs.WRSendWithImm,
				Flags: verbs.SendSignaled, ImmData: qp.QPN(), SGL: []verbs.SGE{mr.SGE(udCount*(udSize+40), udSize)},
				AH: ah, RemoteQPN: ud.QPNum, RemoteQKey: ud.QKey}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// udWait collects udCount receives (and the signalled sends) and
	// returns the last receive.
	udWait := func(t *testing.T, cq verbs.CQ, sends int) verbs.WC {
		t.Helper()
		var last verbs.WC
		for recvs := 0; recvs < udCount || sends > 0; {
			wc := waitWC(t, cq)
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("UD wc %+v", wc)
			}
			if wc.Opcode == verbs.WCRecv {
				if wc.ByteLen != udSize+40 || wc.Flags&verbs.WCFlagWithImm == 0 {
					t.Fatalf("UD recv %+v", wc)
				}
				recvs++
				last = wc
			} else {
				sends--
			}
		}
		return last
	}

	t.Run("kernel udaddy server", func(t *testing.T) {
		job, err := v.Go("udaddy_server", fmt.Sprintf("udaddy -b %s", guest), 120*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ch := rdmacm.NewEventChannel()
		var id *rdmacm.ID
		var cq verbs.CQ
		var qp verbs.QP
		var mr verbs.MR
		var est *rdmacm.Event
		for try := 0; ; try++ {
			if id, err = m.CreateID(ch, nil, rdmacm.PSUDP); err != nil {
				t.Fatal(err)
			}
			if err := id.ResolveAddr(netip.AddrPortFrom(host, 0), netip.AddrPortFrom(guest, 7174), time.Second); err != nil {
				t.Fatal(err)
			}
			expect(t, ch, rdmacm.EventAddrResolved)
			if err := id.ResolveRoute(time.Second); err != nil {
				t.Fatal(err)
			}
			expect(t, ch, rdmacm.EventRouteResolved)
			cq, qp, mr = udSetup(t, id)
			if err := id.Connect(&rdmacm.ConnParam{}); err != nil {
				t.Fatal(err)
			}
			if est, err = ch.GetEvent(ctx); err != nil {
				t.Fatal(err)
			}
			if est.Type == rdmacm.EventEstablished {
				break
			}
			// No listener yet: the kernel answers SIDR_REP "unsupported".
			if est.Type != rdmacm.EventUnreachable || try > 100 || job.Done() {
				r, _ := job.Wait(ctx)
				t.Fatalf("UD connect: %v status %d (%v); guest: %s %s", est.Type, est.Status, est.Err, r.Stdout, r.Stderr)
			}
			id.DestroyQP()
			id.Destroy()
			time.Sleep(300 * time.Millisecond)
		}
		if est.UD.QKey != mad.RDMAUDPQKey {
			t.Errorf("UD param %+v", est.UD)
		}
		udSend(t, id, qp, mr, est.UD)
		if wc := udWait(t, cq, udCount); wc.ImmData != est.UD.QPNum {
			t.Errorf("reply imm %#x, want server QPN %#x", wc.ImmData, est.UD.QPNum)
		}
		r, err := job.Wait(ctx)
		if err != nil || r.Code != 0 {
			t.Fatalf("udaddy server: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
		}
		id.DestroyQP()
		id.Destroy()
	})

	t.Run("kernel udaddy client", func(t *testing.T) {
		ch := rdmacm.NewEventChannel()
		lis, err := m.CreateID(ch, nil, rdmacm.PSUDP)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Destroy()
		if err := lis.BindAddr(netip.AddrPortFrom(host, 7174)); err != nil {
			t.Fatal(err)
		}
		if err := lis.Listen(0); err != nil {
			t.Fatal(err)
		}
		job, err := v.Go("udaddy_client", fmt.Sprintf("udaddy -s %s", host), 120*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ectx, ecancel := context.WithTimeout(ctx, 3*time.Minute)
		defer ecancel()
		req, err := ch.GetEvent(ectx)
		if err != nil || req.Type != rdmacm.EventConnectRequest {
			r, _ := job.Wait(ctx)
			t.Fatalf("no UD CONNECT_REQUEST (%v %v); guest: %s %s", req, err, r.Stdout, r.Stderr)
		}
		id := req.ID
		cq, qp, mr := udSetup(t, id)
		if err := id.Accept(nil); err != nil {
			t.Fatal(err)
		}
		wc := udWait(t, cq, 0)
		// Reply to the QPN in the immediate data, at the address the
		// request came from.
		reply := rdmacm.UDParam{QPNum: wc.ImmData, QKey: mad.RDMAUDPQKey,
			AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(id.RemoteAddr().Addr()), SGIDIndex: 1, HopLimit: 64}}}
		udSend(t, id, qp, mr, reply)
		for range udCount {
			if wc := waitWC(t, cq); wc.Status != verbs.WCSuccess {
				t.Fatalf("UD send %+v", wc)
			}
		}
		r, err := job.Wait(ctx)
		if err != nil || r.Code != 0 {
			t.Fatalf("udaddy client: %v rc %d\n%s%s", err, r.Code, r.Stdout, r.Stderr)
		}
		id.DestroyQP()
		id.Destroy()
	})

	// Stop tcpdump once it has written every frame so far: it writes in
	// capture order, packet by packet (-U), so a marker datagram sent
	// now is in the file after all of them.
	marker := fmt.Sprintf("softib-capture-end-%d-%d", os.Getpid(), time.Now().UnixNano())
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for {
		send := v.Command(ctx, "bash", "-c", fmt.Sprintf("echo %s > /dev/udp/%s/9", marker, guest))
		if out, err := send.CombinedOutput(); err != nil {
			t.Fatalf("sending the capture's end marker: %v\n%s", err, out)
		}
		b, err := os.ReadFile(pcapPath)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump wrote no end marker in 30 s (%s)", capt.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	capt.Stop()
	tsharktest.CheckNoMalformed(t, pcapPath)
	rows := tsharktest.Fields(t, pcapPath, []string{"ip.src", "infiniband.mad.attributeid", "infiniband.cm.rej.reason"},
		"-Y", "infiniband.mad.mgmtclass == 0x07")
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r[0]+" "+r[1]] = true
	}
	t.Logf("CM MADs in capture: %d", len(rows))
	for _, want := range []string{
		host.String() + " 0x0010", guest.String() + " 0x0013", host.String() + " 0x0014", // we connect
		guest.String() + " 0x0010", host.String() + " 0x0013", guest.String() + " 0x0014", // they connect
		guest.String() + " 0x0015", host.String() + " 0x0016", // they disconnect, we answer
		host.String() + " 0x0015", guest.String() + " 0x0016", // we disconnect, they answer
		host.String() + " 0x0017", guest.String() + " 0x0018", // we resolve a UD service
		guest.String() + " 0x0017", host.String() + " 0x0018", // they do
	} {
		if !seen[want] {
			t.Errorf("capture lacks %s (have %v)", want, seen)
		}
	}
}
