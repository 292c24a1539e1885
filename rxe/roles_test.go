package rxe

import (
	"bytes"
	"encoding/binary"
	"testing"

	"softib/verbs"
	"softib/wire/roce"
)

// Unit tests of the three roles, each driven alone by a scripted peer
// (roles_rig_test.go). Times are explicit: nothing here waits.

const rigNow = int64(1_000_000_000)

var ackUnlimited = roce.SyndromeACKUnlimited

// TestResponderSendSequence: in-order, duplicate and out-of-sequence
// SENDs and an RNR NAK, and what each one sends back.
func TestResponderSendSequence(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	stats := &q.dev.stats
	msg := []byte("scripted request")

	// In order: the data lands, the receive completes, the ACK carries
	// the request's PSN and MSN 1.
	r.postRecv(7, 0, 64)
	r.request(rigNow, roce.RCSendOnly, rigRQPSN, msg, nil)
	got := r.want("in-order SEND", expSyn(roce.RCAck, rigRQPSN, ackUnlimited))
	if got[0].msn != 1 {
		t.Fatalf("ACK MSN %d, want 1", got[0].msn)
	}
	r.wantWCs("in-order SEND", verbs.WC{WRID: 7, Opcode: verbs.WCRecv, ByteLen: uint32(len(msg))})
	if !bytes.Equal(r.buf[:len(msg)], msg) {
		t.Fatalf("received %q", r.buf[:len(msg)])
	}
	if uint32(q.resp.psn) != rigRQPSN+1 {
		t.Fatalf("expected PSN %d, want %d", q.resp.psn, rigRQPSN+1)
	}

	// Duplicate: re-ACKed with the last acknowledged PSN, nothing
	// delivered again.
	dup := stats.DupReq.Load()
	r.request(rigNow, roce.RCSendOnly, rigRQPSN, msg, nil)
	r.want("duplicate SEND", expSyn(roce.RCAck, rigRQPSN, ackUnlimited))
	r.wantWCs("duplicate SEND")
	if stats.DupReq.Load() != dup+1 {
		t.Fatal("duplicate not counted")
	}

	// Out of sequence: one PSN sequence error NAK carrying the expected
	// PSN for the gap, then silence until the gap is filled.
	oos := stats.OutOfSeqReq.Load()
	seqNAK := roce.NAKSyndrome(roce.NAKPSNSeqError)
	r.request(rigNow, roce.RCSendOnly, rigRQPSN+3, msg, nil)
	r.want("first SEND past a gap", expSyn(roce.RCAck, rigRQPSN+1, seqNAK))
	r.request(rigNow, roce.RCSendOnly, rigRQPSN+4, msg, nil)
	r.want("second SEND past the gap")
	if stats.OutOfSeqReq.Load() != oos+2 {
		t.Fatal("out-of-sequence requests not counted")
	}

	// No receive posted: an RNR NAK with the QP's min_rnr_timer; the
	// PSN is not consumed, so the retransmission is executed.
	rnr := stats.SndRNR.Load()
	r.request(rigNow, roce.RCSendOnly, rigRQPSN+1, msg, nil)
	r.want("SEND without a receive", expSyn(roce.RCAck, rigRQPSN+1, roce.RNRNAKSyndrome(rigMinRNR)))
	if stats.SndRNR.Load() != rnr+1 || uint32(q.resp.psn) != rigRQPSN+1 {
		t.Fatalf("after RNR: SndRNR %d, expected PSN %d", stats.SndRNR.Load()-rnr, q.resp.psn)
	}
	r.postRecv(8, 64, 64)
	r.request(rigNow, roce.RCSendOnly, rigRQPSN+1, msg, nil)
	got = r.want("SEND retried after RNR", expSyn(roce.RCAck, rigRQPSN+1, ackUnlimited))
	if got[0].msn != 2 {
		t.Fatalf("ACK MSN %d, want 2", got[0].msn)
	}
	r.wantWCs("SEND retried after RNR", verbs.WC{WRID: 8, Opcode: verbs.WCRecv, ByteLen: uint32(len(msg))})

	// A new gap NAKs again: the in-order SEND cleared the NAK state.
	r.request(rigNow, roce.RCSendOnly, rigRQPSN+5, msg, nil)
	r.want("a new gap", expSyn(roce.RCAck, rigRQPSN+2, seqNAK))
}

