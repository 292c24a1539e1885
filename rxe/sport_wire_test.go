//go:build linux

package rxe_test

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/internal/seqnum"
	"softib/rxe"
	"softib/udp"
	"softib/udp/udptest"
	"softib/verbs"
	"softib/wire/roce"
)

// sportPeer is a plain UDP socket standing in for a RoCE peer, so that
// the source ports of the datagrams a device sends can be read.
type sportPeer struct {
	s  *udp.Socket
	in []udp.Message
}

func newSportPeer(t testing.TB, ap netip.AddrPort) *sportPeer {
	t.Helper()
	s, err := udp.Listen(ap, &udp.Config{DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &sportPeer{s: s, in: []udp.Message{{Buf: make([]byte, 9000)}}}
}

func (p *sportPeer) addr() netip.AddrPort { return p.s.LocalAddr() }

// ah is an address vector towards the peer.
func (p *sportPeer) ah() verbs.AHAttr {
	a := p.addr()
	return verbs.AHAttr{IsGlobal: true, PortNum: 1, DPort: a.Port(),
		GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(a.Addr()), SGIDIndex: 1, HopLimit: 64}}
}

// newAH creates an address handle towards the peer.
func (p *sportPeer) newAH(t testing.TB, pd verbs.PD) verbs.AH {
	t.Helper()
	a := p.ah()
	ah, err := pd.CreateAH(&a)
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

// next reads the next datagram, checks that its ICRC is valid for the
// source address it came from (IPv4 ID 0, as softib's sockets send), and
// returns the source and the parsed packet.
func (p *sportPeer) next(t testing.TB) (netip.AddrPort, roce.Packet) {
	t.Helper()
	p.s.UDPConn().SetReadDeadline(time.Now().Add(20 * time.Second)) // hang guard
	if n, err := p.s.ReadBatch(p.in); n != 1 || err != nil {
		t.Fatalf("peer read: %d, %v", n, err)
	}
	m := p.in[0]
	b := m.Buf[:m.N]
	pkt, err := roce.Parse(b)
	if err != nil {
		t.Fatalf("datagram from %v: %v", m.Addr, err)
	}
	e, err := roce.NewEncap(roce.EncapConfig{Src: m.Addr, Dst: p.addr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.VerifyICRC(b); err != nil {
		t.Fatalf("datagram from %v (%v): %v", m.Addr, pkt.Opcode(), err)
	}
	return m.Addr, pkt
}

// send sends a packet with the given headers to dst, ICRC set.
func (p *sportPeer) send(t testing.TB, dst netip.AddrPort, h *roce.Headers, payload []byte) {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := roce.Build(buf, h, payload)
	if err != nil {
		t.Fatal(err)
	}
	e, err := roce.NewEncap(roce.EncapConfig{Src: p.addr(), Dst: dst})
	if err != nil {
		t.Fatal(err)
	}
	e.SetICRC(buf[:n])
	if _, err := p.s.WriteBatch([]udp.Message{{Buf: buf[:n], N: n, Addr: dst}}); err != nil {
		t.Fatal(err)
	}
}

// sportFamily opens a device and a peer socket on loopback: IPv4 on
// addresses of this test process (port 4791), or IPv6 on ::1 with
// ephemeral ports.
func sportFamily(t testing.TB, v6 bool, cfg rxe.Config) (*rxe.Device, *sportPeer) {
	t.Helper()
	if !v6 {
		return openDev(t, cfg), newSportPeer(t, netip.AddrPortFrom(testAddr(), rxe.RoCEv2Port))
	}
	lo := netip.IPv6Loopback()
	s, err := udp.Listen(netip.AddrPortFrom(lo, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Conn, cfg.Addr = s, lo
	return openDev(t, cfg), newSportPeer(t, netip.AddrPortFrom(lo, 0))
}

// wantSport checks the source port a QP reports and that it has its own
// socket for it.
func wantSport(t testing.TB, qp verbs.QP, port uint16, own bool) {
	t.Helper()
	if p, o := rxe.QPSourcePort(qp); p != port || o != own {
		t.Fatalf("QP %#x sends from port %d (own socket %v), want %d (%v)", qp.QPN(), p, o, port, own)
	}
}

func modifyQP(t testing.TB, qp verbs.QP, a verbs.QPAttr, m verbs.QPAttrMask) {
	t.Helper()
	if err := qp.Modify(&a, m); err != nil {
		t.Fatal(err)
	}
}

// rcToPeer moves e's RC QP from RESET to RTR talking to remote QPN rqpn
// at the peer.
func rcToPeer(t testing.TB, e *end, p *sportPeer, rqpn uint32) {
	t.Helper()
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	modifyQP(t, e.qp, verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: all},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	wantSport(t, e.qp, e.dev.Addr().Port(), false) // INIT sends nothing
	modifyQP(t, e.qp, verbs.QPAttr{State: verbs.QPStateRTR, AH: p.ah(), PathMTU: verbs.MTU1024, DestQPN: rqpn,
		RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
}

// TestSourcePortOnWire reads the source ports of a device's packets on
// the receiving side: UD and GSI QPs send from the hash form of their
// QPN, an RC QP from RTR on (its ACKs) and in RTS (its requests) from the
// flow-label form of its QPN pair, every ICRC covering that port.
func TestSourcePortOnWire(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) { testSourcePortOnWire(t, v6) })
	}
}

func testSourcePortOnWire(t *testing.T, v6 bool) {
	d, peer := sportFamily(t, v6, rxe.Config{})
	devIP := d.Addr().Addr()
	ports := map[uint16]bool{}

	// UD: hash form of the QPN.
	ud := newEnd(t, d, verbs.QPTypeUD, 4096)
	connect(t, ud, ud, connOpts{})
	want := rxe.SourcePort(ud.qp.QPN(), 0)
	wantSport(t, ud.qp, want, true)
	ports[want] = true
	ah := peer.newAH(t, ud.pd)
	post(t, ud, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{ud.mr.SGE(0, 100)}, AH: ah,
		RemoteQPN: 0x99, RemoteQKey: 0x11111111})
	src, pkt := peer.next(t)
	if src != netip.AddrPortFrom(devIP, want) || pkt.Opcode() != roce.UDSendOnly || pkt.DETH().SrcQP() != ud.qp.QPN() {
		t.Fatalf("UD packet %v from %v, want UD SEND_ONLY from %v", pkt.Opcode(), src, netip.AddrPortFrom(devIP, want))
	}

	// GSI: QPN 1 sends from 55410.
	gsi := newEnd(t, d, verbs.QPTypeGSI, 4096)
	connect(t, gsi, gsi, connOpts{})
	wantSport(t, gsi.qp, 55410, true)
	ports[55410] = true
	gah := peer.newAH(t, gsi.pd)
	post(t, gsi, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{gsi.mr.SGE(0, 256)}, AH: gah,
		RemoteQPN: 1, RemoteQKey: rxe.GSIQKey})
	if src, pkt := peer.next(t); src.Port() != 55410 || pkt.DETH().SrcQP() != 1 {
		t.Fatalf("GSI packet from %v (source QP %d), want port 55410, QP 1", src, pkt.DETH().SrcQP())
	}

	// RC in RTR: the ACK of a request from the peer leaves from the
	// flow-label port.
	rc := newEnd(t, d, verbs.QPTypeRC, 4096)
	const rqpn = 0xC1
	rcToPeer(t, rc, peer, rqpn)
	want = rxe.SourcePort(rc.qp.QPN(), rqpn)
	wantSport(t, rc.qp, want, true)
	ports[want] = true
	if got := rxe.SportSockets(d); got != len(ports) {
		t.Fatalf("%d source-port sockets, want %d", got, len(ports))
	}
	postRecv(t, rc, verbs.RecvWR{ID: 3, SGL: []verbs.SGE{rc.mr.SGE(0, 1024)}})
	msg := []byte("request from the peer")
	peer.send(t, d.Addr(), &roce.Headers{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: rxe.DefaultPKey,
		DestQP: rc.qp.QPN(), AckReq: true, PSN: seqnum.NewPSN(100)}}, msg)
	src, pkt = peer.next(t)
	if src != netip.AddrPortFrom(devIP, want) || pkt.Opcode() != roce.RCAck || pkt.DestQP() != rqpn || pkt.PSN() != seqnum.NewPSN(100) {
		t.Fatalf("RTR: %v to QP %#x PSN %v from %v, want an ACK of PSN 100 to %#x from port %d",
			pkt.Opcode(), pkt.DestQP(), pkt.PSN(), src, rqpn, want)
	}
	wc := waitWC(t, rc.cq, 1)[0]
	wantOK(t, wc, verbs.WCRecv)
	rc.sync()
	if !bytes.Equal(rc.buf[:len(msg)], msg) {
		t.Fatal("received data differs")
	}

	// RC in RTS: requests leave from the same port.
	modifyQP(t, rc.qp, verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 7, Timeout: 20, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
	wantSport(t, rc.qp, want, true)
	post(t, rc, verbs.SendWR{ID: 4, Opcode: verbs.WRSend, SGL: []verbs.SGE{rc.mr.SGE(0, 64)}})
	src, pkt = peer.next(t)
	if src != netip.AddrPortFrom(devIP, want) || pkt.Opcode() != roce.RCSendOnly || pkt.DestQP() != rqpn || pkt.PSN() != seqnum.NewPSN(7) {
		t.Fatalf("RTS: %v to QP %#x PSN %v from %v, want SEND_ONLY PSN 7 to %#x from port %d",
			pkt.Opcode(), pkt.DestQP(), pkt.PSN(), src, rqpn, want)
	}

	// Reconnected to another remote QPN: another port, and the old
	// socket is closed (no other QP uses it).
	modifyQP(t, rc.qp, verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState)
	wantSport(t, rc.qp, d.Addr().Port(), false)
	delete(ports, want)
	if got := rxe.SportSockets(d); got != len(ports) {
		t.Fatalf("after RESET: %d source-port sockets, want %d", got, len(ports))
	}
	const rqpn2 = 0x4321
	rcToPeer(t, rc, peer, rqpn2)
	want2 := rxe.SourcePort(rc.qp.QPN(), rqpn2)
	if want2 == want {
		t.Fatalf("test needs another port than %d", want)
	}
	wantSport(t, rc.qp, want2, true)
	postRecv(t, rc, verbs.RecvWR{ID: 5, SGL: []verbs.SGE{rc.mr.SGE(0, 1024)}})
	peer.send(t, d.Addr(), &roce.Headers{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: rxe.DefaultPKey,
		DestQP: rc.qp.QPN(), AckReq: true, PSN: seqnum.NewPSN(100)}}, msg)
	if src, pkt := peer.next(t); src.Port() != want2 || pkt.Opcode() != roce.RCAck {
		t.Fatalf("reconnected: %v from %v, want an ACK from port %d", pkt.Opcode(), src, want2)
	}
	if st := d.Stats(); st["SportFallback"] != 0 || st["SendErr"] != 0 {
		t.Fatalf("SportFallback %d, SendErr %d", st["SportFallback"], st["SendErr"])
	}
	// Destroying the QPs closes their sockets.
	for _, e := range []*end{ud, gsi, rc} {
		if err := e.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if got := rxe.SportSockets(d); got != 0 {
		t.Fatalf("%d source-port sockets left after destroying every QP", got)
	}
}

// TestSourcePortSharing checks that QPs with the same source port share
// one socket until the last of them is destroyed, and that two devices on
// one IP address (different device ports) both get their own socket for
// a port.
func TestSourcePortSharing(t *testing.T) {
	d := openDev(t, rxe.Config{})
	peer := newSportPeer(t, netip.AddrPortFrom(testAddr(), rxe.RoCEv2Port))
	e1, e2 := newEnd(t, d, verbs.QPTypeRC, 64), newEnd(t, d, verbs.QPTypeRC, 64)
	const r1 = 0x100
	port := rxe.SourcePort(e1.qp.QPN(), r1)
	r2 := uint32(1)
	for rxe.SourcePort(e2.qp.QPN(), r2) != port {
		r2++
	}
	rcToPeer(t, e1, peer, r1)
	rcToPeer(t, e2, peer, r2)
	wantSport(t, e1.qp, port, true)
	wantSport(t, e2.qp, port, true)
	if n := rxe.SportSockets(d); n != 1 {
		t.Fatalf("%d sockets for one port", n)
	}
	e1.qp.Destroy()
	if n := rxe.SportSockets(d); n != 1 {
		t.Fatalf("%d sockets after destroying one of two QPs", n)
	}
	wantSport(t, e2.qp, port, true)
	e2.qp.Destroy()
	if n := rxe.SportSockets(d); n != 0 {
		t.Fatalf("%d sockets after destroying both QPs", n)
	}

	// Two devices on one address: both GSI QPs send from 55410.
	ip := testAddr()
	da := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
	db := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip, Port: rxe.RoCEv2Port + 1}})
	for _, dev := range []*rxe.Device{da, db} {
		g := newEnd(t, dev, verbs.QPTypeGSI, 256)
		connect(t, g, g, connOpts{})
		wantSport(t, g.qp, 55410, true)
		ah := peer.newAH(t, g.pd)
		post(t, g, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{g.mr.SGE(0, 256)}, AH: ah, RemoteQPN: 1, RemoteQKey: rxe.GSIQKey})
		if src, _ := peer.next(t); src != netip.AddrPortFrom(ip, 55410) {
			t.Fatalf("device %v: GSI packet from %v", dev.Addr(), src)
		}
		if n := dev.Stats()["SportFallback"]; n != 0 {
			t.Fatalf("device %v: SportFallback %d", dev.Addr(), n)
		}
	}
}

