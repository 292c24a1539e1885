//go:build linux

package udp

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func classCmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[cmsgHdrLen:], data)
	return b
}

// TestRecvClass: the class is found after a UDP_GRO message, in the
// one-byte IPv4 and the int IPv6 forms; garbage gives 0.
func TestRecvClass(t *testing.T) {
	v4 := classCmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x63})
	v6 := classCmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, []byte{0x62, 0, 0, 0})
	for _, c := range []struct {
		b    []byte
		want uint8
	}{
		{v4, 0x63},
		{append(groCmsg(1000), v4...), 0x63},
		{append(groCmsg(1000), v6...), 0x62},
		{groCmsg(1000), 0},
		{nil, 0},
		{v4[:cmsgHdrLen], 0},
		{[]byte{1, 2, 3}, 0},
	} {
		if got := recvClass(c.b); got != c.want {
			t.Errorf("recvClass(%x) = %#x, want %#x", c.b, got, c.want)
		}
	}
}

func FuzzRecvClass(f *testing.F) {
	f.Add(classCmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{3}))
	f.Add(append(groCmsg(1400), classCmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, []byte{3, 0, 0, 0})...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		recvClass(b)
		groSize(b)
	})
}
