package rxe

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"sync"
	"testing"

	"softib/internal/seqnum"
	"softib/udp/udptest"
	"softib/verbs"
	"softib/wire/roce"
)

// roleRig drives one role of an RC QP alone, with a scripted peer: the
// test builds the peer's packets and hands them straight to the role
// (responder.respond, completer.complete), runs the requester itself,
// and reads what the QP sent from a filter on the simulated network.
// The QP's mutex is held from setup to cleanup, so neither its run loop
// nor the device's receive path takes a round in between: each step runs
// exactly the role code it names, at the time the test passes (now).
type roleRig struct {
	t    *testing.T
	dev  *Device
	q    *QP
	cq   *CQ
	mr   *MR
	buf  []byte
	peer netip.AddrPort

	mu   sync.Mutex // guards sent (the filter runs on the sending goroutine)
	sent [][]byte
}

// The rig's device and its peer live on a simulated network: no socket
// is opened, so fixed addresses collide with nothing on the host.
var (
	rigLocal = netip.MustParseAddrPort("10.202.0.1:4791")
	rigPeer  = netip.MustParseAddrPort("10.202.0.2:4791")
)

// Rig QP parameters.
const (
	rigDestQPN  = 0x99
	rigSQPSN    = 100 // first request PSN
	rigRQPSN    = 500 // first expected request PSN
	rigRetry    = 3
	rigRNRRetry = 2
	rigMinRNR   = 12 // min_rnr_timer code the responder's RNR NAKs carry
	rigTimeout  = 14 // local ACK timeout code (67 ms)
	rigRdAtomic = 4  // max_rd_atomic and max_dest_rd_atomic
)

// newRoleRig opens a device with one RC QP in RTS (path MTU 1024) and a
// registered buffer of bufSize bytes, and locks the QP.
func newRoleRig(t *testing.T, bufSize int) *roleRig {
	t.Helper()
	return newRoleRigType(t, verbs.QPTypeRC, bufSize)
}

// rigQKey is the UD rig QP's Q_Key.
const rigQKey = 0x1234

// newRoleRigType is newRoleRig for a QP of type typ (RC, UC or UD).
func newRoleRigType(t *testing.T, typ verbs.QPType, bufSize int) *roleRig {
	t.Helper()
	r := &roleRig{t: t, peer: rigPeer}
	nw := udptest.NewNetwork(1)
	t.Cleanup(func() { nw.Close() })
	nw.SetFilter(func(src, dst netip.AddrPort, pkt []byte) udptest.Verdict {
		r.mu.Lock()
		r.sent = append(r.sent, bytes.Clone(pkt))
		r.mu.Unlock()
		return udptest.Drop
	})
	dv, err := Open(Config{DeviceConfig: verbs.DeviceConfig{Addr: rigLocal.Addr()}, Conn: nw.Endpoint(rigLocal)})
	if err != nil {
		t.Fatal(err)
	}
	r.dev = dv.(*Device)
	t.Cleanup(func() { r.dev.Close() })
	pd, err := r.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cqv, err := r.dev.CreateCQ(verbs.CQAttr{CQE: 256})
	if err != nil {
		t.Fatal(err)
	}
	r.cq = cqv.(*CQ)
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	r.buf = make([]byte, bufSize)
	mrv, err := pd.RegMR(r.buf, all)
	if err != nil {
		t.Fatal(err)
	}
	r.mr = mrv.(*MR)
	qv, err := pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cqv, RecvCQ: cqv,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	r.q = qv.(*QP)
	mod := func(a verbs.QPAttr, m verbs.QPAttrMask) {
		t.Helper()
		if err := r.q.Modify(&a, m); err != nil {
			t.Fatal(err)
		}
	}
	if typ == verbs.QPTypeUD {
		mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: rigQKey},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
		mod(verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
		mod(verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: rigSQPSN}, verbs.QPAttrState|verbs.QPAttrSQPSN)
	} else {
		rtr := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		rts := verbs.QPAttrState | verbs.QPAttrSQPSN
		if typ == verbs.QPTypeRC {
			rtr |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
			rts |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		av := verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(rigPeer.Addr()), SGIDIndex: 1}}
		mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: all},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		mod(verbs.QPAttr{State: verbs.QPStateRTR, AH: av, PathMTU: verbs.MTU1024, DestQPN: rigDestQPN, RQPSN: rigRQPSN,
			MaxDestRdAtomic: rigRdAtomic, MinRNRTimer: rigMinRNR}, rtr)
		mod(verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: rigSQPSN, Timeout: rigTimeout, RetryCnt: rigRetry,
			RNRRetry: rigRNRRetry, MaxRdAtomic: rigRdAtomic}, rts)
	}
	// Hold the engine from here on; cleanups run last-in first-out, so
	// the QP is unlocked before the device closes.
	r.q.mu.Lock()
	t.Cleanup(func() { r.q.mu.Unlock() })
	return r
}

