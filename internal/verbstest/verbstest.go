// Package verbstest is the shared verbs test harness for the packages
// above the provider (rxe's own tests, cm, rdmacm and the o2iblnd LND):
// rxe devices on the deterministic simulated network (udp/udptest) or on
// real loopback sockets with addresses unique to the test binary
// (internal/testaddr), a PD/CQ/QP/MR bundle per side, the RESET → INIT →
// RTR → RTS sequence for RC, UC, UD and GSI QPs, posting, waiting for work
// completions under a hang guard, and data patterns.
//
// It is a test double: only _test files may import it (internal/layers
// gives it a rule of its own and lists it in no production allow list), so
// cm and rdmacm tests can reach for rxe without cm or rdmacm depending on a
// provider.
//
// Everything here works inside a testing/synctest bubble when the devices
// are on a Sim network created in that bubble: waits block on the CQ's
// condition variable and the hang guard runs on the bubble's fake clock.
package verbstest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/udp/udptest"
	"softib/verbs"
)

// HangGuard bounds every blocking wait: it catches a hang, it does not
// time an operation (a wait that needs it has failed).
const HangGuard = 30 * time.Second

// Net is where test devices live: the simulated network or real loopback
// sockets. The zero value is not usable; use Sim or Loopback.
type Net struct {
	// Sim is the simulated network, nil for loopback sockets.
	Sim  *udptest.Network
	next atomic.Uint32
}

// Sim returns a Net on a fresh simulated network with the given seed,
// closed when the test ends. Call it inside the synctest bubble the
// devices run in: the network's timer belongs to that bubble.
func Sim(t testing.TB, seed uint64) *Net {
	t.Helper()
	nw := udptest.NewNetwork(seed)
	t.Cleanup(func() { nw.Close() })
	return &Net{Sim: nw}
}

// Loopback returns a Net whose devices listen on real UDP sockets, each on
// a loopback address unique to this test binary (port 4791).
func Loopback() *Net { return &Net{} }

// Addr returns a fresh device address on n: 10.200.x.y on the simulated
// network (nothing else lives there), a testaddr loopback address
// otherwise.
func (n *Net) Addr() netip.Addr {
	if n.Sim == nil {
		return testaddr.Next()
	}
	k := n.next.Add(1)
	return netip.AddrFrom4([4]byte{10, 200, byte(k >> 8), byte(k)})
}

// Open opens an rxe device on n, closed when the test ends. cfg.Addr
// defaults to n.Addr(); on a Sim net cfg.Conn defaults to an endpoint of
// the network on that address and port 4791.
func (n *Net) Open(t testing.TB, cfg rxe.Config) *rxe.Device {
	t.Helper()
	if !cfg.Addr.IsValid() && cfg.Conn == nil {
		cfg.Addr = n.Addr()
	}
	if n.Sim != nil && cfg.Conn == nil {
		cfg.Conn = n.Sim.Endpoint(netip.AddrPortFrom(cfg.Addr, rxe.RoCEv2Port))
	}
	d, err := rxe.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*rxe.Device)
}

// GID returns the GID of dev's address (GID index 1, RoCEv2).
func GID(dev verbs.Device) verbs.GID { return verbs.GIDFromAddr(dev.(*rxe.Device).Addr().Addr()) }

// AllAccess is every access right a test MR gets.
const AllAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// EndOpts shapes an End. The zero value gives a 4096-entry CQ with a
// completion channel and a QP of 1024 WRs and 32 SGEs each way.
type EndOpts struct {
	Buf     int               // bytes of the registered buffer
	CQE     int               // CQ size (default 4096)
	Handler func(verbs.CQ)    // CQ completion handler; nil: a completion channel
	Cap     verbs.QPCap       // QP capacities (zero: the defaults above)
	Access  verbs.AccessFlags // MR access (default AllAccess)
	NoQP    bool              // PD, CQ and MR only (the QP comes from elsewhere, e.g. a CM)
}

