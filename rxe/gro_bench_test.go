package rxe_test

import (
	"net/netip"
	"testing"

	"softib/rxe"
	"softib/udp"
	"softib/verbs"
)

// groBenchWrite measures RC RDMA WRITE bandwidth of size-byte messages
// (32 in flight, path MTU 4096) between two devices whose sockets use uc.
// It reports GB/s and the receiver's udp.ReadBatch recvmmsg calls per
// MiB written (0 when rxe reads a GRO-less socket itself, busypoll.go).
func groBenchWrite(b *testing.B, size int, uc udp.Config) {
	var socks [2]*udp.Socket
	var devs [2]*rxe.Device
	for i := range devs {
		addr := testAddr()
		s, err := udp.Listen(netip.AddrPortFrom(addr, rxe.RoCEv2Port), &uc)
		if err != nil {
			b.Fatal(err)
		}
		socks[i] = s
		cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}, Conn: s}
		cfg.Addr = addr
		devs[i] = openDev(b, cfg)
	}
	x, y := newEnd(b, devs[0], verbs.QPTypeRC, size*writeDepth), newEnd(b, devs[1], verbs.QPTypeRC, size*writeDepth)
	connect(b, x, y, connOpts{mtu: verbs.MTU4096})
	connect(b, y, x, connOpts{mtu: verbs.MTU4096})
	rx0 := socks[1].Stats.RxSyscalls.Load()
	el := streamWrites(b, x, y, size)
	b.StopTimer()
	b.ReportMetric(float64(size)*float64(b.N)/el.Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(socks[1].Stats.RxSyscalls.Load()-rx0)/(float64(size)*float64(b.N)/(1<<20)), "rxsys/MiB")
	if st := devs[0].Stats(); st["CompRetry"] != 0 {
		b.Logf("%d retransmissions", st["CompRetry"])
	}
}

// BenchmarkGROWrite compares RC RDMA WRITE bandwidth with UDP GRO on and
// off, in the same run (BenchmarkRCWrite uses Open's default socket).
func BenchmarkGROWrite(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		b.Run(size.name+"/gro", func(b *testing.B) { groBenchWrite(b, size.n, udp.Config{}) })
		b.Run(size.name+"/nogro", func(b *testing.B) { groBenchWrite(b, size.n, udp.Config{DisableGRO: true}) })
	}
}

// BenchmarkGROWriteLevers measures udp-side settings with GRO on: batch
// size (messages per sendmmsg/recvmmsg) and socket buffer size.
func BenchmarkGROWriteLevers(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		for _, lv := range []struct {
			name string
			uc   udp.Config
		}{
			{"batch16", udp.Config{BatchSize: 16}},
			{"batch64", udp.Config{}},
			{"batch256", udp.Config{BatchSize: 256}},
			{"buf1M", udp.Config{ReadBuffer: 1 << 20, WriteBuffer: 1 << 20}},
			{"buf32M", udp.Config{ReadBuffer: 32 << 20, WriteBuffer: 32 << 20}},
		} {
			b.Run(size.name+"/"+lv.name, func(b *testing.B) { groBenchWrite(b, size.n, lv.uc) })
		}
	}
}
