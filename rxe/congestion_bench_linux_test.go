//go:build linux

package rxe_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// BenchmarkRCWriteECN is BenchmarkRCWrite/64KiB with ECN off and on (no
// CE on loopback: the cost of the ECT mark, the received-class control
// message and the per-packet CE check), reporting the process CPU time
// per MB beside the bandwidth.
func BenchmarkRCWriteECN(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("ecn=%v", on), func(b *testing.B) {
			const size = 64 << 10
			cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{NetMTU: 9000}, ECN: rxe.ECNConfig{Enable: on}}
			x, y := pair(b, verbs.QPTypeRC, cfg, connOpts{mtu: verbs.MTU4096}, size*writeDepth)
			var r0, r1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
			el := streamWrites(b, x, y, size)
			syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
			cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
			b.ReportMetric(float64(size)*float64(b.N)/el.Seconds()/1e9, "GB/s")
			b.ReportMetric(float64(cpu.Microseconds())/(float64(size)*float64(b.N)/1e6), "cpu-us/MB")
		})
	}
}