// TestResponderMultiPacket: a three-packet SEND fills one receive; a
// MIDDLE shorter than the MTU is dropped (BadLength) and a packet that
// breaks the message order NAKs invalid request and errors the QP.
func TestResponderMultiPacket(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	mtu := bytes.Repeat([]byte{0xA5}, 1024)
	r.postRecv(1, 0, 4096)
	r.request(rigNow, roce.RCSendFirst, rigRQPSN, mtu, nil)
	bad := r.q.dev.stats.BadLength.Load()
	r.request(rigNow, roce.RCSendMiddle, rigRQPSN+1, mtu[:100], nil)
	if r.q.dev.stats.BadLength.Load() != bad+1 {
		t.Fatal("short MIDDLE not dropped as BadLength")
	}
	r.request(rigNow, roce.RCSendMiddle, rigRQPSN+1, mtu, nil)
	r.request(rigNow, roce.RCSendLast, rigRQPSN+2, mtu[:10], nil)
	// One round: the three ACKs the packets asked for are one (sched.go).
	r.want("three-packet SEND", expSyn(roce.RCAck, rigRQPSN+2, ackUnlimited))
	r.wantWCs("three-packet SEND", verbs.WC{WRID: 1, Opcode: verbs.WCRecv, ByteLen: 2058})

	// A MIDDLE with no message in progress: invalid request, QP to ERR.
	r.request(rigNow, roce.RCSendMiddle, rigRQPSN+3, mtu, nil)
	r.want("MIDDLE out of order", expSyn(roce.RCAck, rigRQPSN+3, roce.NAKSyndrome(roce.NAKInvalidRequest)))
	if r.q.state != verbs.QPStateErr {
		t.Fatalf("QP in %v after an invalid request, want ERR", r.q.state)
	}
}

// TestResponderAckCoalescing: the ACKs that one round's requests ask for
// are one, for the newest PSN and MSN; a run is cut every maxPktPerAck
// PSNs; a NAK or a READ response goes out behind the pending ACK, in PSN
// order; rounds do not merge.
func TestResponderAckCoalescing(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	psn := uint32(rigRQPSN)
	write := func(n int) {
		for range n {
			r.request(rigNow, roce.RCWriteOnly, psn, []byte("12345678"), r.reth(int(psn%64)*8, 8))
			psn++
		}
	}
	write(10)
	got := r.want("10 WRITEs in one round", expSyn(roce.RCAck, psn-1, ackUnlimited))
	if got[0].msn != 10 || r.q.resp.ack.merged != 9 {
		t.Fatalf("coalesced ACK MSN %d, %d merged; want 10, 9", got[0].msn, r.q.resp.ack.merged)
	}
	write(1)
	r.want("the next round's WRITE", expSyn(roce.RCAck, psn-1, ackUnlimited))

	// A run longer than maxPktPerAck: one ACK per maxPktPerAck PSNs.
	first := psn
	write(maxPktPerAck + 6)
	r.want("a long run", expSyn(roce.RCAck, first+maxPktPerAck-1, ackUnlimited), expSyn(roce.RCAck, psn-1, ackUnlimited))

	// A WRITE then a READ: the WRITE's ACK leaves first.
	write(2)
	r.request(rigNow, roce.RCReadRequest, psn, nil, r.reth(0, 8))
	psn++
	r.want("WRITEs then a READ", expSyn(roce.RCAck, psn-2, ackUnlimited), exp(roce.RCReadResponseOnly, psn-1))

	// A duplicate in the same round as new WRITEs is covered by their ACK.
	write(1)
	r.request(rigNow, roce.RCWriteOnly, psn-1, []byte("12345678"), r.reth(0, 8))
	r.want("a WRITE and its duplicate", expSyn(roce.RCAck, psn-1, ackUnlimited))

	// WRITEs then a gap: the ACK, then the sequence NAK.
	write(3)
	r.request(rigNow, roce.RCWriteOnly, psn+5, []byte("12345678"), r.reth(0, 8))
	r.want("WRITEs then a gap", expSyn(roce.RCAck, psn-1, ackUnlimited), expSyn(roce.RCAck, psn, roce.NAKSyndrome(roce.NAKPSNSeqError)))
}

