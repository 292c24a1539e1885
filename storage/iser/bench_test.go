package iser

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"softib/storage/internal/targettest"
	"softib/storage/scsi"
)

// BenchmarkISER measures fio-like patterns through the target from the Go
// initiator over two rxe devices on loopback, queue depth 16, against a
// file LUN; BenchmarkLocalFile reads the same kind of file directly.
func BenchmarkISER(b *testing.B) {
	for _, tc := range targettest.BenchCases {
		b.Run(tc.Name, func(b *testing.B) {
			e := newEnv(b, 4096, 32)
			const size = 256 << 20
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

// BenchmarkLocalFile is the baseline: the same reads straight from a
// FileBackend (O_DIRECT with aligned buffers), one at a time.
func BenchmarkLocalFile(b *testing.B) {
	for _, tc := range []struct {
		name string
		bs   int
		rand bool
	}{{"seq-read-128k", 128 << 10, false}, {"rand-read-4k", 4096, true}} {
		b.Run(tc.name, func(b *testing.B) {
			const size = 256 << 20
			fb, err := scsi.OpenFile(filepath.Join(b.TempDir(), "lun"), size, false)
			if err != nil {
				b.Fatal(err)
			}
			defer fb.Close()
			buf := scsi.AlignedBuf(tc.bs)
			nblk := int64(size / tc.bs)
			r := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(int64(tc.bs))
			for i := 0; b.Loop(); i++ {
				idx := int64(i) % nblk
				if tc.rand {
					idx = r.Int64N(nblk)
				}
				if _, err := fb.ReadAt(buf, idx*int64(tc.bs)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
