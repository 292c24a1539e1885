package rxe_test

import (
	"bytes"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// ecnPair opens two devices with ECN on and connects an RC QP on each;
// x's path marks every packet CE (rxe.ECNSendCE: a congested path on
// loopback), y's marks nothing (ECT(0)).
func ecnPair(t *testing.T, xcfg rxe.ECNConfig) (x, y *end) {
	t.Helper()
	xcfg.Enable = true
	rxe.ECNSendCE(&xcfg)
	dx := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}, ECN: xcfg})
	dy := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}, ECN: rxe.ECNConfig{Enable: true}})
	x, y = newEnd(t, dx, verbs.QPTypeRC, 8<<20), newEnd(t, dy, verbs.QPTypeRC, 8<<20)
	connect(t, x, y, connOpts{mtu: verbs.MTU4096})
	connect(t, y, x, connOpts{mtu: verbs.MTU4096})
	return x, y
}

// TestECNLoopback: over real loopback sockets (the traffic class read
// with IP_RECVTOS), every CE-marked packet x sends is counted at y, y
// answers with CNPs at most one per MinTimeBetweenCNPs, x's QP handles
// them with its rate limiter, which cuts the rate (not below MinRate), and
// the writes still complete, intact; y's ECT(0) packets cause no CNPs.
func TestECNLoopback(t *testing.T) {
	x, y := ecnPair(t, rxe.ECNConfig{MinRate: 2e9, MaxRate: 40e9})
	const chunk, n = 64 << 10, 64
	fill(x.buf, 11)
	var wrs []verbs.SendWR
	for i := range n {
		off := (i * chunk) % (4 << 20)
		wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{x.mr.SGE(off, chunk)}, RemoteAddr: y.mr.Addr() + uint64(off), RKey: y.mr.RKey()})
	}
	for i := 0; i < n; i += 16 {
		post(t, x, wrs[i:i+16]...)
		for _, wc := range waitWC(t, x.cq, 16) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("completion %+v", wc)
			}
		}
	}
	y.sync()
	if !bytes.Equal(y.buf[:4<<20], x.buf[:4<<20]) {
		t.Fatal("data differs")
	}
	xs, ys := rxe.CQDeviceStats(x.cq), rxe.CQDeviceStats(y.cq)
	t.Logf("y: %d CE-marked packets, %d CNPs sent; x: %d CNPs handled", ys["NPECNMarked"], ys["NPCNPSent"], xs["RPCNPHandled"])
	if ys["NPECNMarked"] == 0 || ys["NPCNPSent"] == 0 || ys["NPCNPSent"] > ys["NPECNMarked"] {
		t.Fatalf("y: %d marked, %d CNPs sent", ys["NPECNMarked"], ys["NPCNPSent"])
	}
	if xs["RPCNPHandled"] == 0 || xs["RPCNPHandled"] > ys["NPCNPSent"] || xs["RPCNPIgnored"] != 0 {
		t.Fatalf("x: %d CNPs handled, %d ignored; y sent %d", xs["RPCNPHandled"], xs["RPCNPIgnored"], ys["NPCNPSent"])
	}
	if xs["NPECNMarked"] != 0 || xs["NPCNPSent"] != 0 || ys["RPCNPHandled"] != 0 {
		t.Fatalf("ECT(0) traffic y→x caused CNPs: x %v", xs)
	}
	_, rate, minRate, cuts := rxe.QPRate(x.qp)
	t.Logf("x: %d rate cuts, lowest rate %.3g b/s, now %.3g b/s", cuts, minRate, rate)
	if cuts == 0 || minRate > 0.51*40e9 || minRate < 2e9 {
		t.Fatalf("x: %d cuts, lowest rate %.3g, want cut to about half MaxRate 40e9 or less, not below MinRate 2e9", cuts, minRate)
	}
}

// TestECNOffIgnoresCNP: a device with ECN off counts a CNP in
// rp_cnp_ignored and changes nothing; its packets carry no ECT mark, so
// an ECN peer never sees CE from it.
func TestECNOffIgnoresCNP(t *testing.T) {
	xcfg := rxe.ECNConfig{Enable: true}
	rxe.ECNSendCE(&xcfg)
	dx := openDev(t, rxe.Config{ECN: xcfg})
	dy := openDev(t, rxe.Config{})
	x, y := newEnd(t, dx, verbs.QPTypeRC, 1<<20), newEnd(t, dy, verbs.QPTypeRC, 1<<20)
	connect(t, x, y, connOpts{})
	connect(t, y, x, connOpts{})
	// y (ECN off) sends; x receives Not-ECT packets: no CNPs.
	post(t, y, verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{y.mr.SGE(0, 256<<10)},
		RemoteAddr: x.mr.Addr(), RKey: x.mr.RKey()})
	waitWC(t, y.cq, 1)
	// x sends CE-marked packets; y's ECN is off, so it neither reads nor
	// answers the marks.
	post(t, x, verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 256<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()})
	waitWC(t, x.cq, 1)
	xs, ys := rxe.CQDeviceStats(x.cq), rxe.CQDeviceStats(y.cq)
	for _, k := range []string{"NPECNMarked", "NPCNPSent", "RPCNPHandled", "RPCNPIgnored"} {
		if xs[k] != 0 || ys[k] != 0 {
			t.Fatalf("%s: x %d, y %d", k, xs[k], ys[k])
		}
	}
	if active, _, _, _ := rxe.QPRate(x.qp); active {
		t.Fatal("rate limiter active without CNPs")
	}
}