// TestACKPolicy: the decision table of sched.go's ACK policy.
func TestACKPolicy(t *testing.T) {
	for _, c := range []struct {
		by                       sendMode
		hdue                     uint8
		woke, pushed, resp, lone bool
		want                     respHold
	}{
		{byApp, 0, false, false, true, true, holdNone},
		{byApp, 0, true, true, true, true, holdNone}, // the poster is the application
		{byApp, hdueRecv, false, true, true, false, holdHandlers},
		{byDevice, hdueSend, true, true, true, false, holdHandlers},
		{byDevice, 0, true, true, true, true, holdYield},
		{byDevice, 0, true, true, false, true, holdYield}, // the reader gets the CPU either way
		{byDevice, 0, true, true, true, false, holdNone},  // a stream's receiving side: no yield
		{byDevice, 0, false, true, true, true, holdNone},
		{byPoller, 0, false, true, true, false, holdPoller},
		{byPoller, 0, false, true, false, true, holdNone},
		{byPoller, 0, true, false, true, true, holdNone}, // no completion: nobody will reply
		{byPoller, hdueSend, false, true, true, true, holdHandlers},
	} {
		if got := holdFor(c.by, c.hdue, c.woke, c.pushed, c.resp, c.lone); got != c.want {
			t.Errorf("holdFor(%d, %d, woke %v, pushed %v, resp %v, lone %v) = %d, want %d", c.by, c.hdue, c.woke, c.pushed, c.resp, c.lone, got, c.want)
		}
	}
}

// TestResponderReadReplay: a READ is answered from memory; duplicates of
// it, whole or from its middle (a requester resuming after a lost
// response), are replayed from the resource ring.
func TestResponderReadReplay(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	for i := range r.buf {
		r.buf[i] = byte(i * 7)
	}
	const n = 2500
	r.request(rigNow, roce.RCReadRequest, rigRQPSN, nil, r.reth(100, n))
	got := r.want("READ", exp(roce.RCReadResponseFirst, rigRQPSN), exp(roce.RCReadResponseMiddle, rigRQPSN+1),
		exp(roce.RCReadResponseLast, rigRQPSN+2))
	var data []byte
	for _, p := range got {
		data = append(data, p.pay...)
	}
	if !bytes.Equal(data, r.buf[100:100+n]) {
		t.Fatal("READ response data differs from memory")
	}
	if got[0].msn != 1 || got[2].msn != 1 {
		t.Fatalf("READ response MSNs %d, %d, want 1", got[0].msn, got[2].msn)
	}
	if uint32(r.q.resp.psn) != rigRQPSN+3 {
		t.Fatalf("expected PSN %d after a 3-packet READ", r.q.resp.psn)
	}

	// Memory changes after the READ executed: a replay still reads
	// memory (as rxe), the resource records where, not what.
	r.buf[100+1024] ^= 0xFF
	r.request(rigNow, roce.RCReadRequest, rigRQPSN+1, nil, r.reth(100+1024, n-1024))
	got = r.want("READ duplicate from its middle", exp(roce.RCReadResponseMiddle, rigRQPSN+1),
		exp(roce.RCReadResponseLast, rigRQPSN+2))
	if !bytes.Equal(append(got[0].pay, got[1].pay...), r.buf[100+1024:100+n]) {
		t.Fatal("replayed READ data differs from memory")
	}
	r.request(rigNow, roce.RCReadRequest, rigRQPSN, nil, r.reth(100, n))
	r.want("whole READ duplicate", exp(roce.RCReadResponseFirst, rigRQPSN), exp(roce.RCReadResponseMiddle, rigRQPSN+1),
		exp(roce.RCReadResponseLast, rigRQPSN+2))
	if uint32(r.q.resp.psn) != rigRQPSN+3 {
		t.Fatal("a replay moved the expected PSN")
	}
}

