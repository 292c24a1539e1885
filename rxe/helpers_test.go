package rxe_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/verbs"
)

// testAddr returns a fresh loopback address unique to this test binary
// (a block it holds a claim on), so that parallel test binaries and other
// softib processes do not collide on 4791 or the source ports.
func testAddr() netip.Addr { return testaddr.Next() }

func openDev(t testing.TB, cfg rxe.Config) *rxe.Device {
	t.Helper()
	if !cfg.Addr.IsValid() && cfg.Conn == nil {
		cfg.Addr = testAddr()
	}
	d, err := rxe.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d.(*rxe.Device)
}

// end is one side of a connection: a device, PD, CQ, QP and a registered
// buffer.
type end struct {
	dev *rxe.Device
	pd  verbs.PD
	cq  verbs.CQ
	ch  *verbs.CompChannel
	qp  verbs.QP
	mr  verbs.MR
	buf []byte

	ticker *time.Ticker // hang-guard tick for blocking waits (guard)
}

// guard returns a 1 s ticker, made once per end so that waits that use
// it as a hang guard do not allocate.
func (e *end) guard() *time.Ticker {
	if e.ticker == nil {
		e.ticker = time.NewTicker(time.Second)
	}
	return e.ticker
}

func newEnd(t testing.TB, d *rxe.Device, typ verbs.QPType, bufSize int) *end {
	return newEndHandler(t, d, typ, bufSize, nil)
}

// newEndHandler is newEnd with a completion handler on the CQ (which
// then has no completion channel).
func newEndHandler(t testing.TB, d *rxe.Device, typ verbs.QPType, bufSize int, h func(verbs.CQ)) *end {
	t.Helper()
	e := &end{dev: d}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	attr := verbs.CQAttr{CQE: 4096, Handler: h}
	if h == nil {
		e.ch = verbs.NewCompChannel(0)
		attr.Channel = e.ch
	}
	if e.cq, err = d.CreateCQ(attr); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInlineData: 400}})
	if err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, bufSize)
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if e.mr, err = e.pd.RegMR(e.buf, all); err != nil {
		t.Fatal(err)
	}
	return e
}

type connOpts struct {
	mtu      verbs.MTU
	timeout  uint8
	retry    uint8
	rnrRetry uint8
	minRNR   uint8
	qkey     uint32
	exact    bool // use timeout, retry, rnrRetry as given (0 included)
}

func (o *connOpts) defaults() {
	if o.exact {
		if o.mtu == 0 {
			o.mtu = verbs.MTU1024
		}
		if o.qkey == 0 {
			o.qkey = 0x11111111
		}
		return
	}
	if o.mtu == 0 {
		o.mtu = verbs.MTU1024
	}
	if o.timeout == 0 {
		// 0.5 s: the shared CI machines delay loopback datagrams by tens
		// of ms under load, which the rxe-typical 67 ms (14) would turn
		// into spurious retransmissions.
		o.timeout = 17
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.qkey == 0 {
		o.qkey = 0x11111111
	}
}

func ahTo(d *rxe.Device) verbs.AHAttr {
	a := d.Addr()
	return verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(a.Addr()), SGIDIndex: 1, HopLimit: 64}, DPort: a.Port()}
}

// connect moves e to RTS talking to peer.
func connect(t testing.TB, e, peer *end, o connOpts) {
	t.Helper()
	o.defaults()
	typ := e.qp.Type()
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	mod := func(a verbs.QPAttr, m verbs.QPAttrMask) {
		t.Helper()
		if err := e.qp.Modify(&a, m); err != nil {
			t.Fatal(err)
		}
	}
	switch typ {
	case verbs.QPTypeUD:
		mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: o.qkey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
		mod(verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
		mod(verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		return
	case verbs.QPTypeGSI:
		mod(verbs.QPAttr{State: verbs.QPStateInit, QKey: rxe.GSIQKey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrQKey)
		mod(verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
		mod(verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		return
	}
	mod(verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: all}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	rtr := verbs.QPAttr{State: verbs.QPStateRTR, AH: ahTo(peer.dev), PathMTU: o.mtu, DestQPN: peer.qp.QPN(), RQPSN: 0xFFFFF0, MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR}
	m := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
	if typ == verbs.QPTypeRC {
		m |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	}
	mod(rtr, m)
	rts := verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0xFFFFF0, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: 16}
	m = verbs.QPAttrState | verbs.QPAttrSQPSN
	if typ == verbs.QPTypeRC {
		m |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
	}
	mod(rts, m)
}

// pair opens two devices and connects one QP of type typ on each.
func pair(t testing.TB, typ verbs.QPType, cfg rxe.Config, o connOpts, bufSize int) (a, b *end) {
	return pairHandlers(t, typ, cfg, o, bufSize, nil, nil)
}

// pairHandlers is pair with completion handlers ha and hb on the CQs
// (nil: a completion channel instead).
func pairHandlers(t testing.TB, typ verbs.QPType, cfg rxe.Config, o connOpts, bufSize int, ha, hb func(verbs.CQ)) (a, b *end) {
	t.Helper()
	da := openDev(t, cfg)
	db := openDev(t, cfg)
	a, b = newEndHandler(t, da, typ, bufSize, ha), newEndHandler(t, db, typ, bufSize, hb)
	connect(t, a, b, o)
	connect(t, b, a, o)
	return a, b
}

// waitWC polls cq until n completions arrived (hang guard: 20 s).
func waitWC(t testing.TB, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wcs := make([]verbs.WC, 64)
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n {
		k, err := cq.Poll(wcs[:min(len(wcs), n-len(out))])
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		out = append(out, wcs[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("timeout: %d of %d completions: %v\nstats: %v", len(out), n, out, rxe.CQDeviceStats(cq))
			}
			cq.(*rxe.CQ).Wait(50 * time.Millisecond)
		}
	}
	return out
}

func post(t testing.TB, e *end, wrs ...verbs.SendWR) {
	t.Helper()
	if n, err := e.qp.PostSend(wrs); err != nil {
		t.Fatalf("post send: %d: %v", n, err)
	}
}

func postRecv(t testing.TB, e *end, wrs ...verbs.RecvWR) {
	t.Helper()
	if n, err := e.qp.PostRecv(wrs); err != nil {
		t.Fatalf("post recv: %d: %v", n, err)
	}
}

func wantOK(t testing.TB, wc verbs.WC, op verbs.WCOpcode) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || wc.Opcode != op {
		t.Fatalf("completion %+v: want %v success (%s)", wc, op, fmt.Sprint(wc.Status))
	}
}

// sync establishes, for the race detector, happens-before between the
// test and e's engine: the responder touches memory only while holding the
// QP mutex, which Query takes. Real peers are separate processes; here the
// causality runs through the kernel socket, which the detector cannot see.
func (e *end) sync() { e.qp.Query() }
