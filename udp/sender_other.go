//go:build !linux

package udp

import (
	"errors"
	"fmt"
	"net/netip"
)

// OpenSender opens a send-only socket bound to laddr with SO_REUSEADDR;
// see the Linux version. Elsewhere it is not supported and returns an
// error wrapping errors.ErrUnsupported, so callers send from their main
// socket instead.
func OpenSender(laddr netip.AddrPort, cfg *Config) (*Socket, error) {
	return nil, fmt.Errorf("udp: open sender %v: %w", laddr, errors.ErrUnsupported)
}

// Sender opens a send-only socket bound to laddr, configured as s is;
// see the Linux version. Elsewhere it returns an error wrapping
// errors.ErrUnsupported.
func (s *Socket) Sender(laddr netip.AddrPort) (*Socket, error) {
	return OpenSender(senderAddr(s.laddr, laddr), &s.cfg)
}