// TestSourcePortFallback checks the QPs that cannot have their source
// port: a foreign socket holds it, sockets cannot be opened (EMFILE,
// injected), or the Conn is a simulated network. They send from the
// device port, correctly, and the device counts them; FixedSourcePort
// sends everything from the device port without counting.
func TestSourcePortFallback(t *testing.T) {
	t.Run("foreign", func(t *testing.T) {
		ip := testAddr()
		foreign, err := udp.Listen(netip.AddrPortFrom(ip, 55410), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer foreign.Close()
		d := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
		peer := newSportPeer(t, netip.AddrPortFrom(testAddr(), rxe.RoCEv2Port))
		g := newEnd(t, d, verbs.QPTypeGSI, 256)
		connect(t, g, g, connOpts{})
		wantSport(t, g.qp, rxe.RoCEv2Port, false)
		ah := peer.newAH(t, g.pd)
		post(t, g, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{g.mr.SGE(0, 256)}, AH: ah, RemoteQPN: 1, RemoteQKey: rxe.GSIQKey})
		if src, _ := peer.next(t); src != d.Addr() {
			t.Fatalf("GSI packet from %v, want the device address %v", src, d.Addr())
		}
		if n := d.Stats()["SportFallback"]; n != 1 {
			t.Fatalf("SportFallback %d, want 1", n)
		}
	})
	t.Run("emfile", func(t *testing.T) {
		da, db := openDev(t, rxe.Config{}), openDev(t, rxe.Config{})
		rxe.SetSportOpener(da, func(uint16) (udp.Conn, error) { return nil, syscall.EMFILE })
		a, b := newEnd(t, da, verbs.QPTypeRC, 8192), newEnd(t, db, verbs.QPTypeRC, 8192)
		connect(t, a, b, connOpts{})
		connect(t, b, a, connOpts{})
		wantSport(t, a.qp, da.Addr().Port(), false)
		wantSport(t, b.qp, rxe.SourcePort(b.qp.QPN(), a.qp.QPN()), true)
		sportTraffic(t, a, b)
		if n := da.Stats()["SportFallback"]; n != 1 {
			t.Fatalf("SportFallback %d, want 1 (one QP, counted once)", n)
		}
	})
	t.Run("limit", func(t *testing.T) {
		// A device at its socket limit (half of RLIMIT_NOFILE) lets
		// further QPs fall back until a socket closes.
		d := openDev(t, rxe.Config{})
		rxe.SetSportLimit(d, 1)
		u1, u2 := newEnd(t, d, verbs.QPTypeUD, 64), newEnd(t, d, verbs.QPTypeUD, 64)
		connect(t, u1, u1, connOpts{})
		connect(t, u2, u2, connOpts{})
		wantSport(t, u1.qp, rxe.SourcePort(u1.qp.QPN(), 0), true)
		wantSport(t, u2.qp, d.Addr().Port(), false)
		if n := d.Stats()["SportFallback"]; n != 1 {
			t.Fatalf("SportFallback %d, want 1", n)
		}
		u1.qp.Destroy()
		u3 := newEnd(t, d, verbs.QPTypeUD, 64)
		connect(t, u3, u3, connOpts{})
		wantSport(t, u3.qp, rxe.SourcePort(u3.qp.QPN(), 0), true)
	})
	t.Run("simnet", func(t *testing.T) {
		nw := udptest.NewNetwork(1)
		conn := func(ip string) rxe.Config {
			ep, err := nw.Listen(netip.AddrPortFrom(netip.MustParseAddr(ip), rxe.RoCEv2Port))
			if err != nil {
				t.Fatal(err)
			}
			return rxe.Config{Conn: ep}
		}
		da, db := openDev(t, conn("10.0.0.1")), openDev(t, conn("10.0.0.2"))
		a, b := newEnd(t, da, verbs.QPTypeRC, 8192), newEnd(t, db, verbs.QPTypeRC, 8192)
		connect(t, a, b, connOpts{})
		connect(t, b, a, connOpts{})
		wantSport(t, a.qp, rxe.RoCEv2Port, false)
		sportTraffic(t, a, b)
		if n := da.Stats()["SportFallback"]; n != 1 {
			t.Fatalf("SportFallback %d, want 1", n)
		}
	})
	t.Run("fixed", func(t *testing.T) {
		cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{FixedSourcePort: true}}
		da, db := openDev(t, cfg), openDev(t, cfg)
		a, b := newEnd(t, da, verbs.QPTypeRC, 8192), newEnd(t, db, verbs.QPTypeRC, 8192)
		connect(t, a, b, connOpts{})
		connect(t, b, a, connOpts{})
		wantSport(t, a.qp, da.Addr().Port(), false)
		sportTraffic(t, a, b)
		if n := int(da.Stats()["SportFallback"]) + rxe.SportSockets(da); n != 0 {
			t.Fatalf("fixed source port: %d fallbacks + sockets", n)
		}
	})
}

