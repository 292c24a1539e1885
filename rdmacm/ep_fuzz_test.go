package rdmacm

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzEPHdr feeds parseEPHdr arbitrary private data (what a peer puts in
// a REQ or REP): it never panics, and what it returns stays inside its
// input; data with the endpoint magic round-trips.
func FuzzEPHdr(f *testing.F) {
	hdr := func(addr uint64, rkey, n uint32, user []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, epMagic)
		b = binary.BigEndian.AppendUint64(b, addr)
		b = binary.BigEndian.AppendUint32(b, rkey)
		b = binary.BigEndian.AppendUint32(b, n)
		b = append(b, byte(len(user)))
		return append(b, user...)
	}
	f.Add(hdr(0x1000, 0x1234, 4096, []byte("hello")))
	f.Add(hdr(0, 0, 0, nil))
	f.Add(append(hdr(1, 2, 3, []byte("ab"))[:epHdrLen], 200)) // length byte past the end: cut
	f.Add([]byte("not an endpoint"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, pd []byte) {
		r, user := parseEPHdr(pd)
		if len(user) > len(pd) {
			t.Fatalf("user data %d bytes from %d", len(user), len(pd))
		}
		if len(pd) < epHdrLen || binary.BigEndian.Uint32(pd) != epMagic {
			if r != (RemoteBuf{}) || !bytes.Equal(user, pd) {
				t.Fatalf("foreign private data parsed as %+v, %q", r, user)
			}
			return
		}
		// The buffer round-trips; the user data is what follows the
		// header, at most the length byte says (a short one is cut).
		want := pd[epHdrLen:][:min(int(pd[epHdrLen-1]), len(pd)-epHdrLen)]
		if !bytes.Equal(hdr(r.Addr, r.RKey, r.Len, nil)[:epHdrLen-1], pd[:epHdrLen-1]) || !bytes.Equal(user, want) {
			t.Fatalf("round trip: %+v %q from %x", r, user, pd)
		}
	})
}
