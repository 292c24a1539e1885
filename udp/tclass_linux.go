//go:build linux

package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Per-datagram IP traffic class and hop limit (Message.TOS, Message.TTL).
// Each sendmmsg header has room for a UDP_SEGMENT control message
// followed by two int-sized ones: IP_TOS and IP_TTL on an IPv4 socket,
// IPV6_TCLASS and IPV6_HOPLIMIT on an IPv6 one (ip_cmsg_send and
// ip6_datagram_send_ctl accept both per datagram). A GSO run carries the
// same values in every segment, so datagrams that differ in them start a
// new run; the batch is still one sendmmsg.

// classCmsgSize is the room for the two int-sized class messages.
var classCmsgSize = 2 * unix.CmsgSpace(4)

// hdrOOBSize is the control buffer of one sendmmsg header: the GSO
// message first (so that it can be added when a run grows to two
// datagrams), then the class messages.
var hdrOOBSize = gsoCmsgSize + classCmsgSize

// putClassCmsgs writes the control messages for tos and ttl (each only
// when not 0) into b and returns their length.
func putClassCmsgs(b []byte, tos, ttl uint8, is6 bool) int {
	n := 0
	if tos != 0 {
		typ, level := unix.IP_TOS, unix.IPPROTO_IP
		if is6 {
			typ, level = unix.IPV6_TCLASS, unix.IPPROTO_IPV6
		}
		n += putIntCmsg(b[n:], level, typ, int32(tos))
	}
	if ttl != 0 {
		typ, level := unix.IP_TTL, unix.IPPROTO_IP
		if is6 {
			typ, level = unix.IPV6_HOPLIMIT, unix.IPPROTO_IPV6
		}
		n += putIntCmsg(b[n:], level, typ, int32(ttl))
	}
	return n
}

// putIntCmsg writes one control message carrying an int and returns its
// aligned size.
func putIntCmsg(b []byte, level, typ int, v int32) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = int32(level)
	h.Type = int32(typ)
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&b[cmsgHdrLen])) = v
	return unix.CmsgSpace(4)
}