// sportTraffic runs a SEND and an RDMA WRITE each way between a and b
// and checks the data.
func sportTraffic(t testing.TB, a, b *end) {
	t.Helper()
	for _, p := range [][2]*end{{a, b}, {b, a}} {
		x, y := p[0], p[1]
		fill(x.buf[:4096], uint64(x.qp.QPN()))
		x.sync()
		postRecv(t, y, verbs.RecvWR{ID: 7, SGL: []verbs.SGE{y.mr.SGE(0, 4096)}})
		post(t, x, verbs.SendWR{ID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 3000)}},
			verbs.SendWR{ID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 4096)},
				RemoteAddr: y.mr.Addr() + 4096, RKey: y.mr.RKey()})
		for _, wc := range waitWC(t, x.cq, 2) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
		wantOK(t, waitWC(t, y.cq, 1)[0], verbs.WCRecv)
		y.sync()
		if !bytes.Equal(y.buf[:3000], x.buf[:3000]) || !bytes.Equal(y.buf[4096:8192], x.buf[:4096]) {
			t.Fatal("data differs")
		}
	}
}

// TestSourcePortEMFILE runs out of file descriptors for real: in a child
// process with RLIMIT_NOFILE lowered, RC QPs are connected until source
// ports can no longer be opened; the QPs beyond that fall back to the
// device port and still move data.
func TestSourcePortEMFILE(t *testing.T) {
	if os.Getenv("SOFTIB_SPORT_EMFILE") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSourcePortEMFILE$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "SOFTIB_SPORT_EMFILE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "fallback QPs moved data") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	da, db := openDev(t, rxe.Config{}), openDev(t, rxe.Config{})
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// Room for a few source-port sockets only.
	lim := old
	lim.Cur = uint64(len(fds) + 4)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	var pairs [][2]*end
	for i := 0; i < 16 && da.Stats()["SportFallback"]+db.Stats()["SportFallback"] < 2; i++ {
		a, b := newEnd(t, da, verbs.QPTypeRC, 8192), newEnd(t, db, verbs.QPTypeRC, 8192)
		connect(t, a, b, connOpts{})
		connect(t, b, a, connOpts{})
		rxe.QPSourcePort(a.qp) // open the senders, as a first packet would
		rxe.QPSourcePort(b.qp)
		pairs = append(pairs, [2]*end{a, b})
	}
	fb := da.Stats()["SportFallback"] + db.Stats()["SportFallback"]
	if fb < 2 {
		t.Fatalf("%d fallbacks with RLIMIT_NOFILE %d", fb, lim.Cur)
	}
	last := pairs[len(pairs)-1]
	if _, own := rxe.QPSourcePort(last[1].qp); own {
		t.Fatal("the last QP has a socket")
	}
	for _, p := range pairs {
		sportTraffic(t, p[0], p[1])
	}
	t.Logf("%d pairs, %d fallback QPs moved data", len(pairs), fb)
}

