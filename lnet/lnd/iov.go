package lnd

// IOV describes a byte range of a scatter list: Len bytes starting Offset
// bytes into the concatenation of Frags (an MD's iov, at most 256
// fragments). It never owns or copies the memory it names. The core builds
// IOVs with Offset+Len within the fragments; methods clamp anyway.
type IOV struct {
	Frags  [][]byte
	Offset int
	Len    int
}

// Whole returns an IOV covering all of frags.
func Whole(frags [][]byte) IOV {
	n := 0
	for _, f := range frags {
		n += len(f)
	}
	return IOV{Frags: frags, Len: n}
}

// Slice returns the sub-range [off, off+n) of v, clamped to v.
func (v IOV) Slice(off, n int) IOV {
	off = max(0, min(off, v.Len))
	n = max(0, min(n, v.Len-off))
	return IOV{Frags: v.Frags, Offset: v.Offset + off, Len: n}
}

// Walk calls fn with each contiguous piece of the range in order, stopping
// early when fn returns false. Pieces alias the fragments.
func (v IOV) Walk(fn func(b []byte) bool) {
	skip, left := v.Offset, v.Len
	for _, f := range v.Frags {
		if left <= 0 {
			return
		}
		if skip >= len(f) {
			skip -= len(f)
			continue
		}
		p := f[skip:]
		skip = 0
		if len(p) > left {
			p = p[:left]
		}
		left -= len(p)
		if !fn(p) {
			return
		}
	}
}

// AppendBuffers appends the range's pieces to dst (for net.Buffers-style
// vectored writes or reads) and returns the extended slice.
func (v IOV) AppendBuffers(dst [][]byte) [][]byte {
	skip, left := v.Offset, v.Len
	for _, f := range v.Frags {
		if left <= 0 {
			break
		}
		if skip >= len(f) {
			skip -= len(f)
			continue
		}
		p := f[skip:]
		skip = 0
		if len(p) > left {
			p = p[:left]
		}
		left -= len(p)
		dst = append(dst, p)
	}
	return dst
}

// CopyTo copies the range (or its first len(dst) bytes) into dst and
// returns the count.
func (v IOV) CopyTo(dst []byte) int {
	n := 0
	skip, left := v.Offset, min(v.Len, len(dst))
	for _, f := range v.Frags {
		if left <= 0 {
			break
		}
		if skip >= len(f) {
			skip -= len(f)
			continue
		}
		c := copy(dst[n:n+left], f[skip:])
		skip = 0
		n += c
		left -= c
	}
	return n
}

// CopyFrom fills the range (or its first len(src) bytes) from src and
// returns the count.
func (v IOV) CopyFrom(src []byte) int {
	n := 0
	skip, left := v.Offset, min(v.Len, len(src))
	for _, f := range v.Frags {
		if left <= 0 {
			break
		}
		if skip >= len(f) {
			skip -= len(f)
			continue
		}
		c := copy(f[skip:], src[n:n+left])
		skip = 0
		n += c
		left -= c
	}
	return n
}

// CopyIOV copies min(dst.Len, src.Len) bytes from src to dst, fragment by
// fragment without allocating, and returns the count.
func CopyIOV(dst, src IOV) int {
	total := min(dst.Len, src.Len)
	di, doff := seek(dst.Frags, dst.Offset)
	si, soff := seek(src.Frags, src.Offset)
	n := 0
	for n < total && di < len(dst.Frags) && si < len(src.Frags) {
		d := dst.Frags[di][doff:]
		s := src.Frags[si][soff:]
		c := min(len(d), len(s), total-n)
		copy(d[:c], s[:c])
		n += c
		doff += c
		soff += c
		if doff == len(dst.Frags[di]) {
			di, doff = di+1, 0
		}
		if soff == len(src.Frags[si]) {
			si, soff = si+1, 0
		}
	}
	return n
}

// seek returns the fragment index and in-fragment offset of byte off.
func seek(frags [][]byte, off int) (int, int) {
	for i, f := range frags {
		if off < len(f) {
			return i, off
		}
		off -= len(f)
	}
	return len(frags), 0
}
