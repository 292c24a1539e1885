package o2iblnd_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/wire/lnetwire"
)

// TestCreditExhaustion runs 64 concurrent senders in both directions
// over connections with a queue depth of 2 (and 4 posted sends), with
// LNet's own credits high enough that the o2iblnd flow control is what
// throttles: IMMEDIATE, PUT_REQ and GET_REQ compete for send and
// reserved credits. Everything must complete with intact data (no
// deadlock, no credit overflow).
func TestCreditExhaustion(t *testing.T) { sim(t, 113, testCreditExhaustion) }

func testCreditExhaustion(t *testing.T) {
	cfg := o2iblnd.Config{PeerCredits: 2, AllowSmallQueue: true, ConcurrentSends: 2}
	tun := lnd.Tunables{Credits: 1024, PeerCredits: 255}
	var xs [2]*node
	for i := range xs {
		dev, m, a := newDevice(t)
		xs[i] = newNodeTun(t, dev, m, a, cfg, tun)
	}
	const senders = 64
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	sizes := []int{0, 100, 3976, 3977, 20000, 300 << 10}
	var wg sync.WaitGroup
	errs := make(chan error, 2*senders)
	for g := range 2 * senders {
		s, r := xs[g%2], xs[1-g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range rounds {
				size := sizes[(g+k)%len(sizes)]
				if err := putGetPrivate(s, r, size, uint64(g*1000+k)); err != nil {
					errs <- fmt.Errorf("sender %d round %d (%d B): %w", g, k, size, err)
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
	for _, x := range xs {
		st := x.drv().Stats()
		if st.CreditOverflow.Load()+st.Malformed.Load()+st.TxTimeouts.Load() != 0 {
			t.Fatalf("%s: overflow %d malformed %d timeouts %d", x.nid, st.CreditOverflow.Load(), st.Malformed.Load(), st.TxTimeouts.Load())
		}
		t.Logf("%s: %d msgs sent, %d NOOPs, %d RDMA bytes", x.nid, st.TxMsgs.Load(), st.TxNoops.Load(), st.RDMABytes.Load())
	}
}

// putGetPrivate PUTs size bytes with an ACK and GETs them back on private
// EQs, verifying data and events.
func putGetPrivate(s, r *node, size int, bits uint64) error {
	eqS, err := s.in.EQAlloc(16, nil)
	if err != nil {
		return err
	}
	defer s.in.EQFree(eqS)
	eqR, err := r.in.EQAlloc(16, nil)
	if err != nil {
		return err
	}
	defer r.in.EQFree(eqR)
	buf := make([]byte, size)
	me, err := r.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, bits, 0, lnet.AutoUnlink, lnet.InsAfter)
	if err != nil {
		return err
	}
	if _, err := r.in.MDAttach(me, lnet.MD{Start: buf, Threshold: 2, Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote, EQ: eqR}, lnet.AutoUnlink); err != nil {
		return err
	}
	src := pattern(size, byte(bits))
	h, err := s.in.MDBind(lnet.MD{Start: src, Threshold: 2, EQ: eqS}, lnet.AutoUnlink)
	if err != nil {
		return err
	}
	if err := s.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, r.id(), e2ePortal, bits, 0, 0); err != nil {
		return err
	}
	if err := expectEvents(s, eqS, lnet.EventSend, lnet.EventAck); err != nil {
		return err
	}
	if err := expectEvents(r, eqR, lnet.EventPut); err != nil {
		return err
	}
	if !bytes.Equal(buf, src) {
		return fmt.Errorf("PUT data differs")
	}
	back := make([]byte, size)
	gh, err := s.in.MDBind(lnet.MD{Start: back, Threshold: 2, EQ: eqS}, lnet.AutoUnlink)
	if err != nil {
		return err
	}
	if err := s.in.Get(lnetwire.NIDAny, gh, r.id(), e2ePortal, bits, 0); err != nil {
		return err
	}
	if err := expectEvents(s, eqS, lnet.EventSend, lnet.EventReply); err != nil {
		return err
	}
	if err := expectEvents(r, eqR, lnet.EventGet); err != nil {
		return err
	}
	if !bytes.Equal(back, src) {
		return fmt.Errorf("GET data differs")
	}
	return nil
}

// expectEvents waits for the given event types (any order), all
// successful.
func expectEvents(x *node, eq *lnet.EQ, types ...lnet.EventType) error {
	want := map[lnet.EventType]bool{}
	for _, ty := range types {
		want[ty] = true
	}
	for len(want) > 0 {
		ev, _, err := x.in.EQPoll([]*lnet.EQ{eq}, hangGuard)
		if err != nil {
			return fmt.Errorf("waiting for %v: %w", want, err)
		}
		if ev.Status != nil {
			return fmt.Errorf("%v failed: %w", ev.Type, ev.Status)
		}
		delete(want, ev.Type)
	}
	return nil
}
