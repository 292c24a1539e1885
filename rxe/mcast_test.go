package rxe_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"softib/rxe"
	"softib/udp"
	"softib/udp/udptest"
	"softib/verbs"
)

// mcastQKey is the Q_Key the RDMA CM gives UDP port space groups.
const mcastQKey = 0x01234567

// TestMcastFanOut: a UD send to a multicast AH leaves for the group
// address with destination QPN 0xFFFFFF, and a datagram arriving for a
// group reaches every QP attached to it, on every device, and no other;
// detached and destroyed QPs stop receiving, the last one leaving drops
// the group.
func TestMcastFanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(3)
		defer nw.Close()
		group := netip.MustParseAddr("239.1.2.3")
		mgid := verbs.GIDFromAddr(group)
		tap, err := nw.Listen(netip.AddrPortFrom(group, rxe.RoCEv2Port))
		if err != nil {
			t.Fatal(err)
		}
		dev := func(ip string) *rxe.Device {
			a := netip.MustParseAddrPort(ip + ":4791")
			return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a.Addr()}, Conn: nw.Endpoint(a)})
		}
		da, db, dc := dev("10.200.1.1"), dev("10.200.1.2"), dev("10.200.1.3")
		ud := func(d *rxe.Device) *end {
			e := newEnd(t, d, verbs.QPTypeUD, 64<<10)
			connect(t, e, e, connOpts{qkey: mcastQKey})
			return e
		}
		a, b1, b2, b3, c1 := ud(da), ud(db), ud(db), ud(db), ud(dc)
		for _, e := range []*end{b1, b2, c1} {
			if err := verbs.AttachMcast(e.qp, mgid, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := verbs.AttachMcast(b1.qp, mgid, 0); err != nil {
			t.Errorf("second attach: %v, want nil (rxe_attach_mcg)", err)
		}
		for _, e := range []*end{b1, b2, b3, c1} {
			for k := range 8 {
				postRecv(t, e, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{e.mr.SGE(k*1024, 1024)}})
			}
		}
		ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: mgid, SGIDIndex: 1}})
		if err != nil {
			t.Fatal(err)
		}
		fill(a.buf, 9)
		send := func(k int) []byte {
			post(t, a, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSendWithImm, ImmData: uint32(k), Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.mr.SGE(k*100, 100)}, AH: ah, RemoteQPN: verbs.MulticastQPN, RemoteQKey: mcastQKey})
			if wc := waitWC(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("send %d: %+v", k, wc)
			}
			msgs := make([]udp.Message, 1)
			msgs[0].Buf = make([]byte, 4096)
			n, err := tap.ReadBatch(msgs)
			if err != nil || n != 1 {
				t.Fatalf("group address got %d datagrams: %v", n, err)
			}
			return msgs[0].Buf[:msgs[0].N]
		}
		inject := func(k int, devs ...*rxe.Device) {
			pkt := send(k)
			for _, d := range devs {
				if !rxe.McastInject(d, mgid, pkt, da.Addr()) {
					t.Fatalf("%s has no group %v", d.Name(), mgid)
				}
			}
		}
		check := func(e *end, name string, want ...int) {
			t.Helper()
			time.Sleep(time.Millisecond) // virtual: let the QPs run
			wcs := make([]verbs.WC, 16)
			n, _ := e.cq.Poll(wcs)
			if n != len(want) {
				t.Fatalf("%s: %d receives, want %d (%v)", name, n, len(want), e.dev.Stats())
			}
			for i, wc := range wcs[:n] {
				k := want[i]
				if wc.Status != verbs.WCSuccess || wc.ImmData != uint32(k) || wc.SrcQP != a.qp.QPN() || wc.ByteLen != 40+100 {
					t.Fatalf("%s receive %d: %+v", name, i, wc)
				}
				// The GRH area holds the datagram's IPv4 header, as
				// Linux rxe copies it: destination the group (the
				// MGID), not the receiving device.
				ip := e.buf[int(wc.WRID)*1024+20 : int(wc.WRID)*1024+40]
				if g, s := group.As4(), da.Addr().Addr().As4(); !bytes.Equal(ip[16:20], g[:]) || !bytes.Equal(ip[12:16], s[:]) {
					t.Fatalf("%s receive %d: GRH area IPv4 header % x, want %v -> %v", name, i, ip, da.Addr().Addr(), group)
				}
				got := e.buf[int(wc.WRID)*1024+40 : int(wc.WRID)*1024+140]
				if !bytes.Equal(got, a.buf[k*100:k*100+100]) {
					t.Fatalf("%s message %d: data differs", name, k)
				}
			}
		}
		inject(0, db, dc)
		inject(1, db, dc)
		check(b1, "b1", 0, 1)
		check(b2, "b2", 0, 1)
		check(b3, "b3 (not attached)")
		check(c1, "c1", 0, 1)

		if err := verbs.DetachMcast(b2.qp, mgid, 0); err != nil {
			t.Fatal(err)
		}
		if err := verbs.DetachMcast(b2.qp, mgid, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("second detach: %v, want ErrInvalidArgument", err)
		}
		if err := c1.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
		if g := dc.McastGroups(); len(g) != 0 {
			t.Errorf("device c still has groups %v after its only member was destroyed", g)
		}
		inject(2, db)
		check(b1, "b1", 2)
		check(b2, "b2 (detached)")
		if rxe.McastInject(dc, mgid, send(3), da.Addr()) {
			t.Error("device c accepted a datagram for a group it left")
		}
	})
}

