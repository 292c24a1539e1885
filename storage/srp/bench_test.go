package srp

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"softib/storage/scsi"
)

// BenchmarkSRP measures fio-like patterns through the target from the Go
// initiator over two rxe devices on loopback, 16 commands in flight,
// against a 256 MiB file LUN (compare storage/iser's BenchmarkLocalFile).
func BenchmarkSRP(b *testing.B) {
	for _, tc := range []struct {
		name  string
		bs    int
		write bool
		rand  bool
	}{{"seq-read-128k", 128 << 10, false, false}, {"seq-write-128k", 128 << 10, true, false},
		{"rand-read-4k", 4096, false, true}, {"rand-write-4k", 4096, true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			m, src, tgt, st := newEnv(b)
			const size = 256 << 20
			fb, err := scsi.OpenFile(filepath.Join(b.TempDir(), "lun"), size, false)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.AddLUN(1, fb, scsi.LUNConfig{MaxTransfer: maxXfer}); err != nil {
				b.Fatal(err)
			}
			const qd = 16
			in, _ := dial(b, m, src, tgt.Addr(), 512, qd*tc.bs)
			blocks := uint16(tc.bs / 512)
			nblk := uint32(size / tc.bs)
			r := rand.New(rand.NewPCG(1, 2))
			lun := scsi.EncodeLUN(1)
			b.SetBytes(int64(tc.bs))
			b.ResetTimer()
			inflight, sent, done := 0, 0, 0
			for done < b.N {
				for inflight < qd && sent < b.N {
					idx := uint32(sent) % nblk
					if tc.rand {
						idx = r.Uint32N(nblk)
					}
					op := byte(scsi.OpRead10)
					if tc.write {
						op = scsi.OpWrite10
					}
					s := sent % qd
					iu := in.cmdIU(uint64(sent+1), rw10(op, idx*uint32(blocks), blocks), tc.write, [2]int{s * tc.bs, tc.bs})
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
