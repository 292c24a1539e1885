//go:build darwin || freebsd

package stat

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerAllowed reports whether the peer is root or our own user, and its
// uid (LOCAL_PEERCRED: the BSD form of Linux's SO_PEERCRED).
func peerAllowed(c *net.UnixConn) (int, bool) {
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
	return int(cred.Uid), cred.Uid == 0 || int(cred.Uid) == os.Getuid()
}
