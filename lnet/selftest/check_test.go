package selftest

import "testing"

func TestPatterns(t *testing.T) {
	for _, size := range []int{1, 7, 8, 15, 16, 17, 1000, 4096, 4097, 8192 + 9, 1 << 20} {
		for _, c := range []uint32{CheckSimple, CheckFull} {
			buf := make([]byte, size)
			FillPattern(buf, 0xABCDEF, c)
			if off := VerifyPattern(buf, 0xABCDEF, c); off != -1 {
				t.Fatalf("size %d %s: clean buffer fails at %d", size, CheckName(c), off)
			}
			if size >= 16 && VerifyPattern(buf, 0xABCDEE, c) == -1 {
				t.Errorf("size %d %s: wrong seed not detected", size, CheckName(c))
			}
		}
	}
}

// TestFullDetectsEveryByte flips each byte of a buffer in turn: check=full
// must catch every one, at the word holding it.
func TestFullDetectsEveryByte(t *testing.T) {
	buf := make([]byte, 4096+13)
	FillPattern(buf, 42, CheckFull)
	for i := range buf {
		buf[i] ^= 0x01
		if off := VerifyPattern(buf, 42, CheckFull); off != i&^7 {
			t.Fatalf("byte %d flipped: reported offset %d, want %d", i, off, i&^7)
		}
		buf[i] ^= 0x01
	}
}

// TestSimpleChecksHeaders: check=simple catches a corrupted page header
// and, by design, not a byte in the middle of a page.
func TestSimpleChecksHeaders(t *testing.T) {
	buf := make([]byte, 3*pageSize)
	FillPattern(buf, 7, CheckSimple)
	buf[pageSize+3] ^= 0xFF
	if off := VerifyPattern(buf, 7, CheckSimple); off != pageSize {
		t.Fatalf("header corruption: offset %d, want %d", off, pageSize)
	}
	buf[pageSize+3] ^= 0xFF
	buf[pageSize+100] ^= 0xFF
	if off := VerifyPattern(buf, 7, CheckSimple); off != -1 {
		t.Fatalf("mid-page byte: simple reported %d", off)
	}
	if VerifyPattern(buf, 7, CheckNone) != -1 {
		t.Fatal("check=none reported a mismatch")
	}
}

func TestPatternAllocs(t *testing.T) {
	buf := make([]byte, 1<<20)
	if n := testing.AllocsPerRun(10, func() {
		FillPattern(buf, 3, CheckFull)
		VerifyPattern(buf, 3, CheckFull)
	}); n != 0 {
		t.Fatalf("%v allocations per fill+verify", n)
	}
}

func BenchmarkVerifyFull1M(b *testing.B) {
	buf := make([]byte, 1<<20)
	FillPattern(buf, 3, CheckFull)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		VerifyPattern(buf, 3, CheckFull)
	}
}