// TestResponderAtomicReplay: an atomic executes once; its duplicate is
// answered with the original value from the resource ring and does not
// touch memory again.
func TestResponderAtomicReplay(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	const off = 64
	binary.NativeEndian.PutUint64(r.buf[off:], 10)
	fetchAdd := func(psn uint32, add uint64) {
		r.request(rigNow, roce.RCFetchAdd, psn, nil, func(b []byte) {
			roce.AtomicETH(b[roce.BTHSize:]).Encode(&roce.AtomicETHFields{VA: r.mr.Addr() + off, RKey: r.mr.RKey(), SwapAdd: add})
		})
	}
	orig := func(p rigPkt) uint64 { return binary.BigEndian.Uint64(p.raw[roce.BTHSize+roce.AETHSize:]) }
	fetchAdd(rigRQPSN, 5)
	got := r.want("FETCH_ADD", expSyn(roce.RCAtomicAck, rigRQPSN, ackUnlimited))
	if orig(got[0]) != 10 || binary.NativeEndian.Uint64(r.buf[off:]) != 15 {
		t.Fatalf("FETCH_ADD returned %d, memory %d; want 10, 15", orig(got[0]), binary.NativeEndian.Uint64(r.buf[off:]))
	}
	fetchAdd(rigRQPSN, 5)
	got = r.want("FETCH_ADD duplicate", expSyn(roce.RCAtomicAck, rigRQPSN, ackUnlimited))
	if orig(got[0]) != 10 || binary.NativeEndian.Uint64(r.buf[off:]) != 15 {
		t.Fatalf("replay returned %d, memory %d; want 10, 15 (executed once)", orig(got[0]), binary.NativeEndian.Uint64(r.buf[off:]))
	}
	// A misaligned atomic is an invalid request.
	r.request(rigNow, roce.RCCompareSwap, rigRQPSN+1, nil, func(b []byte) {
		roce.AtomicETH(b[roce.BTHSize:]).Encode(&roce.AtomicETHFields{VA: r.mr.Addr() + off + 4, RKey: r.mr.RKey()})
	})
	r.want("misaligned atomic", expSyn(roce.RCAck, rigRQPSN+1, roce.NAKSyndrome(roce.NAKInvalidRequest)))
}

// TestResponderRemoteAccess: a WRITE with a bad rkey NAKs remote access
// error and moves the QP to ERR.
func TestResponderRemoteAccess(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	r.request(rigNow, roce.RCWriteOnly, rigRQPSN, []byte("x"), func(b []byte) {
		roce.RETH(b[roce.BTHSize:]).Encode(&roce.RETHFields{VA: r.mr.Addr(), RKey: r.mr.RKey() ^ 0x5500, DMALen: 1})
	})
	r.want("WRITE with a bad rkey", expSyn(roce.RCAck, rigRQPSN, roce.NAKSyndrome(roce.NAKRemoteAccessError)))
	if r.q.state != verbs.QPStateErr {
		t.Fatalf("QP in %v, want ERR", r.q.state)
	}
}

