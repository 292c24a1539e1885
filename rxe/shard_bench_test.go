package rxe_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// BenchmarkRCWriteQPs streams 64 KiB RDMA WRITEs on N QPs between one
// device pair (each QP in its own goroutine, writeDepth in flight), with
// the default receive shards (GOMAXPROCS) and with one shard, for the
// aggregate bandwidth: what issue #14's "a device uses every core" is
// about. b.N counts WRITEs over all QPs.
func BenchmarkRCWriteQPs(b *testing.B) {
	for _, shards := range []int{0, 1} {
		for _, n := range []int{1, 2, 4, 8} {
			name := fmt.Sprintf("shards=%d/qps=%d", shards, n)
			if shards == 0 {
				name = fmt.Sprintf("shards=default/qps=%d", n)
			}
			b.Run(name, func(b *testing.B) { benchWriteQPs(b, n, shards, 64<<10) })
		}
	}
}

func benchWriteQPs(b *testing.B, n, shards, size int) {
	cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000, RxShards: shards}}
	da, db := openDev(b, cfg), openDev(b, cfg)
	o := connOpts{mtu: verbs.MTU4096}
	xs, ys := make([]*end, n), make([]*end, n)
	for i := range n {
		xs[i], ys[i] = newEnd(b, da, verbs.QPTypeRC, size*writeDepth), newEnd(b, db, verbs.QPTypeRC, size*writeDepth)
		connect(b, xs[i], ys[i], o)
		connect(b, ys[i], xs[i], o)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	sa0, sb0 := rxe.SockStats(xs[0].cq), rxe.SockStats(ys[0].cq)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, y := xs[i], ys[i]
			wcs := make([]verbs.WC, writeDepth)
			wrs := make([]verbs.SendWR, writeDepth)
			for k := range wrs {
				wrs[k] = verbs.SendWR{ID: uint64(k), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{x.mr.SGE(k*size, size)}, RemoteAddr: y.mr.Addr() + uint64(k*size), RKey: y.mr.RKey()}
			}
			mine := b.N / n
			if i < b.N%n {
				mine++
			}
			posted, done := 0, 0
			for done < mine {
				if k := min(writeDepth-(posted-done), mine-posted); k > 0 {
					if _, err := x.qp.PostSend(wrs[:k]); err != nil {
						b.Error(err)
						return
					}
					posted += k
				}
				done += waitSome(b, x.cq, wcs)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.ReportMetric(float64(size)*float64(b.N)/el.Seconds()/1e9, "GB/s")
	// System calls per WRITE on both sides: sendmmsg (requests and
	// ACKs) and recvmmsg; what batching saves shows here.
	sa1, sb1 := rxe.SockStats(xs[0].cq), rxe.SockStats(ys[0].cq)
	if sa1 != nil && sb1 != nil {
		per := func(k string) float64 { return float64(sa1[k]-sa0[k]+sb1[k]-sb0[k]) / float64(b.N) }
		b.ReportMetric(per("TxSyscalls"), "sendmmsg/op")
		b.ReportMetric(per("RxSyscalls"), "recvmmsg/op")
	}
}

// BenchmarkRCWrite8B is the 8-byte RDMA WRITE message rate of one QP
// (writeDepth in flight, every WRITE signalled), perftest's write_bw -s 8.
func BenchmarkRCWrite8B(b *testing.B) {
	benchWriteQPs(b, 1, 0, 8)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
}

// BenchmarkRCSendPingPongShards is BenchmarkRCSendPingPong/spin with one
// receive shard and with two, for the cost of the shards in latency.
func BenchmarkRCSendPingPongShards(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("spin/shards=%d", n), func(b *testing.B) {
			benchPingPongOn(b, rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000, RxShards: n}}, true, verbs.QPTypeRC)
		})
	}
}
