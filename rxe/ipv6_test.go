package rxe_test

import (
	"bytes"
	"net/netip"
	"testing"

	"softib/rxe"
	"softib/udp"
	"softib/verbs"
)

// TestIPv6Loopback runs RC and UD between two devices on ::1 (distinct
// ports, reached through AHAttr.DPort): IPv6 ICRCs are always verified,
// and UD receives carry the IPv6 header as their 40-byte GRH area.
func TestIPv6Loopback(t *testing.T) {
	lo := netip.IPv6Loopback()
	open := func() *rxe.Device {
		s, err := udp.Listen(netip.AddrPortFrom(lo, 0), &udp.Config{DisableGRO: true})
		if err != nil {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: lo}, Conn: s})
	}
	da, db := open(), open()
	if g, _ := da.QueryGID(1, 1); g != verbs.GIDFromAddr(lo) || g.IsIPv4() {
		t.Fatalf("GID[1] %v", g)
	}
	a, b := newEnd(t, da, verbs.QPTypeRC, 1<<16), newEnd(t, db, verbs.QPTypeRC, 1<<16)
	connect(t, a, b, connOpts{})
	connect(t, b, a, connOpts{})
	fill(a.buf[:5000], 9)
	postRecv(t, b, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 8192)}})
	post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 5000)}})
	waitWC(t, a.cq, 1)
	if wc := waitWC(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != 5000 {
		t.Fatalf("%+v", wc)
	}
	b.sync()
	if !bytes.Equal(b.buf[:5000], a.buf[:5000]) {
		t.Fatal("data differs")
	}
	if st := db.Stats(); st["ICRCIPv4ID"] != 0 || st["ICRCErr"] != 0 {
		t.Fatalf("ICRC stats %v", st)
	}

	ua, ub := newEnd(t, da, verbs.QPTypeUD, 4096), newEnd(t, db, verbs.QPTypeUD, 4096)
	connect(t, ua, ub, connOpts{})
	connect(t, ub, ua, connOpts{})
	ah, err := ua.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(lo), SGIDIndex: 1}, DPort: db.Addr().Port()})
	if err != nil {
		t.Fatal(err)
	}
	postRecv(t, ub, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{ub.mr.SGE(0, 200)}})
	post(t, ua, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("six"),
		AH: ah, RemoteQPN: ub.qp.QPN(), RemoteQKey: 0x11111111})
	waitWC(t, ua.cq, 1)
	wc := waitWC(t, ub.cq, 1)[0]
	ub.sync()
	if wc.Status != verbs.WCSuccess || wc.ByteLen != 43 || string(ub.buf[40:43]) != "six" || ub.buf[0]>>4 != 6 || ub.buf[6] != 17 ||
		netip.AddrFrom16([16]byte(ub.buf[8:24])) != lo || netip.AddrFrom16([16]byte(ub.buf[24:40])) != lo {
		t.Fatalf("UD over IPv6: %+v, GRH % x", wc, ub.buf[:40])
	}
}