// TestCompleterImpliedAck: one ACK for a later PSN completes every
// earlier SEND/WRITE in order (an implied ACK), and the retransmit
// deadline stops once nothing is outstanding.
func TestCompleterImpliedAck(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{r.mr.SGE(0, 16)}})
	r.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{r.mr.SGE(0, 3000)},
		RemoteAddr: 0x1000, RKey: 0x42})
	q.req.run(rigNow, procBudget)
	got := r.want("SEND and WRITE", exp(roce.RCSendOnly, rigSQPSN), exp(roce.RCWriteFirst, rigSQPSN+1),
		exp(roce.RCWriteMiddle, rigSQPSN+2), exp(roce.RCWriteLast, rigSQPSN+3))
	if !got[0].bth.AckReq || got[1].bth.AckReq || !got[3].bth.AckReq {
		t.Fatal("AckReq must be on each message's last packet only")
	}
	if q.comp.deadline() != rigNow+r.rto() {
		t.Fatalf("retransmit deadline %d, want now+rto", q.comp.deadline())
	}
	r.ack(rigNow+1, rigSQPSN+1) // inside the WRITE: completes the SEND only
	r.wantWCs("ACK inside the WRITE", verbs.WC{WRID: 1, Opcode: verbs.WCSend, ByteLen: 16})
	if q.comp.deadline() != rigNow+1+r.rto() {
		t.Fatal("progress did not restart the retransmit deadline")
	}
	r.ack(rigNow+2, rigSQPSN+3)
	r.wantWCs("ACK of the WRITE's last PSN", verbs.WC{WRID: 2, Opcode: verbs.WCRDMAWrite, ByteLen: 3000})
	if uint32(q.comp.psn) != rigSQPSN+4 || q.comp.deadline() != 0 || q.sq.len() != 0 {
		t.Fatalf("after the last ACK: unacked PSN %d, deadline %d, SQ %d", q.comp.psn, q.comp.deadline(), q.sq.len())
	}
	// A duplicate ACK is stale.
	stale := q.dev.stats.StaleResp.Load()
	r.ack(rigNow+3, rigSQPSN+3)
	if q.dev.stats.StaleResp.Load() != stale+1 {
		t.Fatal("duplicate ACK not counted as stale")
	}
}

// TestCompleterSeqNAKRetry: a PSN sequence error NAK rewinds the
// requester to the NAKed PSN (go-back-N within a message), once per
// retry; later stale NAKs do not retry again.
func TestCompleterSeqNAKRetry(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	for i := range r.buf {
		r.buf[i] = byte(i / 1024)
	}
	r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{r.mr.SGE(0, 3000)},
		RemoteAddr: 0x1000, RKey: 0x42})
	q.req.run(rigNow, procBudget)
	r.want("WRITE", exp(roce.RCWriteFirst, rigSQPSN), exp(roce.RCWriteMiddle, rigSQPSN+1), exp(roce.RCWriteLast, rigSQPSN+2))
	retries := q.dev.stats.CompRetry.Load()
	seqNAK := roce.NAKSyndrome(roce.NAKPSNSeqError)
	r.response(rigNow, roce.RCAck, rigSQPSN+1, seqNAK, 0, nil)
	if q.comp.retryCnt != rigRetry-1 || q.dev.stats.CompRetry.Load() != retries+1 {
		t.Fatalf("retry count %d, retries %d after a NAK", q.comp.retryCnt, q.dev.stats.CompRetry.Load()-retries)
	}
	q.req.run(rigNow, procBudget)
	got := r.want("resend after the NAK", exp(roce.RCWriteMiddle, rigSQPSN+1), exp(roce.RCWriteLast, rigSQPSN+2))
	if !bytes.Equal(got[0].pay, r.buf[1024:2048]) {
		t.Fatal("resent MIDDLE carries the wrong data")
	}
	// The same NAK again (sent before the peer saw the resend): stale.
	stale := q.dev.stats.StaleResp.Load()
	r.response(rigNow, roce.RCAck, rigSQPSN+1, seqNAK, 0, nil)
	q.req.run(rigNow, procBudget)
	r.want("stale NAK")
	if q.dev.stats.StaleResp.Load() != stale+1 || q.dev.stats.CompRetry.Load() != retries+1 {
		t.Fatal("a stale NAK started another retry")
	}
	r.ack(rigNow, rigSQPSN+2)
	r.wantWCs("WRITE acknowledged", verbs.WC{WRID: 1, Opcode: verbs.WCRDMAWrite, ByteLen: 3000})
	if q.comp.retryCnt != rigRetry {
		t.Fatal("progress did not reload retry_cnt")
	}
}

