package rxe_test

import (
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

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
