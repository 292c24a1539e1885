//go:build !linux && !darwin && !freebsd

package peercred

import "net"

// UID knows no way to learn a Unix socket peer's credentials on this
// system: it always reports false, so callers refuse every peer.
func UID(*net.UnixConn) (int, bool) { return -1, false }
