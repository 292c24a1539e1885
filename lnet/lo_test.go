package lnet_test

import (
	"bytes"
	"testing"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

func newLo(t testing.TB) *lnet.Instance {
	t.Helper()
	in, err := lnet.New(lnet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	// A sink on portal 1 for loPut: any bits, any initiator.
	me, err := in.MEAttach(1, lnetwire.ProcessIDAny, 0, ^uint64(0), lnet.Retain, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.MDAttach(me, lnet.MD{Start: make([]byte, 64), Threshold: lnet.ThreshInf, Options: lnet.MDOpPut | lnet.MDManageRemote | lnet.MDTruncate}, lnet.Retain); err != nil {
		t.Fatal(err)
	}
	return in
}

func poll(t testing.TB, in *lnet.Instance, eqs ...*lnet.EQ) lnet.Event {
	t.Helper()
	ev, _, err := in.EQPoll(eqs, 10*time.Second)
	if err != nil {
		t.Fatalf("EQPoll: %v", err)
	}
	return ev
}

func TestLoopbackPutAck(t *testing.T) {
	in := newLo(t)
	eq, _ := in.EQAlloc(16, nil)
	me, err := in.MEAttach(5, lnetwire.ProcessIDAny, 7, 0, lnet.AutoUnlink, lnet.InsAfter)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 100)
	if _, err := in.MDAttach(me, lnet.MD{Start: dst, Threshold: 1, Options: lnet.MDOpPut, EQ: eq}, lnet.AutoUnlink); err != nil {
		t.Fatal(err)
	}
	src := []byte("hello lnet")
	h, err := in.MDBind(lnet.MD{Start: src, Threshold: 2, EQ: eq}, lnet.AutoUnlink)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: in.PID()}, 5, 7, 0, 99); err != nil {
		t.Fatal(err)
	}
	var types []lnet.EventType
	for range 3 {
		ev := poll(t, in, eq)
		if ev.Status != nil {
			t.Fatalf("event %v status %v", ev.Type, ev.Status)
		}
		types = append(types, ev.Type)
	}
	t.Log(types)
	if !bytes.Equal(dst[:len(src)], src) {
		t.Fatalf("data %q", dst[:len(src)])
	}
}
