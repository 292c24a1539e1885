package selftest

import "testing"

func TestPatterns(t *testing.T) {
	for _, size := range []int{8, 16, 24, 1000, 4096, 4104, 8192 + 8, 1 << 20} {
		for _, off := range []int{0, 8, 1024, 4088} {
			for _, c := range []uint32{CheckSimple, CheckFull} {
				buf := make([]byte, size)
				FillPattern(buf, off, c, BRWMagic)
				if bad := VerifyPattern(buf, off, c, BRWMagic); bad != -1 {
					t.Fatalf("size %d off %d %s: clean buffer fails at %d", size, off, CheckName(c), bad)
				}
				if VerifyPattern(buf, off, c, BRWPoison) == -1 {
					t.Errorf("size %d off %d %s: poison not detected", size, off, CheckName(c))
				}
			}
		}
	}
}

// TestSimpleLayout pins check=simple to brw_fill_page: the magic at the
// first and last word of each page chunk, chunks cut at the page offset.
func TestSimpleLayout(t *testing.T) {
	buf := make([]byte, 3*pageSize)
	FillPattern(buf, 1024, CheckSimple, BRWMagic)
	var words []int
	for i := 0; i < len(buf); i += 8 {
		if le.Uint64(buf[i:]) == BRWMagic {
			words = append(words, i)
		}
	}
	want := []int{0, 3072 - 8, 3072, 3072 + 4096 - 8, 7168, 7168 + 4096 - 8, 11264, 12288 - 8}
	if len(words) != len(want) {
		t.Fatalf("magic at %v, want %v", words, want)
	}
	for i := range want {
		if words[i] != want[i] {
			t.Fatalf("magic at %v, want %v", words, want)
		}
	}
}

// TestFullDetectsEveryByte flips each byte of a buffer in turn: check=full
// must catch every one, at the word holding it.
func TestFullDetectsEveryByte(t *testing.T) {
	buf := make([]byte, 4096+16)
	FillPattern(buf, 0, CheckFull, BRWMagic)
	for i := range buf {
		buf[i] ^= 0x01
		if off := VerifyPattern(buf, 0, CheckFull, BRWMagic); off != i&^7 {
			t.Fatalf("byte %d flipped: reported offset %d, want %d", i, off, i&^7)
		}
		buf[i] ^= 0x01
	}
}

// TestSimpleChecksEnds: check=simple catches a corrupted first or last
// word of a page and, by design, not a byte in the middle of a page.
func TestSimpleChecksEnds(t *testing.T) {
	buf := make([]byte, 3*pageSize)
	FillPattern(buf, 0, CheckSimple, BRWMagic)
	buf[pageSize+3] ^= 0xFF
	if off := VerifyPattern(buf, 0, CheckSimple, BRWMagic); off != pageSize {
		t.Fatalf("first-word corruption: offset %d, want %d", off, pageSize)
	}
	buf[pageSize+3] ^= 0xFF
	buf[2*pageSize-1] ^= 0xFF
	if off := VerifyPattern(buf, 0, CheckSimple, BRWMagic); off != 2*pageSize-8 {
		t.Fatalf("last-word corruption: offset %d, want %d", off, 2*pageSize-8)
	}
	buf[2*pageSize-1] ^= 0xFF
	buf[pageSize+100] ^= 0xFF
	if off := VerifyPattern(buf, 0, CheckSimple, BRWMagic); off != -1 {
		t.Fatalf("mid-page byte: simple reported %d", off)
	}
	if VerifyPattern(buf, 0, CheckNone, BRWMagic) != -1 {
		t.Fatal("check=none reported a mismatch")
	}
}

func TestPatternAllocs(t *testing.T) {
	buf := make([]byte, 1<<20)
	if n := testing.AllocsPerRun(10, func() {
		FillPattern(buf, 0, CheckFull, BRWMagic)
		VerifyPattern(buf, 0, CheckFull, BRWMagic)
	}); n != 0 {
		t.Fatalf("%v allocations per fill+verify", n)
	}
}

func BenchmarkVerifyFull1M(b *testing.B) {
	buf := make([]byte, 1<<20)
	FillPattern(buf, 0, CheckFull, BRWMagic)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		VerifyPattern(buf, 0, CheckFull, BRWMagic)
	}
}