// TestCompleterTimeoutRetry: the retransmit deadline resends from the
// oldest unacknowledged PSN and counts against retry_cnt; when it is
// spent the WQE completes RETRY_EXC_ERR and the QP errors.
func TestCompleterTimeoutRetry(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{r.mr.SGE(0, 100)}})
	now := rigNow
	q.req.run(now, procBudget)
	r.want("SEND", exp(roce.RCSendOnly, rigSQPSN))
	for i := range rigRetry {
		if q.nextDeadline() != now+r.rto() {
			t.Fatalf("retry %d: next deadline %d, want %d", i, q.nextDeadline(), now+r.rto())
		}
		q.checkTimers(now + r.rto() - 1)
		q.req.run(now+r.rto()-1, procBudget)
		r.want("before the deadline")
		now += r.rto()
		q.checkTimers(now)
		q.req.run(now, procBudget)
		r.want("after the deadline", exp(roce.RCSendOnly, rigSQPSN))
	}
	now += r.rto()
	q.checkTimers(now)
	q.comp.completeSends()
	r.wantWCs("retries exhausted", verbs.WC{WRID: 1, Status: verbs.WCRetryExcErr, Opcode: verbs.WCSend})
	if q.state != verbs.QPStateErr {
		t.Fatalf("QP in %v, want ERR", q.state)
	}
}

// TestCompleterRNRRetry: an RNR NAK pauses the requester for the NAK's
// timer and resends from its PSN, counting against rnr_retry.
func TestCompleterRNRRetry(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{r.mr.SGE(0, 100)}})
	now := rigNow
	q.req.run(now, procBudget)
	r.want("SEND", exp(roce.RCSendOnly, rigSQPSN))
	const code = 14 // 1.92 ms
	wait := int64(roce.RNRTimer(code).Duration())
	for i := range rigRNRRetry {
		r.response(now, roce.RCAck, rigSQPSN, roce.RNRNAKSyndrome(code), 0, nil)
		if q.comp.rnrRetry != uint8(rigRNRRetry-1-i) || q.comp.deadline() != 0 {
			t.Fatalf("RNR %d: rnr_retry %d, retransmit deadline %d", i, q.comp.rnrRetry, q.comp.deadline())
		}
		q.req.run(now+wait-1, procBudget)
		r.want("paused")
		if q.nextDeadline() != now+wait {
			t.Fatalf("next deadline %d, want the RNR pause's end %d", q.nextDeadline(), now+wait)
		}
		now += wait
		q.checkTimers(now)
		q.req.run(now, procBudget)
		r.want("resumed", exp(roce.RCSendOnly, rigSQPSN))
	}
	r.response(now, roce.RCAck, rigSQPSN, roce.RNRNAKSyndrome(code), 0, nil)
	r.wantWCs("rnr_retry exhausted", verbs.WC{WRID: 1, Status: verbs.WCRNRRetryExcErr, Opcode: verbs.WCSend})
	if q.state != verbs.QPStateErr {
		t.Fatalf("QP in %v, want ERR", q.state)
	}
}