// End is one side of a connection: a device, PD, CQ, QP and a registered
// buffer.
type End struct {
	Dev verbs.Device
	PD  verbs.PD
	CQ  verbs.CQ
	Ch  *verbs.CompChannel // nil when the CQ has a handler
	QP  verbs.QP
	MR  verbs.MR
	Buf []byte
}

// NewEnd allocates a PD, CQ, MR over a fresh buffer and (unless o.NoQP) a
// QP of type typ on dev.
func NewEnd(t testing.TB, dev verbs.Device, typ verbs.QPType, o EndOpts) *End {
	t.Helper()
	e := &End{Dev: dev}
	var err error
	if e.PD, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	attr := verbs.CQAttr{CQE: o.CQE, Handler: o.Handler}
	if attr.CQE == 0 {
		attr.CQE = 4096
	}
	if o.Handler == nil {
		e.Ch = verbs.NewCompChannel(0)
		attr.Channel = e.Ch
	}
	if e.CQ, err = dev.CreateCQ(attr); err != nil {
		t.Fatal(err)
	}
	if !o.NoQP {
		c := o.Cap
		if c == (verbs.QPCap{}) {
			c = verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInlineData: 400}
		}
		if e.QP, err = e.PD.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: e.CQ, RecvCQ: e.CQ, Cap: c}); err != nil {
			t.Fatal(err)
		}
	}
	e.Buf = make([]byte, o.Buf)
	acc := o.Access
	if acc == 0 {
		acc = AllAccess
	}
	if e.MR, err = e.PD.RegMR(e.Buf, acc); err != nil {
		t.Fatal(err)
	}
	return e
}

// ConnOpts are the connection attributes Connect applies. Zero fields
// take the defaults unless Exact is set.
type ConnOpts struct {
	MTU      verbs.MTU // default 1024
	Timeout  uint8     // local ACK timeout exponent (default 17, 0.5 s)
	Retry    uint8     // default 7
	RNRRetry uint8     // default 7
	MinRNR   uint8     // default 1
	QKey     uint32    // UD Q_Key (default 0x11111111)
	SQPSN    uint32    // both directions' initial PSN (default 0xFFFFF0: wraps early)
	Exact    bool      // use Timeout, Retry, RNRRetry, MinRNR and SQPSN as given (0 included)
}

func (o *ConnOpts) defaults() {
	if o.MTU == 0 {
		o.MTU = verbs.MTU1024
	}
	if o.QKey == 0 {
		o.QKey = 0x11111111
	}
	if o.Exact {
		return
	}
	if o.Timeout == 0 {
		// 0.5 s: the shared CI machines delay loopback datagrams by tens
		// of ms under load, which the rxe-typical 67 ms (14) would turn
		// into spurious retransmissions.
		o.Timeout = 17
	}
	if o.Retry == 0 {
		o.Retry = 7
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = 7
	}
	if o.MinRNR == 0 {
		o.MinRNR = 1
	}
	if o.SQPSN == 0 {
		o.SQPSN = 0xFFFFF0
	}
}

// AHTo is the address vector of dev (GID index 1, its UDP port).
func AHTo(dev verbs.Device) verbs.AHAttr {
	a := dev.(*rxe.Device).Addr()
	return verbs.AHAttr{IsGlobal: true, PortNum: 1, DPort: a.Port(),
		GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(a.Addr()), SGIDIndex: 1, HopLimit: 64}}
}

