package selftest

import "fmt"

// Bulk data patterns. check=simple writes a 16-byte header at the start of
// every 4 KiB page: brwMagic, then the seed XOR the page number; only the
// headers are verified. check=full fills every 8-byte word i with
// seed XOR (i * golden), so every byte depends on the RPC (the seed is the
// request's BulkID, known to both sides) and on its position: a stale,
// shifted or corrupted byte anywhere is detected.
const (
	brwMagic = 0xEEB0EEB1EEB2EEB3
	pageSize = 4096
	golden   = 0x9E3779B97F4A7C15
)

// ParseCheck maps "none", "simple", "full" onto CheckNone, CheckSimple,
// CheckFull.
func ParseCheck(s string) (uint32, error) {
	switch s {
	case "none", "":
		return CheckNone, nil
	case "simple":
		return CheckSimple, nil
	case "full":
		return CheckFull, nil
	}
	return 0, fmt.Errorf("check=%s: want none, simple or full", s)
}

// CheckName is the inverse of ParseCheck.
func CheckName(c uint32) string {
	switch c {
	case CheckSimple:
		return "simple"
	case CheckFull:
		return "full"
	}
	return "none"
}

// putWord stores the low len(b) bytes (up to 8) of v little-endian.
func putWord(b []byte, v uint64) {
	if len(b) >= 8 {
		le.PutUint64(b, v)
		return
	}
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

// wordAt reads up to 8 bytes little-endian.
func wordAt(b []byte) uint64 {
	if len(b) >= 8 {
		return le.Uint64(b)
	}
	var v uint64
	for i := range b {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// FillPattern writes the pattern of check mode c for seed into buf.
// CheckNone leaves buf as it is.
func FillPattern(buf []byte, seed uint64, c uint32) {
	switch c {
	case CheckSimple:
		for off := 0; off < len(buf); off += pageSize {
			page := buf[off:min(off+16, len(buf))]
			putWord(page, brwMagic)
			if len(page) > 8 {
				putWord(page[8:], seed^uint64(off/pageSize))
			}
		}
	case CheckFull:
		i := 0
		for ; i+8 <= len(buf); i += 8 {
			le.PutUint64(buf[i:], seed^(uint64(i/8)*golden))
		}
		if i < len(buf) {
			putWord(buf[i:], seed^(uint64(i/8)*golden))
		}
	}
}

// VerifyPattern checks buf against the pattern FillPattern wrote. It
// returns -1 when it matches, else the offset of the first bad word.
func VerifyPattern(buf []byte, seed uint64, c uint32) int {
	switch c {
	case CheckSimple:
		for off := 0; off < len(buf); off += pageSize {
			page := buf[off:min(off+16, len(buf))]
			n := min(8, len(page))
			if wordAt(page[:n]) != brwMagic&(^uint64(0)>>(64-8*n)) {
				return off
			}
			if len(page) > 8 {
				rest := page[8:]
				want := (seed ^ uint64(off/pageSize)) & (^uint64(0) >> (64 - 8*len(rest)))
				if wordAt(rest) != want {
					return off + 8
				}
			}
		}
	case CheckFull:
		i := 0
		for ; i+8 <= len(buf); i += 8 {
			if le.Uint64(buf[i:]) != seed^(uint64(i/8)*golden) {
				return i
			}
		}
		if i < len(buf) {
			rest := buf[i:]
			want := (seed ^ (uint64(i/8) * golden)) & (^uint64(0) >> (64 - 8*len(rest)))
			if wordAt(rest) != want {
				return i
			}
		}
	}
	return -1
}
