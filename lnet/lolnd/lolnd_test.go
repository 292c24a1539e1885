package lolnd_test

import (
	"bytes"
	"testing"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lolnd"
	"softib/wire/lnetwire"
)

func TestStartup(t *testing.T) {
	var l lolnd.LND
	if l.Type() != lnetwire.LOLND {
		t.Fatal("type")
	}
	ni := lnd.NewNI(nil, lnd.NIConfig{NID: lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.LOLND, 0), 7)})
	d, err := l.Startup(ni)
	if err != nil || ni.NID != lnetwire.NIDLo0 {
		t.Fatalf("startup %v %v", ni.NID, err)
	}
	d.Shutdown()
	if l.DefaultTunables().Credits < 1<<20 {
		t.Fatal("loopback credits should be effectively unlimited")
	}
}

// TestSelfPut sends to the instance's own network NID: it goes through
// the loopback LND with the payload copied between MDs.
func TestSelfPut(t *testing.T) {
	in, err := lnet.New(lnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	eq, _ := in.EQAlloc(8, nil)
	me, _ := in.MEAttach(3, lnetwire.ProcessIDAny, 1, 0, lnet.AutoUnlink, lnet.InsAfter)
	dst := make([][]byte, 3)
	for i := range dst {
		dst[i] = make([]byte, 7)
	}
	in.MDAttach(me, lnet.MD{IOV: dst, Threshold: 1, Options: lnet.MDOpPut, EQ: eq}, lnet.AutoUnlink)
	src := []byte("0123456789abcdefghij")
	h, _ := in.MDBind(lnet.MD{IOV: [][]byte{src[:3], src[3:]}, Threshold: 1, EQ: eq}, lnet.AutoUnlink)
	if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: in.PID()}, 3, 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ev, _, err := in.EQPoll([]*lnet.EQ{eq}, 5*time.Second)
		if err != nil || ev.Status != nil {
			t.Fatalf("event %v: %v %v", ev.Type, err, ev.Status)
		}
	}
	got := bytes.Join(dst, nil)[:len(src)]
	if !bytes.Equal(got, src) {
		t.Fatalf("got %q", got)
	}
}
