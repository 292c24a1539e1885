package o2iblnd_test

import (
	"bytes"
	"testing"

	"softib/lnet"
	"softib/lnet/o2iblnd"
	"softib/wire/lnetwire"
)

// TestLazyPortal: messages arriving on a lazy portal with nothing posted
// wait in the core (their IMMEDIATE buffers, or the PUT_REQ unanswered);
// once an MD is attached the core calls Recv later (delayed) and the data
// lands intact.
func TestLazyPortal(t *testing.T) { sim(t, 102, testLazyPortal) }

func testLazyPortal(t *testing.T) {
	a, b := newNode(t, o2iblnd.Config{}), newNode(t, o2iblnd.Config{})
	putGet(t, a, b, 10, 1, 1)
	const portal = 33
	if err := b.in.SetLazyPortal(portal); err != nil {
		t.Fatal(err)
	}
	sizes := []int{100, 3976, 200 << 10}
	srcs := make([][]byte, len(sizes))
	for i, size := range sizes {
		srcs[i] = pattern(size, byte(i+3))
		h, err := a.in.MDBind(lnet.MD{Start: srcs[i], Threshold: 1, EQ: a.eq}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.in.Put(lnetwire.NIDAny, h, lnet.AckReqNo, b.id(), portal, uint64(i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The IMMEDIATEs complete at the sender; the PUT_REQ waits.
	for range 2 {
		if ev := poll(t, a); ev.Type != lnet.EventSend || ev.Status != nil {
			t.Fatalf("sender %v %v", ev.Type, ev.Status)
		}
	}
	bufs := make([][]byte, len(sizes))
	for i, size := range sizes {
		bufs[i] = make([]byte, size)
		me, err := b.in.MEAttach(portal, lnetwire.ProcessIDAny, uint64(i), 0, lnet.AutoUnlink, lnet.InsAfter)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.in.MDAttach(me, lnet.MD{Start: bufs[i], Threshold: 1, Options: lnet.MDOpPut, EQ: b.eq}, lnet.AutoUnlink); err != nil {
			t.Fatal(err)
		}
	}
	for range sizes {
		if ev := poll(t, b); ev.Type != lnet.EventPut || ev.Status != nil {
			t.Fatalf("receiver %v %v", ev.Type, ev.Status)
		}
	}
	if ev := poll(t, a); ev.Type != lnet.EventSend || ev.Status != nil {
		t.Fatalf("sender %v %v", ev.Type, ev.Status)
	}
	for i := range sizes {
		if !bytes.Equal(bufs[i], srcs[i]) {
			t.Fatalf("%d B delayed PUT: data differs", sizes[i])
		}
	}
}

// TestTruncatedPut: a large PUT into a smaller MD with truncation
// allowed moves only what matched (the source writes at most the sink
// descriptor's size) and reports it in the events.
func TestTruncatedPut(t *testing.T) { sim(t, 103, testTruncatedPut) }

func testTruncatedPut(t *testing.T) {
	a, b := newNode(t, o2iblnd.Config{}), newNode(t, o2iblnd.Config{})
	for i, tc := range []struct{ send, room int }{{100 << 10, 50 << 10}, {3000, 1000}} {
		buf := make([]byte, tc.room)
		me, err := b.in.MEAttach(e2ePortal, lnetwire.ProcessIDAny, uint64(500+i), 0, lnet.AutoUnlink, lnet.InsAfter)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.in.MDAttach(me, lnet.MD{Start: buf, Threshold: 1, Options: lnet.MDOpPut | lnet.MDTruncate, EQ: b.eq}, lnet.AutoUnlink); err != nil {
			t.Fatal(err)
		}
		src := pattern(tc.send, 9)
		h, err := a.in.MDBind(lnet.MD{Start: src, Threshold: 2, EQ: a.eq}, lnet.AutoUnlink)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, b.id(), e2ePortal, uint64(500+i), 0, 0); err != nil {
			t.Fatal(err)
		}
		if ev := poll(t, b); ev.Type != lnet.EventPut || ev.Status != nil || ev.MLength != tc.room || ev.RLength != tc.send {
			t.Fatalf("receiver %v %v mlen %d rlen %d", ev.Type, ev.Status, ev.MLength, ev.RLength)
		}
		for range 2 {
			if ev := poll(t, a); ev.Status != nil || (ev.Type == lnet.EventAck && ev.MLength != tc.room) {
				t.Fatalf("sender %v %v mlen %d", ev.Type, ev.Status, ev.MLength)
			}
		}
		if !bytes.Equal(buf, src[:tc.room]) {
			t.Fatal("truncated data differs")
		}
	}
}
