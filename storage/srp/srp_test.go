package srp

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"softib/internal/verbstest"
	"softib/rdmacm"
	"softib/storage/internal/targettest"
	"softib/storage/scsi"
	"softib/verbs"
)

// initiator is a minimal SRP initiator over the RDMA CM for the tests.
type initiator struct {
	t       testing.TB
	id      *rdmacm.ID
	qp      verbs.QP
	cq      verbs.CQ
	ctrl    verbs.MR
	data    verbs.MR
	reqLim  int
	rsp     map[uint64][]byte
	nRecv   int
	maxTI   int
	loginRs []byte
}

func (in *initiator) postRecv(i int) {
	if _, err := in.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{in.ctrl.SGE(i*256, 256)}}}); err != nil {
		in.t.Fatal(err)
	}
}

// dial logs in to tgt over the RDMA CM.
func dial(t testing.TB, m *rdmacm.Manager, src netip.Addr, tgt *Target, itIU uint32, dataLen int) (*initiator, *rdmacm.Event) {
	t.Helper()
	return dialPort(t, m, src, tgt.Addr(), tgt.TargetPortID(), itIU, dataLen)
}

// dialPort logs in to dst naming target port tport.
func dialPort(t testing.TB, m *rdmacm.Manager, src netip.Addr, dst netip.AddrPort, tport [16]byte, itIU uint32, dataLen int) (*initiator, *rdmacm.Event) {
	t.Helper()
	ch := rdmacm.NewEventChannel()
	id, err := m.CreateID(ch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := func() *rdmacm.Event {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	id.ResolveAddr(netip.AddrPortFrom(src, 0), dst, time.Second)
	if ev := next(); ev.Type != rdmacm.EventAddrResolved {
		t.Fatal(ev.Type)
	}
	id.ResolveRoute(time.Second)
	if ev := next(); ev.Type != rdmacm.EventRouteResolved {
		t.Fatal(ev.Type)
	}
	in := &initiator{t: t, id: id, rsp: map[uint64][]byte{}, nRecv: 32}
	in.cq, _ = id.Device().CreateCQ(verbs.CQAttr{CQE: 512})
	if in.qp, err = id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: in.cq, RecvCQ: in.cq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: in.nRecv, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	in.ctrl, _ = id.PD().RegMR(make([]byte, (in.nRecv+32)*256+int(itIU)), verbs.AccessLocalWrite)
	in.data, _ = id.PD().RegMR(make([]byte, dataLen), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	for i := range in.nRecv {
		in.postRecv(i)
	}
	req := make([]byte, LoginReqRDMALen)
	copy(req[0:8], "logintag")
	binary.BigEndian.PutUint16(req[8:], BufFmtDirect|BufFmtIndirect)
	req[11] = OpLoginReq
	binary.BigEndian.PutUint32(req[12:], itIU)
	copy(req[32:48], tport[:])
	if err := id.Connect(&rdmacm.ConnParam{PrivateData: req, ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := next()
	t.Cleanup(func() {
		id.Disconnect()
		in.qp.Drain()
		id.DestroyQP()
		id.Destroy()
	})
	if ev.Type == rdmacm.EventEstablished {
		in.loginRs = ev.Conn.PrivateData
		in.reqLim = int(binary.BigEndian.Uint32(in.loginRs[4:8]))
		in.maxTI = int(binary.BigEndian.Uint32(in.loginRs[20:24]))
	}
	return in, ev
}

func (in *initiator) poll() {
	wcs := make([]verbs.WC, 16)
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := in.cq.Poll(wcs)
		if err != nil {
			in.t.Fatal(err)
		}
		got := false
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				in.t.Fatalf("wc %+v", wc)
			}
			if wc.Opcode != verbs.WCRecv {
				continue
			}
			b := append([]byte(nil), in.ctrl.Buf()[int(wc.WRID)*256:int(wc.WRID)*256+int(wc.ByteLen)]...)
			in.rsp[binary.BigEndian.Uint64(b[8:16])] = b
			in.reqLim += int(binary.BigEndian.Uint32(b[4:8]))
			in.postRecv(int(wc.WRID))
			got = true
		}
		if got {
			return
		}
		if time.Now().After(deadline) {
			in.t.Fatal("no response")
		}
		runtime.Gosched() // a sleep would cost a timer tick (~1 ms under load) per poll
	}
}

// send posts an IU from control slot s (after the receive slots).
func (in *initiator) send(s int, iu []byte) {
	off := (in.nRecv + s) * 256
	n := copy(in.ctrl.Buf()[off:off+len(iu)], iu)
	in.reqLim--
	if _, err := in.qp.PostSend([]verbs.SendWR{{ID: 1 << 40, Opcode: verbs.WRSend, SGL: []verbs.SGE{in.ctrl.SGE(off, n)}}}); err != nil {
		in.t.Fatal(err)
	}
}

// cmdIU builds an SRP_CMD; descs are (offset in data MR, length) pairs:
// one gives a direct descriptor, more an indirect table in the IU.
func (in *initiator) cmdIU(tag uint64, cdb []byte, out bool, descs ...[2]int) []byte {
	iu := make([]byte, CmdLen, 256)
	iu[0] = OpCmd
	binary.BigEndian.PutUint64(iu[8:], tag)
	copy(iu[32:], cdb)
	put := func(off, n int) {
		var d [DescLen]byte
		binary.BigEndian.PutUint64(d[0:], in.data.Addr()+uint64(off))
		binary.BigEndian.PutUint32(d[8:], in.data.RKey())
		binary.BigEndian.PutUint32(d[12:], uint32(n))
		iu = append(iu, d[:]...)
	}
	var f byte
	switch len(descs) {
	case 0:
		return iu
	case 1:
		f = DescDirect
		put(descs[0][0], descs[0][1])
	default:
		f = DescIndirect
		var table [DescLen + 4]byte
		binary.BigEndian.PutUint32(table[12:], uint32(len(descs)*DescLen))
		total := 0
		for _, d := range descs {
			total += d[1]
		}
		binary.BigEndian.PutUint32(table[16:], uint32(total))
		iu = append(iu, table[:]...)
		for _, d := range descs {
			put(d[0], d[1])
		}
	}
	if out {
		iu[5], iu[6] = f<<4, byte(len(descs))
	} else {
		iu[5], iu[7] = f, byte(len(descs))
	}
	return iu
}

func (in *initiator) do(iu []byte) []byte {
	tag := binary.BigEndian.Uint64(iu[8:16])
	in.send(0, iu)
	for in.rsp[tag] == nil {
		in.poll()
	}
	r := in.rsp[tag]
	delete(in.rsp, tag)
	return r
}

// rw10 is the tests' READ(10)/WRITE(10) CDB.
var rw10 = targettest.RW10

func newEnv(t testing.TB) (*rdmacm.Manager, netip.Addr, *Target, *scsi.Target) {
	m, a, src := targettest.Net(t, verbstest.Loopback().Open)
	st := scsi.NewTarget()
	if _, err := st.AddLUN(0, scsi.NewMemBackend(8<<20), scsi.LUNConfig{MaxTransfer: maxXfer}); err != nil {
		t.Fatal(err)
	}
	tgt, err := NewTarget(Config{Addr: netip.AddrPortFrom(a, 0), Credits: 16, Logf: t.Logf}, m, st)
	if err != nil {
		t.Fatal(err)
	}
	targettest.Serve(t, tgt)
	return m, src, tgt, st
}

func TestLoginIOAndTMF(t *testing.T) {
	m, src, tgt, st := newEnv(t)
	in, ev := dial(t, m, src, tgt, 512, 1<<20)
	if ev.Type != rdmacm.EventEstablished || in.loginRs[0] != OpLoginRsp || string(in.loginRs[8:16]) != "logintag" {
		t.Fatalf("login: %v % x", ev.Type, in.loginRs)
	}
	if in.reqLim != 16 || in.maxTI != maxTIIU || binary.BigEndian.Uint32(in.loginRs[16:20]) != 512 {
		t.Fatalf("login response: credits %d max TI %d", in.reqLim, in.maxTI)
	}
	buf := in.data.Buf()
	for i := range 256 << 10 {
		buf[i] = byte(i * 13)
	}
	want := append([]byte(nil), buf[:256<<10]...)
	// Direct write of 128 KiB, indirect write of 3 pieces (128 KiB).
	if r := in.do(in.cmdIU(1, rw10(scsi.OpWrite10, 0, 256), true, [2]int{0, 128 << 10})); r[0] != OpRsp || r[19] != 0 {
		t.Fatalf("write: % x", r)
	}
	if r := in.do(in.cmdIU(2, rw10(scsi.OpWrite10, 256, 256), true, [2]int{128 << 10, 4096}, [2]int{132 << 10, 60 << 10}, [2]int{192 << 10, 64 << 10})); r[19] != 0 {
		t.Fatalf("indirect write: % x", r)
	}
	clear(buf[:512<<10])
	// Read both back in one indirect read into two pieces, then direct.
	if r := in.do(in.cmdIU(3, rw10(scsi.OpRead10, 0, 512), false, [2]int{256 << 10, 100 << 10}, [2]int{356 << 10, 156 << 10})); r[19] != 0 {
		t.Fatalf("indirect read: % x", r)
	}
	if !bytes.Equal(buf[256<<10:512<<10], want) {
		t.Fatal("indirect read data differs")
	}
	if r := in.do(in.cmdIU(4, rw10(scsi.OpRead10, 256, 256), false, [2]int{0, 128 << 10})); r[19] != 0 || !bytes.Equal(buf[:128<<10], want[128<<10:]) {
		t.Fatalf("direct read: % x", r[:36])
	}
	// CHECK CONDITION with sense; INQUIRY underflow.
	r := in.do(in.cmdIU(5, rw10(scsi.OpRead10, 1<<20, 1), false, [2]int{0, 512}))
	s, _ := scsi.ParseFixed(r[RspLen:])
	if r[19] != byte(scsi.StatusCheckCondition) || r[18]&RspFlagSnsValid == 0 || s != scsi.SenseLBAOutOfRange {
		t.Fatalf("out of range: % x", r)
	}
	r = in.do(in.cmdIU(6, []byte{scsi.OpInquiry, 0, 0, 0, 255, 0}, false, [2]int{0, 255}))
	if r[19] != 0 || r[18]&RspFlagDIUnder == 0 || binary.BigEndian.Uint32(r[24:]) != 255-66 {
		t.Fatalf("inquiry: % x", r[:36])
	}
	// Task management: abort of a finished task, LUN reset, unknown.
	for _, tc := range []struct{ fn, want byte }{{TskAbortTask, tmfComplete}, {TskLUNReset, tmfComplete}, {0x20, tmfNotSupported}} {
		iu := make([]byte, TskMgmtLen)
		iu[0] = OpTskMgmt
		binary.BigEndian.PutUint64(iu[8:], 100+uint64(tc.fn))
		iu[30] = tc.fn
		binary.BigEndian.PutUint64(iu[32:], 1)
		r := in.do(iu)
		if r[18]&RspFlagRspValid == 0 || r[RspLen+3] != tc.want {
			t.Fatalf("tmf %#x: % x", tc.fn, r)
		}
	}
	if in.reqLim != 16 {
		t.Fatalf("credits %d after all responses, want 16", in.reqLim)
	}
	if got := st.Stats.BytesWritten.Load(); got != 256<<10 {
		t.Fatalf("written %d", got)
	}
}

func TestLoginReject(t *testing.T) {
	m, src, tgt, _ := newEnv(t)
	_, ev := dial(t, m, src, tgt, maxITIU+1, 4096)
	if ev.Type != rdmacm.EventRejected || len(ev.Conn.PrivateData) < LoginRejLen || ev.Conn.PrivateData[0] != OpLoginRej ||
		binary.BigEndian.Uint32(ev.Conn.PrivateData[4:]) != RejITIULenTooLarge {
		t.Fatalf("%v % x", ev.Type, ev.Conn.PrivateData)
	}
	// A login naming another target port is refused, as ib_srpt does.
	_, ev = dialPort(t, m, src, tgt.Addr(), [16]byte{15: 1}, 512, 4096)
	if ev.Type != rdmacm.EventRejected || len(ev.Conn.PrivateData) < LoginRejLen ||
		binary.BigEndian.Uint32(ev.Conn.PrivateData[4:]) != RejUnableAssociate {
		t.Fatalf("wrong port: %v % x", ev.Type, ev.Conn.PrivateData)
	}
}

// FuzzParseCmd checks the SRP_CMD parser: descriptors stay inside the IU
// and never panic.
func FuzzParseCmd(f *testing.F) {
	in := &initiator{}
	in.data = fakeMR{}
	f.Add(in.cmdIU(1, rw10(scsi.OpRead10, 0, 8), false, [2]int{0, 4096}))
	f.Add(in.cmdIU(2, rw10(scsi.OpWrite10, 0, 8), true, [2]int{0, 2048}, [2]int{4096, 2048}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Cmd
		if err := ParseCmd(b, &c); err != nil {
			return
		}
		if c.External == nil {
			var sum uint64
			for _, d := range c.Descs {
				sum += uint64(d.Len)
			}
			if sum != c.Length {
				t.Fatalf("length %d, descriptors %d", c.Length, sum)
			}
		}
	})
}

// FuzzLoginAndTskMgmt checks the other decoders.
func FuzzLoginAndTskMgmt(f *testing.F) {
	f.Add(make([]byte, LoginReqRDMALen))
	f.Add(PutLoginReq(make([]byte, LoginReqLen), []byte("logintag"), 512, BufFmtDirect, 1, []byte("initiator.port.."), []byte("target...port...")))
	f.Add(make([]byte, TskMgmtLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		if l, err := ParseLoginReqRDMA(b); err == nil {
			_, _, _ = l.ITIULen(), l.BufFmt(), l.TargetPortID()
		}
		if l, err := ParseLoginReq(b); err == nil {
			f := l.fields()
			var again [LoginReqLen]byte
			g := LoginReq(PutLoginReq(again[:], f.tag, f.itIU, f.bufFmt, f.flags, l.InitiatorPortID(), f.tPort)).fields()
			if !bytes.Equal(g.tag, f.tag) || g.itIU != f.itIU || g.bufFmt != f.bufFmt || g.flags != f.flags ||
				!bytes.Equal(g.tPort, f.tPort) {
				t.Fatalf("SRP_LOGIN_REQ does not round-trip: %+v, %+v", f, g)
			}
		}
		if tm, err := ParseTskMgmt(b); err == nil {
			_, _, _ = tm.Func(), tm.TaskTag(), tm.LUN()
		}
		var o [LoginRspLen]byte
		if len(b) >= 8 && PutLoginRsp(o[:], b[:8], 1, 2, 3, 0)[0] != OpLoginRsp {
			t.Fatal("login rsp")
		}
	})
}

type fakeMR struct{ verbs.MR }

func (fakeMR) Addr() uint64 { return 0x1000 }
func (fakeMR) RKey() uint32 { return 7 }

// TestExternalDescriptorTable sends an indirect descriptor table that is
// only in the initiator's memory (the IU carries none of it, as ib_srp
// does with allow_ext_sg when the list outgrows the IU): the target
// fetches it by RDMA READ first.
func TestExternalDescriptorTable(t *testing.T) {
	m, src, tgt, _ := newEnv(t)
	in, ev := dial(t, m, src, tgt, 512, 1<<20)
	if ev.Type != rdmacm.EventEstablished {
		t.Fatal(ev.Type)
	}
	buf := in.data.Buf()
	for i := range 64 << 10 {
		buf[i] = byte(i * 7)
	}
	want := append([]byte(nil), buf[:64<<10]...)
	// The table at 512 KiB: four 16 KiB pieces of the first 64 KiB, in
	// reverse order.
	const tableOff = 512 << 10
	for i := range 4 {
		d := buf[tableOff+i*DescLen:]
		binary.BigEndian.PutUint64(d[0:], in.data.Addr()+uint64((3-i)*16<<10))
		binary.BigEndian.PutUint32(d[8:], in.data.RKey())
		binary.BigEndian.PutUint32(d[12:], 16<<10)
	}
	iu := func(tag uint64, op byte, out bool) []byte {
		b := make([]byte, CmdLen+DescLen+4)
		b[0] = OpCmd
		binary.BigEndian.PutUint64(b[8:], tag)
		copy(b[32:], rw10(op, 0, 128))
		if out {
			b[5] = DescIndirect << 4
		} else {
			b[5] = DescIndirect
		}
		binary.BigEndian.PutUint64(b[CmdLen:], in.data.Addr()+tableOff)
		binary.BigEndian.PutUint32(b[CmdLen+8:], in.data.RKey())
		binary.BigEndian.PutUint32(b[CmdLen+12:], 4*DescLen)
		binary.BigEndian.PutUint32(b[CmdLen+16:], 64<<10)
		return b
	}
	if r := in.do(iu(1, scsi.OpWrite10, true)); r[19] != 0 {
		t.Fatalf("write: % x", r)
	}
	clear(buf[:64<<10])
	if r := in.do(iu(2, scsi.OpRead10, false)); r[19] != 0 {
		t.Fatalf("read: % x", r)
	}
	if !bytes.Equal(buf[:64<<10], want) {
		t.Fatal("data differs after a write and a read through an external table")
	}
	// A table whose pieces do not add up to the total is refused.
	bad := iu(3, scsi.OpRead10, false)
	binary.BigEndian.PutUint32(bad[CmdLen+16:], 60<<10)
	if r := in.do(bad); r[19] != byte(scsi.StatusCheckCondition) {
		t.Fatalf("bad table: % x", r)
	}
}
