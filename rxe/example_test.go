package rxe_test

import (
	"fmt"
	"net/netip"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// Example connects two Soft-RoCE devices on loopback addresses and sends
// one RC message.
func Example() {
	open := func(ip string) verbs.Device {
		d, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: netip.MustParseAddr(ip)}})
		if err != nil {
			panic(err)
		}
		return d
	}
	da, db := open("127.77.0.1"), open("127.77.0.2")
	defer da.Close()
	defer db.Close()

	type side struct {
		dev verbs.Device
		cq  verbs.CQ
		qp  verbs.QP
		mr  verbs.MR
	}
	mk := func(d verbs.Device) *side {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 16})
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
		return &side{d, cq, qp, mr}
	}
	a, b := mk(da), mk(db)
	connect := func(s, peer *side) {
		gid, _ := peer.dev.QueryGID(1, 1) // the IPv4-mapped GID
		s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(),
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic); err != nil {
			panic(err)
		}
	}
	connect(a, b)
	connect(b, a)

	b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}})
	a.qp.PostSend([]verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		InlineData: []byte("hello, rxe")}})

	wc := make([]verbs.WC, 1)
	for n, _ := b.cq.Poll(wc); n == 0; n, _ = b.cq.Poll(wc) {
		time.Sleep(time.Millisecond)
	}
	fmt.Println(wc[0].Opcode, wc[0].Status, string(b.mr.Buf()[:wc[0].ByteLen]))
	// Output: RECV success hello, rxe
}