// rto is the rig's retransmit timeout.
func (r *roleRig) rto() int64 { return int64(ackTimeout(rigTimeout)) }

// rigPkt is a decoded packet the QP sent.
type rigPkt struct {
	bth roce.BTHFields
	syn roce.Syndrome // AETH syndrome (responses)
	msn seqnum.MSN    // AETH MSN
	raw []byte        // whole datagram
	pay []byte        // payload (pad and ICRC stripped)
}

func (p rigPkt) reth() roce.RETH { return roce.RETH(p.raw[p.bth.Opcode.Info().Offset(roce.HdrRETH):]) }

// out ends the round as process and unlockAndSend do (the pending
// coalesced ACK is built, both send lanes are flushed, with the QP
// mutex still held) and returns the packets sent since the last call.
func (r *roleRig) out() []rigPkt {
	r.t.Helper()
	q := r.q
	q.resp.flushAck()
	if q.reqTx.take() {
		q.reqTx.send(q)
	}
	if q.respTx.take() {
		q.respTx.send(q)
	}
	r.mu.Lock()
	sent := r.sent
	r.sent = nil
	r.mu.Unlock()
	var ps []rigPkt
	for _, b := range sent {
		if len(b) < roce.BTHSize+roce.ICRCSize {
			r.t.Fatalf("short packet sent: % x", b)
		}
		// Every packet leaves with a valid ICRC.
		if got, want := binary.LittleEndian.Uint32(b[len(b)-4:]), roce.ICRCFor(rigLocal, rigPeer, b); got != want {
			r.t.Fatalf("sent packet with ICRC %#x, want %#x", got, want)
		}
		p := rigPkt{bth: roce.BTH(b).Fields(), raw: b}
		op := p.bth.Opcode
		if o := op.Info().Offset(roce.HdrAETH); o >= 0 {
			a := roce.AETH(b[o:])
			p.syn, p.msn = a.Syndrome(), a.MSN()
		}
		hl := op.HeaderLen()
		p.pay = b[hl : len(b)-roce.ICRCSize-int(p.bth.PadCnt)]
		ps = append(ps, p)
	}
	return ps
}

