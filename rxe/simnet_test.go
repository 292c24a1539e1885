package rxe_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"softib/internal/stats"
	"softib/rxe"
	"softib/udp/udptest"
	"softib/verbs"
)

// simPair opens two devices on an in-memory network (inside a synctest
// bubble) and connects one QP pair of type typ.
func simPair(t *testing.T, nw *udptest.Network, typ verbs.QPType, o connOpts, bufSize int) (a, b *end) {
	t.Helper()
	aa := netip.MustParseAddrPort("10.200.0.1:4791")
	ba := netip.MustParseAddrPort("10.200.0.2:4791")
	da := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: aa.Addr()}, Conn: nw.Endpoint(aa)})
	db := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ba.Addr()}, Conn: nw.Endpoint(ba)})
	a, b = newEnd(t, da, typ, bufSize), newEnd(t, db, typ, bufSize)
	connect(t, a, b, o)
	connect(t, b, a, o)
	return a, b
}

var simFaults = []struct {
	name string
	f    udptest.Faults
}{
	{"perfect", udptest.Faults{}},
	{"drop", udptest.Faults{Drop: 0.1}},
	{"duplicate", udptest.Faults{Duplicate: 0.2}},
	{"reorder", udptest.Faults{Reorder: 0.2, ReorderGap: 3}},
	{"corrupt", udptest.Faults{Corrupt: 0.05}},
	{"delay-jitter", udptest.Faults{Delay: 200 * time.Microsecond, Jitter: 300 * time.Microsecond}},
	{"everything", udptest.Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.02, Delay: 50 * time.Microsecond, Jitter: 100 * time.Microsecond}},
}

// TestSimNetRC runs every RC opcode over a faulty network: each WR must
// complete exactly once, in order, successfully, with intact data.
func TestSimNetRC(t *testing.T) {
	for i, sf := range simFaults {
		t.Run(sf.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nw := udptest.NewNetwork(uint64(i + 1))
				defer nw.Close()
				const slot = 16 << 10
				const n = 48
				a, b := simPair(t, nw, verbs.QPTypeRC, connOpts{timeout: 10, retry: 7, rnrRetry: 7, minRNR: 1}, 2*n*slot)
				nw.SetFaults(sf.f)
				fill(a.buf, 11)
				fill(b.buf, 22)
				b.sync()
				orig := bytes.Clone(b.buf)
				sizes := []int{0, 1, 1023, 1024, 1025, 3000, slot}
				ops := []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRSendWithImm,
					verbs.WRRDMAWriteWithImm, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp, verbs.WRSendWithInv}
				var wrs []verbs.SendWR
				var recvs int
				for k := range n {
					op := ops[k%len(ops)]
					size := sizes[k%len(sizes)]
					off := k * slot
					wr := verbs.SendWR{ID: uint64(k), Opcode: op, Flags: verbs.SendSignaled, ImmData: uint32(k),
						RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
					switch op {
					case verbs.WRRDMARead:
						wr.SGL = []verbs.SGE{a.mr.SGE(n*slot+off, size)}
					case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
						wr.SGL = []verbs.SGE{a.mr.SGE(n*slot+off, 8)}
						wr.CompareAdd = binary.NativeEndian.Uint64(orig[off:])
						wr.Swap = uint64(k)
					case verbs.WRSendWithInv:
						// Only fast-reg MRs and type 2 windows are
						// invalidatable; invalidating a free one
						// succeeds, as in rxe.
						mr, err := verbs.AllocMR(b.pd, verbs.MRTypeMemReg, 1)
						if err != nil {
							t.Fatal(err)
						}
						wr.InvalidateRKey = mr.RKey()
						fallthrough
					default:
						wr.SGL = []verbs.SGE{a.mr.SGE(off, size)}
					}
					if op == verbs.WRSend || op == verbs.WRSendWithImm || op == verbs.WRSendWithInv || op == verbs.WRRDMAWriteWithImm {
						postRecv(t, b, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{b.mr.SGE(off, slot)}})
						recvs++
					}
					wrs = append(wrs, wr)
				}
				post(t, a, wrs...)
				wcs := waitWC(t, a.cq, n)
				for k, wc := range wcs {
					if wc.WRID != uint64(k) || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCOpcodeFor(wrs[k].Opcode) {
						t.Fatalf("completion %d: %+v (%v)\nstats a %v\nstats b %v", k, wc, wc.Status.ID(), a.dev.Stats(), b.dev.Stats())
					}
				}
				rwcs := waitWC(t, b.cq, recvs)
				runtime.Gosched()
				b.sync()
				ri := 0
				for k, wr := range wrs {
					off := k * slot
					size := sizes[k%len(sizes)]
					switch wr.Opcode {
					case verbs.WRRDMARead:
						if !bytes.Equal(a.buf[n*slot+off:n*slot+off+size], orig[off:off+size]) {
							t.Fatalf("read %d (%d bytes): data differs", k, size)
						}
					case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
						if got := binary.NativeEndian.Uint64(a.buf[n*slot+off:]); got != binary.NativeEndian.Uint64(orig[off:]) {
							t.Fatalf("atomic %d: orig %x", k, got)
						}
						want := binary.NativeEndian.Uint64(orig[off:]) * 2
						if wr.Opcode == verbs.WRAtomicCmpAndSwp {
							want = uint64(k)
						}
						if got := binary.NativeEndian.Uint64(b.buf[off:]); got != want {
							t.Fatalf("atomic %d: now %x want %x", k, got, want)
						}
					default:
						if !bytes.Equal(b.buf[off:off+size], a.buf[off:off+size]) {
							t.Fatalf("%v %d (%d bytes): data differs", wr.Opcode, k, size)
						}
						if wr.Opcode != verbs.WRRDMAWrite {
							rwc := rwcs[ri]
							ri++
							if rwc.WRID != uint64(k) || rwc.Status != verbs.WCSuccess {
								t.Fatalf("receive for %d: %+v", k, rwc)
							}
							if wr.Opcode != verbs.WRSend && wr.Opcode != verbs.WRSendWithInv && rwc.ImmData != uint32(k) {
								t.Fatalf("receive for %d: imm %d", k, rwc.ImmData)
							}
						}
					}
				}
				if testing.Verbose() {
					t.Logf("network %v\na %v\nb %v", stats.Snapshot(&nw.Stats), a.dev.Stats(), b.dev.Stats())
				}
			})
		})
	}
}
