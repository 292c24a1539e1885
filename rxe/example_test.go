package rxe_test

import (
	"fmt"
	"net/netip"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// Example connects two Soft-RoCE devices on loopback addresses by hand
// (the verbs a CM would run: QP states, GIDs, keys) and does an RC RDMA
// WRITE followed by a SEND. rdmacm's Example_endpoint does the same in a
// quarter of the lines.
//
// Two access rights must agree for a WRITE to land: the target MR's
// (AccessRemoteWrite) and the target QP's (QPAttr.AccessFlags, set on
// the way to INIT). Modifying to INIT with QPAttrAccessFlags in the
// mask but AccessFlags left 0 allows no remote access at all: the WRITE
// then fails at the requester with a remote access error.
func Example() {
	open := func(ip netip.Addr) verbs.Device {
		d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
		if err != nil {
			panic(err)
		}
		return d
	}
	// Two loopback addresses of this process's own (127.X.Y.1, .2).
	da, db := open(testAddr()), open(testAddr())
	defer da.Close()
	defer db.Close()

	type side struct {
		dev verbs.Device
		cq  verbs.CQ
		qp  verbs.QP
		mr  verbs.MR
	}
	const access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite // MR and QP alike
	mk := func(d verbs.Device) *side {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 16})
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		mr, _ := pd.RegMR(make([]byte, 64), access)
		return &side{d, cq, qp, mr}
	}
	a, b := mk(da), mk(db)
	connect := func(s, peer *side) {
		gid, _ := peer.dev.QueryGID(1, 1) // the IPv4-mapped GID
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: access},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			panic(err)
		}
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			panic(err)
		}
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic); err != nil {
			panic(err)
		}
	}
	connect(a, b)
	connect(b, a)

	// The peer's buffer address and R_Key would come over the network;
	// here both sides live in one process.
	copy(a.mr.Buf(), "hello")
	b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 32)}}})
	a.qp.PostSend([]verbs.SendWR{
		{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.mr.SGE(0, 5)}, RemoteAddr: b.mr.Addr() + 32, RKey: b.mr.RKey()},
		{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("done")},
	})

	wc := make([]verbs.WC, 1)
	for n, _ := b.cq.Poll(wc); n == 0; n, _ = b.cq.Poll(wc) {
		time.Sleep(time.Millisecond)
	}
	fmt.Println(wc[0].Opcode, wc[0].Status, string(b.mr.Buf()[:wc[0].ByteLen]), string(b.mr.Buf()[32:37]))
	// Output: RECV success done hello
}

// Example_completionHandler answers every message in the receiving CQ's
// completion handler (verbs.CQAttr.Handler), which the device's receive
// goroutine runs: an event-driven echo with no goroutine of its own.
func Example_completionHandler() {
	open := func(ip netip.Addr) verbs.Device {
		d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
		if err != nil {
			panic(err)
		}
		return d
	}
	da, db := open(testAddr()), open(testAddr())
	defer da.Close()
	defer db.Close()

	var echo verbs.QP // b's QP, set below
	bBuf := make([]byte, 64)
	wcs := make([]verbs.WC, 4)
	handler := func(cq verbs.CQ) {
		for {
			n, _ := cq.Poll(wcs)
			if n == 0 {
				// Arm, then poll again: a completion that came in
				// before the arm raises no event.
				cq.ReqNotify(false)
				if n, _ = cq.Poll(wcs); n == 0 {
					return
				}
			}
			for _, wc := range wcs[:n] {
				if wc.Opcode == verbs.WCRecv && wc.Status == verbs.WCSuccess {
					reply := append([]byte("echo: "), bBuf[:wc.ByteLen]...)
					echo.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: reply}})
				}
			}
		}
	}
	mk := func(d verbs.Device, buf []byte, h func(verbs.CQ)) (verbs.CQ, verbs.QP, verbs.MR) {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 16, Handler: h})
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
		mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
		return cq, qp, mr
	}
	aBuf := make([]byte, 64)
	acq, aqp, amr := mk(da, aBuf, nil)
	bcq, bqp, bmr := mk(db, bBuf, handler)
	echo = bqp
	connect := func(qp verbs.QP, peer verbs.Device, peerQP verbs.QP) {
		gid, _ := peer.QueryGID(1, 1)
		qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peerQP.QPN(),
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
		qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
	}
	connect(aqp, db, bqp)
	connect(bqp, da, aqp)

	bqp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{bmr.SGE(0, 64)}}})
	bcq.ReqNotify(false) // arm: the first message calls the handler
	aqp.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{amr.SGE(0, 64)}}})
	aqp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: []byte("ping")}})

	wc := make([]verbs.WC, 1)
	for n, _ := acq.Poll(wc); n == 0; n, _ = acq.Poll(wc) {
		time.Sleep(time.Millisecond)
	}
	fmt.Println(string(aBuf[:wc[0].ByteLen]))
	// Output: echo: ping
}
