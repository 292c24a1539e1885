//go:build !linux

package rxe

import (
	"fmt"
	"net/netip"

	"softib/udp"
	"softib/verbs"
)

// joinGroup: joining IP multicast groups is implemented on Linux only.
func joinGroup(conn udp.Conn, local netip.Addr, group netip.AddrPort) (udp.Conn, error) {
	if _, ok := conn.(*udp.Socket); !ok {
		return nil, nil
	}
	return nil, fmt.Errorf("join %v: %w", group.Addr(), verbs.ErrNotSupported)
}