// notAttacher is a QP of a provider without multicast.
type notAttacher struct{ verbs.QP }

// TestMcastAttachErrors: the checks ibv_attach_mcast callers rely on.
func TestMcastAttachErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := udptest.NewNetwork(4)
		defer nw.Close()
		a := netip.MustParseAddrPort("10.200.2.1:4791")
		d := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a.Addr()}, Conn: nw.Endpoint(a)})
		rc := newEnd(t, d, verbs.QPTypeRC, 4096)
		ud := newEnd(t, d, verbs.QPTypeUD, 4096)
		mgid := verbs.GIDFromAddr(netip.MustParseAddr("239.9.9.9"))
		for _, c := range []struct {
			name string
			qp   verbs.QP
			gid  verbs.GID
			want error
		}{
			{"RC QP", rc.qp, mgid, verbs.ErrInvalidArgument},
			{"unicast GID", ud.qp, verbs.GIDFromAddr(netip.MustParseAddr("10.1.1.1")), verbs.ErrInvalidArgument},
			{"IPv6 GID on an IPv4 device", ud.qp, verbs.GIDFromAddr(netip.MustParseAddr("ff0e::1")), verbs.ErrInvalidArgument},
			{"provider without multicast", notAttacher{ud.qp}, mgid, verbs.ErrNotSupported},
		} {
			if err := verbs.AttachMcast(c.qp, c.gid, 0); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		if err := verbs.DetachMcast(ud.qp, mgid, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("detach without attach: %v", err)
		}
		a1 := d.Query()
		if a1.MaxMcastGrp != rxe.MaxMcastGrp || a1.MaxMcastQPAttach != rxe.MaxMcastQPAttach || a1.MaxTotalMcastQPAttach != rxe.MaxTotalMcastQPAttach {
			t.Errorf("device attributes: %d groups, %d per group, %d in all", a1.MaxMcastGrp, a1.MaxMcastQPAttach, a1.MaxTotalMcastQPAttach)
		}
		var qps []*end
		for range rxe.MaxMcastQPAttach {
			e := newEnd(t, d, verbs.QPTypeUD, 64)
			qps = append(qps, e)
			if err := verbs.AttachMcast(e.qp, mgid, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := verbs.AttachMcast(ud.qp, mgid, 0); !errors.Is(err, verbs.ErrResourceLimit) {
			t.Errorf("attach beyond max_mcast_qp_attach: %v", err)
		}
		_ = qps
	})
}
