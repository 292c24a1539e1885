package rxe_test

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"softib/udp/udptest"
	"softib/verbs"
	"softib/wire/roce"
)

// recorder is a udptest filter that logs (and can drop) packets.
type recorder struct {
	mu   sync.Mutex
	seen []roce.BTHFields
	syn  []roce.Syndrome
	drop func(f roce.BTHFields, n int) bool
}

func (r *recorder) filter(src, dst netip.AddrPort, pkt []byte) udptest.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(pkt) < roce.BTHSize+roce.ICRCSize {
		return udptest.Pass
	}
	f := roce.BTH(pkt).Fields()
	n := len(r.seen)
	r.seen = append(r.seen, f)
	var s roce.Syndrome
	if f.Opcode.Is(roce.MaskAETH) {
		s = roce.AETH(pkt[roce.BTHSize:]).Syndrome()
	}
	r.syn = append(r.syn, s)
	if r.drop != nil && r.drop(f, n) {
		return udptest.Drop
	}
	return udptest.Pass
}

func TestWireReadReplayFromMiddle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		defer nw.Close()
		a, b := simPair(t, nw, verbs.QPTypeRC, connOpts{timeout: 10}, 1<<16)
		dropped := false
		rec := &recorder{drop: func(f roce.BTHFields, _ int) bool {
			if f.Opcode == roce.RCReadResponseMiddle && !dropped {
				dropped = true
				return true
			}
			return false
		}}
		nw.SetFilter(rec.filter)
		fill(b.buf[:4096], 8)
		b.sync()
		post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(8192, 4096)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCRDMARead)
		if !bytes.Equal(a.buf[8192:12288], b.buf[:4096]) {
			t.Fatal("data differs")
		}
		// Requests: READ, then the re-issued READ for the rest. Responses
		// after the re-issue start with MIDDLE (a replay from inside the
		// message, as rxe 6.1 sends it).
		var ops []roce.Opcode
		var reqPSN []uint32
		for _, f := range rec.seen {
			ops = append(ops, f.Opcode)
			if f.Opcode == roce.RCReadRequest {
				reqPSN = append(reqPSN, uint32(f.PSN))
			}
		}
		if len(reqPSN) < 2 || reqPSN[1] != reqPSN[0]+1 {
			t.Fatalf("READ requests at PSNs %v", reqPSN)
		}
		i := 0
		for ops[i] != roce.RCReadRequest || i == 0 {
			i++
		}
		if ops[i+1] != roce.RCReadResponseMiddle {
			t.Fatalf("replay starts with %v (packets %v)", ops[i+1], ops)
		}
	})
}

func TestWireRNRAndDuplicateAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(2)
		defer nw.Close()
		a, b := simPair(t, nw, verbs.QPTypeRC, connOpts{timeout: 10, minRNR: 5}, 1<<16)
		var mu sync.Mutex
		dropAck := false
		rec := &recorder{drop: func(f roce.BTHFields, _ int) bool {
			mu.Lock()
			defer mu.Unlock()
			if dropAck && f.Opcode == roce.RCAck {
				dropAck = false
				return true
			}
			return false
		}}
		nw.SetFilter(rec.filter)
		post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 10)}})
		for a.dev.Stats()["RcvRNR"] == 0 {
			time.Sleep(time.Millisecond) // virtual time
		}
		mu.Lock()
		dropAck = true // the ACK of the SEND that gets through is lost
		mu.Unlock()
		postRecv(t, b, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(0, 64)}})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
		wantOK(t, waitWC(t, b.cq, 1)[0], verbs.WCRecv)
		time.Sleep(100 * time.Millisecond)
		if n, _ := b.cq.Poll(make([]verbs.WC, 4)); n != 0 {
			t.Fatalf("%d extra receive completions", n)
		}
		var sendPSN uint32
		var rnr, acks []uint32
		rec.mu.Lock()
		for i, f := range rec.seen {
			switch {
			case f.Opcode == roce.RCSendOnly:
				sendPSN = uint32(f.PSN)
			case f.Opcode == roce.RCAck && rec.syn[i].IsRNRNAK():
				if rec.syn[i] != 0x25 {
					t.Errorf("RNR NAK syndrome %#x, want 0x25 (min_rnr_timer 5)", uint8(rec.syn[i]))
				}
				rnr = append(rnr, uint32(f.PSN))
			case f.Opcode == roce.RCAck:
				acks = append(acks, uint32(f.PSN))
			}
		}
		rec.mu.Unlock()
		// The lost ACK and the re-ACK of the duplicate both carry the
		// SEND's PSN (ePSN - 1 after it).
		if len(rnr) == 0 || rnr[0] != sendPSN || len(acks) != 2 || acks[0] != sendPSN || acks[1] != sendPSN {
			t.Fatalf("SEND PSN %d, RNR NAKs %v, ACKs %v", sendPSN, rnr, acks)
		}
		if b.dev.Stats()["DupReq"] != 1 || b.dev.Stats()["SndRNR"] == 0 {
			t.Fatalf("responder stats %v", b.dev.Stats())
		}
	})
}
