//go:build linux

package rxe_test

import (
	"bytes"
	"net/netip"
	"testing"

	"softib/internal/e2etest"
	"softib/internal/netns"
	"softib/rxe"
	"softib/verbs"
)

// TestMcastIPv6Netns sends UD multicast over IPv6 through real kernel
// sockets: a device in one namespace sends to an IPv6 MGID, and the two
// QPs of a device in the other namespace attached to it (their device
// joined the IPv6 group on its veth) receive every datagram, with the
// datagram's IPv6 header in the GRH area (destination the group); a QP
// of the same device that is not attached receives nothing.
func TestMcastIPv6Netns(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{})
	if !p.A.Addr6.IsValid() {
		t.Fatal("no IPv6 in the namespaces")
	}
	// NewPair waited for each side's IPv6 multicast route and an IPv6
	// ping: a fresh veth drops IPv6 multicast until IPv6 finds it ready.
	open := func(n *netns.Node) *rxe.Device {
		s := e2etest.ListenUDP(t, n.Do, netip.AddrPortFrom(n.Addr6, rxe.RoCEv2Port))
		return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: n.Addr6, NetMTU: n.MTU}, Conn: s})
	}
	da, db := open(p.A), open(p.B)
	group := netip.MustParseAddr("ff0e::db8:15:7")
	mgid := verbs.GIDFromAddr(group)
	ud := func(d *rxe.Device) *end {
		e := newEnd(t, d, verbs.QPTypeUD, 64<<10)
		connect(t, e, e, connOpts{qkey: mcastQKey})
		return e
	}
	a, b1, b2, b3 := ud(da), ud(db), ud(db), ud(db)
	for _, e := range []*end{b1, b2} {
		if err := verbs.AttachMcast(e.qp, mgid, 0); err != nil {
			t.Fatal(err)
		}
	}
	const n, size = 16, 300
	for _, e := range []*end{b1, b2, b3} {
		for k := range n {
			postRecv(t, e, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{e.mr.SGE(k*1024, 1024)}})
		}
	}
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: mgid, SGIDIndex: 1, HopLimit: 8}})
	if err != nil {
		t.Fatal(err)
	}
	fill(a.buf, 11)
	for k := range n {
		post(t, a, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(k*size, size)}, AH: ah, RemoteQPN: verbs.MulticastQPN, RemoteQKey: mcastQKey})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	}
	src := da.Addr().Addr().As16()
	dst := group.As16()
	for _, e := range []*end{b1, b2} {
		for k, wc := range waitWC(t, e.cq, n) {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(k) || wc.ByteLen != 40+size || wc.SrcQP != a.qp.QPN() {
				t.Fatalf("QP %#x receive %d: %+v", e.qp.QPN(), k, wc)
			}
			slot := e.buf[k*1024:]
			if slot[0]>>4 != 6 || !bytes.Equal(slot[8:24], src[:]) || !bytes.Equal(slot[24:40], dst[:]) {
				t.Fatalf("QP %#x receive %d: GRH area % x, want an IPv6 header %v -> %v", e.qp.QPN(), k, slot[:40], da.Addr().Addr(), group)
			}
			if !bytes.Equal(slot[40:40+size], a.buf[k*size:(k+1)*size]) {
				t.Fatalf("QP %#x message %d: data differs", e.qp.QPN(), k)
			}
		}
	}
	// The unattached QP: a unicast datagram after the group's arrives
	// first at it.
	bah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(db.Addr().Addr()), SGIDIndex: 1}})
	if err != nil {
		t.Fatal(err)
	}
	post(t, a, verbs.SendWR{ID: 99, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 10)}, AH: bah, RemoteQPN: b3.qp.QPN(), RemoteQKey: mcastQKey})
	wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
	if wc := waitWC(t, b3.cq, 1)[0]; wc.WRID != 0 || wc.ByteLen != 50 {
		t.Fatalf("unattached QP got %+v, want only the unicast datagram", wc)
	}
	if g := db.McastGroups(); len(g) != 1 || g[0] != mgid {
		t.Fatalf("receiver groups %v", g)
	}
}
