package rxe_test

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"softib/internal/verbstest"
	"softib/rxe"
	"softib/udp"
	"softib/udp/udptest"
	"softib/verbs"
	"softib/wire/roce"
)

// classConn records the opcode, TOS and TTL of every datagram a device
// sends.
type classConn struct {
	udp.Conn
	mu   sync.Mutex
	sent []sentClass
}

type sentClass struct {
	op       roce.Opcode
	tos, ttl uint8
}

func (c *classConn) WriteBatch(msgs []udp.Message) (int, error) {
	c.mu.Lock()
	for _, m := range msgs {
		c.sent = append(c.sent, sentClass{roce.Opcode(m.Buf[0]), m.TOS, m.TTL})
	}
	c.mu.Unlock()
	return c.Conn.WriteBatch(msgs)
}

func (c *classConn) take() []sentClass {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	c.sent = nil
	return s
}

// connectPath is connect with the path's traffic class and hop limit.
func connectPath(t *testing.T, e, peer *end, tc, hop uint8) {
	t.Helper()
	mod := func(a verbs.QPAttr, m verbs.QPAttrMask) {
		t.Helper()
		if err := e.qp.Modify(&a, m); err != nil {
			t.Fatalf("modify to %v: %v", a.State, err)
		}
	}
	mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: verbstest.AllAccess},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	av := ahTo(peer.dev)
	av.GRH.TrafficClass, av.GRH.HopLimit = tc, hop
	mod(verbs.QPAttr{State: verbs.QPStateRTR, AH: av, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(), MaxDestRdAtomic: 16, MinRNRTimer: 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	mod(verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 17, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

// TestTrafficClass: every packet of an RC QP (requests, and the ACKs and
// read responses it answers with) carries its path's traffic class and
// hop limit, each side its own; UD requests carry their AH's, per work
// request within one batch.
func TestTrafficClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(5)
		defer nw.Close()
		open := func(ip string) (*rxe.Device, *classConn) {
			a := netip.MustParseAddrPort(ip + ":4791")
			c := &classConn{Conn: nw.Endpoint(a)}
			return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a.Addr()}, Conn: c}), c
		}
		da, ca := open("10.200.3.1")
		db, cb := open("10.200.3.2")
		a, b := newEnd(t, da, verbs.QPTypeRC, 64<<10), newEnd(t, db, verbs.QPTypeRC, 64<<10)
		connectPath(t, a, b, 0x62, 9) // DSCP 24, ECN ECT(0)
		connectPath(t, b, a, 0x8B, 17)
		postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(32<<10, 4096)}})
		postRecv(t, a, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{a.mr.SGE(32<<10, 4096)}})
		post(t, a,
			verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(4096, 3000)}, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()},
			verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 100)}})
		post(t, b, verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{b.mr.SGE(0, 100)}})
		for _, wc := range append(waitWC(t, a.cq, 4), waitWC(t, b.cq, 2)...) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		time.Sleep(time.Second) // virtual: the last ACKs
		check := func(name string, got []sentClass, tos, ttl uint8, ops ...roce.Opcode) {
			t.Helper()
			var seen []roce.Opcode
			for _, s := range got {
				if s.tos != tos || s.ttl != ttl {
					t.Errorf("%s: %v sent with TOS %#x TTL %d, want %#x %d", name, s.op, s.tos, s.ttl, tos, ttl)
				}
				seen = append(seen, s.op)
			}
			for _, op := range ops {
				if !slices.Contains(seen, op) {
					t.Errorf("%s: no %v among %v", name, op, seen)
				}
			}
		}
		check("a", ca.take(), 0x62, 9, roce.RCWriteFirst, roce.RCWriteLast, roce.RCReadRequest, roce.RCSendOnly, roce.RCAck)
		check("b", cb.take(), 0x8B, 17, roce.RCReadResponseFirst, roce.RCReadResponseLast, roce.RCSendOnly, roce.RCAck)

		// UD: the class of each work request's AH.
		ua, ub := newEnd(t, da, verbs.QPTypeUD, 8192), newEnd(t, db, verbs.QPTypeUD, 8192)
		connect(t, ua, ua, connOpts{})
		connect(t, ub, ub, connOpts{})
		ah := func(tc, hop uint8) verbs.AH {
			av := ahTo(db)
			av.GRH.TrafficClass, av.GRH.HopLimit = tc, hop
			h, err := ua.pd.CreateAH(&av)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		h1, h2 := ah(0x2E, 3), ah(0, 0)
		for k := range 3 {
			postRecv(t, ub, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{ub.mr.SGE(k*1024, 1024)}})
		}
		var wrs []verbs.SendWR
		for k, h := range []verbs.AH{h1, h2, h1} {
			wrs = append(wrs, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{ua.mr.SGE(0, 64)}, AH: h, RemoteQPN: ub.qp.QPN(), RemoteQKey: 0x11111111})
		}
		post(t, ua, wrs...)
		waitWC(t, ua.cq, 3)
		waitWC(t, ub.cq, 3)
		want := []sentClass{{roce.UDSendOnly, 0x2E, 3}, {roce.UDSendOnly, 0, 0}, {roce.UDSendOnly, 0x2E, 3}}
		if got := ca.take(); !slices.Equal(got, want) {
			t.Errorf("UD sends: %v, want %v", got, want)
		}
	})
}
