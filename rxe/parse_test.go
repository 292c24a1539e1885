package rxe

import (
	"testing"

	"softib/wire/roce"
)

// TestRecvParseCounters: every reason roce.Parse (and rxe's transport
// check) rejects a datagram for moves its own device counter, and only
// that one.
func TestRecvParseCounters(t *testing.T) {
	rig := newFuzzRig(t)
	good := seedPacket(roce.UCSendOnly, 0x12, 0, 8, nil)
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, c := range []struct {
		counter string
		pkt     []byte
	}{
		{"HdrTooShort", good[:10]},
		{"HdrTooShort", mut(func(b []byte) []byte { b[1] |= 3 << 4; return b[:roce.BTHSize+roce.ICRCSize] })},
		{"BadTVer", mut(func(b []byte) []byte { b[1] |= 1; return b })},
		{"BadOpcode", mut(func(b []byte) []byte { b[0] = 0x1F; return b })}, // reserved RC opcode
		{"BadOpcode", mut(func(b []byte) []byte { b[0] = 0x51; return b })}, // RD ACKNOWLEDGE: known, but not a transport rxe serves
		{"BadPad", mut(func(b []byte) []byte { return append(b, 0) })},      // length not a multiple of 4
		{"BadPayload", seedPacket(roce.RCAck, 0x11, 0, 4, nil)},             // an ACK with a payload
		{"HdrTooShort", make([]byte, pktBufSize+1)},                         // larger than a packet buffer
	} {
		before := rig.dev.Stats()
		rig.feed(c.pkt)
		after := rig.dev.Stats()
		for k, v := range after {
			want := before[k]
			if k == c.counter {
				want++
			}
			if v != want {
				t.Errorf("% x: %s %d -> %d, want %d (expected %s)", c.pkt[:min(len(c.pkt), 16)], k, before[k], v, want, c.counter)
			}
		}
	}
}
