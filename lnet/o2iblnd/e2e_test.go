package o2iblnd_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// End-to-end tests: lnet.Instances, each with its own rxe device on a
// loopback address and its own RDMA CM, talking over o2iblnd.

const hangGuard = 60 * time.Second

// e2ePortal is the test portal: one Wireshark's Lustre dissector does not
// claim (12 would be MDS_REQUEST_PORTAL), so tshark leaves payloads alone.
var e2ePortal = 51

// testAddr returns a fresh loopback address unique to this test binary
// (tests on real sockets only).
func testAddr() netip.Addr { return testaddr.Next() }

var testLog = slog.New(slog.DiscardHandler)

func init() {
	if os.Getenv("O2IB_DEBUG") != "" {
		testLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// node is one LNet instance on its own rxe device and RDMA CM.
type node struct {
	in  *lnet.Instance
	lnd *o2iblnd.LND
	nid lnetwire.NID
	eq  *lnet.EQ
	dev verbs.Device
	cm  *rdmacm.Manager
}

func (x *node) id() lnetwire.ProcessID { return lnetwire.ProcessID{NID: x.nid, PID: x.in.PID()} }
func (x *node) drv() *o2iblnd.Driver   { return x.lnd.Driver(x.nid) }

// newDevice opens an rxe device on a fresh address of the test's network
// (netFor: the simulated network inside a sim bubble, else loopback) with
// an RDMA CM on it.
func newDevice(t testing.TB) (verbs.Device, *rdmacm.Manager, netip.Addr) {
	t.Helper()
	a := netFor(t).Addr()
	dev, m := newDeviceAt(t, a)
	return dev, m, a
}

// newDeviceAt opens an rxe device in its default configuration on
// address a of the test's network, with an RDMA CM on it; both are closed
// when the test ends.
func newDeviceAt(t testing.TB, a netip.Addr) (verbs.Device, *rdmacm.Manager) {
	t.Helper()
	dev := netFor(t).Open(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a}})
	m := rdmacm.NewManager(rdmacm.Config{})
	t.Cleanup(func() { m.Close() }) // before the device's (cleanups run last first)
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	return dev, m
}

func newNode(t testing.TB, cfg o2iblnd.Config) *node {
	t.Helper()
	dev, m, a := newDevice(t)
	return newNodeOn(t, dev, m, a, cfg)
}

func newNodeOn(t testing.TB, dev verbs.Device, m *rdmacm.Manager, a netip.Addr, cfg o2iblnd.Config) *node {
	t.Helper()
	return newNodeTun(t, dev, m, a, cfg, lnd.Tunables{})
}

