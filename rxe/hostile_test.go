package rxe_test

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"softib/internal/seqnum"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/roce"
)

// flooder sends hostile RoCE traffic at a device from its own UDP socket.
type flooder struct {
	t    testing.TB
	conn *net.UDPConn
	to   netip.AddrPort
	enc  roce.Encap
	rng  *rand.Rand
	buf  []byte
	sent atomic.Uint64
	// kinds are the packet kinds sent in turn (see packet); farPSN keeps
	// PSNs in [0x400000, 0xC00000), far from the victim's window.
	kinds  []int
	farPSN bool
}

func newFlooder(t testing.TB, from netip.Addr, to netip.AddrPort) *flooder {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	enc, err := roce.NewEncap(roce.EncapConfig{Src: c.LocalAddr().(*net.UDPAddr).AddrPort(), Dst: to})
	if err != nil {
		t.Fatal(err)
	}
	return &flooder{t: t, conn: c, to: to, enc: enc, rng: rand.New(rand.NewPCG(1, 2)), buf: make([]byte, 8192),
		kinds: []int{0, 1, 2, 3, 4}}
}

// packet builds one hostile packet of the given kind for the QP qpn.
func (f *flooder) packet(kind int, qpn uint32) []byte {
	h := roce.Headers{BTH: roce.BTHFields{PKey: 0xFFFF, DestQP: qpn, PSN: seqnum.PSN(f.rng.Uint32() & 0xFFFFFF), AckReq: true}}
	if f.farPSN {
		h.BTH.PSN = seqnum.PSN(0x400000 + f.rng.Uint32()%0x800000)
	}
	var payload []byte
	switch kind {
	case 0: // garbage
		n := 1 + f.rng.IntN(1500)
		for i := range n {
			f.buf[i] = byte(f.rng.Uint32())
		}
		return f.buf[:n]
	case 1: // a SEND to a QP that does not exist
		h.BTH.Opcode = roce.RCSendOnly
		h.BTH.DestQP = 0xFF0000 | f.rng.Uint32()&0xFFFF
		payload = make([]byte, 64)
	case 2: // a WRITE of 2 GiB with a made-up rkey to the real QP
		h.BTH.Opcode = roce.RCWriteOnly
		h.RETH = roce.RETHFields{VA: f.rng.Uint64(), RKey: f.rng.Uint32(), DMALen: 1 << 31}
		payload = make([]byte, 1024)
	case 3: // a SEND with a PSN anywhere to the real QP
		h.BTH.Opcode = roce.RCSendOnly
		payload = make([]byte, 256)
	case 4: // a READ request for 1 GiB with a made-up rkey
		h.BTH.Opcode = roce.RCReadRequest
		h.RETH = roce.RETHFields{VA: f.rng.Uint64(), RKey: f.rng.Uint32(), DMALen: 1 << 30}
	}
	n, err := roce.Build(f.buf, &h, payload)
	if err != nil {
		f.t.Errorf("build kind %d: %v", kind, err)
		return nil
	}
	pkt := f.buf[:n]
	if kind == 3 && f.rng.IntN(2) == 0 {
		return pkt // bad (zero) ICRC as well
	}
	f.enc.SetICRC(pkt)
	return pkt
}

// run sends packets round-robin over the kinds until stop is closed or
// max packets went out.
func (f *flooder) run(qpn uint32, max int, stop <-chan struct{}) {
	for i := 0; i < max; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if p := f.packet(f.kinds[i%len(f.kinds)], qpn); p != nil {
			if _, err := f.conn.WriteToUDPAddrPort(p, f.to); err == nil {
				f.sent.Add(1)
			}
		}
		if i%256 == 255 {
			runtime.Gosched() // share the two cores with the victims
		}
	}
}

// TestForeignFlood: a flood of malformed and valid-looking packets (garbage,
// unknown QPNs, WRITE/READ requests with huge lengths and made-up rkeys,
// SENDs at arbitrary PSNs, bad ICRCs) from a foreign address at a device
// whose RC QP is busy with a well-behaved peer. Every WR of the peer
// completes once with intact data, the hostile packets are counted and
// dropped before they reach the QP, the QP stays in RTS, and the heap does
// not grow with the flood.
func TestForeignFlood(t *testing.T) {
	const msgs, size = 400, 4096
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 1<<20)
	f := newFlooder(t, testAddr(), b.dev.Addr())
	// A second flooder sends from the peer's own address (another port):
	// requests at PSNs far outside the window, which the responder must
	// treat as duplicates or sequence errors without disturbing the peer.
	fp := newFlooder(t, a.dev.Addr().Addr(), b.dev.Addr())
	fp.kinds, fp.farPSN = []int{2, 3, 4}, true

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	// Bounded: the flood is meant to overlap the good traffic, not to
	// outlast it on a slow (-race) build.
	burst := 200000
	if raceEnabled {
		burst = 20000
	}
	go func() { defer wg.Done(); f.run(b.qp.QPN(), burst, stop) }()
	go func() { defer wg.Done(); fp.run(b.qp.QPN(), burst, stop) }()
	defer func() { close(stop); wg.Wait() }()

	// The well-behaved traffic: SENDs with data checks and WRITEs
	// read back, one message at a time.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range msgs {
		data := a.buf[:size]
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		postRecv(t, b, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.mr.SGE(0, size)}})
		if i%2 == 0 {
			post(t, a, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, size)}})
		} else {
			post(t, a, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, ImmData: uint32(i),
				SGL: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		}
		wc := waitWC(t, a.cq, 1)[0]
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("message %d: sender completion %+v", i, wc)
		}
		wc = waitWC(t, b.cq, 1)[0]
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("message %d: receiver completion %+v", i, wc)
		}
		b.sync()
		if !bytes.Equal(b.buf[:size], data) {
			t.Fatalf("message %d: data corrupted", i)
		}
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close

	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := b.dev.Stats()
	t.Logf("%d foreign and %d peer-address hostile packets during %d good messages; heap %d -> %d KiB; drops: BadSrcAddr %d NoQP %d ICRCErr %d parse %d; DupReq %d OutOfSeqReq %d",
		f.sent.Load(), fp.sent.Load(), msgs, before.HeapInuse>>10, after.HeapInuse>>10,
		st["BadSrcAddr"], st["NoQP"], st["ICRCErr"], st["HdrTooShort"]+st["BadTVer"]+st["BadOpcode"]+st["BadPad"]+st["BadPayload"], st["DupReq"], st["OutOfSeqReq"])
	if f.sent.Load() < 1000 || fp.sent.Load() < 1000 {
		t.Fatalf("only %d+%d hostile packets sent", f.sent.Load(), fp.sent.Load())
	}
	if st["BadSrcAddr"] == 0 || st["NoQP"] == 0 {
		t.Errorf("hostile packets not counted: %v", st)
	}
	if st["RemAccessNAK"] != 0 || st["InvReqNAK"] != 0 {
		t.Errorf("hostile requests were executed: %v", st)
	}
	if st["DupReq"]+st["OutOfSeqReq"] == 0 {
		t.Errorf("no out-of-window request from the peer's address was seen: %v", st)
	}
	if s := a.qp.State(); s != verbs.QPStateRTS {
		t.Errorf("peer QP in %v", s)
	}
	if s := b.qp.State(); s != verbs.QPStateRTS {
		t.Errorf("victim QP in %v", s)
	}
	// A bound, not a timing: the flood must not be buffered anywhere.
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 32<<20 {
		t.Errorf("heap grew by %d MiB during the flood", grow>>20)
	}
}
