//go:build !linux

package udp

import (
	"fmt"
	"net/netip"
)

// ListenShards is Listen for n = 1; other counts need SO_REUSEPORT's
// flow hashing (Linux) and return ErrShards.
func ListenShards(addr netip.AddrPort, n int, cfg *Config) ([]*Socket, error) {
	if n != 1 {
		return nil, fmt.Errorf("udp: listen %v: %d shards: SO_REUSEPORT receive shards need Linux: %w", addr, n, ErrShards)
	}
	s, err := Listen(addr, cfg)
	if err != nil {
		return nil, err
	}
	return []*Socket{s}, nil
}
