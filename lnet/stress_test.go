package lnet_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// TestConcurrentTraffic runs PUTs with ACKs and GETs in both directions
// from several goroutines over asynchronous delivery with tight credits,
// checking every exchange completes correctly.
func TestConcurrentTraffic(t *testing.T) {
	p := newPair(t, lnd.Tunables{PeerCredits: 2, Credits: 3})
	p.net.SetAsync(true)
	const workers, rounds, size = 4, 50, 3000
	setup := func(in *lnet.Instance) []byte {
		mem := pattern(size, 9)
		me, _ := in.MEAttach(11, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
		in.MDAttach(me, lnet.MD{Start: mem, Threshold: lnet.ThreshInf, Options: lnet.MDOpGet | lnet.MDManageRemote}, lnet.Retain)
		me2, _ := in.MEAttach(12, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
		in.MDAttach(me2, lnet.MD{Start: make([]byte, size), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDManageRemote}, lnet.Retain)
		return mem
	}
	memA, memB := setup(p.a), setup(p.b)
	var wg sync.WaitGroup
	errs := make(chan string, workers*2)
	run := func(from *lnet.Instance, to lnetwire.ProcessID, remote []byte) {
		defer wg.Done()
		eq, _ := from.EQAlloc(8, nil)
		for r := range rounds {
			data := pattern(size, byte(r))
			h, _ := from.MDBind(lnet.MD{Start: data, Threshold: 2, EQ: eq}, lnet.AutoUnlink)
			from.Put(lnetwire.NIDAny, h, lnet.AckReqYes, to, 12, uint64(r), 0, 0)
			back := make([]byte, size)
			g, _ := from.MDBind(lnet.MD{Start: back, Threshold: 2, EQ: eq}, lnet.AutoUnlink)
			from.Get(lnetwire.NIDAny, g, to, 11, 0, 0)
			seen := map[lnet.EventType]int{}
			for range 4 {
				ev, _, err := from.EQPoll([]*lnet.EQ{eq}, 30*time.Second)
				if err != nil || ev.Status != nil {
					errs <- "event failed"
					return
				}
				seen[ev.Type]++
			}
			if seen[lnet.EventSend] != 2 || seen[lnet.EventAck] != 1 || seen[lnet.EventReply] != 1 {
				errs <- "wrong events"
				return
			}
			if !bytes.Equal(back, remote) {
				errs <- "GET data mismatch"
				return
			}
		}
	}
	for range workers {
		wg.Add(2)
		go run(p.a, p.idB(), memB)
		go run(p.b, p.idA(), memA)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, in := range []*lnet.Instance{p.a, p.b} {
		st := in.Stats()
		if st.MsgsAlloc != 0 || st.Errors != 0 || st.DropCount != 0 {
			t.Errorf("stats %+v", st)
		}
	}
	pi := peerInfo(t, p.a, nidB)
	if pi.TxCredits != 2 || pi.MinTxCredits >= 0 {
		t.Errorf("peer credits %+v", pi)
	}
}

// TestCloseDuringTraffic closes an instance while sends are queued and in
// flight: every SEND completes (with an error) and nothing hangs.
func TestCloseDuringTraffic(t *testing.T) {
	p := newPair(t, lnd.Tunables{PeerCredits: 1, Credits: 2})
	p.net.SetAsync(true)
	var got []uint64
	var mu sync.Mutex
	me, _ := p.b.MEAttach(5, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	p.b.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDManageRemote | lnet.MDTruncate,
		Handler: func(ev *lnet.Event) { mu.Lock(); got = append(got, ev.MatchBits); mu.Unlock() }}, lnet.Retain)
	const n = 100
	eq, _ := p.a.EQAlloc(n, nil)
	for i := range n {
		h, _ := p.a.MDBind(lnet.MD{Start: make([]byte, 10), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
		p.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, p.idB(), 5, uint64(i), 0, 0)
	}
	p.a.Close()
	ok, failed := 0, 0
	for range n {
		ev, _, err := p.a.EQPoll([]*lnet.EQ{eq}, 30*time.Second)
		if err != nil {
			t.Fatalf("missing SEND events: %v (ok %d failed %d)", err, ok, failed)
		}
		if ev.Status == nil {
			ok++
		} else {
			failed++
		}
	}
	mu.Lock()
	delivered := len(got)
	mu.Unlock()
	if delivered != ok {
		t.Errorf("%d delivered but %d SENDs succeeded", delivered, ok)
	}
	if st := p.a.Stats(); st.MsgsAlloc != 0 {
		t.Errorf("messages leaked: %+v", st)
	}
	t.Logf("%d sent, %d failed by the close", ok, failed)
}