// TestSourcePortLazy checks that a QP opens its sender when it first
// sends, not at RTR: connection setup does not wait for a socket, and
// connected QPs that never send hold none.
func TestSourcePortLazy(t *testing.T) {
	da, db := openDev(t, rxe.Config{}), openDev(t, rxe.Config{})
	a, b := newEnd(t, da, verbs.QPTypeRC, 4096), newEnd(t, db, verbs.QPTypeRC, 4096)
	connect(t, a, b, connOpts{})
	connect(t, b, a, connOpts{})
	if n := rxe.SportSockets(da) + rxe.SportSockets(db); n != 0 || !rxe.QPSportPending(a.qp) || !rxe.QPSportPending(b.qp) {
		t.Fatalf("after connect: %d sockets open, pending %v/%v; want none open, both pending",
			n, rxe.QPSportPending(a.qp), rxe.QPSportPending(b.qp))
	}
	// a's request opens a's sender; b's ACK opens b's.
	post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := waitWC(t, a.cq, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v", wc.Status)
	}
	if rxe.QPSportPending(a.qp) || rxe.QPSportPending(b.qp) || rxe.SportSockets(da) != 1 || rxe.SportSockets(db) != 1 {
		t.Fatalf("after a WRITE and its ACK: pending %v/%v, sockets %d/%d; want opened, 1/1",
			rxe.QPSportPending(a.qp), rxe.QPSportPending(b.qp), rxe.SportSockets(da), rxe.SportSockets(db))
	}
	wantSport(t, a.qp, rxe.SourcePort(a.qp.QPN(), b.qp.QPN()), true)
}