// TestCompleterReadResume: a READ response with a gap retries once, and
// the requester resumes the READ at the missing packet (a new READ
// request for the rest, at that PSN).
func TestCompleterReadResume(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	const n = 2500
	r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{r.mr.SGE(0, n)},
		RemoteAddr: 0x10000, RKey: 0x42})
	q.req.run(rigNow, procBudget)
	got := r.want("READ request", exp(roce.RCReadRequest, rigSQPSN))
	if got[0].reth().DMALen() != n {
		t.Fatalf("READ DMA length %d", got[0].reth().DMALen())
	}
	src := bytes.Repeat([]byte{1, 2, 3, 4, 5}, n/5)
	r.response(rigNow, roce.RCReadResponseFirst, rigSQPSN, ackUnlimited, 1, src[:1024])
	// The MIDDLE is lost; the LAST shows the gap.
	r.response(rigNow, roce.RCReadResponseLast, rigSQPSN+2, ackUnlimited, 1, src[2048:])
	q.req.run(rigNow, procBudget)
	got = r.want("resumed READ", exp(roce.RCReadRequest, rigSQPSN+1))
	if got[0].reth().VA() != 0x10000+1024 || got[0].reth().DMALen() != n-1024 {
		t.Fatalf("resumed READ at VA %#x for %d bytes", got[0].reth().VA(), got[0].reth().DMALen())
	}
	r.response(rigNow, roce.RCReadResponseMiddle, rigSQPSN+1, ackUnlimited, 1, src[1024:2048])
	r.response(rigNow, roce.RCReadResponseLast, rigSQPSN+2, ackUnlimited, 1, src[2048:])
	r.wantWCs("READ done", verbs.WC{WRID: 1, Opcode: verbs.WCRDMARead, ByteLen: n})
	if !bytes.Equal(r.buf[:n], src) {
		t.Fatal("READ data differs")
	}
}

// TestRequesterWindow: the requester keeps at most 128 PSNs
// unacknowledged, requests an ACK every 65 packets and on a message's
// last one, and stops for its budget.
func TestRequesterWindow(t *testing.T) {
	r := newRoleRig(t, 256<<10)
	q := r.q
	const pkts = 200
	r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{r.mr.SGE(0, pkts*1024)},
		RemoteAddr: 0x1000, RKey: 0x42})
	if more := q.req.run(rigNow, 10); !more {
		t.Fatal("run with a budget of 10 did not report the budget spent")
	}
	if len(r.out()) != 10 {
		t.Fatal("budget of 10 not honoured")
	}
	if more := q.req.run(rigNow, procBudget); more {
		t.Fatal("a run stopped by the window reported the budget spent")
	}
	got := r.out()
	if len(got) != maxUnackedPSNs-10 {
		t.Fatalf("sent %d packets, want the window's %d", 10+len(got), maxUnackedPSNs)
	}
	if last := got[len(got)-1].bth.PSN; uint32(last) != rigSQPSN+maxUnackedPSNs-1 {
		t.Fatalf("last PSN %d", last)
	}
	for i, p := range got {
		if want := i+10 == maxPktPerAck; p.bth.AckReq != want {
			t.Fatalf("packet %d AckReq %v", i+10, p.bth.AckReq)
		}
	}
	q.req.run(rigNow, procBudget)
	r.want("window full")
	// An ACK inside the message opens the window by as much.
	r.ack(rigNow, rigSQPSN+49)
	q.req.run(rigNow, procBudget)
	got = r.out()
	if len(got) != 50 || uint32(got[0].bth.PSN) != rigSQPSN+maxUnackedPSNs || uint32(got[49].bth.PSN) != rigSQPSN+maxUnackedPSNs+49 {
		t.Fatalf("after the ACK: %d packets from PSN %d", len(got), got[0].bth.PSN)
	}
}

// TestRequesterRdAtomicLimit: no more READ/atomic WQEs in flight than
// max_rd_atomic; a completed one lets the next start.
func TestRequesterRdAtomicLimit(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	for i := range rigRdAtomic + 1 {
		r.postSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{r.mr.SGE(i*8, 8)}, RemoteAddr: 0x1000, RKey: 0x42})
	}
	q.req.run(rigNow, procBudget)
	r.want("READs up to max_rd_atomic", exp(roce.RCReadRequest, rigSQPSN), exp(roce.RCReadRequest, rigSQPSN+1),
		exp(roce.RCReadRequest, rigSQPSN+2), exp(roce.RCReadRequest, rigSQPSN+3))
	r.response(rigNow, roce.RCReadResponseOnly, rigSQPSN, ackUnlimited, 1, make([]byte, 8))
	r.wantWCs("first READ", verbs.WC{WRID: 0, Opcode: verbs.WCRDMARead, ByteLen: 8})
	q.req.run(rigNow, procBudget)
	r.want("the fifth READ", exp(roce.RCReadRequest, rigSQPSN+4))
}

