package socklnd_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/socklnd"
	"softib/wire/lnetwire"
)

// End-to-end tests: lnet.Instances talking over socklnd on loopback.

const (
	e2ePortal = 12
	hangGuard = 30 * time.Second
)

type inst struct {
	in  *lnet.Instance
	lnd *socklnd.LND
	nid lnetwire.NID
	eq  *lnet.EQ
}

func (x *inst) id() lnetwire.ProcessID { return lnetwire.ProcessID{NID: x.nid, PID: x.in.PID()} }
func (x *inst) drv() *socklnd.Driver   { return x.lnd.Driver(x.nid) }

func newInst(t testing.TB, ip string, cfg socklnd.Config) *inst {
	t.Helper()
	nid := lnetwire.MustParseNID(ip + "@tcp")
	l := socklnd.New(cfg)
	in, err := lnet.New(lnet.Config{
		LNDs: []lnd.LND{l},
		Nets: []lnet.NetConfig{{Net: nid.Net(), Addr: nid.Addr()}},
		Log:  socklnd.TestLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	eq, err := in.EQAlloc(4096, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &inst{in: in, lnd: l, nid: nid, eq: eq}
}

func poll(t testing.TB, x *inst) lnet.Event {
	t.Helper()
	ev, _, err := x.in.EQPoll([]*lnet.EQ{x.eq}, hangGuard)
	if err != nil {
		t.Fatalf("EQPoll on %s: %v", x.nid, err)
	}
	return ev
}

// sink attaches an MD of size bytes on x's portal accepting PUT and GET.
func sink(t testing.TB, x *inst, bits uint64, buf []byte) {
	t.Helper()
	me, err := x.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, bits, 0, lnet.Retain, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.in.MDAttach(me, lnet.MD{Start: buf, Threshold: lnet.ThreshInf,
		Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote, EQ: x.eq}, lnet.Retain); err != nil {
		t.Fatal(err)
	}
}

// putGet PUTs size bytes from s to r with an ACK and GETs them back,
// checking the data and the events on both sides.
func putGet(t *testing.T, s, r *inst, size int, bits uint64) {
	t.Helper()
	buf := make([]byte, size)
	sink(t, r, bits, buf)
	src := socklnd.Pattern(size, byte(bits))
	h, err := s.in.MDBind(lnet.MD{Start: src, Threshold: 2, EQ: s.eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, r.id(), e2ePortal, bits, 0, 7); err != nil {
		t.Fatal(err)
	}
	if ev := poll(t, r); ev.Type != lnet.EventPut || ev.Status != nil || ev.MLength != size || ev.Initiator.NID != s.nid {
		t.Fatalf("receiver event %v status %v mlen %d", ev.Type, ev.Status, ev.MLength)
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
		t.Fatalf("SEND: %v", got)
	}
	if e, ok := got[lnet.EventAck]; !ok || e != nil {
		t.Fatalf("ACK: %v", got)
	}
	if !bytes.Equal(buf, src) {
		t.Fatalf("%d B: PUT data differs", size)
	}
	back := make([]byte, size)
	gh, err := s.in.MDBind(lnet.MD{Start: back, Threshold: 2, EQ: s.eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.in.Get(lnetwire.NIDAny, gh, r.id(), e2ePortal, bits, 0); err != nil {
		t.Fatal(err)
	}
	if ev := poll(t, r); ev.Type != lnet.EventGet || ev.Status != nil {
		t.Fatalf("receiver event %v status %v", ev.Type, ev.Status)
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
		t.Fatalf("REPLY: %v", got)
	}
	if !bytes.Equal(back, src) {
		t.Fatalf("%d B: GET data differs", size)
	}
}

func TestE2EPutGet(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*socklnd.Config)
	}{
		{"v3", func(*socklnd.Config) {}},
		{"v2-csum", func(c *socklnd.Config) { c.Version, c.EnableCsum = lnetwire.SockProtoV2, true }},
		{"v1", func(c *socklnd.Config) { c.Version = lnetwire.SockProtoV1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ips := socklnd.TestIPs(2)
			cfg := socklnd.BaseConfig()
			tc.cfg(&cfg)
			a := newInst(t, ips[0], cfg)
			b := newInst(t, ips[1], cfg)
			for i, size := range []int{0, 1, 1000, 4096, 16 << 10, 65537, 1 << 20} {
				putGet(t, a, b, size, uint64(100+i))
			}
			if st := a.drv().Stats(); st.Malformed.Load()+b.drv().Stats().Malformed.Load() != 0 {
				t.Fatal("malformed counted")
			}
		})
	}
}

// TestE2EThreeNodes runs PUT/GET between three instances concurrently.
func TestE2EThreeNodes(t *testing.T) {
	ips := socklnd.TestIPs(3)
	var xs []*inst
	for _, ip := range ips {
		xs = append(xs, newInst(t, ip, socklnd.BaseConfig()))
	}
	// Each node gets its own EQ per direction to keep event streams apart.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i, s := range xs {
		r := xs[(i+1)%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k, size := range []int{0, 4096, 1 << 20} {
				if err := putAck(s, r, size, uint64(1000*i+k)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// putAck PUTs with an ACK on private EQs and verifies the data.
func putAck(s, r *inst, size int, bits uint64) error {
	eqS, _ := s.in.EQAlloc(8, nil)
	eqR, _ := r.in.EQAlloc(8, nil)
	defer s.in.EQFree(eqS)
	defer r.in.EQFree(eqR)
	buf := make([]byte, size)
	me, err := r.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, bits, 0, lnet.AutoUnlink, lnet.InsAfter)
	if err != nil {
		return err
	}
	if _, err := r.in.MDAttach(me, lnet.MD{Start: buf, Threshold: 1, Options: lnet.MDOpPut, EQ: eqR}, lnet.AutoUnlink); err != nil {
		return err
	}
	src := socklnd.Pattern(size, byte(bits))
	h, err := s.in.MDBind(lnet.MD{Start: src, Threshold: 2, EQ: eqS}, lnet.AutoUnlink)
	if err != nil {
		return err
	}
	if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, r.id(), e2ePortal, bits, 0, 0); err != nil {
		return err
	}
	for _, x := range []struct {
		in *lnet.Instance
		eq *lnet.EQ
	}{{r.in, eqR}, {s.in, eqS}, {s.in, eqS}} {
		ev, _, err := x.in.EQPoll([]*lnet.EQ{x.eq}, hangGuard)
		if err != nil {
			return err
		}
		if ev.Status != nil {
			return fmt.Errorf("%v event: %w", ev.Type, ev.Status)
		}
	}
	if !bytes.Equal(buf, src) {
		return fmt.Errorf("%d B from %s: data differs", size, s.nid)
	}
	return nil
}

// TestE2EPeerKilled: the receiver closes while 1 MiB PUTs stream to it.
// Every PUT gets a SEND event; at least one fails; no PUT is ACKed that
// the receiver did not take.
func TestE2EPeerKilled(t *testing.T) {
	ips := socklnd.TestIPs(2)
	a := newInst(t, ips[0], socklnd.BaseConfig())
	b := newInst(t, ips[1], socklnd.BaseConfig())
	var mu sync.Mutex
	received := 0
	me, _ := b.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	b.in.MDAttach(me, lnet.MD{Start: make([]byte, 1<<20), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDManageRemote,
		Handler: func(ev *lnet.Event) {
			if ev.Type == lnet.EventPut && ev.Status == nil {
				mu.Lock()
				received++
				if received == 3 {
					// Kill the receiver in the middle of the stream.
					go b.in.Close()
				}
				mu.Unlock()
			}
		}}, lnet.Retain)
	const n = 48
	src := socklnd.Pattern(1<<20, 1)
	h, _ := a.in.MDBind(lnet.MD{Start: src, Threshold: lnet.ThreshInf, EQ: a.eq}, lnet.Retain)
	sent := 0
	for i := range n {
		if err := a.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, b.id(), e2ePortal, uint64(i), 0, 0); err != nil {
			break
		}
		sent++
	}
	sends, sendFail, acks := 0, 0, 0
	for sends < sent {
		ev := poll(t, a)
		switch ev.Type {
		case lnet.EventSend:
			sends++
			if ev.Status != nil {
				sendFail++
			}
		case lnet.EventAck:
			if ev.Status == nil {
				acks++
			}
		}
	}
	// Late ACKs for PUTs already sent.
	for {
		ev, _, err := a.in.EQPoll([]*lnet.EQ{a.eq}, 200*time.Millisecond)
		if err != nil {
			break
		}
		if ev.Type == lnet.EventAck && ev.Status == nil {
			acks++
		}
	}
	mu.Lock()
	got := received
	mu.Unlock()
	if sendFail == 0 {
		t.Fatalf("%d PUTs, none failed though the peer closed", sent)
	}
	if acks > got {
		t.Fatalf("%d ACKs but the peer received %d PUTs", acks, got)
	}
	t.Logf("sent %d, SEND failures %d, ACKs %d, received %d", sent, sendFail, acks, got)
}

// TestE2EPeerRestart: the peer restarts with the same NID; the sender
// sees the new incarnation and a fresh connection carries the traffic.
func TestE2EPeerRestart(t *testing.T) {
	ips := socklnd.TestIPs(2)
	a := newInst(t, ips[0], socklnd.BaseConfig())
	b := newInst(t, ips[1], socklnd.BaseConfig())
	putGet(t, a, b, 4096, 1)
	oldInc := b.drv().Incarnation()
	b.in.Close()
	waitFor(t, "old connections closed", func() bool { return len(a.drv().Conns(b.nid)) == 0 })
	var b2 *inst
	waitFor(t, "restart", func() bool {
		defer func() { recover() }()
		b2 = newInst(&quietTB{TB: t}, ips[1], socklnd.BaseConfig())
		return true
	})
	if b2.drv().Incarnation() == oldInc {
		t.Fatal("same incarnation")
	}
	// The first attempts may fail while the backoff runs; a PUT then
	// works over a fresh connection.
	buf := make([]byte, 4096)
	sink(t, b2, 2, buf)
	src := socklnd.Pattern(4096, 9)
	waitFor(t, "PUT after restart", func() bool {
		h, _ := a.in.MDBind(lnet.MD{Start: src, Threshold: 2, EQ: a.eq}, lnet.AutoUnlink)
		if err := a.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, b2.id(), e2ePortal, 2, 0, 0); err != nil {
			return false
		}
		for range 2 {
			if ev := poll(t, a); ev.Status != nil {
				if ev.Type == lnet.EventSend {
					return false
				}
			} else if ev.Type == lnet.EventAck {
				return true
			}
		}
		return false
	})
	// Synchronize with the receiver's event before reading its buffer.
	for {
		if ev := poll(t, b2); ev.Type == lnet.EventPut && ev.Status == nil {
			break
		}
	}
	if !bytes.Equal(buf, src) {
		t.Fatal("data differs after restart")
	}
	if r := a.drv().Stats().PeerReboots.Load(); r != 1 {
		t.Fatalf("PeerReboots %d, want 1", r)
	}
}

// quietTB turns Fatal into a panic that waitFor recovers, so a restart
// can be retried until the old listener is gone.
type quietTB struct{ testing.TB }

func (q *quietTB) Fatal(args ...any) { panic(errors.New(fmt.Sprint(args...))) }

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("hang guard: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
