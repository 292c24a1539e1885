package selftest

import "fmt"

// Bulk data patterns of brw_test.c. The bulk is cut into page chunks:
// the first runs from the buffer's page offset to the end of its page,
// the others are whole 4 KiB pages (the last may be short). A check
// writes the 8-byte magic (native, little-endian, order) into each
// chunk: check=simple at its first and last 8 bytes, check=full in
// every 8-byte word. The data source writes BRWMagic; the sink first
// fills its buffer with BRWPoison, so that data that did not arrive
// fails the check. Clients chunk at their blk_offset, servers at 0.
const (
	BRWMagic  = 0xEEB0EEB1EEB2EEB3
	BRWPoison = 0xBEEFBEEFBEEFBEEF
	pageSize  = 4096
	wordSize  = 8
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

// chunks calls f for each page chunk of a buffer of n bytes starting at
// page offset off.
func chunks(n, off int, f func(start, end int) bool) {
	off %= pageSize
	for start := 0; start < n; {
		end := min(n, start+pageSize-off)
		off = 0
		if !f(start, end) {
			return
		}
		start = end
	}
}

// putWord stores the low len(b) bytes (up to 8) of v little-endian.
func putWord(b []byte, v uint64) {
	if len(b) >= wordSize {
		le.PutUint64(b, v)
		return
	}
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

// wordOK compares up to 8 bytes with the low bytes of v.
func wordOK(b []byte, v uint64) bool {
	if len(b) >= wordSize {
		return le.Uint64(b) == v
	}
	for i := range b {
		if b[i] != byte(v>>(8*i)) {
			return false
		}
	}
	return true
}

// FillPattern writes check c's pattern of magic into buf, chunked at
// page offset off. CheckNone leaves buf as it is.
func FillPattern(buf []byte, off int, c uint32, magic uint64) {
	switch c {
	case CheckSimple:
		chunks(len(buf), off, func(s, e int) bool {
			putWord(buf[s:min(e, s+wordSize)], magic)
			if e-s > wordSize {
				putWord(buf[max(s, e-wordSize):e], magic)
			}
			return true
		})
	case CheckFull:
		chunks(len(buf), off, func(s, e int) bool {
			for i := s; i < e; i += wordSize {
				putWord(buf[i:min(e, i+wordSize)], magic)
			}
			return true
		})
	}
}

// VerifyPattern checks buf against FillPattern's. It returns -1 when it
// matches, else the offset of the first bad word.
func VerifyPattern(buf []byte, off int, c uint32, magic uint64) int {
	bad := -1
	switch c {
	case CheckSimple:
		chunks(len(buf), off, func(s, e int) bool {
			if !wordOK(buf[s:min(e, s+wordSize)], magic) {
				bad = s
			} else if e-s > wordSize && !wordOK(buf[max(s, e-wordSize):e], magic) {
				bad = max(s, e-wordSize)
			}
			return bad < 0
		})
	case CheckFull:
		chunks(len(buf), off, func(s, e int) bool {
			for i := s; i < e; i += wordSize {
				if !wordOK(buf[i:min(e, i+wordSize)], magic) {
					bad = i
					return false
				}
			}
			return true
		})
	}
	return bad
}
