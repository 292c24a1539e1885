package srp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"softib/cm"
	"softib/internal/verbstest"
	"softib/storage/internal/targettest"
	"softib/storage/scsi"
	"softib/verbs"
	"softib/wire/mad"
)

// ibEnv is a target listening on both CMs of device a, and the IB CM of
// the initiator's device b.
type ibEnv struct {
	tgt      *Target
	st       *scsi.Target
	a, b     netip.Addr
	cmA, cmB *cm.CM
}

func newIBEnv(t testing.TB) *ibEnv {
	m, a, b, cms := targettest.NetIBCM(t, verbstest.Loopback().Open)
	st := scsi.NewTarget()
	if _, err := st.AddLUN(0, scsi.NewMemBackend(8<<20), scsi.LUNConfig{MaxTransfer: maxXfer}); err != nil {
		t.Fatal(err)
	}
	tgt, err := NewTarget(Config{Addr: netip.AddrPortFrom(a, 0), Credits: 16, Logf: t.Logf}, m, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.ListenIBCM(cms[0]); err != nil {
		t.Fatal(err)
	}
	targettest.Serve(t, tgt)
	return &ibEnv{tgt: tgt, st: st, a: a, b: b, cmA: cms[0], cmB: cms[1]}
}

// dialIBCM logs in over the IB CM the way Linux's ib_srp does without
// dest= (srp_send_req: SRP_LOGIN_REQ as REQ private data, 4 RDMA READs
// each way, retry counts 7), with a path it builds itself where ib_srp
// would ask the SA. It returns the initiator and the REP_RECEIVED or
// REJ_RECEIVED event.
func dialIBCM(t testing.TB, e *ibEnv, serviceID uint64, tport [16]byte, itIU uint32, dataLen int) (*initiator, *cm.Event) {
	t.Helper()
	g := e.cmB.Port().(*cm.GSI)
	dev := g.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	in := &initiator{t: t, rsp: map[uint64][]byte{}, nRecv: 32}
	in.cq, _ = dev.CreateCQ(verbs.CQAttr{CQE: 512})
	if in.qp, err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: in.cq, RecvCQ: in.cq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: in.nRecv, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	in.ctrl, _ = pd.RegMR(make([]byte, (in.nRecv+32)*256+int(itIU)), verbs.AccessLocalWrite)
	in.data, _ = pd.RegMR(make([]byte, dataLen), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err := in.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	for i := range in.nRecv {
		in.postRecv(i)
	}
	events := make(chan *cm.Event, 8)
	id, err := e.cmB.CreateID(func(id *cm.ID, ev *cm.Event) error {
		if ev.Type == cm.EventREPReceived {
			for _, s := range []verbs.QPState{verbs.QPStateRTR, verbs.QPStateRTS} {
				a, m, err := id.InitQPAttr(s)
				if err == nil {
					err = in.qp.Modify(&a, m)
				}
				if err != nil {
					ev.Err = err
					events <- ev
					return err
				}
			}
			if err := id.SendRTU(nil); err != nil {
				ev.Err = err
			}
		}
		events <- ev
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var iport [16]byte
	copy(iport[8:], "initiatr")
	req := PutLoginReq(make([]byte, LoginReqLen), []byte("logintag"), itIU, BufFmtDirect|BufFmtIndirect, 0, iport[:], tport[:])
	if err := id.SendREQ(&cm.REQParam{
		Primary:   mad.RoCEv2Path(mad.RoCEv2PathParams{Src: e.b, Dst: e.a}),
		SGIDIndex: g.GIDIndex(), ServiceID: serviceID, QPN: in.qp.QPN(), StartingPSN: 0x1234,
		ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7, PrivateData: req,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		id.SendDREQ(nil)
		in.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
		in.qp.Drain()
		id.Destroy()
		in.qp.Destroy()
		in.ctrl.Dereg()
		in.data.Dereg()
		in.cq.Destroy()
		pd.Dealloc()
	})
	var ev *cm.Event
	select {
	case ev = <-events:
	case <-time.After(30 * time.Second): // hang guard
		t.Fatal("no answer to the REQ")
	}
	if ev.Err != nil && ev.Type != cm.EventREJReceived {
		t.Fatalf("%v: %v", ev.Type, ev.Err)
	}
	if ev.Type == cm.EventREPReceived {
		in.loginRs = ev.PrivateData
		in.reqLim = int(binary.BigEndian.Uint32(in.loginRs[4:8]))
		in.maxTI = int(binary.BigEndian.Uint32(in.loginRs[20:24]))
	}
	return in, ev
}

// checkIO writes 256 KiB in direct and indirect pieces and reads it back
// through the channel.
func checkIO(t *testing.T, in *initiator) {
	t.Helper()
	buf := in.data.Buf()
	for i := range 256 << 10 {
		buf[i] = byte(i*29 + 3)
	}
	want := bytes.Clone(buf[:256<<10])
	if r := in.do(in.cmdIU(1, rw10(scsi.OpWrite10, 0, 256), true, [2]int{0, 128 << 10})); r[0] != OpRsp || r[19] != 0 {
		t.Fatalf("write: % x", r)
	}
	if r := in.do(in.cmdIU(2, rw10(scsi.OpWrite10, 256, 256), true, [2]int{128 << 10, 4096}, [2]int{132 << 10, 124 << 10})); r[19] != 0 {
		t.Fatalf("indirect write: % x", r)
	}
	clear(buf[:512<<10])
	if r := in.do(in.cmdIU(3, rw10(scsi.OpRead10, 0, 512), false, [2]int{256 << 10, 100 << 10}, [2]int{356 << 10, 156 << 10})); r[19] != 0 {
		t.Fatalf("read: % x", r)
	}
	if !bytes.Equal(buf[256<<10:512<<10], want) {
		t.Fatal("data read back over the IB CM channel differs")
	}
}

// TestIBCMLoginIO logs in over the IB CM with the target's service ID
// and target port ID, checks the SRP_LOGIN_RSP in the REP, and moves
// data both ways through the same channel code as the RDMA CM path.
func TestIBCMLoginIO(t *testing.T) {
	e := newIBEnv(t)
	in, ev := dialIBCM(t, e, e.tgt.ServiceID(), e.tgt.TargetPortID(), 512, 1<<20)
	if ev.Type != cm.EventREPReceived || in.loginRs[0] != OpLoginRsp || string(in.loginRs[8:16]) != "logintag" {
		t.Fatalf("login: %v % x", ev.Type, ev.PrivateData)
	}
	if in.reqLim != 16 || in.maxTI != maxTIIU || ev.REP.ResponderResources != 4 || ev.REP.InitiatorDepth != 4 {
		t.Fatalf("login response: credits %d max TI %d, REP %+v", in.reqLim, in.maxTI, ev.REP)
	}
	checkIO(t, in)
	if got := e.st.Stats.BytesWritten.Load(); got != 256<<10 {
		t.Fatalf("written %d", got)
	}
	if e.tgt.Stats.Logins.Load() != 1 {
		t.Fatalf("logins %d", e.tgt.Stats.Logins.Load())
	}
}

// TestIBCMLoginReject: a wrong target port ID gets SRP_LOGIN_REJ in a
// REJ (consumer defined); an unknown service ID the CM's "invalid
// service ID".
func TestIBCMLoginReject(t *testing.T) {
	e := newIBEnv(t)
	_, ev := dialIBCM(t, e, e.tgt.ServiceID(), [16]byte{15: 9}, 512, 4096)
	if ev.Type != cm.EventREJReceived || ev.REJ.Reason != mad.RejConsumerDefined || len(ev.PrivateData) < LoginRejLen ||
		ev.PrivateData[0] != OpLoginRej || binary.BigEndian.Uint32(ev.PrivateData[4:]) != RejUnableAssociate {
		t.Fatalf("wrong port: %v % x", ev.Type, ev.PrivateData)
	}
	_, ev = dialIBCM(t, e, e.tgt.ServiceID()+1, e.tgt.TargetPortID(), 512, 4096)
	if ev.Type != cm.EventREJReceived || ev.REJ.Reason != mad.RejInvalidServiceID {
		t.Fatalf("wrong service ID: %v %+v", ev.Type, ev.REJ)
	}
}

// dmGetReq sends a DM Get from the initiator's GSI to the target's and
// returns the response.
func dmGetReq(t *testing.T, e *ibEnv, attr mad.AttrID, mod uint32, method mad.Method) DMMAD {
	t.Helper()
	g := e.cmB.Port().(*cm.GSI)
	req := AppendDMGet(nil, 0, attr, mod)
	mad.Header(req).SetMethod(method)
	var to cm.Addr
	to.AH.GRH.DGID = verbs.GIDFromAddr(e.a)
	resp, err := g.Request(context.Background(), req, to, 2*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseDMMAD(resp)
	if err != nil {
		t.Fatal(err)
	}
	if h := m.Header(); h.Method() != mad.MethodGetResp || h.AttrID() != attr || h.AttrMod() != mod {
		t.Fatalf("response header %+v", h.Fields())
	}
	return m
}

// TestDMDiscoveryLogin is what srp_daemon does, from the Go side: Get
// IOUnitInfo, the IOControllerProfile of each present slot and its
// ServiceEntries, then a login with the target found there (service
// ID, id_ext from the "SRP.T10:" name, ioc_guid from the profile) and
// I/O. Then the statuses ib_srpt answers errors with.
func TestDMDiscoveryLogin(t *testing.T) {
	e := newIBEnv(t)
	cpi := dmGetReq(t, e, DMAttrClassPortInfo, 0, mad.MethodGet)
	if cpi.Header().Status() != 0 || cpi.Data()[0] != 1 || cpi.Data()[1] != DMClassVersion || cpi.Data()[7]&0x1f != 20 {
		t.Fatalf("ClassPortInfo: % x", cpi.Data()[:8])
	}
	iou, err := ParseIOUnitInfo(dmGetReq(t, e, DMAttrIOUnitInfo, 0, mad.MethodGet).Data())
	if err != nil {
		t.Fatal(err)
	}
	if iou.MaxControllers() != 16 || iou.ChangeID() != 1 {
		t.Fatalf("IOUnitInfo: %d controllers, change ID %d", iou.MaxControllers(), iou.ChangeID())
	}
	type found struct {
		serviceID, idExt, iocGUID uint64
	}
	var targets []found
	for slot := 1; slot <= iou.MaxControllers(); slot++ {
		if iou.Controller(slot) != IOCPresent {
			continue
		}
		pm := dmGetReq(t, e, DMAttrIOCProfile, uint32(slot), mad.MethodGet)
		p, _ := ParseIOCProfile(pm.Data())
		if pm.Header().Status() != 0 || p.IOClass() != SRPIOClass || p.Protocol() != SRPProtocol ||
			p.IOSubclass() != SRPIOSubclass || p.SendSize() != maxITIU || p.ServiceEntries() != 1 {
			t.Fatalf("IOControllerProfile slot %d: status %#x % x", slot, pm.Header().Status(), pm.Data()[:64])
		}
		for j := 0; j < p.ServiceEntries(); j += ServiceEntriesCount {
			hi := min(j+ServiceEntriesCount, p.ServiceEntries()) - 1
			sm := dmGetReq(t, e, DMAttrServiceEntries, ServiceEntriesMod(uint16(slot), uint8(j), uint8(hi)), mad.MethodGet)
			if sm.Header().Status() != 0 {
				t.Fatalf("ServiceEntries status %#x", sm.Header().Status())
			}
			se, _ := ParseServiceEntries(sm.Data())
			for k := 0; k <= hi-j; k++ {
				name, id := se.Entry(k)
				ext, ok := strings.CutPrefix(name, ServiceNamePrefix)
				x, err := strconv.ParseUint(ext, 16, 64)
				if !ok || err != nil {
					t.Fatalf("service entry %q", name)
				}
				targets = append(targets, found{id, x, p.GUID()})
			}
		}
	}
	if len(targets) != 1 {
		t.Fatalf("targets %+v", targets)
	}
	f := targets[0]
	// The add_target line srp_daemon would print.
	t.Logf("id_ext=%016x,ioc_guid=%016x,service_id=%016x", f.idExt, f.iocGUID, f.serviceID)
	var tport [16]byte
	binary.BigEndian.PutUint64(tport[:8], f.idExt)
	binary.BigEndian.PutUint64(tport[8:], f.iocGUID)
	in, ev := dialIBCM(t, e, f.serviceID, tport, 512, 1<<20)
	if ev.Type != cm.EventREPReceived {
		t.Fatalf("login with the discovered target: %v", ev.Type)
	}
	checkIO(t, in)

	for _, c := range []struct {
		attr   mad.AttrID
		mod    uint32
		method mad.Method
		want   uint16
	}{
		{DMAttrIOCProfile, 0, mad.MethodGet, DMStatusInvalidField},
		{DMAttrIOCProfile, 17, mad.MethodGet, DMStatusInvalidField},
		{DMAttrIOCProfile, 2, mad.MethodGet, DMStatusNoIOC},
		{DMAttrServiceEntries, ServiceEntriesMod(1, 0, 1), mad.MethodGet, DMStatusNoIOC},
		{DMAttrServiceEntries, ServiceEntriesMod(0, 0, 0), mad.MethodGet, DMStatusInvalidField},
		{0x0020, 0, mad.MethodGet, DMStatusUnsupportedMethodAttr},
		{DMAttrClassPortInfo, 0, mad.MethodSet, DMStatusUnsupportedMethodAttr},
	} {
		if m := dmGetReq(t, e, c.attr, c.mod, c.method); m.Header().Status() != c.want {
			t.Errorf("%v %v mod %#x: status %#x, want %#x", c.method, c.attr, c.mod, m.Header().Status(), c.want)
		}
	}
	if got := e.tgt.Stats.DMErrors.Load(); got != 7 {
		t.Errorf("DM errors %d, want 7", got)
	}
}

// FuzzDMAgent feeds the agent arbitrary MADs: it never panics, answers
// every DM Get/Set with a GetResp of the same TID, attribute and
// modifier, and the attribute views read any bytes.
func FuzzDMAgent(f *testing.F) {
	for _, a := range []mad.AttrID{DMAttrClassPortInfo, DMAttrIOUnitInfo, DMAttrIOCProfile, DMAttrServiceEntries, 0x99} {
		f.Add(AppendDMGet(nil, 7, a, 1))
	}
	f.Add(AppendDMGet(nil, 8, DMAttrServiceEntries, ServiceEntriesMod(1, 0, 0)))
	tgt := &Target{cfg: Config{IOCGUID: 0x1122, IDExt: 0x3344, Credits: 64}}
	info := tgt.dmInfo(verbs.DeviceAttr{VendorID: 0x2c9})
	unit := &dmUnit{changeID: 1}
	unit.slots[0] = &info
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := ParseIOCProfile(b); err == nil {
			_ = fmt.Sprint(p.GUID(), p.VendorID(), p.IDString(), p.SendSize(), p.ServiceEntries())
		}
		if s, err := ParseServiceEntries(b); err == nil {
			for i := range ServiceEntriesCount {
				s.Entry(i)
			}
		}
		if u, err := ParseIOUnitInfo(b); err == nil {
			for i := -1; i < 258; i++ {
				u.Controller(i)
			}
		}
		req, err := ParseDMMAD(b)
		if err != nil {
			return
		}
		var resp [mad.MADSize]byte
		st := dmAnswer(req, resp[:], unit)
		h := mad.Header(resp[:])
		if h.Method() != mad.MethodGetResp || h.Status() != st || h.TID() != req.Header().TID() ||
			h.AttrID() != req.Header().AttrID() || h.AttrMod() != req.Header().AttrMod() {
			t.Fatalf("response %+v to %+v", h.Fields(), req.Header().Fields())
		}
		if st == 0 && req.Header().AttrID() == DMAttrServiceEntries {
			if name, id := ServiceEntries(resp[DMDataOffset:]).Entry(0); name != SRPServiceName(0x3344) || id != 0x1122 {
				t.Fatalf("entry %q %#x", name, id)
			}
		}
	})
}
