//go:build linux

package udp

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Received traffic class (Config.RecvTOS). With IP_RECVTOS (IPv4) or
// IPV6_RECVTCLASS (IPv6) on, the kernel adds each datagram's TOS byte or
// traffic class, ECN bits included, as a control message: IPv4 carries
// it in one byte (ip_cmsg_recv_tos), IPv6 in an int. RoCEv2 congestion
// notification reads the ECN field of every received packet this way
// (a CE mark makes the receiving QP send a CNP).
//
// UDP GRO coalesces only datagrams whose TOS (IPv4, inet_gro_receive
// compares tos and ttl) or traffic class (IPv6, ipv6_gro_receive
// compares the first header word) are equal, so one control message
// describes every segment of a super-datagram (TestRecvTOS checks that
// on loopback, where super-datagrams come from GSO sends, which split
// their runs where the class changes).

// tosCmsgSize is the control space of one received class message (the
// IPv4 one-byte form and the IPv6 int form align to the same size).
var tosCmsgSize = unix.CmsgSpace(4)

// setRecvTOS turns on the received-class control message.
func setRecvTOS(fd int, is6 bool) error {
	if is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			return os.NewSyscallError("setsockopt IPV6_RECVTCLASS", err)
		}
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
		return os.NewSyscallError("setsockopt IP_RECVTOS", err)
	}
	return nil
}

// recvClass returns the TOS byte or traffic class in control data b, or
// 0 if b has none.
func recvClass(b []byte) uint8 {
	if d := cmsgData(b, unix.IPPROTO_IP, unix.IP_TOS); len(d) >= 1 {
		return d[0]
	}
	if d := cmsgData(b, unix.IPPROTO_IPV6, unix.IPV6_TCLASS); len(d) >= 4 {
		return uint8(*(*int32)(unsafe.Pointer(&d[0])))
	}
	return 0
}
