package rxe_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softib/rxe"
	"softib/verbs"
)

func TestUDSend(t *testing.T) {
	a, b := pair(t, verbs.QPTypeUD, rxe.Config{}, connOpts{}, 8192)
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(b.dev.Addr().Addr()), SGIDIndex: 1}})
	if err != nil {
		t.Fatal(err)
	}
	fill(a.buf[:1000], 3)
	postRecv(t, b, verbs.RecvWR{ID: 9, SGL: []verbs.SGE{b.mr.SGE(0, 2000)}})
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSendWithImm, ImmData: 0xdeadbeef, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 1000)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	wc := waitWC(t, b.cq, 1)[0]
	wantOK(t, wc, verbs.WCRecv)
	if wc.ByteLen != 1040 || wc.SrcQP != a.qp.QPN() || wc.Flags != verbs.WCFlagGRH|verbs.WCFlagWithImm || wc.ImmData != 0xdeadbeef {
		t.Fatalf("wc %+v", wc)
	}
	if !bytes.Equal(b.buf[40:1040], a.buf[:1000]) {
		t.Fatal("payload differs")
	}
	ip := b.buf[20:40]
	src := a.dev.Addr().Addr().As4()
	dst := b.dev.Addr().Addr().As4()
	if ip[0] != 0x45 || ip[9] != 17 || !bytes.Equal(ip[12:16], src[:]) || !bytes.Equal(ip[16:20], dst[:]) ||
		binary.BigEndian.Uint16(ip[2:]) != 20+8+12+8+4+1000+4 || !bytes.Equal(b.buf[:20], make([]byte, 20)) {
		t.Fatalf("GRH area % x", b.buf[:40])
	}
	// Wrong Q_Key: dropped and counted.
	postRecv(t, b, verbs.RecvWR{ID: 10, SGL: []verbs.SGE{b.mr.SGE(0, 2000)}})
	post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 10)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x1234})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	// A good one after it proves the bad one was dropped, not delayed.
	post(t, a, verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 10)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x80000000})
	waitWC(t, a.cq, 1)
	wc = waitWC(t, b.cq, 1)[0]
	if wc.WRID != 10 || wc.ByteLen != 50 {
		t.Fatalf("wc %+v", wc)
	}
	if b.dev.Stats()["BadQKey"] != 1 {
		t.Fatalf("BadQKey = %d", b.dev.Stats()["BadQKey"])
	}
}

func TestRCAtomicsImmInv(t *testing.T) {
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 4096)
	binary.NativeEndian.PutUint64(b.buf[8:], 100)
	b.sync()
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 5})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCFetchAdd)
	b.sync()
	if got := binary.NativeEndian.Uint64(a.buf); got != 100 || binary.NativeEndian.Uint64(b.buf[8:]) != 105 {
		t.Fatalf("fetch-add: orig %d, now %d", got, binary.NativeEndian.Uint64(b.buf[8:]))
	}
	b.sync()
	post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(16, 8)},
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 105, Swap: 7})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCCompSwap)
	b.sync()
	if got := binary.NativeEndian.Uint64(a.buf[16:]); got != 105 || binary.NativeEndian.Uint64(b.buf[8:]) != 7 {
		t.Fatalf("cmp-swap: orig %d, now %d", got, binary.NativeEndian.Uint64(b.buf[8:]))
	}
	// WRITE_WITH_IMM consumes a receive.
	postRecv(t, b, verbs.RecvWR{ID: 5})
	copy(a.buf[100:], "hello")
	post(t, a, verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 42, SGL: []verbs.SGE{a.mr.SGE(100, 5)},
		RemoteAddr: b.mr.Addr() + 200, RKey: b.mr.RKey()})
	wc := waitWC(t, b.cq, 1)[0]
	wantOK(t, wc, verbs.WCRecvRDMAWithImm)
	if wc.ImmData != 42 || wc.ByteLen != 5 || string(b.buf[200:205]) != "hello" {
		t.Fatalf("write imm: %+v %q", wc, b.buf[200:205])
	}
	// SEND_WITH_INV invalidates b's second MR, a fast-reg MR (ordinary
	// MRs are not invalidatable, as on Linux) registered over b's buffer.
	mr2, err := verbs.AllocMR(b.pd, verbs.MRTypeMemReg, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := mr2.MapMRSG([]verbs.SGE{b.mr.SGE(512, 64)}, 0, 4096); n != 1 || err != nil {
		t.Fatalf("map: %d %v", n, err)
	}
	post(t, b, verbs.SendWR{ID: 7, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled, Reg: verbs.RegWR{MR: mr2,
		Key: verbs.IncKey(mr2.RKey()), Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}})
	wantOK(t, waitWC(t, b.cq, 1)[0], verbs.WCRegMR)
	postRecv(t, b, verbs.RecvWR{ID: 6, SGL: []verbs.SGE{b.mr.SGE(0, 64)}})
	post(t, a, verbs.SendWR{ID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("inv"), InvalidateRKey: mr2.RKey()})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	wc = waitWC(t, b.cq, 1)[0]
	wantOK(t, wc, verbs.WCRecv)
	if wc.Flags != verbs.WCFlagWithInv || wc.InvalidatedRKey != mr2.RKey() || string(b.buf[:3]) != "inv" {
		t.Fatalf("send inv: %+v", wc)
	}
	// A WRITE to the invalidated MR now fails with a remote access error.
	post(t, a, verbs.SendWR{ID: 8, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: mr2.Addr(), RKey: mr2.RKey()})
	wc = waitWC(t, a.cq, 1)[0]
	if wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("write to invalidated MR: %+v", wc)
	}
	if a.qp.State() != verbs.QPStateErr {
		t.Fatalf("requester state %v", a.qp.State())
	}
}