// TestRequesterFence: a fenced WQE waits until every earlier WQE has
// completed.
func TestRequesterFence(t *testing.T) {
	r := newRoleRig(t, 1<<16)
	q := r.q
	r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{r.mr.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 0x42})
	r.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendFence, SGL: []verbs.SGE{r.mr.SGE(0, 8)}})
	q.req.run(rigNow, procBudget)
	r.want("READ, fenced SEND held", exp(roce.RCReadRequest, rigSQPSN))
	r.response(rigNow, roce.RCReadResponseOnly, rigSQPSN, ackUnlimited, 1, make([]byte, 8))
	q.req.run(rigNow, procBudget)
	r.want("fenced SEND after the READ", exp(roce.RCSendOnly, rigSQPSN+1))
}

// TestResponderUC: a UC message that lost a packet is dropped up to the
// next FIRST/ONLY, whose message then fills the receive WQE the broken
// one had taken; UC sends no ACKs.
func TestResponderUC(t *testing.T) {
	r := newRoleRigType(t, verbs.QPTypeUC, 1<<16)
	mtu := bytes.Repeat([]byte{0x5A}, 1024)
	r.postRecv(1, 0, 4096)
	dropped := r.q.dev.stats.UCDropped.Load()
	r.request(rigNow, roce.UCSendFirst, rigRQPSN, mtu, nil)
	// The MIDDLE at rigRQPSN+1 is lost.
	r.request(rigNow, roce.UCSendLast, rigRQPSN+2, mtu[:10], nil)
	if r.q.dev.stats.UCDropped.Load() != dropped+1 {
		t.Fatal("LAST after a lost MIDDLE not dropped")
	}
	r.wantWCs("broken UC message")
	msg := []byte("next message")
	r.request(rigNow, roce.UCSendOnly, rigRQPSN+3, msg, nil)
	r.wantWCs("UC message after the gap", verbs.WC{WRID: 1, Opcode: verbs.WCRecv, ByteLen: uint32(len(msg))})
	if !bytes.Equal(r.buf[:len(msg)], msg) {
		t.Fatalf("received %q", r.buf[:len(msg)])
	}
	r.want("UC")
}

// TestResponderUD: a UD SEND needs the QP's Q_Key; it lands behind the
// 40-byte GRH area with the sender's QPN.
func TestResponderUD(t *testing.T) {
	r := newRoleRigType(t, verbs.QPTypeUD, 1<<16)
	r.postRecv(1, 0, 1024)
	deth := func(qkey uint32) func(b []byte) {
		return func(b []byte) {
			roce.DETH(b[roce.BTHSize:]).Encode(&roce.DETHFields{QKey: qkey, SrcQP: 0x77})
		}
	}
	msg := []byte("datagram")
	bad := r.q.dev.stats.BadQKey.Load()
	r.request(rigNow, roce.UDSendOnly, 9, msg, deth(rigQKey+1))
	if r.q.dev.stats.BadQKey.Load() != bad+1 {
		t.Fatal("wrong Q_Key not counted")
	}
	r.wantWCs("wrong Q_Key")
	r.request(rigNow, roce.UDSendOnly, 10, msg, deth(rigQKey))
	got := r.wcs()
	if len(got) != 1 || got[0].WRID != 1 || got[0].Status != verbs.WCSuccess || got[0].ByteLen != uint32(40+len(msg)) ||
		got[0].SrcQP != 0x77 || got[0].Flags&verbs.WCFlagGRH == 0 {
		t.Fatalf("UD completion %+v", got)
	}
	if !bytes.Equal(r.buf[40:40+len(msg)], msg) {
		t.Fatalf("received %q behind the GRH area", r.buf[40:40+len(msg)])
	}
	r.want("UD")
}
