//go:build !linux

package rxe

// sportSocketLimit bounds a device's source-port sockets; udp has no
// send-only sockets outside Linux, so it does not matter there.
func sportSocketLimit() int { return 1 << 14 }
