package stat

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// peerAllowed reports whether the peer is root or our own user, and its
// uid (SO_PEERCRED: the credentials the peer connected with).
func peerAllowed(c *net.UnixConn) (int, bool) {
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
	return int(cred.Uid), cred.Uid == 0 || int(cred.Uid) == os.Getuid()
}
