package stat

import (
	"net"
	"os"

	"softib/internal/peercred"
)

// peerAllowed reports whether the peer is root or our own user, and its
// uid (the credentials the peer connected with; refused where they
// cannot be read).
func peerAllowed(c *net.UnixConn) (int, bool) {
	uid, ok := peercred.UID(c)
	return uid, ok && (uid == 0 || uid == os.Getuid())
}