// newNodeTun is newNodeOn with LNet tunables (credits) for the NI.
func newNodeTun(t testing.TB, dev verbs.Device, m *rdmacm.Manager, a netip.Addr, cfg o2iblnd.Config, tun lnd.Tunables) *node {
	t.Helper()
	b := a.As4()
	nid := lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.O2IBLND, 0), uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
	cfg.CM = m
	l := o2iblnd.New(cfg)
	in, err := lnet.New(lnet.Config{
		LNDs: []lnd.LND{l},
		Nets: []lnet.NetConfig{{Net: nid.Net(), Addr: nid.Addr(), Tunables: tun}},
		Log:  testLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	eq, err := in.EQAlloc(4096, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &node{in: in, lnd: l, nid: nid, eq: eq, dev: dev, cm: m}
}

func poll(t testing.TB, x *node) lnet.Event {
	t.Helper()
	ev, _, err := x.in.EQPoll([]*lnet.EQ{x.eq}, hangGuard)
	if err != nil {
		t.Fatalf("EQPoll on %s: %v", x.nid, err)
	}
	return ev
}

// sink attaches an MD over frags on x's portal accepting PUT and GET.
func sink(t testing.TB, x *node, bits uint64, frags [][]byte) {
	t.Helper()
	me, err := x.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, bits, 0, lnet.Retain, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	md := lnet.MD{Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote, EQ: x.eq}
	if len(frags) == 1 {
		md.Start = frags[0]
	} else {
		md.IOV = frags
	}
	if _, err := x.in.MDAttach(me, md, lnet.Retain); err != nil {
		t.Fatal(err)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func split(b []byte, parts int) [][]byte {
	if parts <= 1 || len(b) < parts {
		return [][]byte{b}
	}
	var out [][]byte
	step := len(b) / parts
	for i := range parts {
		end := (i + 1) * step
		if i == parts-1 {
			end = len(b)
		}
		out = append(out, b[i*step:end])
	}
	return out
}

// putGet PUTs size bytes from s to r with an ACK and GETs them back,
// checking data and the events on both sides. frags > 1 splits the
// receiver's buffer into an IOV of that many fragments.
func putGet(t *testing.T, s, r *node, size int, bits uint64, frags int) {
	t.Helper()
	buf := make([]byte, size)
	sink(t, r, bits, split(buf, frags))
	src := pattern(size, byte(bits))
	h, err := s.in.MDBind(lnet.MD{Start: src, Threshold: 2, EQ: s.eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, r.id(), e2ePortal, bits, 0, 7); err != nil {
		t.Fatal(err)
	}
	if ev := poll(t, r); ev.Type != lnet.EventPut || ev.Status != nil || ev.MLength != size || ev.Initiator.NID != s.nid {
		t.Fatalf("%d B: receiver event %v status %v mlen %d", size, ev.Type, ev.Status, ev.MLength)
	}
	got := map[lnet.EventType]error{}
	for range 2 {
		ev := poll(t, s)
		got[ev.Type] = ev.Status
		if ev.Type == lnet.EventAck && ev.MLength != size {
			t.Fatalf("ACK mlength %d", ev.MLength)
		}
	}
	if e, ok := got[lnet.EventSend]; !ok || e != nil {
		t.Fatalf("%d B: SEND: %v", size, got)
	}
	if e, ok := got[lnet.EventAck]; !ok || e != nil {
		t.Fatalf("%d B: ACK: %v", size, got)
	}
	if !bytes.Equal(buf, src) {
		t.Fatalf("%d B: PUT data differs", size)
	}
	back := make([]byte, size)
	md := lnet.MD{Start: back, Threshold: 2, EQ: s.eq}
	if frags > 1 && size >= frags {
		md.IOV = split(back, frags) // the reply lands in several fragments too
	}
	gh, err := s.in.MDBind(md, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Get(lnetwire.NIDAny, gh, r.id(), e2ePortal, bits, 0); err != nil {
		t.Fatal(err)
	}
	if ev := poll(t, r); ev.Type != lnet.EventGet || ev.Status != nil {
		t.Fatalf("%d B: receiver event %v status %v", size, ev.Type, ev.Status)
	}
	got = map[lnet.EventType]error{}
	for range 2 {
		ev := poll(t, s)
		got[ev.Type] = ev.Status
		if ev.Type == lnet.EventReply && ev.MLength != size {
			t.Fatalf("REPLY mlength %d", ev.MLength)
		}
	}
	if e, ok := got[lnet.EventReply]; !ok || e != nil {
		t.Fatalf("%d B: REPLY: %v", size, got)
	}
	if !bytes.Equal(back, src) {
		t.Fatalf("%d B: GET data differs", size)
	}
}

// TestE2EPutGet moves PUTs and GETs of 0 B .. 1 MiB both ways (the
// IMMEDIATE and RDMA paths, one or several sink fragments) between two
// nodes, on the simulated network for each protocol variant and once
// over loopback sockets in the devices' default configuration (GSO and
// GRO on).
func TestE2EPutGet(t *testing.T) {
	for i, tc := range []struct {
		name     string
		cfg      o2iblnd.Config
		frags    int
		loopback bool
	}{
		{"v2", o2iblnd.Config{}, 1, false},
		{"v2-cksum-iov", o2iblnd.Config{Cksum: true}, 3, false},
		{"v1", o2iblnd.Config{Version: lnetwire.KibVersion1}, 1, false},
		{"v2-cksum-iov-loopback", o2iblnd.Config{Cksum: true}, 3, true},
		{"v2-conns_per_peer3", o2iblnd.Config{ConnsPerPeer: 3}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.loopback {
				e2ePutGet(t, tc.cfg, tc.frags)
				return
			}
			sim(t, uint64(300+i), func(t *testing.T) { e2ePutGet(t, tc.cfg, tc.frags) })
		})
	}
}

func e2ePutGet(t *testing.T, cfg o2iblnd.Config, frags int) {
	a := newNode(t, cfg)
	b := newNode(t, cfg)
	for i, size := range []int{0, 1, 1000, 3976, 3977, 4096, 16 << 10, 65537, 1 << 20} {
		putGet(t, a, b, size, uint64(100+i), frags)
	}
	for _, x := range []*node{a, b} {
		st := x.drv().Stats()
		if st.Malformed.Load()+st.CreditOverflow.Load()+st.Stale.Load() != 0 {
			t.Fatalf("%s: malformed %d overflow %d stale %d", x.nid, st.Malformed.Load(), st.CreditOverflow.Load(), st.Stale.Load())
		}
	}
	if a.drv().Stats().TxRDMA.Load() == 0 || b.drv().Stats().RDMABytes.Load() == 0 {
		t.Fatal("no RDMA transfers")
	}
	if frags > 1 && b.drv().Stats().Bounced.Load() == 0 {
		t.Fatal("multi-fragment sink not staged")
	}
	if a.drv().Conns(b.nid)+b.drv().Conns(a.nid) == 0 {
		t.Fatal("no connection")
	}
}

// TestE2EGetNoMatch: a GET of something nobody posted fails (GET_DONE
// with -ENODATA on the RDMA path).
func TestE2EGetNoMatch(t *testing.T) { sim(t, 101, testE2EGetNoMatch) }

func testE2EGetNoMatch(t *testing.T) {
	a, b := newNode(t, o2iblnd.Config{}), newNode(t, o2iblnd.Config{})
	putGet(t, a, b, 10, 1, 1) // connect
	back := make([]byte, 1<<16)
	gh, err := a.in.MDBind(lnet.MD{Start: back, Threshold: 2, EQ: a.eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.in.Get(lnetwire.NIDAny, gh, b.id(), e2ePortal, 999, 0); err != nil {
		t.Fatal(err)
	}
	failed := false
	for range 2 {
		ev := poll(t, a)
		if ev.Status != nil {
			failed = true
		}
		if ev.Type == lnet.EventReply && ev.Status == nil {
			t.Fatalf("REPLY succeeded for an unmatched GET")
		}
		if ev.Unlinked {
			break
		}
	}
	if !failed {
		t.Fatal("no failure event")
	}
}

func (x *node) String() string { return fmt.Sprint(x.nid) }

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }
