package udp

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// groCmsg builds a control buffer holding one UDP_GRO message.
func groCmsg(size int32) []byte {
	b := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = size
	return b
}

func TestGROSize(t *testing.T) {
	other := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&other[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	h.SetLen(unix.CmsgLen(1))
	for _, c := range []struct {
		b    []byte
		want int
	}{
		{nil, 0},
		{groCmsg(4200), 4200},
		{append(other, groCmsg(1000)...), 1000},
		{other, 0},
		{groCmsg(4200)[:10], 0},
	} {
		if got := groSize(c.b); got != c.want {
			t.Errorf("groSize(%x) = %d, want %d", c.b, got, c.want)
		}
	}
}

// FuzzGROSize checks that the in-place cmsg walk never reads out of
// bounds, whatever the control buffer holds.
func FuzzGROSize(f *testing.F) {
	f.Add(groCmsg(4200))
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The kernel's control buffer is 8-byte aligned; keep that.
		buf := make([]uint64, (len(b)+7)/8)
		ab := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*8)[:len(b)]
		copy(ab, b)
		groSize(ab)
	})
}
