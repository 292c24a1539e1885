package socklnd

import (
	"bytes"
	"testing"

	"softib/lnet/lnd"
)

// TestSendManyFragments sends payloads of more fragments than one
// sendmsg(2) takes (maxMoreIov iovecs), so the writer sends a message in
// several calls, all but the last with MSG_MORE, and a burst of them so
// that batches carry many messages: every byte arrives in order.
func TestSendManyFragments(t *testing.T) {
	ips := testIPs(2)
	a := startNode(t, ips[0], baseConfig())
	b := startNode(t, ips[1], baseConfig())
	const msgs = 20
	var want [][]byte
	var sent []*lnd.Msg
	for i := range msgs {
		// 150-400 fragments of 1 to 997 bytes.
		var frags [][]byte
		var all []byte
		for j := range 150 + 13*i {
			f := pattern(1+(j*131+i*17)%997, byte(i+j))
			frags = append(frags, f)
			all = append(all, f...)
		}
		m := putMsg(a.nid, b.nid, nil, uint64(i))
		m.Hdr.PayloadLength = uint32(len(all))
		m.Payload = lnd.Whole(frags)
		if err := a.d.Send(m); err != nil {
			t.Fatal(err)
		}
		want = append(want, all)
		sent = append(sent, m)
	}
	got := map[uint64][]byte{}
	for range msgs {
		r := b.waitRx(t)
		got[r.hdr.MatchBits] = r.data
	}
	for range msgs {
		if err := a.waitFin(t, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range want {
		if !bytes.Equal(got[uint64(i)], w) {
			t.Fatalf("message %d (%d fragments, %d bytes): payload differs", i, len(sent[i].Payload.Frags), len(w))
		}
	}
}
