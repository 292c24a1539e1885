//go:build darwin || freebsd

package peercred

import (
	"net"

	"golang.org/x/sys/unix"
)

// UID returns the uid the peer of c connected with (LOCAL_PEERCRED, the
// BSD form of Linux's SO_PEERCRED), and false when it cannot be read.
func UID(c *net.UnixConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, false
	}
	var cred *unix.Xucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil || cerr != nil {
		return -1, false
	}
	return int(cred.Uid), true
}
