package iser

import (
	"math/rand/v2"
	"testing"

	"softib/storage/internal/targettest"
	"softib/storage/scsi"
)

// BenchmarkISER measures fio-like patterns through the target from the Go
// initiator over two rxe devices on loopback, queue depth 16, against a
// 64 MiB file LUN (written through, no holes); BenchmarkLocalFile does
// the same reads and writes on the same kind of file directly. Each
// reports the process's CPU time per MiB.
func BenchmarkISER(b *testing.B) {
	for _, tc := range targettest.BenchCases {
		b.Run(tc.Name, func(b *testing.B) {
			e := newEnv(b, 4096, 32)
			const size = 64 << 20
			targettest.FileLUN(b, e.st, 1, size, maxBurst)
			in := dialInitiator(b, e.m, e.b, e.tgt.Addr(), 16, tc.BS)
			if st, _ := in.login(testIQN); st != 0 {
				b.Fatal(st)
			}
			blocks := uint32(tc.BS / 512)
			nblk := uint32(size / tc.BS)
			r := rand.New(rand.NewPCG(1, 2))
			data := make([]byte, tc.BS)
			cmds := make([]*cmd, 64)
			b.SetBytes(int64(tc.BS))
			b.ResetTimer()
			cpu := targettest.StartCPU()
			defer func() { cpu.Report(b, int64(b.N)*int64(tc.BS)) }()
			for done, i := 0, uint32(0); done < b.N; {
				n := min(len(cmds), b.N-done)
				for k := range n {
					idx := i % nblk
					if tc.Rand {
						idx = r.Uint32N(nblk)
					}
					i++
					c := &cmd{}
					if tc.Write {
						c.cdb, c.write, c.imm = rw10(scsi.OpWrite10, idx*blocks, uint16(blocks)), data, 8192
					} else {
						c.cdb, c.read = rw10(scsi.OpRead10, idx*blocks, uint16(blocks)), tc.BS
					}
					cmds[k] = c
				}
				in.do(1, cmds[:n])
				for _, c := range cmds[:n] {
					if c.status != scsi.StatusGood {
						b.Fatal(c)
					}
				}
				done += n
			}
		})
	}
}

// BenchmarkLocalFile is the baseline: the same reads and writes straight
// on a FileBackend (O_DIRECT with aligned buffers), one at a time.
func BenchmarkLocalFile(b *testing.B) {
	for _, tc := range targettest.BenchCases {
		b.Run(tc.Name, func(b *testing.B) {
			const size = 64 << 20
			fb, err := scsi.OpenFile(targettest.DataFile(b, size), size, false)
			if err != nil {
				b.Fatal(err)
			}
			defer fb.Close()
			buf := scsi.AlignedBuf(tc.BS)
			nblk := int64(size / tc.BS)
			r := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(tc.BS))
			cpu := targettest.StartCPU()
			n := 0
			for i := 0; b.Loop(); i++ {
				idx := int64(i) % nblk
				if tc.Rand {
					idx = r.Int64N(nblk)
				}
				var err error
				if tc.Write {
					_, err = fb.WriteAt(buf, idx*int64(tc.BS))
				} else {
					_, err = fb.ReadAt(buf, idx*int64(tc.BS))
				}
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			cpu.Report(b, int64(n)*int64(tc.BS))
		})
	}
}
