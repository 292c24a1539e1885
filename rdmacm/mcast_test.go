//go:build linux

package rdmacm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/mad"
)

// TestMulticastNetns joins a multicast group through the RDMA CM on two
// softib devices in two network namespaces (the kernel's IP multicast
// path over a veth), as mckey does: the receiver binds,
// creates its QP and joins; the sender resolves the group address,
// joins, and sends to the AH of its MULTICAST_JOIN event with its TOS.
// Every datagram arrives; leaving detaches and the device leaves the IP
// group.
func TestMulticastNetns(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{})
	// Datagrams are not retransmitted: wait until the link carries
	// traffic (a fresh veth drops what it is given until linkwatch has
	// activated its queue, up to a second later, longer under load).
	testenv.RequireTool(t, "ping")
	if out, err := p.A.Command("ping", "-c", "1", "-w", "20", p.B.Addr.String()).CombinedOutput(); err != nil {
		t.Fatalf("ping %v: %v\n%s", p.B.Addr, err, out)
	}
	open := func(n *netns.Node, addr netip.Addr) (*rdmacm.Manager, *rxe.Device) {
		var d verbs.Device
		if err := n.Do(func() (err error) {
			d, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		m := rdmacm.NewManager(rdmacm.Config{})
		t.Cleanup(func() { m.Close() })
		if err := m.AddDevice(d); err != nil {
			t.Fatal(err)
		}
		return m, d.(*rxe.Device)
	}
	for _, fam := range []struct {
		name  string
		a, b  netip.Addr
		group netip.Addr
	}{
		{"IPv4", p.A.Addr, p.B.Addr, netip.MustParseAddr("239.23.1.7")},
	} {
		t.Run(fam.name, func(t *testing.T) {
			ma, _ := open(p.A, fam.a)
			mb, db := open(p.B, fam.b)
			const n, size = 16, 200
			// Receiver: bind, QP, join.
			rch := rdmacm.NewEventChannel()
			r, _ := mb.CreateID(rch, nil, rdmacm.PSUDP)
			if err := r.BindAddr(netip.AddrPortFrom(fam.b, 0)); err != nil {
				t.Fatal(err)
			}
			rcq := newCQ(t, r)
			rqp, err := r.CreateQP(nil, &verbs.QPInitAttr{SendCQ: rcq, RecvCQ: rcq, Cap: qpCap})
			if err != nil {
				t.Fatal(err)
			}
			rmr, _ := r.PD().RegMR(make([]byte, n*256), verbs.AccessLocalWrite)
			for k := range n {
				if _, err := rqp.PostRecv([]verbs.RecvWR{{ID: uint64(k), SGL: []verbs.SGE{rmr.SGE(k*256, 256)}}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.JoinMulticast(fam.group, "rx"); err != nil {
				t.Fatal(err)
			}
			je := expect(t, rch, rdmacm.EventMulticastJoin)
			mgid := rdmacm.MGID(fam.group)
			if je.McastAddr != fam.group || je.McastContext != "rx" || je.UD.QPNum != verbs.MulticastQPN ||
				je.UD.QKey != mad.RDMAUDPQKey || je.UD.AH.GRH.DGID != mgid {
				t.Fatalf("join event %+v", je)
			}
			if g := db.McastGroups(); len(g) != 1 || g[0] != mgid {
				t.Fatalf("receiver device groups %v", g)
			}
			if err := r.JoinMulticast(fam.group, nil); !errors.Is(err, rdmacm.ErrAddrInUse) {
				t.Errorf("second join: %v", err)
			}
			if err := r.JoinMulticast(netip.MustParseAddr("ff0e::1"), nil); !errors.Is(err, verbs.ErrNotSupported) && !errors.Is(err, rdmacm.ErrInvalid) {
				t.Errorf("IPv6 group: %v, want ErrNotSupported as Linux 6.1", err)
			}

			// Sender: resolve the group, QP, join, send.
			sch := rdmacm.NewEventChannel()
			s, _ := ma.CreateID(sch, nil, rdmacm.PSUDP)
			s.SetTOS(0x60)
			if err := s.ResolveAddr(netip.AddrPortFrom(fam.a, 0), netip.AddrPortFrom(fam.group, 0), 0); err != nil {
				t.Fatal(err)
			}
			expect(t, sch, rdmacm.EventAddrResolved)
			scq := newCQ(t, s)
			sqp, err := s.CreateQP(nil, &verbs.QPInitAttr{SendCQ: scq, RecvCQ: scq, Cap: qpCap})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.JoinMulticast(fam.group, nil); err != nil {
				t.Fatal(err)
			}
			se := expect(t, sch, rdmacm.EventMulticastJoin)
			if se.UD.AH.GRH.TrafficClass != 0x60 || se.UD.AH.GRH.HopLimit != 64 {
				t.Errorf("sender's group AH %+v: want the ID's TOS 0x60 and hop limit 64", se.UD.AH.GRH)
			}
			ah, err := s.PD().CreateAH(&se.UD.AH)
			if err != nil {
				t.Fatal(err)
			}
			smr, _ := s.PD().RegMR(make([]byte, n*size), verbs.AccessLocalWrite)
			for i := range smr.Buf() {
				smr.Buf()[i] = byte(i * 7)
			}
			for k := range n {
				if _, err := sqp.PostSend([]verbs.SendWR{{ID: uint64(k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{smr.SGE(k*size, size)}, AH: ah, RemoteQPN: se.UD.QPNum, RemoteQKey: se.UD.QKey}}); err != nil {
					t.Fatal(err)
				}
				if wc := waitWC(t, scq); wc.Status != verbs.WCSuccess {
					t.Fatalf("send %d: %+v", k, wc)
				}
			}
			for k := range n {
				wc := waitWC(t, rcq)
				if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+size || wc.WRID != uint64(k) {
					t.Fatalf("receive %d: %+v", k, wc)
				}
				got := rmr.Buf()[k*256+40 : k*256+40+size]
				if !bytes.Equal(got, smr.Buf()[k*size:(k+1)*size]) {
					t.Fatalf("datagram %d differs", k)
				}
			}
			if err := r.LeaveMulticast(fam.group); err != nil {
				t.Fatal(err)
			}
			if err := r.LeaveMulticast(fam.group); !errors.Is(err, rdmacm.ErrNotJoined) {
				t.Errorf("second leave: %v", err)
			}
			if g := db.McastGroups(); len(g) != 0 {
				t.Errorf("receiver device still in %v after the leave", g)
			}
		})
	}
}
