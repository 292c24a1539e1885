package rxe_test

import (
	"bytes"
	"net/netip"
	"testing"
	"testing/synctest"

	"softib/rxe"
	"softib/udp/udptest"
	"softib/verbs"
)

func TestUC(t *testing.T) {
	a, b := pair(t, verbs.QPTypeUC, rxe.Config{}, connOpts{}, 1<<20)
	for _, n := range []int{0, 1, 1025, 64 << 10} {
		fill(a.buf[:n], uint64(n))
		postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64<<10)}})
		post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithImm, ImmData: 9, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, n)}},
			verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, n)},
				RemoteAddr: b.mr.Addr() + 512<<10, RKey: b.mr.RKey()})
		waitWC(t, a.cq, 2)
		wc := waitWC(t, b.cq, 1)[0]
		wantOK(t, wc, verbs.WCRecv)
		// The WRITE has no ACK on UC: sync through a zero-length
		// WRITE_WITH_IMM behind it.
		postRecv(t, b, verbs.RecvWR{ID: 4})
		post(t, a, verbs.SendWR{ID: 5, Opcode: verbs.WRRDMAWriteWithImm, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		wantOK(t, waitWC(t, b.cq, 1)[0], verbs.WCRecvRDMAWithImm)
		b.sync()
		if wc.ByteLen != uint32(n) || wc.ImmData != 9 || !bytes.Equal(b.buf[:n], a.buf[:n]) || !bytes.Equal(b.buf[512<<10:512<<10+n], a.buf[:n]) {
			t.Fatalf("UC %d bytes: %+v", n, wc)
		}
		b.sync()
	}
}

// TestUCLoss: a UC message that loses a packet is dropped whole; later
// messages arrive intact.
func TestUCLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(3)
		defer nw.Close()
		a, b := simPair(t, nw, verbs.QPTypeUC, connOpts{}, 1<<20)
		drop := 0
		nw.SetFilter(func(src, dst netip.AddrPort, pkt []byte) udptest.Verdict {
			if pkt[0] == 0x21 && drop == 0 { // the first UC SEND_MIDDLE
				drop++
				return udptest.Drop
			}
			return udptest.Pass
		})
		postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64<<10)}})
		fill(a.buf[:8000], 5)
		post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 8000)}},
			verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 3000)}})
		waitWC(t, a.cq, 1)
		wc := waitWC(t, b.cq, 1)[0]
		b.sync()
		if wc.Status != verbs.WCSuccess || wc.ByteLen != 3000 || !bytes.Equal(b.buf[:3000], a.buf[:3000]) {
			t.Fatalf("%+v", wc)
		}
		if b.dev.Stats()["UCDropped"] == 0 {
			t.Fatal("UCDropped not counted")
		}
	})
}

func TestSGEListsAndBigMessages(t *testing.T) {
	const big = 8 << 20
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}}, connOpts{mtu: verbs.MTU4096}, 2*big)
	fill(a.buf[:big], 77)
	// 32-element gather list of uneven pieces into a 3-element scatter list.
	var sgl []verbs.SGE
	off := 0
	for i := range 32 {
		n := 100 + i*37
		sgl = append(sgl, a.mr.SGE(off, n))
		off += n + 13
	}
	total := 0
	var want []byte
	for _, s := range sgl {
		total += int(s.Length)
		o := int(s.Addr - a.mr.Addr())
		want = append(want, a.buf[o:o+int(s.Length)]...)
	}
	postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 1000), b.mr.SGE(5000, 1000), b.mr.SGE(10000, 60000)}})
	post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	wc := waitWC(t, b.cq, 1)[0]
	b.sync()
	got := append(append(bytes.Clone(b.buf[:1000]), b.buf[5000:6000]...), b.buf[10000:10000+total-2000]...)
	if wc.ByteLen != uint32(total) || !bytes.Equal(got, want) {
		t.Fatalf("scatter/gather: %+v", wc)
	}
	// 8 MiB (the maximum message) WRITE and READ back.
	post(t, a, verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, big)},
		RemoteAddr: b.mr.Addr() + big, RKey: b.mr.RKey()})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCRDMAWrite)
	post(t, a, verbs.SendWR{ID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(big, big)},
		RemoteAddr: b.mr.Addr() + big, RKey: b.mr.RKey()})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCRDMARead)
	if !bytes.Equal(a.buf[big:], a.buf[:big]) {
		t.Fatal("8 MiB round trip differs")
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.mr.SGE(0, big), a.mr.SGE(0, 1)}}}); err == nil {
		t.Fatal("message above 8 MiB accepted")
	}
}

func TestGSI(t *testing.T) {
	da, db := openDev(t, rxe.Config{}), openDev(t, rxe.Config{})
	a, b := newEnd(t, da, verbs.QPTypeGSI, 4096), newEnd(t, db, verbs.QPTypeGSI, 4096)
	if a.qp.QPN() != 1 || b.qp.QPN() != 1 {
		t.Fatalf("GSI QPNs %d %d", a.qp.QPN(), b.qp.QPN())
	}
	connect(t, a, b, connOpts{})
	connect(t, b, a, connOpts{})
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(db.Addr().Addr()), SGIDIndex: 1}})
	if err != nil {
		t.Fatal(err)
	}
	postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 296)}})
	copy(a.buf, "MAD!")
	post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 256)},
		AH: ah, RemoteQPN: 1, RemoteQKey: rxe.GSIQKey})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	wc := waitWC(t, b.cq, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.SrcQP != 1 || wc.ByteLen != 296 || string(b.buf[40:44]) != "MAD!" {
		t.Fatalf("%+v", wc)
	}
	pd, _ := da.AllocPD()
	if _, err := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeGSI, SendCQ: a.cq, RecvCQ: a.cq}); err == nil {
		t.Fatal("second GSI QP created")
	}
}
