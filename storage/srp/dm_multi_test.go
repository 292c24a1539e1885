package srp

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"softib/cm"
	"softib/storage/internal/targettest"
	"softib/storage/scsi"
	"softib/wire/mad"
)

// dmFound is a target srp_daemon's walk of a DM agent finds.
type dmFound struct {
	serviceID, idExt, iocGUID uint64
	slot                      int
}

// dmDiscover walks the I/O unit as srp_daemon does and returns its change
// ID and the targets of every present slot.
func dmDiscover(t *testing.T, e *ibEnv) (uint16, []dmFound) {
	t.Helper()
	iou, err := ParseIOUnitInfo(dmGetReq(t, e, DMAttrIOUnitInfo, 0, mad.MethodGet).Data())
	if err != nil {
		t.Fatal(err)
	}
	var out []dmFound
	for slot := 1; slot <= iou.MaxControllers(); slot++ {
		pm := dmGetReq(t, e, DMAttrIOCProfile, uint32(slot), mad.MethodGet)
		if iou.Controller(slot) != IOCPresent {
			if pm.Header().Status() != DMStatusNoIOC {
				t.Fatalf("empty slot %d: IOCProfile status %#x", slot, pm.Header().Status())
			}
			continue
		}
		p, _ := ParseIOCProfile(pm.Data())
		if pm.Header().Status() != 0 || p.IOClass() != SRPIOClass || p.ServiceEntries() != 1 {
			t.Fatalf("IOControllerProfile slot %d: status %#x", slot, pm.Header().Status())
		}
		sm := dmGetReq(t, e, DMAttrServiceEntries, ServiceEntriesMod(uint16(slot), 0, 0), mad.MethodGet)
		se, _ := ParseServiceEntries(sm.Data())
		name, id := se.Entry(0)
		x, err := strconv.ParseUint(strings.TrimPrefix(name, ServiceNamePrefix), 16, 64)
		if sm.Header().Status() != 0 || !strings.HasPrefix(name, ServiceNamePrefix) || err != nil {
			t.Fatalf("slot %d service entry %q status %#x", slot, name, sm.Header().Status())
		}
		out = append(out, dmFound{id, x, p.GUID(), slot})
	}
	return iou.ChangeID(), out
}

// TestDMTwoTargets: two targets on one device share its DM agent, each
// an I/O controller of its own slot with its profile and service entry;
// srp_daemon's walk finds both and a login to each works. When one
// closes its slot empties (the change ID moves on) and the other stays;
// when both are gone the device answers DM Gets as having no agent.
func TestDMTwoTargets(t *testing.T) {
	e := newIBEnv(t)
	st2 := scsi.NewTarget()
	if _, err := st2.AddLUN(0, scsi.NewMemBackend(8<<20), scsi.LUNConfig{MaxTransfer: maxXfer}); err != nil {
		t.Fatal(err)
	}
	tgt2, err := NewTarget(Config{Addr: netip.AddrPortFrom(e.a, DefaultPort+1), Credits: 16, Logf: t.Logf,
		IOCGUID: e.tgt.IOCGUID() + 1, IDExt: 0x5EC0D}, e.tgt.m, st2)
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt2.ListenIBCM(e.cmA); err != nil {
		t.Fatal(err)
	}
	targettest.Serve(t, tgt2)

	change, found := dmDiscover(t, e)
	want := []dmFound{
		{e.tgt.ServiceID(), e.tgt.IDExt(), e.tgt.IOCGUID(), 1},
		{tgt2.ServiceID(), 0x5EC0D, tgt2.IOCGUID(), 2},
	}
	if change != 2 || len(found) != 2 || found[0] != want[0] || found[1] != want[1] {
		t.Fatalf("change ID %d, found %+v, want 2, %+v", change, found, want)
	}
	for _, f := range found {
		var tport [16]byte
		binary.BigEndian.PutUint64(tport[:8], f.idExt)
		binary.BigEndian.PutUint64(tport[8:], f.iocGUID)
		in, ev := dialIBCM(t, e, f.serviceID, tport, 512, 1<<20)
		if ev.Type != cm.EventREPReceived {
			t.Fatalf("login with the target of slot %d: %v", f.slot, ev.Type)
		}
		checkIO(t, in)
	}
	if e.tgt.Stats.DMGets.Load() == 0 || tgt2.Stats.DMGets.Load() == 0 {
		t.Errorf("DM gets counted: %d, %d", e.tgt.Stats.DMGets.Load(), tgt2.Stats.DMGets.Load())
	}

	e.tgt.Close()
	change, found = dmDiscover(t, e)
	if change != 3 || len(found) != 1 || found[0] != want[1] {
		t.Fatalf("after closing the first: change ID %d, found %+v", change, found)
	}
	tgt2.Close()
	if m := dmGetReq(t, e, DMAttrIOUnitInfo, 0, mad.MethodGet); m.Header().Status() != DMStatusUnsupportedMethodAttr {
		t.Fatalf("no target left: IOUnitInfo status %#x", m.Header().Status())
	}
}
