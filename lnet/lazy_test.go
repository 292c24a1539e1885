package lnet_test

import (
	"bytes"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

func TestLazyPortal(t *testing.T) {
	t.Run("pair", func(t *testing.T) {
		p := newPair(t, lnd.Tunables{})
		testLazy(t, p.a, p.b, p.eqA, p.eqB, p.idB())
	})
	t.Run("loopback", func(t *testing.T) {
		in := newLo(t)
		eqS, _ := in.EQAlloc(64, nil)
		eqR, _ := in.EQAlloc(64, nil)
		testLazy(t, in, in, eqS, eqR, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: in.PID()})
	})
}

func testLazy(t *testing.T, s, r *lnet.Instance, eqS, eqR *lnet.EQ, target lnetwire.ProcessID) {
	const portal = 6
	if err := r.SetLazyPortal(portal); err != nil {
		t.Fatal(err)
	}
	data := map[uint64][]byte{}
	for _, bits := range []uint64{1, 2, 3} {
		data[bits] = pattern(100, byte(bits))
		h, _ := s.MDBind(lnet.MD{Start: data[bits], Threshold: 2, EQ: eqS}, lnet.AutoUnlink)
		if err := s.Put(lnetwire.NIDAny, h, lnet.AckReqYes, target, portal, bits, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The sends completed (the LND delivered them); no ACK yet, nothing
	// at the target.
	for _, ev := range drain(t, eqS) {
		if ev.Type != lnet.EventSend || ev.Status != nil {
			t.Fatalf("sender event %s", evStr(ev))
		}
	}
	if evs := drain(t, eqR); len(evs) != 0 {
		t.Fatalf("target events before any ME: %v", types(evs))
	}
	if st := r.Stats(); st.Delayed != 3 || st.DropCount != 0 {
		t.Fatalf("stats %+v", st)
	}
	// An ME for bits 2 takes the second message.
	recv := func(bits, ignore uint64) []byte {
		me, _ := r.MEAttach(portal, lnetwire.ProcessIDAny, bits, ignore, lnet.AutoUnlink, lnet.InsAfter)
		buf := make([]byte, 100)
		if _, err := r.MDAttach(me, lnet.MD{Start: buf, Threshold: 1, Options: lnet.MDOpPut, EQ: eqR}, lnet.AutoUnlink); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	buf := recv(2, 0)
	evs := drain(t, eqR)
	if len(evs) != 1 || evs[0].Type != lnet.EventPut || evs[0].MatchBits != 2 || evs[0].MLength != 100 || !evs[0].Unlinked {
		t.Fatalf("events %v", types(evs))
	}
	if !bytes.Equal(buf, data[2]) {
		t.Fatal("delayed PUT data mismatch")
	}
	if evs := drain(t, eqS); len(evs) != 1 || evs[0].Type != lnet.EventAck || evs[0].MatchBits != 2 {
		t.Fatalf("ACK for the delayed PUT: %v", types(evs))
	}
	// A wildcard ME takes the oldest remaining one (FIFO).
	buf = recv(0, ^uint64(0))
	evs = drain(t, eqR)
	if len(evs) != 1 || evs[0].MatchBits != 1 || !bytes.Equal(buf, data[1]) {
		t.Fatalf("events %v", types(evs))
	}
	drain(t, eqS)
	// Clearing drops what is left: no event, no ACK.
	if err := r.ClearLazyPortal(portal); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.DropCount != 1 {
		t.Fatalf("stats after clear %+v", st)
	}
	recv(3, 0)
	if evs := drain(t, eqR); len(evs) != 0 {
		t.Fatalf("cleared message delivered: %v", types(evs))
	}
	if evs := drain(t, eqS); len(evs) != 0 {
		t.Fatalf("sender events after clear: %v", types(evs))
	}
	// No longer lazy: an unmatched PUT is dropped at once.
	h, _ := s.MDBind(lnet.MD{Start: []byte{1}, Threshold: 1}, lnet.AutoUnlink)
	s.Put(lnetwire.NIDAny, h, lnet.AckReqNo, target, portal, 99, 0, 0)
	if st := r.Stats(); st.DropCount != 2 || st.Delayed != 3 {
		t.Fatalf("stats %+v", st)
	}
	// GETs are never delayed.
	r.SetLazyPortal(portal)
	g, _ := s.MDBind(lnet.MD{Start: make([]byte, 4), Threshold: 2, EQ: eqS}, lnet.AutoUnlink)
	s.Get(lnetwire.NIDAny, g, target, portal, 77, 0)
	if st := r.Stats(); st.DropCount != 3 || st.Delayed != 3 {
		t.Fatalf("GET on lazy portal: %+v", st)
	}
	for _, ev := range drain(t, eqS) {
		if ev.Type == lnet.EventReply {
			t.Fatal("REPLY for an unmatched GET")
		}
	}
}
