//go:build !linux

package rxe

import "softib/udp"

// newPollSock returns nil: busy-poll receive needs Linux (see
// busypoll_linux.go); devices fall back to the receive goroutine.
func newPollSock(udp.Conn, int) pollSock { return nil }
