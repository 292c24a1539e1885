package rxe_test

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"softib/udp/udptest"
	"softib/verbs"
)

// TestSimNetUnreliable: UC and UD over a lossy, reordering, corrupting
// network. Every send completes locally; what arrives is intact and never
// duplicated, and for UC in order (UD has no sequencing: the network's
// reordering shows through, as with rxe).
func TestSimNetUnreliable(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTypeUC, verbs.QPTypeUD} {
		t.Run(typ.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := udptest.NewNetwork(9)
				defer nw.Close()
				const n, size, slot = 64, 3000, 4096
				a, b := simPair(t, nw, typ, connOpts{}, (n+1)*slot)
				nw.SetFaults(udptest.Faults{Drop: 0.1, Reorder: 0.1, Corrupt: 0.05, Delay: 20 * time.Microsecond})
				var ah verbs.AH
				msg := size
				if typ == verbs.QPTypeUD {
					var err error
					if ah, err = a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(b.dev.Addr().Addr()), SGIDIndex: 1}}); err != nil {
						t.Fatal(err)
					}
					msg = 1000 // one packet at MTU 1024
				}
				fill(a.buf, 5)
				for k := range n {
					postRecv(t, b, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{b.mr.SGE(k*slot, slot)}})
				}
				var wrs []verbs.SendWR
				for k := range n {
					wrs = append(wrs, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSendWithImm, ImmData: uint32(k), Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{a.mr.SGE(k*slot, msg)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111})
				}
				post(t, a, wrs...)
				for k, wc := range waitWC(t, a.cq, n) {
					if wc.WRID != uint64(k) || wc.Status != verbs.WCSuccess {
						t.Fatalf("send %d: %+v", k, wc)
					}
				}
				time.Sleep(time.Second) // virtual: let the network drain
				wcs := make([]verbs.WC, n)
				got, _ := b.cq.Poll(wcs)
				b.sync()
				last := -1
				seen := map[int]bool{}
				off := 0
				if typ == verbs.QPTypeUD {
					off = 40
				}
				for i, wc := range wcs[:got] {
					k := int(wc.ImmData)
					if wc.Status != verbs.WCSuccess || seen[k] || (typ == verbs.QPTypeUC && k <= last) || wc.ByteLen != uint32(off+msg) {
						t.Fatalf("receive %d: %+v (previous message %d)", i, wc, last)
					}
					last = k
					seen[k] = true
					// Receive WQEs are consumed in order, so message k
					// landed in the buffer of receive i.
					if !bytes.Equal(b.buf[i*slot+off:i*slot+off+msg], a.buf[k*slot:k*slot+msg]) {
						t.Fatalf("message %d: data differs", k)
					}
				}
				if got == 0 {
					t.Fatal("nothing arrived")
				}
				t.Logf("%d of %d messages arrived; b: %v", got, n, b.dev.Stats())
			})
		})
	}
}
