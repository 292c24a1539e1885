package rxe_test

import (
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

func TestLocalInvFenceInlineSGL(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 1<<16)
	// Inline from an SGL: the bytes are copied at post time.
	copy(a.buf, "inline-sgl")
	postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64)}})
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, SGL: []verbs.SGE{a.mr.SGE(0, 10)}})
	copy(a.buf, "XXXXXXXXXX") // allowed: inline data was copied
	waitWC(t, a.cq, 1)
	waitWC(t, b.cq, 1)
	b.sync()
	if string(b.buf[:10]) != "inline-sgl" {
		t.Fatalf("inline: %q", b.buf[:10])
	}
	// READ then a fenced SEND of what was read: the fence makes the
	// SEND wait for the READ's data.
	copy(b.buf[1000:], "fenced-data")
	b.sync()
	postRecv(t, b, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(2000, 64)}})
	post(t, a,
		verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.mr.SGE(100, 11)}, RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()},
		verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendFence, SGL: []verbs.SGE{a.mr.SGE(100, 11)}})
	if wc := waitWC(t, a.cq, 1)[0]; wc.WRID != 3 || wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	waitWC(t, b.cq, 1)
	b.sync()
	if string(b.buf[2000:2011]) != "fenced-data" {
		t.Fatalf("fence: %q", b.buf[2000:2011])
	}
	// LOCAL_INV of a fast-reg MR over a's buffer: a remote WRITE from b
	// with the invalidated key then fails.
	fmr, err := verbs.AllocMR(a.pd, verbs.MRTypeMemReg, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fmr.MapMRSG([]verbs.SGE{a.mr.SGE(0, 64)}, 0, 4096); n != 1 || err != nil {
		t.Fatalf("map: %d %v", n, err)
	}
	post(t, a,
		verbs.SendWR{ID: 6, Opcode: verbs.WRRegMR, Reg: verbs.RegWR{MR: fmr, Key: verbs.IncKey(fmr.RKey()),
			Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}},
		verbs.SendWR{ID: 4, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: verbs.IncKey(fmr.RKey())})
	if wc := waitWC(t, a.cq, 1)[0]; wc.Opcode != verbs.WCLocalInv || wc.Status != verbs.WCSuccess {
		t.Fatalf("%+v", wc)
	}
	post(t, b, verbs.SendWR{ID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{b.mr.SGE(0, 8)},
		RemoteAddr: fmr.Addr(), RKey: fmr.RKey()})
	if wc := waitWC(t, b.cq, 1)[0]; wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("write to invalidated MR: %+v", wc)
	}
}

func TestQueryAndSQD(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{mtu: verbs.MTU2048}, 4096)
	attr, init, err := a.qp.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.State != verbs.QPStateRTS || attr.DestQPN != b.qp.QPN() || attr.PathMTU != verbs.MTU2048 || attr.Timeout != 17 ||
		attr.RetryCnt != 7 || attr.MaxDestRdAtomic != 16 || init.Type != verbs.QPTypeRC || init.Cap.MaxSendWR != 1024 || attr.AH.GRH.DGID != ahTo(b.dev).GRH.DGID {
		t.Fatalf("query: %+v %+v", attr, init)
	}
	if err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPStateSQD, EnSQDAsyncNotify: true}, verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-a.dev.Events():
			done = ev.Type == verbs.EventSQDrained && ev.QP == a.qp
		case <-deadline:
			t.Fatal("no SQ_DRAINED")
		}
	}
	// Posted in SQD: queued, sent after SQD→RTS.
	postRecv(t, b, verbs.RecvWR{ID: 1})
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	if err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
}

func TestUDLengthError(t *testing.T) {
	// A 1500-byte link: UD messages above 1024 bytes are refused.
	a, b := pair(t, verbs.QPTypeUD, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 1500}}, connOpts{}, 4096)
	ah, _ := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(b.dev.Addr().Addr()), SGIDIndex: 1}})
	postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 60)}}) // 40 + 20 < 40 + 100
	post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 100)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
	if wc := waitWC(t, b.cq, 1)[0]; wc.Status != verbs.WCLocLenErr {
		t.Fatalf("%+v", wc)
	}
	if b.qp.State() != verbs.QPStateRTS {
		t.Fatalf("UD QP state %v after a length error", b.qp.State())
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 2000)}, AH: ah, RemoteQPN: 1}}); err == nil {
		t.Fatal("UD message above the MTU accepted")
	}
}
