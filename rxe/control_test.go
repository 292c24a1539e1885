package rxe_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/udp/udptest"
	"softib/verbs"
)

// TestControlVerbs: node description, port capability bits, the Q_Key
// violation counter and its reset, peek CQ, find GID/P_Key.
func TestControlVerbs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(6)
		defer nw.Close()
		open := func(ip string) *rxe.Device {
			a := netip.MustParseAddrPort(ip + ":4791")
			return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a.Addr()}, Conn: nw.Endpoint(a)})
		}
		da, db := open("10.200.4.1"), open("10.200.4.2")
		if got := db.NodeDesc(); got != db.Name() {
			t.Errorf("initial node description %q, want the device name", got)
		}
		if err := verbs.ModifyDevice(db, verbs.DeviceModifyNodeDesc, &verbs.DeviceModify{NodeDesc: "node b"}); err != nil || db.NodeDesc() != "node b" {
			t.Errorf("node description %q, %v", db.NodeDesc(), err)
		}
		if err := verbs.ModifyDevice(db, verbs.DeviceModifySysImageGUID, &verbs.DeviceModify{}); !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("system image GUID: %v", err)
		}
		const bit = 1 << 5
		if err := verbs.ModifyPort(db, 1, 0, &verbs.PortModify{SetPortCapMask: bit}); err != nil {
			t.Fatal(err)
		}
		pa, _ := db.QueryPort(1)
		if pa.PortCapFlags&bit == 0 || pa.PortCapFlags&(1<<16) == 0 {
			t.Errorf("capability flags %#x after setting %#x", pa.PortCapFlags, bit)
		}
		verbs.ModifyPort(db, 1, 0, &verbs.PortModify{ClrPortCapMask: bit})
		if pa, _ = db.QueryPort(1); pa.PortCapFlags&bit != 0 {
			t.Errorf("capability flags %#x after clearing %#x", pa.PortCapFlags, bit)
		}
		if err := verbs.ModifyPort(db, 1, verbs.PortShutdown, &verbs.PortModify{}); !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("shutdown: %v", err)
		}

		// Q_Key violations count, and reset.
		a, b := newEnd(t, da, verbs.QPTypeUD, 4096), newEnd(t, db, verbs.QPTypeUD, 4096)
		connect(t, a, a, connOpts{})
		connect(t, b, b, connOpts{})
		postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 4096)}})
		ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(db.Addr().Addr()), SGIDIndex: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			post(t, a, verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0xBAD})
		}
		time.Sleep(time.Second) // virtual
		if n, err := verbs.PeekCQ(a.cq, 8); n != 3 || err != nil {
			t.Errorf("peek: %d %v, want the 3 send completions", n, err)
		}
		waitWC(t, a.cq, 3)
		if n, _ := verbs.PeekCQ(a.cq, 8); n != 0 {
			t.Errorf("peek after poll: %d", n)
		}
		if pa, _ = db.QueryPort(1); pa.QKeyViolCntr != 3 || pa.BadPKeyCntr != 0 {
			t.Errorf("Q_Key violations %d (want 3), bad P_Keys %d", pa.QKeyViolCntr, pa.BadPKeyCntr)
		}
		verbs.ModifyPort(db, 1, verbs.PortResetQKeyCntr, &verbs.PortModify{})
		if pa, _ = db.QueryPort(1); pa.QKeyViolCntr != 0 {
			t.Errorf("Q_Key violations %d after reset", pa.QKeyViolCntr)
		}

		if attr, pd, err := verbs.QueryAH(ah); err != nil || pd != a.pd || attr.GRH.DGID != verbs.GIDFromAddr(db.Addr().Addr()) {
			t.Errorf("QueryAH: %+v %v %v", attr, pd, err)
		}
		b2 := newEnd(t, db, verbs.QPTypeRC, 64)
		qps, err := verbs.DeviceQPs(db)
		if err != nil {
			t.Fatal(err)
		}
		var qpns []uint32
		for _, q := range qps {
			qpns = append(qpns, q.QPN())
		}
		if !slices.IsSorted(qpns) || !slices.Contains(qps, b.qp) || !slices.Contains(qps, b2.qp) || slices.Contains(qps, a.qp) {
			t.Errorf("device b's QPs %v: want b's %#x and %#x, sorted, not a's", qpns, b.qp.QPN(), b2.qp.QPN())
		}
		b2.qp.Destroy()
		if qps, _ = verbs.DeviceQPs(db); slices.Contains(qps, b2.qp) {
			t.Error("a destroyed QP is still listed")
		}

		port, idx, err := verbs.FindGID(db, verbs.GIDFromAddr(db.Addr().Addr()))
		if err != nil || port != 1 || idx != 1 {
			t.Errorf("FindGID: port %d index %d %v", port, idx, err)
		}
		if _, _, err := verbs.FindGID(db, verbs.GIDFromAddr(netip.MustParseAddr("10.9.9.9"))); !errors.Is(err, verbs.ErrNotFound) {
			t.Errorf("FindGID of a foreign GID: %v", err)
		}
		if i, err := verbs.FindPKey(db, 1, 0xFFFF); i != 0 || err != nil {
			t.Errorf("FindPKey(0xFFFF): %d %v", i, err)
		}
		if i, err := verbs.FindPKey(db, 1, 0x7FFF); i != 0 || err != nil {
			t.Errorf("FindPKey(0x7FFF), the limited form: %d %v", i, err)
		}
		if _, err := verbs.FindPKey(db, 1, 0x1234); !errors.Is(err, verbs.ErrNotFound) {
			t.Errorf("FindPKey(0x1234): %v", err)
		}
	})
}