// want checks the opcodes and PSNs of what the QP sent since the last
// check.
func (r *roleRig) want(what string, want ...rigExp) []rigPkt {
	r.t.Helper()
	got := r.out()
	if len(got) != len(want) {
		var s []string
		for _, p := range got {
			s = append(s, p.bth.Opcode.String()+"/"+strconv.Itoa(int(p.bth.PSN)))
		}
		r.t.Fatalf("%s: sent %d packets %v, want %d", what, len(got), s, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.bth.Opcode != w.op || uint32(g.bth.PSN) != w.psn || g.bth.DestQP != rigDestQPN {
			r.t.Fatalf("%s: packet %d is %v PSN %d to QP %#x, want %v PSN %d to %#x", what, i,
				g.bth.Opcode, uint32(g.bth.PSN), g.bth.DestQP, w.op, w.psn, rigDestQPN)
		}
		if w.syn != nil && g.syn != *w.syn {
			r.t.Fatalf("%s: packet %d syndrome %v, want %v", what, i, g.syn, *w.syn)
		}
	}
	return got
}

// rigExp is an expected packet: opcode, PSN and, if syn is set, AETH
// syndrome.
type rigExp struct {
	op  roce.Opcode
	psn uint32
	syn *roce.Syndrome
}

func exp(op roce.Opcode, psn uint32) rigExp { return rigExp{op: op, psn: psn} }

func expSyn(op roce.Opcode, psn uint32, s roce.Syndrome) rigExp {
	return rigExp{op: op, psn: psn, syn: &s}
}

// peerPkt builds a packet from the scripted peer: opcode op at PSN psn
// with a payload of pay, extension headers written by ext. The
// AckReq bit is set, as a requester sets it on a message's last packet.
func (r *roleRig) peerPkt(op roce.Opcode, psn uint32, pay []byte, ext func(b []byte)) *packet {
	r.t.Helper()
	hl := op.HeaderLen()
	pad := -len(pay) & 3
	p := r.dev.getPacket()
	p.n = hl + len(pay) + pad + roce.ICRCSize
	b := p.buf[:p.n]
	clear(b)
	roce.BTH(b).Encode(&roce.BTHFields{Opcode: op, PadCnt: uint8(pad), PKey: DefaultPKey, DestQP: r.q.qpn,
		AckReq: true, PSN: seqnum.NewPSN(psn)})
	if ext != nil {
		ext(b)
	}
	copy(b[hl:], pay)
	binary.LittleEndian.PutUint32(b[len(b)-4:], roce.ICRCFor(rigPeer, rigLocal, b))
	p.addr = r.peer
	if err := p.parse(); err != nil {
		r.t.Fatalf("scripted %v: %v", op, err)
	}
	return p
}

// request hands a scripted request to the responder alone.
func (r *roleRig) request(now int64, op roce.Opcode, psn uint32, pay []byte, ext func(b []byte)) {
	r.t.Helper()
	p := r.peerPkt(op, psn, pay, ext)
	r.q.resp.respond(p, now)
	r.dev.putPacket(p)
}

// response hands a scripted response to the completer alone, then
// retires what it finished (as a round does after its packets).
func (r *roleRig) response(now int64, op roce.Opcode, psn uint32, syn roce.Syndrome, msn uint32, pay []byte) {
	r.t.Helper()
	p := r.peerPkt(op, psn, pay, func(b []byte) {
		if o := op.Info().Offset(roce.HdrAETH); o >= 0 {
			roce.AETH(b[o:]).Encode(&roce.AETHFields{Syndrome: syn, MSN: seqnum.NewMSN(msn)})
		}
	})
	r.q.comp.complete(p, now)
	r.dev.putPacket(p)
	r.q.comp.completeSends()
}

// ack is a positive ACK with unlimited credits.
func (r *roleRig) ack(now int64, psn uint32) {
	r.t.Helper()
	r.response(now, roce.RCAck, psn, roce.SyndromeACKUnlimited, 0, nil)
}

// postSend posts a WR through the verbs checks (QP.postOne, mu held) but
// runs nothing: the test runs the requester itself.
func (r *roleRig) postSend(wr verbs.SendWR) {
	r.t.Helper()
	if err := r.q.postOne(&wr); err != nil {
		r.t.Fatal(err)
	}
}

// postRecv queues a receive WQE as PostRecv does (mu held).
func (r *roleRig) postRecv(id uint64, off, n int) {
	r.t.Helper()
	e := r.q.rq.push()
	if e == nil {
		r.t.Fatal("RQ full")
	}
	e.id = id
	e.sgl = append(e.sgl[:0], r.mr.SGE(off, n))
}

// wcs returns the completions queued on the CQ.
func (r *roleRig) wcs() []verbs.WC {
	r.t.Helper()
	w := make([]verbs.WC, 64)
	n, err := r.cq.poll(w)
	if err != nil {
		r.t.Fatal(err)
	}
	return w[:n]
}

// wantWCs checks the completions queued since the last check (WRID,
// status, opcode, and byte length for successful ones when n >= 0).
func (r *roleRig) wantWCs(what string, want ...verbs.WC) {
	r.t.Helper()
	got := r.wcs()
	if len(got) != len(want) {
		r.t.Fatalf("%s: %d completions %+v, want %d", what, len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.WRID != w.WRID || g.Status != w.Status || g.Opcode != w.Opcode || (w.Status == verbs.WCSuccess && g.ByteLen != w.ByteLen) {
			r.t.Fatalf("%s: completion %d = {id %d %v %v len %d}, want {id %d %v %v len %d}", what, i,
				g.WRID, g.Status, g.Opcode, g.ByteLen, w.WRID, w.Status, w.Opcode, w.ByteLen)
		}
	}
}

// reth writes a RETH (VA as an offset into the rig's MR).
func (r *roleRig) reth(off int, n uint32) func(b []byte) {
	return func(b []byte) {
		op := roce.BTH(b).Opcode()
		roce.RETH(b[op.Info().Offset(roce.HdrRETH):]).Encode(&roce.RETHFields{
			VA: r.mr.Addr() + uint64(off), RKey: r.mr.RKey(), DMALen: n})
	}
}
