package lnet_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// TestResponseTracking: an ACK or REPLY that never comes unlinks the MD
// after the transaction timeout with an UNLINK event carrying ErrTimeout;
// responses in time disarm the deadline.
func TestResponseTracking(t *testing.T) {
	for _, c := range []struct {
		name   string
		mode   int
		lose   lnetwire.MsgType
		get    bool
		expire bool
	}{
		{"GET request lost", lnet.TrackBoth, lnetwire.MsgGET, true, true},
		{"REPLY lost", lnet.TrackBoth, lnetwire.MsgREPLY, true, true},
		{"ACK lost", lnet.TrackBoth, lnetwire.MsgACK, false, true},
		{"ACK lost, GET-only tracking", lnet.TrackGet, lnetwire.MsgACK, false, false},
		{"REPLY lost, tracking off", lnet.TrackNone, lnetwire.MsgREPLY, true, false},
		{"nothing lost", lnet.TrackBoth, lnetwire.MsgHELLO, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := lndtest.New(lnetwire.SOCKLND)
				a := newInstance(t, n, nidA, lnd.Tunables{})
				b := newInstance(t, n, nidB, lnd.Tunables{})
				g := lnet.DefaultGlobals()
				g.TransactionTimeout = 10 * time.Second
				g.ResponseTracking = c.mode
				a.SetGlobals(g)
				me, _ := b.MEAttach(4, lnetwire.ProcessIDAny, 0, 0, lnet.Retain, lnet.InsAfter)
				b.MDAttach(me, lnet.MD{Start: make([]byte, 8), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDOpGet | lnet.MDManageRemote}, lnet.Retain)
				n.SetFilter(func(h *lnetwire.Header) lndtest.Action {
					if h.Type == c.lose {
						return lndtest.Drop
					}
					return lndtest.Deliver
				})
				eq, _ := a.EQAlloc(8, nil)
				h, _ := a.MDBind(lnet.MD{Start: make([]byte, 8), Threshold: 2, EQ: eq}, lnet.AutoUnlink)
				target := lnetwire.ProcessID{NID: nidB, PID: 12345}
				if c.get {
					a.Get(lnetwire.NIDAny, h, target, 4, 0, 0)
				} else {
					a.Put(lnetwire.NIDAny, h, lnet.AckReqYes, target, 4, 0, 0, 0)
				}
				evs := drain(t, eq)
				time.Sleep(9 * time.Second)
				synctest.Wait()
				if more := drain(t, eq); len(more) != 0 {
					t.Fatalf("events before the deadline: %v", types(more))
				}
				time.Sleep(2 * time.Second)
				synctest.Wait()
				evs = append(evs, drain(t, eq)...)
				last := evs[len(evs)-1]
				if c.expire {
					if last.Type != lnet.EventUnlink || !errors.Is(last.Status, lnet.ErrTimeout) || !last.Unlinked {
						t.Fatalf("events %v, last %s", types(evs), evStr(last))
					}
					if err := a.MDUnlink(h); !errors.Is(err, lnet.ErrNoEnt) {
						t.Fatalf("MD still linked: %v", err)
					}
				} else {
					for _, ev := range evs {
						if ev.Type == lnet.EventUnlink {
							t.Fatalf("unexpected UNLINK: %v", types(evs))
						}
					}
				}
				want := uint64(0)
				if c.expire {
					want = 1
				}
				if st := a.Stats(); st.ResponseTimeouts != want || st.MsgsAlloc != 0 {
					t.Fatalf("stats %+v", st)
				}
				// A response that did not come lowers the health of the
				// peer NI the request went to, once, and nothing is
				// resent (lnet_finalize_expired_responses).
				health := lnet.MaxHealthValue
				if c.expire {
					health -= g.HealthSensitivity
				}
				if h := peerNIHealth(t, a, nidB); h != health {
					t.Fatalf("peer NI health %d, want %d", h, health)
				}
				if hs := a.HealthStats(); hs.ResendCount != 0 || hs.ResponseTimeoutCount != want || hs.RemoteTimeoutCount != 0 {
					t.Fatalf("health stats %+v", hs)
				}
			})
		})
	}
}

// peerNIHealth returns the health value of in's peer NI nid.
func peerNIHealth(t *testing.T, in *lnet.Instance, nid lnetwire.NID) int {
	t.Helper()
	d, ok := in.PeerOf(nid)
	if !ok {
		t.Fatalf("no peer %v", nid)
	}
	for _, ni := range d.NIs {
		if ni.NID == nid {
			return ni.Health
		}
	}
	t.Fatalf("peer %v has no NI %v", d.Primary, nid)
	return 0
}
