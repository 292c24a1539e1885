package peercred

import (
	"net"

	"golang.org/x/sys/unix"
)

// UID returns the uid the peer of c connected with (SO_PEERCRED), and
// false when it cannot be read.
func UID(c *net.UnixConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return -1, false
	}
	return int(cred.Uid), true
}
