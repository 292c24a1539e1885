package rxe_test

import (
	"net/netip"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/internal/verbstest"
	"softib/rxe"
	"softib/verbs"
)

// testAddr returns a fresh loopback address unique to this test binary
// (a block it holds a claim on), so that parallel test binaries and other
// softib processes do not collide on 4791 or the source ports.
func testAddr() netip.Addr { return testaddr.Next() }

func openDev(t testing.TB, cfg rxe.Config) *rxe.Device {
	t.Helper()
	return verbstest.Loopback().Open(t, cfg)
}

// end is one side of a connection: a device, PD, CQ, QP and a registered
// buffer (verbstest.End under the short names these tests use).
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

func (e *end) v() *verbstest.End {
	return &verbstest.End{Dev: e.dev, PD: e.pd, CQ: e.cq, Ch: e.ch, QP: e.qp, MR: e.mr, Buf: e.buf}
}

func newEnd(t testing.TB, d *rxe.Device, typ verbs.QPType, bufSize int) *end {
	return newEndHandler(t, d, typ, bufSize, nil)
}

// newEndHandler is newEnd with a completion handler on the CQ (which
// then has no completion channel).
func newEndHandler(t testing.TB, d *rxe.Device, typ verbs.QPType, bufSize int, h func(verbs.CQ)) *end {
	t.Helper()
	v := verbstest.NewEnd(t, d, typ, verbstest.EndOpts{Buf: bufSize, Handler: h})
	return &end{dev: d, pd: v.PD, cq: v.CQ, ch: v.Ch, qp: v.QP, mr: v.MR, buf: v.Buf}
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

func ahTo(d *rxe.Device) verbs.AHAttr { return verbstest.AHTo(d) }

// connect moves e to RTS talking to peer.
func connect(t testing.TB, e, peer *end, o connOpts) {
	t.Helper()
	verbstest.Connect(t, e.v(), peer.v(), verbstest.ConnOpts{MTU: o.mtu, Timeout: o.timeout, Retry: o.retry,
		RNRRetry: o.rnrRetry, MinRNR: o.minRNR, QKey: o.qkey, SQPSN: 0xFFFFF0, Exact: o.exact})
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

func post(t testing.TB, e *end, wrs ...verbs.SendWR) { t.Helper(); verbstest.Post(t, e.v(), wrs...) }

func postRecv(t testing.TB, e *end, wrs ...verbs.RecvWR) {
	t.Helper()
	verbstest.PostRecv(t, e.v(), wrs...)
}

func wantOK(t testing.TB, wc verbs.WC, op verbs.WCOpcode) { t.Helper(); verbstest.WantOK(t, wc, op) }

// sync establishes, for the race detector, happens-before between the
// test and e's engine (see verbstest.End.Sync).
func (e *end) sync() { e.qp.Query() }
