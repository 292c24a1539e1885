package udp

import (
	"fmt"
	"net/netip"
)

// ListenShards opens n sockets bound to the same address with
// SO_REUSEPORT, so that n goroutines can receive in parallel: the kernel
// picks a datagram's socket by a hash of its 4-tuple, so one flow (a
// peer's source address and port) always lands on the same socket and
// keeps its order there. n = 1 is Listen. A zero port picks a free port
// for the first socket and binds the others to it.
//
// SO_REUSEPORT would also let a second ListenShards on the same address
// join the group and take part of its traffic, where Listen fails with
// EADDRINUSE. So the address is first bound without SO_REUSEPORT, which
// fails if any socket holds it, and released just before the group binds;
// only another SO_REUSEPORT binder of the same user racing in between can
// get in.
func ListenShards(addr netip.AddrPort, n int, cfg *Config) ([]*Socket, error) {
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("udp: listen %v: %d shards, want 1 to %d: %w", addr, n, MaxShards, ErrShards)
	}
	c := cfg.withDefaults()
	if !addr.IsValid() {
		addr = netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port())
	}
	if n == 1 {
		s, err := open(addr, c, reuseNone, "listen")
		if err != nil {
			return nil, err
		}
		return []*Socket{s}, nil
	}
	// The exclusivity probe: a plain bind fails if the address is held.
	// Its port also fixes a zero port for the group.
	pc := Config{BatchSize: 1, ReadBuffer: 4096, WriteBuffer: 4096, DisableGRO: true, DisableGSO: true}
	probe, err := open(addr, pc.withDefaults(), reuseNone, "listen")
	if err != nil {
		return nil, err
	}
	addr = netip.AddrPortFrom(addr.Addr(), probe.LocalAddr().Port())
	probe.Close()
	socks := make([]*Socket, 0, n)
	for range n {
		s, err := open(addr, c, reusePort, "listen shard")
		if err != nil {
			for _, o := range socks {
				o.Close()
			}
			return nil, err
		}
		socks = append(socks, s)
	}
	return socks, nil
}
