package srp

import (
	"math/rand/v2"
	"testing"

	"softib/storage/internal/targettest"
	"softib/storage/scsi"
)

// BenchmarkSRP measures fio-like patterns through the target from the Go
// initiator over two rxe devices on loopback, 16 commands in flight,
// against a 64 MiB file LUN written through (compare storage/iser's
// BenchmarkLocalFile), with the process's CPU time per MiB.
func BenchmarkSRP(b *testing.B) {
	for _, tc := range targettest.BenchCases {
		b.Run(tc.Name, func(b *testing.B) {
			m, src, tgt, st := newEnv(b)
			const size = 64 << 20
			targettest.FileLUN(b, st, 1, size, maxXfer)
			const qd = 16
			in, _ := dial(b, m, src, tgt, 512, qd*tc.BS)
			blocks := uint16(tc.BS / 512)
			nblk := uint32(size / tc.BS)
			r := rand.New(rand.NewPCG(1, 2))
			lun := scsi.EncodeLUN(1)
			b.SetBytes(int64(tc.BS))
			b.ResetTimer()
			cpu := targettest.StartCPU()
			defer func() { cpu.Report(b, int64(b.N)*int64(tc.BS)) }()
			inflight, sent, done := 0, 0, 0
			for done < b.N {
				for inflight < qd && sent < b.N {
					idx := uint32(sent) % nblk
					if tc.Rand {
						idx = r.Uint32N(nblk)
					}
					op := byte(scsi.OpRead10)
					if tc.Write {
						op = scsi.OpWrite10
					}
					s := sent % qd
					iu := in.cmdIU(uint64(sent+1), rw10(op, idx*uint32(blocks), blocks), tc.Write, [2]int{s * tc.BS, tc.BS})
					copy(iu[20:28], lun[:])
					in.send(s, iu)
					sent++
					inflight++
				}
				in.poll()
				for tag, rsp := range in.rsp {
					if rsp[19] != 0 {
						b.Fatalf("tag %d status %#x", tag, rsp[19])
					}
					delete(in.rsp, tag)
					inflight--
					done++
				}
			}
		})
	}
}