// TestDrainSQRQ: DrainSQ returns once the send queue is flushed, DrainRQ
// once the receive queue is; a QP on an SRQ drains after
// LAST_WQE_REACHED.
func TestDrainSQRQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(7)
		defer nw.Close()
		a, b := simPair(t, nw, verbs.QPTypeRC, connOpts{rnrRetry: 7, minRNR: 31}, 4096)
		// b has no receives: a's SENDs wait on RNR NAKs (retry 7 = ∞).
		post(t, a,
			verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)}},
			verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)}})
		time.Sleep(10 * time.Millisecond) // virtual
		if err := verbs.DrainSQ(a.qp); err != nil {
			t.Fatal(err)
		}
		if n, _ := verbs.PeekCQ(a.cq, 8); n != 2 {
			t.Fatalf("%d send completions after DrainSQ, want 2", n)
		}
		for _, wc := range waitWC(t, a.cq, 2) {
			if wc.Status != verbs.WCWRFlushErr {
				t.Errorf("send %d: %v, want WR_FLUSH_ERR", wc.WRID, wc.Status)
			}
		}
		postRecv(t, b, verbs.RecvWR{ID: 7, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}, verbs.RecvWR{ID: 8, SGL: []verbs.SGE{b.mr.SGE(64, 64)}})
		if err := verbs.DrainRQ(b.qp); err != nil {
			t.Fatal(err)
		}
		if n, _ := verbs.PeekCQ(b.cq, 8); n != 2 {
			t.Fatalf("%d receive completions after DrainRQ, want 2", n)
		}

		// A QP on an SRQ.
		d := b.dev
		srq, err := b.pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qp, err := b.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq, SRQ: srq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		if err := verbs.DrainRQ(qp); err != nil {
			t.Fatal(err)
		}
		for {
			e := <-d.Events()
			if e.Type == verbs.EventQPLastWQEReached && e.QP == qp {
				break
			}
		}
		if err := verbs.DrainRQ(a.qp); err != nil { // already in ERR: returns at once
			t.Fatal(err)
		}
	})
}

// TestRegistryRxe: an rxe device opened through verbs.Open is announced
// to clients, found by name, and retired when it closes.
func TestRegistryRxe(t *testing.T) {
	var removed []verbs.Device
	unreg := verbs.RegisterClient(&verbs.Client{Remove: func(d verbs.Device) { removed = append(removed, d) }})
	defer unreg()
	d, err := verbs.Open(verbs.DeviceConfig{Provider: "rxe", Name: "rxe-registry-test", Addr: testaddr.Next()})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := verbs.DeviceByName("rxe-registry-test"); err != nil || got != d {
		t.Fatalf("DeviceByName: %v %v", got, err)
	}
	d.Close()
	if !slices.Contains(removed, d) || slices.Contains(verbs.Devices(), d) {
		t.Errorf("closed device not retired (removed %v)", removed)
	}
}
