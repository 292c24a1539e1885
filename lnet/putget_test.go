package lnet_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

var sizes = []int{0, 1, 100, 4095, 4096, 65537, 1 << 20}

// split cuts b into n roughly equal fragments.
func split(b []byte, n int) [][]byte {
	var out [][]byte
	step := max(1, (len(b)+n-1)/n)
	for len(b) > step {
		out = append(out, b[:step])
		b = b[step:]
	}
	return append(out, b)
}

func TestPutGetPair(t *testing.T) {
	for _, size := range sizes {
		for _, frags := range []int{1, 3, lnet.MaxIOV} {
			t.Run(fmt.Sprintf("%dB/%dfrags", size, frags), func(t *testing.T) {
				p := newPair(t, lnd.Tunables{})
				testPutGet(t, p.a, p.b, p.eqA, p.eqB, p.idB(), size, frags)
			})
		}
	}
}

func TestPutGetLoopback(t *testing.T) {
	for _, size := range sizes {
		t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
			in := newLo(t)
			eqS, _ := in.EQAlloc(64, nil)
			eqR, _ := in.EQAlloc(64, nil)
			testPutGet(t, in, in, eqS, eqR, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: in.PID()}, size, 2)
		})
	}
}

// testPutGet PUTs size bytes from s to r with an ACK, then GETs them back
// from r's MD, checking data, events and their fields.
func testPutGet(t *testing.T, s, r *lnet.Instance, eqS, eqR *lnet.EQ, target lnetwire.ProcessID, size, frags int) {
	t.Helper()
	const portal, bits = 9, 0x1234
	sink := make([]byte, size)
	me, err := r.MEAttach(portal, lnetwire.ProcessIDAny, bits, 0, lnet.Retain, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	rmd := lnet.MD{IOV: split(sink, frags), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote, EQ: eqR, UserPtr: "recv"}
	if _, err := r.MDAttach(me, rmd, lnet.Retain); err != nil {
		t.Fatal(err)
	}
	src := pattern(size, 3)
	h, err := s.MDBind(lnet.MD{IOV: split(src, frags), Threshold: 2, EQ: eqS, UserPtr: "send"}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(lnetwire.NIDAny, h, lnet.AckReqYes, target, portal, bits, 0, 0xfeed); err != nil {
		t.Fatal(err)
	}
	rev := poll(t, r, eqR)
	if rev.Type != lnet.EventPut || rev.Status != nil || rev.MLength != size || rev.RLength != size ||
		rev.HdrData != 0xfeed || rev.MatchBits != bits || rev.Portal != portal || rev.MD.UserPtr != "recv" || rev.Unlinked {
		t.Fatalf("PUT event %s", evStr(rev))
	}
	got := map[lnet.EventType]lnet.Event{}
	for range 2 {
		ev := poll(t, s, eqS)
		if ev.Status != nil {
			t.Fatalf("%v event failed: %v", ev.Type, ev.Status)
		}
		got[ev.Type] = ev
	}
	if _, ok := got[lnet.EventSend]; !ok {
		t.Fatalf("no SEND event: %v", got)
	}
	ack, ok := got[lnet.EventAck]
	if !ok || ack.MLength != size || ack.MatchBits != bits || ack.MD.UserPtr != "send" {
		t.Fatalf("ACK event %s", evStr(ack))
	}
	lastUnlinked(t, got[lnet.EventSend], ack)
	if !bytes.Equal(sink, src) {
		t.Fatal("PUT data mismatch")
	}

	// GET it back into a fresh buffer.
	back := make([]byte, size)
	gh, err := s.MDBind(lnet.MD{IOV: split(back, frags), Threshold: 2, EQ: eqS}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Get(lnetwire.NIDAny, gh, target, portal, bits, 0); err != nil {
		t.Fatal(err)
	}
	gev := poll(t, r, eqR)
	if gev.Type != lnet.EventGet || gev.Status != nil || gev.MLength != size {
		t.Fatalf("GET event %s", evStr(gev))
	}
	got = map[lnet.EventType]lnet.Event{}
	for range 2 {
		ev := poll(t, s, eqS)
		if ev.Status != nil {
			t.Fatalf("%v event failed: %v", ev.Type, ev.Status)
		}
		got[ev.Type] = ev
	}
	rep, ok := got[lnet.EventReply]
	if !ok || rep.MLength != size {
		t.Fatalf("REPLY event %s", evStr(rep))
	}
	lastUnlinked(t, got[lnet.EventSend], rep)
	if !bytes.Equal(back, src) {
		t.Fatal("GET data mismatch")
	}
	st := s.Stats()
	if st.MsgsAlloc != 0 || st.Errors != 0 {
		t.Fatalf("sender stats %+v", st)
	}
	// Only the ping ME/MD, the two push-target MEs/MDs and the receive
	// ME/MD remain (plus newLo's portal-1 sink on loopback); the
	// AutoUnlink source MDs are gone.
	want := 4
	if s == r {
		want = 5
	}
	if st := r.Stats(); st.MEs != want || st.MDs != want {
		t.Fatalf("receiver stats %+v, want %d MEs and MDs", st, want)
	}
}

// TestPeerFailure: a send that fails in the LND gives a SEND event with an
// error and never an ACK or REPLY; nothing is reported as success.
func TestPeerFailure(t *testing.T) {
	cases := []struct {
		name  string
		setup func(p *pair)
		// sendOK: the SEND itself succeeds (the loss happens later).
		sendOK bool
	}{
		{"peer down", func(p *pair) { p.net.SetDown(nidB, true) }, false},
		{"injected fail", func(p *pair) {
			p.net.SetFilter(func(*lnetwire.Header) lndtest.Action { return lndtest.Fail })
		}, false},
		{"request lost", func(p *pair) {
			p.net.SetFilter(func(h *lnetwire.Header) lndtest.Action {
				if h.Type == lnetwire.MsgPUT || h.Type == lnetwire.MsgGET {
					return lndtest.Drop
				}
				return lndtest.Deliver
			})
		}, true},
		{"response fails", func(p *pair) {
			p.net.SetFilter(func(h *lnetwire.Header) lndtest.Action {
				if h.Type == lnetwire.MsgACK || h.Type == lnetwire.MsgREPLY {
					return lndtest.Fail
				}
				return lndtest.Deliver
			})
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, lnd.Tunables{})
			me, _ := p.b.MEAttach(4, lnetwire.ProcessIDAny, 1, 0, lnet.Retain, lnet.InsAfter)
			buf := make([]byte, 64)
			p.b.MDAttach(me, lnet.MD{Start: buf, Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDOpGet, EQ: p.eqB}, lnet.Retain)
			c.setup(p)
			h, _ := p.a.MDBind(lnet.MD{Start: pattern(64, 1), Threshold: 2, EQ: p.eqA}, lnet.AutoUnlink)
			if err := p.a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, p.idB(), 4, 1, 0, 0); err != nil {
				t.Fatal(err)
			}
			g, _ := p.a.MDBind(lnet.MD{Start: make([]byte, 64), Threshold: 2, EQ: p.eqA}, lnet.AutoUnlink)
			if err := p.a.Get(lnetwire.NIDAny, g, p.idB(), 4, 1, 0); err != nil {
				t.Fatal(err)
			}
			evs := drain(t, p.eqA)
			sends := 0
			for _, ev := range evs {
				switch ev.Type {
				case lnet.EventSend:
					sends++
					if (ev.Status == nil) != c.sendOK {
						t.Errorf("SEND status %v, want ok=%v", ev.Status, c.sendOK)
					}
				default:
					t.Errorf("unexpected %v event (status %v): a failed exchange must not complete", ev.Type, ev.Status)
				}
			}
			if sends != 2 {
				t.Errorf("got events %v, want two SENDs", types(evs))
			}
			for _, ev := range drain(t, p.eqB) {
				if c.name == "response fails" && ev.Type == lnet.EventGet {
					if ev.Status == nil {
						t.Errorf("GET event succeeded though the REPLY failed")
					}
					continue
				}
				if c.name == "response fails" && ev.Type == lnet.EventPut && ev.Status == nil {
					continue // the PUT itself did land
				}
				t.Errorf("target event %v status %v", ev.Type, ev.Status)
			}
			if c.name == "peer down" {
				peers := p.a.Peers()
				i := slices.IndexFunc(peers, func(pi lnet.PeerInfo) bool { return pi.NID == nidB })
				if i < 0 || peers[i].State != "down" {
					t.Errorf("peer table %v, want %v down", peers, nidB)
				}
				// A down peer fails fast with ErrPeerDown.
				h, _ := p.a.MDBind(lnet.MD{Start: nil, Threshold: 1, EQ: p.eqA}, lnet.AutoUnlink)
				p.a.Put(lnetwire.NIDAny, h, lnet.AckReqNo, p.idB(), 4, 1, 0, 0)
				ev := poll(t, p.a, p.eqA)
				if !errors.Is(ev.Status, lnet.ErrPeerDown) {
					t.Errorf("status %v, want ErrPeerDown", ev.Status)
				}
			}
		})
	}
}

func TestNoRoute(t *testing.T) {
	in := newLo(t)
	eq, _ := in.EQAlloc(8, nil)
	h, _ := in.MDBind(lnet.MD{Start: []byte("x"), Threshold: 1, EQ: eq}, lnet.AutoUnlink)
	if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: nidB, PID: 12345}, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	ev := poll(t, in, eq)
	if ev.Type != lnet.EventSend || !errors.Is(ev.Status, lnet.ErrNoRoute) || !ev.Unlinked {
		t.Fatalf("event %s", evStr(ev))
	}
}
