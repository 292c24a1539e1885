package iser

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"softib/rdmacm"
	"softib/storage/scsi"
	"softib/verbs"
)

// initiator is a minimal iSER initiator for the tests: one connection,
// login straight into the operational stage, SCSI commands with their
// data in one registered buffer per queue slot (as Linux's ib_iser
// registers one MR per command).
type initiator struct {
	t      testing.TB
	id     *rdmacm.ID
	qp     verbs.QP
	cq     verbs.CQ
	ctrl   verbs.MR // send and receive buffers
	data   verbs.MR // qd × slot bytes, remote read/write
	slot   int
	qd     int
	cmdSN  uint32
	statSN uint32
	itt    uint32
	maxCmd uint32
	rsp    map[uint32]rsp
}

type rsp struct {
	bhs  [BHSLen]byte
	data []byte
}

const initRecv = 64

func dialInitiator(t testing.TB, m *rdmacm.Manager, src netip.Addr, dst netip.AddrPort, qd, slot int) *initiator {
	t.Helper()
	ch := rdmacm.NewEventChannel()
	id, err := m.CreateID(ch, nil, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := func(want rdmacm.EventType) *rdmacm.Event {
		ev, err := ch.GetEvent(ctx)
		if err != nil || ev.Type != want {
			t.Fatalf("want %v, got %v %v", want, ev, err)
		}
		return ev
	}
	if err := id.ResolveAddr(netip.AddrPortFrom(src, 0), dst, time.Second); err != nil {
		t.Fatal(err)
	}
	next(rdmacm.EventAddrResolved)
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	next(rdmacm.EventRouteResolved)
	in := &initiator{t: t, id: id, qd: qd, slot: slot, rsp: map[uint32]rsp{}}
	if in.cq, err = id.Device().CreateCQ(verbs.CQAttr{CQE: 1024}); err != nil {
		t.Fatal(err)
	}
	if in.qp, err = id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: in.cq, RecvCQ: in.cq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: initRecv, MaxSendSGE: 2, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if in.ctrl, err = id.PD().RegMR(make([]byte, (initRecv+qd+8)*(HeadersLen+recvDSL)), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if in.data, err = id.PD().RegMR(scsi.AlignedBuf(qd*slot), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	for i := range initRecv {
		in.postRecv(i)
	}
	if err := id.Connect(&rdmacm.ConnParam{PrivateData: []byte{cmZBVANotSup | cmSendWInvNoSup, 0, 0, 0},
		ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := next(rdmacm.EventEstablished)
	if len(ev.Conn.PrivateData) < 4 || ev.Conn.PrivateData[0] != cmZBVANotSup|cmSendWInvNoSup {
		t.Fatalf("accept private data % x", ev.Conn.PrivateData)
	}
	t.Cleanup(func() { in.close() })
	return in
}

func (in *initiator) close() {
	in.id.Disconnect()
	in.qp.Drain()
	in.id.DestroyQP()
	in.ctrl.Dereg()
	in.data.Dereg()
	in.cq.Destroy()
	in.id.Destroy()
}

const ctrlSlot = HeadersLen + recvDSL

func (in *initiator) postRecv(i int) {
	if _, err := in.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{in.ctrl.SGE(i*ctrlSlot, ctrlSlot)}}}); err != nil {
		in.t.Fatal(err)
	}
}

// sendPDU sends bhs+data from send slot s (after the receive slots),
// with the STags of data slot ds for a read and/or write.
func (in *initiator) sendPDU(s int, bhs BHS, data []byte, wlen, rlen int, ds, immOff int) {
	off := (initRecv + s) * ctrlSlot
	b := in.ctrl.Buf()[off : off+ctrlSlot]
	var wstag, rstag uint32
	var wva, rva uint64
	if wlen > 0 {
		wstag, wva = in.data.RKey(), in.data.Addr()+uint64(ds*in.slot+immOff)
	}
	if rlen > 0 {
		rstag, rva = in.data.RKey(), in.data.Addr()+uint64(ds*in.slot)
	}
	Hdr(b).PutCtrl(wstag, wva, rstag, rva)
	copy(b[HdrLen:], bhs)
	BHS(b[HdrLen:]).SetDataLen(len(data))
	n := copy(b[HeadersLen:], data)
	if _, err := in.qp.PostSend([]verbs.SendWR{{ID: 1 << 40, Opcode: verbs.WRSend,
		SGL: []verbs.SGE{in.ctrl.SGE(off, HeadersLen+n)}}}); err != nil {
		in.t.Fatal(err)
	}
}

// wait polls until the response to itt arrived.
func (in *initiator) wait(itt uint32) rsp {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if r, ok := in.rsp[itt]; ok {
			delete(in.rsp, itt)
			return r
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("no response to ITT %#x", itt)
		}
		in.pollOnce()
	}
}

// login logs in with the keys open-iscsi sends for iSER.
func (in *initiator) login(iqn string, extra ...KV) (status uint16, keys map[string]string) {
	h := BHS(make([]byte, BHSLen))
	h[0] = OpLoginReq | opImmediate
	h[1] = flagFinal | StageOperational<<2 | StageFullFeature
	copy(h[8:14], []byte{0x80, 0, 0x23, 0x45, 0, 1})
	in.itt++
	h.PutU32(16, in.itt)
	h.PutU32(24, in.cmdSN)
	kvs := append([]KV{{"InitiatorName", "iqn.2026-11.org.softib:test-initiator"}, {"TargetName", iqn},
		{"SessionType", "Normal"}, {"AuthMethod", "None"}, {"DefaultTime2Wait", "2"}, {"DefaultTime2Retain", "0"},
		{"IFMarker", "No"}, {"OFMarker", "No"}, {"ErrorRecoveryLevel", "0"}, {"InitialR2T", "No"},
		{"ImmediateData", "Yes"}, {"MaxBurstLength", "16776192"}, {"FirstBurstLength", "262144"},
		{"MaxOutstandingR2T", "1"}, {"MaxConnections", "1"}, {"DataPDUInOrder", "Yes"},
		{"DataSequenceInOrder", "Yes"}, {"InitiatorRecvDataSegmentLength", "128"},
		{"TargetRecvDataSegmentLength", "262144"}, {"RDMAExtensions", "Yes"}}, extra...)
	in.sendPDU(0, h, AppendText(nil, kvs...), 0, 0, 0, 0)
	r := in.wait(in.itt)
	rb := BHS(r.bhs[:])
	status = uint16(rb[36])<<8 | uint16(rb[37])
	got, err := ParseText(r.data)
	if err != nil {
		in.t.Fatal(err)
	}
	keys = map[string]string{}
	for _, kv := range got {
		keys[kv.Key] = kv.Value
	}
	return status, keys
}

// cmd is one SCSI command for do.
type cmd struct {
	cdb   []byte
	write []byte // data-out (copied into the command's data slot)
	read  int    // data-in length
	imm   int    // how much of write goes as immediate data
	// results
	status   scsi.Status
	sense    scsi.Sense
	residual uint32
	flags    byte
	in       []byte
}

// do runs cmds with up to qd in flight and fills in their results.
func (in *initiator) do(lun uint64, cmds []*cmd) {
	type fl struct {
		c    *cmd
		slot int
	}
	inflight := map[uint32]fl{}
	free := make([]int, 0, in.qd)
	for i := range in.qd {
		free = append(free, i)
	}
	next := 0
	for next < len(cmds) || len(inflight) > 0 {
		for next < len(cmds) && len(free) > 0 && int32(in.maxCmd-in.cmdSN) >= 0 {
			c := cmds[next]
			next++
			s := free[len(free)-1]
			free = free[:len(free)-1]
			in.itt++
			h := BHS(make([]byte, BHSLen))
			h[0], h[1] = OpSCSICmd, flagFinal|0x01 // simple task attribute
			if c.write != nil {
				h[1] |= flagWrite
				copy(in.data.Buf()[s*in.slot:], c.write)
			}
			if c.read > 0 {
				h[1] |= flagRead
			}
			l := scsi.EncodeLUN(lun)
			copy(h[8:16], l[:])
			h.PutU32(16, in.itt)
			h.PutU32(20, uint32(len(c.write)+c.read))
			h.PutU32(24, in.cmdSN)
			in.cmdSN++
			copy(h[32:48], c.cdb)
			imm := c.write[:min(c.imm, len(c.write))]
			// The remote STag's VA skips what went as immediate data,
			// as Linux's iser_prepare_write_cmd does.
			in.sendPDU(1+s, h, imm, len(c.write)-len(imm), c.read, s, len(imm))
			inflight[in.itt] = fl{c, s}
		}
		// Wait for any one response.
		var got uint32
		for got == 0 {
			for itt := range inflight {
				if _, ok := in.rsp[itt]; ok {
					got = itt
					break
				}
			}
			if got == 0 {
				in.pollOnce()
			}
		}
		f := inflight[got]
		delete(inflight, got)
		r := in.wait(got)
		rb := BHS(r.bhs[:])
		if rb.Opcode() != OpSCSIRsp {
			in.t.Fatalf("opcode %#x for a command", rb.Opcode())
		}
		f.c.status, f.c.flags, f.c.residual = scsi.Status(rb[3]), rb[1], rb.U32(44)
		if len(r.data) >= 2 {
			f.c.sense, _ = scsi.ParseFixed(r.data[2:])
		}
		if f.c.read > 0 {
			f.c.in = append(f.c.in[:0], in.data.Buf()[f.slot*in.slot:f.slot*in.slot+f.c.read]...)
		}
		free = append(free, f.slot)
	}
}

func (in *initiator) pollOnce() {
	wcs := make([]verbs.WC, 16)
	n, err := in.cq.Poll(wcs)
	if err != nil {
		in.t.Fatal(err)
	}
	for _, wc := range wcs[:n] {
		if wc.Status != verbs.WCSuccess {
			in.t.Fatalf("initiator completion %+v", wc)
		}
		if wc.Opcode != verbs.WCRecv {
			continue
		}
		b := in.ctrl.Buf()[int(wc.WRID)*ctrlSlot : int(wc.WRID)*ctrlSlot+int(wc.ByteLen)]
		m, err := ParseMessage(b)
		if err != nil {
			in.t.Fatal(err)
		}
		var r rsp
		copy(r.bhs[:], m.BHS)
		r.data = append([]byte(nil), m.Data...)
		in.statSN = m.BHS.U32(24) + 1
		if mx := m.BHS.U32(32); int32(mx-in.maxCmd) > 0 {
			in.maxCmd = mx
		}
		in.rsp[m.BHS.ITT()] = r
		in.postRecv(int(wc.WRID))
	}
	if n == 0 {
		runtime.Gosched() // a sleep would cost a timer tick (~1 ms under load) per poll
	}
}

func (c *cmd) String() string {
	return fmt.Sprintf("cdb % x status %#x sense %+v", c.cdb, c.status, c.sense)
}
