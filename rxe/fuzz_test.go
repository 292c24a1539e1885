package rxe

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"softib/internal/seqnum"
	"softib/udp/udptest"
	"softib/verbs"
	"softib/wire/roce"
)

// fuzzRig is a device with an RC, a UC, a UD and the GSI QP in RTS whose
// peer is peerAddr, for feeding raw datagrams to the receive path.
type fuzzRig struct {
	dev  *Device
	peer netip.AddrPort
	rc   *QP
	enc  encapCache // the rig's reader's ICRC cache
}

// The fuzz rig's device and its peer live on a simulated network
// (udp/udptest): no socket is opened, so fixed addresses collide with
// nothing on the host.
var (
	fuzzLocal = netip.MustParseAddrPort("10.201.0.1:4791")
	fuzzPeer  = netip.MustParseAddrPort("10.201.0.2:4791")
)

func newFuzzRig(t testing.TB) *fuzzRig {
	nw := udptest.NewNetwork(1)
	t.Cleanup(func() { nw.Close() })
	dv, err := Open(Config{DeviceConfig: verbs.DeviceConfig{Addr: fuzzLocal.Addr()}, Conn: nw.Endpoint(fuzzLocal), InlineRx: -1})
	if err != nil {
		t.Fatal(err)
	}
	d := dv.(*Device)
	t.Cleanup(func() { d.Close() })
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(verbs.CQAttr{CQE: 64})
	buf := make([]byte, 1<<16)
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	av := verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(fuzzPeer.Addr()), SGIDIndex: 1}}
	r := &fuzzRig{dev: d, peer: fuzzPeer}
	for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD, verbs.QPTypeGSI} {
		qv, err := pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		q := qv.(*QP)
		mod := func(a verbs.QPAttr, m verbs.QPAttrMask) {
			if err := q.Modify(&a, m); err != nil {
				t.Fatal(err)
			}
		}
		switch typ {
		case verbs.QPTypeRC, verbs.QPTypeUC:
			mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: all}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
			m := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
			if typ == verbs.QPTypeRC {
				m |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
				r.rc = q
			}
			mod(verbs.QPAttr{State: verbs.QPStateRTR, AH: av, PathMTU: verbs.MTU1024, DestQPN: 0x99, MaxDestRdAtomic: 4, MinRNRTimer: 1}, m)
			m = verbs.QPAttrState | verbs.QPAttrSQPSN
			if typ == verbs.QPTypeRC {
				m |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
			}
			mod(verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}, m)
		case verbs.QPTypeGSI:
			mod(verbs.QPAttr{State: verbs.QPStateInit, QKey: GSIQKey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrQKey)
			mod(verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
			mod(verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		default:
			mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: 0x1234}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
			mod(verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
			mod(verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		}
		for range 8 {
			q.PostRecv([]verbs.RecvWR{{SGL: []verbs.SGE{mr.SGE(0, 2048)}}})
		}
	}
	return r
}

// feed runs one datagram through the receive checks and the QP engine.
func (r *fuzzRig) feed(b []byte) {
	p := r.dev.getPacket()
	p.n = copy(p.buf[:], b)
	if len(b) > len(p.buf) {
		p.n = len(b) // an oversize datagram (the socket would truncate)
	}
	p.addr = r.peer
	if q := r.dev.recv(p, &r.enc); q != nil {
		q.mu.Lock()
		q.process()
		q.mu.Unlock()
	} else {
		r.dev.putPacket(p)
	}
}

// seedPacket builds a well-formed packet of opcode op to qpn.
func seedPacket(op roce.Opcode, qpn uint32, psn uint32, payload int, ext func(b []byte)) []byte {
	hl := op.HeaderLen()
	pad := -payload & 3
	b := make([]byte, hl+payload+pad+roce.ICRCSize)
	roce.BTH(b).Encode(&roce.BTHFields{Opcode: op, PadCnt: uint8(pad), PKey: 0xFFFF, DestQP: qpn, AckReq: true, PSN: seqnum.NewPSN(psn)})
	if ext != nil {
		ext(b)
	}
	binary.LittleEndian.PutUint32(b[len(b)-4:], roce.ICRCFor(fuzzPeer, fuzzLocal, b))
	return b
}

func FuzzRecv(f *testing.F) {
	rig := newFuzzRig(f)
	mrKey := uint32(1 << 8) // index 1; the key byte is random: the fuzzer may find it
	for _, op := range []roce.Opcode{roce.RCSendOnly, roce.RCSendFirst, roce.RCSendLastImm, roce.RCWriteOnly, roce.RCWriteFirst,
		roce.RCReadRequest, roce.RCCompareSwap, roce.RCFetchAdd, roce.RCAck, roce.RCAtomicAck, roce.RCReadResponseOnly,
		roce.RCSendOnlyInv, roce.RCWriteOnlyImm} {
		f.Add(seedPacket(op, 0x11, 0, 16, func(b []byte) {
			if o := op.Info().Offset(roce.HdrRETH); o >= 0 {
				roce.RETH(b[o:]).Encode(&roce.RETHFields{VA: 0, RKey: mrKey, DMALen: 16})
			}
		}))
	}
	f.Add(seedPacket(roce.UCSendOnly, 0x12, 0, 5, nil))
	f.Add(seedPacket(roce.UCWriteFirst, 0x12, 0, 1024, nil))
	f.Add(seedPacket(roce.UDSendOnly, 0x13, 0, 7, func(b []byte) {
		roce.DETH(b[12:]).Encode(&roce.DETHFields{QKey: 0x1234, SrcQP: 5})
	}))
	f.Add(seedPacket(roce.UDSendOnlyImm, 1, 0, 100, func(b []byte) {
		roce.DETH(b[12:]).Encode(&roce.DETHFields{QKey: GSIQKey, SrcQP: 1})
	}))
	f.Add([]byte{})
	f.Add([]byte{0x04, 0x10})
	f.Fuzz(func(t *testing.T, b []byte) {
		sum := func() uint64 {
			var s uint64
			for _, v := range rig.dev.Stats() {
				s += v
			}
			return s
		}
		before := sum()
		rig.feed(b)
		if sum() == before {
			t.Fatalf("no counter moved for % x", b)
		}
	})
}
