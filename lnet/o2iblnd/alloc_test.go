package o2iblnd

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/lnet/lnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// fin is one Finalize call.
type fin struct {
	msg    *lnd.Msg
	status error
}

// stubHost is a minimal lnd.Host: every header is accepted and received
// into preset buffers; finalizations go to a channel.
type stubHost struct {
	drv    atomic.Pointer[Driver]
	preMsg *lnd.Msg
	preBuf [][]byte
	fins   chan fin
}

func (h *stubHost) Parse(ni *lnd.NI, hdr *lnetwire.Header, from lnetwire.NID, private any, rdma bool) error {
	return h.drv.Load().Recv(private, h.preMsg, false, lnd.Whole(h.preBuf), int(hdr.PayloadLength))
}
func (h *stubHost) Finalize(ni *lnd.NI, msg *lnd.Msg, status error) { h.fins <- fin{msg, status} }
func (h *stubHost) CreateReplyMsg(ni *lnd.NI, get *lnd.Msg) (*lnd.Msg, error) {
	return &lnd.Msg{Type: lnetwire.MsgREPLY}, nil
}
func (h *stubHost) SetReplyMsgLen(ni *lnd.NI, reply *lnd.Msg, n int)                    {}
func (h *stubHost) NotifyPeer(ni *lnd.NI, nid lnetwire.NID, alive bool, when time.Time) {}

// startStub starts a driver on a fresh rxe device with a stub host.
func startStub(t *testing.T) (*Driver, *stubHost) {
	t.Helper()
	a := testaddr.Next()
	dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: a}})
	if err != nil {
		t.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	b := a.As4()
	nid := lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.O2IBLND, 0), binary.BigEndian.Uint32(b[:]))
	h := &stubHost{fins: make(chan fin, 64)}
	ni := lnd.NewNI(h, lnd.NIConfig{NID: nid, PID: lnetwire.PIDLustre, LNDConfig: Config{CM: m}})
	drv, err := New(Config{}).Startup(ni)
	if err != nil {
		t.Fatal(err)
	}
	d := drv.(*Driver)
	h.drv.Store(d)
	t.Cleanup(func() {
		d.Shutdown()
		m.Close()
		dev.Close()
	})
	return d, h
}

func waitFin(t *testing.T, h *stubHost) {
	if f := <-h.fins; f.status != nil { // the test timeout is the hang guard
		t.Fatal(f.status)
	}
}

// TestDataPathAllocs: steady-state IMMEDIATE and RDMA PUTs between two
// drivers allocate nothing in o2iblnd (tx descriptors, message buffers,
// work requests, receive buffers and MR registrations are pooled or
// cached).
func TestDataPathAllocs(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("allocation counts are meaningless under -race or -cover")
	}
	for _, size := range []int{0, 3000, 1 << 20} {
		a, ha := startStub(t)
		b, hb := startStub(t)
		hb.preMsg = &lnd.Msg{}
		hb.preBuf = [][]byte{make([]byte, size)}
		src := make([]byte, size)
		m := &lnd.Msg{Type: lnetwire.MsgPUT, Target: lnetwire.ProcessID{NID: b.nid, PID: lnetwire.PIDLustre},
			Payload: lnd.Whole([][]byte{src})}
		m.Hdr = lnetwire.Header{Type: lnetwire.MsgPUT, DestNID: b.nid, SrcNID: a.nid, PayloadLength: uint32(size)}
		round := func() {
			if err := a.Send(m); err != nil {
				t.Fatal(err)
			}
			waitFin(t, ha)
			waitFin(t, hb)
		}
		for range 20 {
			round()
		}
		if n := testing.AllocsPerRun(100, round); n > 0 {
			t.Errorf("%d B: %v allocs per PUT, want 0", size, n)
		}
	}
}