// TestECNZeroAllocs: with ECN on and every packet CE-marked (CNPs
// flowing, the rate limiter active), the steady-state data path still
// allocates nothing: the ECT mark, the received class, CE counting, CNP
// pacing and sending, and the limiter's gate.
func TestECNZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	x, y := ecnPair(t, rxe.ECNConfig{MinRate: 5e9})
	wc := make([]verbs.WC, 1)
	w := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, 16<<10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	round := func() {
		x.qp.PostSend(w)
		pollSpin(t, x.cq, wc)
	}
	for range 50 {
		round() // warm pools and rings, make the QPs' congestion state
	}
	if a := testing.AllocsPerRun(200, round); a != 0 {
		t.Fatalf("%v allocations per WRITE round", a)
	}
	if st := rxe.CQDeviceStats(y.cq); st["NPCNPSent"] == 0 {
		t.Fatal("no CNPs sent")
	}
}

// TestECNLoopbackUD: UD over real loopback sockets. x's UD datagrams
// arrive CE-marked at y, whose UD QP answers with CNPs to the source QP
// in their DETH at x's address; x's UD QP handles them (its limiter
// cuts the rate), and the datagrams are delivered. y's ECT(0) datagram
// back to x causes no CNP.
func TestECNLoopbackUD(t *testing.T) {
	xcfg := rxe.ECNConfig{Enable: true, MinRate: 2e9, MaxRate: 40e9}
	rxe.ECNSendCE(&xcfg)
	dx := openDev(t, rxe.Config{ECN: xcfg})
	dy := openDev(t, rxe.Config{ECN: rxe.ECNConfig{Enable: true}})
	x, y := newEnd(t, dx, verbs.QPTypeUD, 1<<20), newEnd(t, dy, verbs.QPTypeUD, 1<<20)
	connect(t, x, y, connOpts{})
	connect(t, y, x, connOpts{})
	ahTo := func(from, to *end) verbs.AH {
		ah, err := from.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(to.dev.Addr().Addr()), SGIDIndex: 1},
			DPort: to.dev.Addr().Port()})
		if err != nil {
			t.Fatal(err)
		}
		return ah
	}
	const n, size = 64, 1024
	for i := range n {
		postRecv(t, y, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{y.mr.SGE(i*2048, 40+size)}})
	}
	ah := ahTo(x, y)
	for i := range n {
		post(t, x, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{x.mr.SGE(0, size)},
			AH: ah, RemoteQPN: y.qp.QPN(), RemoteQKey: 0x11111111})
		waitWC(t, x.cq, 1)
	}
	for _, wc := range waitWC(t, y.cq, n) {
		if wc.Status != verbs.WCSuccess || wc.SrcQP != x.qp.QPN() {
			t.Fatalf("receive %+v", wc)
		}
	}
	// The CNPs travel on their own; wait for x to have handled one
	// (hang guard 20 s).
	for deadline := time.Now().Add(20 * time.Second); rxe.CQDeviceStats(x.cq)["RPCNPHandled"] == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("hang guard: no CNP handled at x; y %v", rxe.CQDeviceStats(y.cq))
		}
	}
	xs, ys := rxe.CQDeviceStats(x.cq), rxe.CQDeviceStats(y.cq)
	t.Logf("y: %d CE-marked datagrams, %d CNPs sent; x: %d CNPs handled", ys["NPECNMarked"], ys["NPCNPSent"], xs["RPCNPHandled"])
	if ys["NPECNMarked"] != n || ys["NPCNPSent"] == 0 || ys["NPCNPSent"] > n || xs["RPCNPHandled"] > ys["NPCNPSent"] || xs["NoQP"]+xs["BadQPType"] != 0 {
		t.Fatalf("counters: y %v; x %v", ys, xs)
	}
	if _, _, minRate, cuts := rxe.QPRate(x.qp); cuts == 0 || minRate > 0.51*40e9 {
		t.Fatalf("x's UD QP: %d cuts, lowest rate %.3g", cuts, minRate)
	}
	// y → x: ECT(0), no CNP either way.
	postRecv(t, x, verbs.RecvWR{ID: 1, SGL: []verbs.SGE{x.mr.SGE(4096, 40+size)}})
	post(t, y, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{y.mr.SGE(0, size)},
		AH: ahTo(y, x), RemoteQPN: x.qp.QPN(), RemoteQKey: 0x11111111})
	waitWC(t, y.cq, 1)
	waitWC(t, x.cq, 1)
	if xs := rxe.CQDeviceStats(x.cq); xs["NPECNMarked"] != 0 || xs["NPCNPSent"] != 0 {
		t.Fatalf("ECT(0) datagram y→x caused CNPs: %v", xs)
	}
}
