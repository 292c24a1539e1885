package rxe_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"softib/internal/stats"
	"softib/rxe"
	"softib/udp"
	"softib/verbs"
)

// groDev opens a device on its own UDP socket with GRO on. The socket is
// passed as Config.Conn so that its counters can be checked too; Open
// builds the same socket from Config.UDP. The port is ephemeral, so that
// no other test process (whose QPs may still retransmit to an address
// they used on port 4791) can reach the device.
func groDev(t testing.TB, cfg rxe.Config, uc udp.Config) (*rxe.Device, *udp.Socket) {
	t.Helper()
	addr := testAddr()
	s, err := udp.Listen(netip.AddrPortFrom(addr, 0), &uc)
	if err != nil {
		t.Fatal(err)
	}
	if _, gro := s.Offloads(); !gro && !uc.DisableGRO {
		s.Close()
		t.Fatal("kernel refused UDP_GRO")
	}
	cfg.Conn = s
	cfg.Addr = addr
	return openDev(t, cfg), s
}

// malformed is the sum of the device counters that a datagram cut or
// merged wrongly on receive would show up in.
func malformed(st map[string]uint64) uint64 {
	return st["HdrTooShort"] + st["BadTVer"] + st["BadOpcode"] + st["BadPad"] + st["BadPayload"] + st["BadLength"] +
		st["BadResp"] + st["ICRCErr"] + st["NoQP"] + st["BadQPType"] + st["BadPKey"] + st["BadSrcAddr"]
}

// TestGRORepro streams 1 MiB RDMA WRITEs and READs between two devices
// whose sockets receive with UDP GRO, and checks that no datagram was
// split wrongly (no malformed-packet drops, no truncation) and that
// nothing had to be retransmitted.
func TestGRORepro(t *testing.T) {
	const size = 1 << 20
	iters := 8
	if testing.Short() {
		iters = 2
	}
	for _, tc := range []struct {
		name string
		mtu  verbs.MTU
		net  int
		uc   udp.Config
	}{
		{"mtu1024", verbs.MTU1024, 0, udp.Config{}},
		{"mtu4096", verbs.MTU4096, 9000, udp.Config{}},
		{"mtu4096-batch8", verbs.MTU4096, 9000, udp.Config{BatchSize: 8}},
		{"mtu4096-busypoll", verbs.MTU4096, 9000, udp.Config{BusyPoll: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: tc.net}}
			da, sa := groDev(t, cfg, tc.uc)
			db, sb := groDev(t, cfg, tc.uc)
			a, b := newEnd(t, da, verbs.QPTypeRC, 3*size), newEnd(t, db, verbs.QPTypeRC, 3*size)
			// A 4 s local ACK timeout (20): the test counts any
			// retransmission as a failure, and under -race on a loaded
			// 2-core machine a 1 MiB READ response can take longer than
			// the default 0.5 s, whose spurious retransmission then
			// shows up as duplicate responses (BadResp).
			connect(t, a, b, connOpts{mtu: tc.mtu, timeout: 20})
			connect(t, b, a, connOpts{mtu: tc.mtu, timeout: 20})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("a: %v\nudp a: %v", da.Stats(), stats.Snapshot(&sa.Stats))
					t.Logf("b: %v\nudp b: %v", db.Stats(), stats.Snapshot(&sb.Stats))
				}
			})
			for it := range iters {
				// Several WRs in flight, so GSO runs and GRO
				// super-datagrams of both streams interleave.
				const depth = 4
				const chunk = size / depth
				fill(a.buf[:size], uint64(it))
				clear(b.buf)
				b.sync()
				var wrs []verbs.SendWR
				for k := range depth {
					wrs = append(wrs, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{a.mr.SGE(k*chunk, chunk)}, RemoteAddr: b.mr.Addr() + uint64(k*chunk), RKey: b.mr.RKey()})
				}
				wrs = append(wrs, verbs.SendWR{ID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr() + size, RKey: b.mr.RKey()})
				post(t, a, wrs...)
				for _, wc := range waitWC(t, a.cq, len(wrs)) {
					wantOK(t, wc, verbs.WCRDMAWrite)
				}
				b.sync()
				if !bytes.Equal(b.buf[:size], a.buf[:size]) || !bytes.Equal(b.buf[size:2*size], a.buf[:size]) {
					t.Fatalf("iteration %d: written data differs", it)
				}
				// READ both halves back into a's upper half, while b
				// writes into a: responses and requests cross.
				clear(a.buf[size:])
				a.sync()
				post(t, a, verbs.SendWR{ID: 20, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{a.mr.SGE(size, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
				post(t, b, verbs.SendWR{ID: 21, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{b.mr.SGE(size, size/2)}, RemoteAddr: a.mr.Addr() + 2*size, RKey: a.mr.RKey()})
				wantOK(t, waitWC(t, a.cq, 1)[0], verbs.WCRDMARead)
				wantOK(t, waitWC(t, b.cq, 1)[0], verbs.WCRDMAWrite)
				a.sync()
				if !bytes.Equal(a.buf[size:2*size], a.buf[:size]) || !bytes.Equal(a.buf[2*size:2*size+size/2], b.buf[size:size+size/2]) {
					t.Fatalf("iteration %d: read data differs", it)
				}
			}
			for _, d := range []struct {
				name      string
				dev, pdev *rxe.Device
				s         *udp.Socket
			}{{"a", da, db, sa}, {"b", db, da, sb}} {
				st := d.dev.Stats()
				us := stats.Snapshot(&d.s.Stats)
				// Only the peer sends to this socket: more datagrams
				// out of ReadBatch than the peer sent means some were
				// split wrongly (fewer would be loss).
				// The peer counts a send when sendmmsg returns, which
				// may be after this side read it: give it a moment.
				rx, tx := us["RxDatagrams"], rxe.TxDatagrams(d.pdev)
				for end := time.Now().Add(2 * time.Second); rx > tx && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
					tx = rxe.TxDatagrams(d.pdev)
				}
				if rx > tx {
					t.Errorf("device %s: received %d datagrams, peer sent %d", d.name, rx, tx)
				}
				if m := malformed(st); m != 0 {
					t.Errorf("device %s: %d malformed datagrams dropped", d.name, m)
				}
				if us["RxTruncated"] != 0 {
					t.Errorf("device %s: %d datagrams truncated", d.name, us["RxTruncated"])
				}
				if st["CompRetry"] != 0 || st["RcvSeqErr"] != 0 || st["OutOfSeqReq"] != 0 || st["RxQueueFull"] != 0 {
					t.Errorf("device %s: retransmissions: %s", d.name, fmtCounters(st, "CompRetry", "RcvSeqErr", "OutOfSeqReq", "DupReq", "RxQueueFull"))
				}
				t.Logf("device %s: GRO splits %d, GSO batches %d, rx syscalls %d, rx datagrams %d", d.name,
					us["RxGROSplit"], us["TxGSOBatches"], us["RxSyscalls"], us["RxDatagrams"])
			}
		})
	}
}

func fmtCounters(st map[string]uint64, names ...string) string {
	var b bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%d ", n, st[n])
	}
	return b.String()
}
