package udptest_test

import (
	"fmt"
	"net/netip"

	"softib/udp"
	"softib/udp/udptest"
)

// A scripted fault: drop the second datagram whose first byte is 0x0C
// (say, an RDMA READ request opcode), deliver the rest.
func ExampleNetwork_SetFilter() {
	nw := udptest.NewNetwork(1)
	defer nw.Close()
	a := nw.Endpoint(netip.MustParseAddrPort("10.0.0.1:4791"))
	b := nw.Endpoint(netip.MustParseAddrPort("10.0.0.2:4791"))

	seen := 0
	nw.SetFilter(func(src, dst netip.AddrPort, pkt []byte) udptest.Verdict {
		if len(pkt) > 0 && pkt[0] == 0x0C {
			if seen++; seen == 2 {
				return udptest.Drop
			}
		}
		return udptest.Pass
	})
	for i := range 4 {
		pkt := []byte{0x0C, byte(i)}
		a.WriteBatch([]udp.Message{{Buf: pkt, N: len(pkt), Addr: b.LocalAddr()}})
	}
	msgs := make([]udp.Message, 4)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 16)
	}
	n, _ := b.ReadBatch(msgs)
	for _, m := range msgs[:n] {
		fmt.Print(m.Buf[1], " ")
	}
	fmt.Println("filtered:", nw.Stats.Filtered.Load())
	// Output: 0 2 3 filtered: 1
}