// Connect moves e's QP from RESET to RTS talking to peer's QP (RC and UC;
// UD and GSI QPs only need their Q_Key and no peer).
func Connect(t testing.TB, e, peer *End, o ConnOpts) {
	t.Helper()
	o.defaults()
	mod := func(a verbs.QPAttr, m verbs.QPAttrMask) {
		t.Helper()
		if err := e.QP.Modify(&a, m); err != nil {
			t.Fatalf("modify to %v: %v", a.State, err)
		}
	}
	typ := e.QP.Type()
	switch typ {
	case verbs.QPTypeUD:
		mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: o.QKey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
		mod(verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
		mod(verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		return
	case verbs.QPTypeGSI:
		mod(verbs.QPAttr{State: verbs.QPStateInit, QKey: rxe.GSIQKey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrQKey)
		mod(verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
		mod(verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		return
	}
	mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: AllAccess},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	rtr := verbs.QPAttr{State: verbs.QPStateRTR, AH: AHTo(peer.Dev), PathMTU: o.MTU, DestQPN: peer.QP.QPN(),
		RQPSN: o.SQPSN, MaxDestRdAtomic: 16, MinRNRTimer: o.MinRNR}
	m := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if typ == verbs.QPTypeRC {
		m |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	mod(rtr, m)
	rts := verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: o.SQPSN, Timeout: o.Timeout, RetryCnt: o.Retry,
		RNRRetry: o.RNRRetry, MaxRdAtomic: 16}
	m = verbs.QPAttrState | verbs.QPAttrSQPSN
	if typ == verbs.QPTypeRC {
		m |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	mod(rts, m)
}

// Pair opens two devices on n with cfg, makes an End of type typ on each
// and connects them both ways.
func Pair(t testing.TB, n *Net, typ verbs.QPType, cfg rxe.Config, eo EndOpts, co ConnOpts) (a, b *End) {
	t.Helper()
	a = NewEnd(t, n.Open(t, cfg), typ, eo)
	b = NewEnd(t, n.Open(t, cfg), typ, eo)
	Connect(t, a, b, co)
	Connect(t, b, a, co)
	return a, b
}

// WaitWC polls cq until n completions arrived and returns them; it fails
// the test after HangGuard. Between polls it blocks on the CQ (rxe CQs) or
// sleeps a millisecond (other providers).
func WaitWC(t testing.TB, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	wcs := make([]verbs.WC, 64)
	deadline := time.Now().Add(HangGuard)
	for len(out) < n {
		k, err := cq.Poll(wcs[:min(len(wcs), n-len(out))])
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		out = append(out, wcs[:k]...)
		if k > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("hang guard: %d of %d completions: %v", len(out), n, out)
		}
		if c, ok := cq.(*rxe.CQ); ok {
			c.Wait(50 * time.Millisecond)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

// WaitOne waits for one completion.
func WaitOne(t testing.TB, cq verbs.CQ) verbs.WC { t.Helper(); return WaitWC(t, cq, 1)[0] }

// Post posts send WRs on e's QP.
func Post(t testing.TB, e *End, wrs ...verbs.SendWR) {
	t.Helper()
	if n, err := e.QP.PostSend(wrs); err != nil {
		t.Fatalf("post send: %d: %v", n, err)
	}
}

// PostRecv posts receive WRs on e's QP.
func PostRecv(t testing.TB, e *End, wrs ...verbs.RecvWR) {
	t.Helper()
	if n, err := e.QP.PostRecv(wrs); err != nil {
		t.Fatalf("post recv: %d: %v", n, err)
	}
}

// WantOK fails the test unless wc is a successful completion of op.
func WantOK(t testing.TB, wc verbs.WC, op verbs.WCOpcode) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || wc.Opcode != op {
		t.Fatalf("completion %+v: want %v success (%s)", wc, op, fmt.Sprint(wc.Status))
	}
}

// Sync establishes, for the race detector, happens-before between the
// test and the engine of e's QP: the responder touches memory only while
// holding the QP mutex, which Query takes. Real peers are separate
// processes; here the causality runs through the socket, which the
// detector cannot see.
func (e *End) Sync() { e.QP.Query() }

// Fill writes pseudo-random bytes seeded by seed into b (no period a
// misplaced offset could hide in).
func Fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// Pattern returns n bytes of Fill's pattern.
func Pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	Fill(b, seed)
	return b
}

// Equal fails the test, naming the first differing offset, unless got
// equals want.
func Equal(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d is %#x, want %#x", what, i, got[i], want[i])
		}
	}
}
