package rxe_test

import (
	"bytes"
	"testing"

	"softib/internal/verbstest"
	"softib/rxe"
	"softib/verbs"
)

// fill writes verbstest.Fill's pseudo-random pattern.
func fill(b []byte, seed uint64) { verbstest.Fill(b, seed) }

func TestRCSendWriteRead(t *testing.T) {
	const size = 1 << 20
	a, b := pair(t, verbs.QPTypeRC, rxe.Config{}, connOpts{}, 2*size)
	for _, n := range []int{0, 1, 1023, 1024, 1025, 4096, size} {
		fill(a.buf[:n], uint64(n))
		clear(b.buf)
		b.sync()
		// SEND
		postRecv(t, b, verbs.RecvWR{ID: 7, SGL: []verbs.SGE{b.mr.SGE(0, size)}})
		post(t, a, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, n)}})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCSend)
		wc := waitWC(t, b.cq, 1)[0]
		wantOK(t, wc, verbs.WCRecv)
		if wc.ByteLen != uint32(n) || wc.WRID != 7 || !bytes.Equal(b.buf[:n], a.buf[:n]) {
			t.Fatalf("send %d: wc %+v, data equal %v", n, wc, bytes.Equal(b.buf[:n], a.buf[:n]))
		}
		// WRITE
		clear(b.buf)
		b.sync()
		post(t, a, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, n)},
			RemoteAddr: b.mr.Addr() + size, RKey: b.mr.RKey()})
		wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCRDMAWrite)
		b.sync()
		if !bytes.Equal(b.buf[size:size+n], a.buf[:n]) {
			t.Fatalf("write %d: data differs", n)
		}
		b.sync()
		// READ back into a's upper half
		clear(a.buf[size:])
		post(t, a, verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(size, n)},
			RemoteAddr: b.mr.Addr() + size, RKey: b.mr.RKey()})
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("a: %v\nb: %v\nb stats %v", rxe.QPDebug(a.qp), rxe.QPDebug(b.qp), b.dev.Stats())
			}
		})
		wc = waitWC(t, a.cq, 1)[0]
		wantOK(t, wc, verbs.WCRDMARead)
		if !bytes.Equal(a.buf[size:size+n], a.buf[:n]) {
			t.Fatalf("read %d: data differs", n)
		}
	}
}
