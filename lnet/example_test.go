package lnet_test

import (
	"bytes"
	"fmt"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

// Example shows the basic library use: two instances (joined here by the
// in-memory test LND; a real node lists socklnd or o2iblnd), an ME/MD on
// the receiver, a PUT with ACK, and the events.
func Example() {
	network := lndtest.New(lnetwire.SOCKLND)
	newNode := func(nid string) *lnet.Instance {
		n := lnetwire.MustParseNID(nid)
		in, err := lnet.New(lnet.Config{
			LNDs: []lnd.LND{network.LND()},
			Nets: []lnet.NetConfig{{Net: n.Net(), Addr: n.Addr()}},
		})
		if err != nil {
			panic(err)
		}
		return in
	}
	server, client := newNode("192.168.1.2@tcp"), newNode("192.168.1.1@tcp")
	defer server.Close()
	defer client.Close()

	// Receiver: accept one PUT with match bits 0x42 from anyone on portal 10.
	sEQ, _ := server.EQAlloc(64, nil)
	me, _ := server.MEAttach(10, lnetwire.ProcessIDAny, 0x42, 0, lnet.AutoUnlink, lnet.InsAfter)
	buf := make([]byte, 1<<20)
	server.MDAttach(me, lnet.MD{Start: buf, Threshold: 1, Options: lnet.MDOpPut, EQ: sEQ}, lnet.AutoUnlink)

	// Sender: PUT a buffer and ask for an ACK (threshold 2: SEND + ACK).
	cEQ, _ := client.EQAlloc(64, nil)
	data := []byte("hello, lustre")
	h, _ := client.MDBind(lnet.MD{Start: data, Threshold: 2, EQ: cEQ}, lnet.AutoUnlink)
	target := lnetwire.ProcessID{NID: lnetwire.MustParseNID("192.168.1.2@tcp"), PID: lnetwire.PIDLustre}
	client.Put(lnetwire.NIDAny, h, lnet.AckReqYes, target, 10, 0x42, 0, 0)

	ev, _, _ := server.EQPoll([]*lnet.EQ{sEQ}, 5*time.Second)
	fmt.Println("server:", ev.Type, ev.MLength, "bytes from", ev.Initiator, bytes.Equal(buf[:ev.MLength], data))
	for range 2 {
		ev, _, err := client.EQPoll([]*lnet.EQ{cEQ}, 5*time.Second)
		if err != nil || ev.Status != nil {
			panic(fmt.Sprint(err, ev.Status))
		}
		if ev.Type == lnet.EventAck {
			fmt.Println("client: ACK for", ev.MLength, "bytes")
		}
	}
	// Output:
	// server: PUT 13 bytes from 12345-192.168.1.1@tcp true
	// client: ACK for 13 bytes
}
