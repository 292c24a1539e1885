// Package testaddr hands out loopback addresses unique to one test binary,
// so that test binaries run in parallel, and other softib processes (the
// demo on 127.0.0.2-4, lnetd, the tools' tests on 127.200-249.*.*), never
// collide on a port such as RoCEv2's 4791.
//
// A process claims a block 127.X.Y.0/24 (X in 16..199) by binding a UDP
// socket to 127.X.Y.0:ClaimPort and holding it open until it exits: a
// live claim, not a probe that is closed and hoped to stay free. Another
// process trying the same block fails that bind and moves on. Next hands
// out 127.X.Y.1 … 127.X.Y.254 and claims a further block when one runs
// out. A test may also reserve a TCP port with a live listener (Port),
// and wait for a server's socket without binding it itself (Bound).
package testaddr

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
)

// ClaimPort is the UDP port of the claim sockets (on the .0 address of
// each block, which no test binds otherwise).
const ClaimPort = 4790

const (
	firstX  = 16
	lastX   = 199
	nBlocks = (lastX - firstX + 1) * 256
)

var (
	mu     sync.Mutex
	block  netip.Addr // 127.X.Y.0 of the current block; invalid before the first claim
	next   int        // host part handed out last in block
	cursor = os.Getpid() * 7919 % nBlocks
	claims []*net.UDPConn // held until the process exits
	ports  []net.Listener // held until the process exits
)

// claim binds the next free block.
func claim() {
	for range nBlocks {
		i := cursor
		cursor = (cursor + 1) % nBlocks
		a := netip.AddrFrom4([4]byte{127, byte(firstX + i/256), byte(i % 256), 0})
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, ClaimPort)))
		if err != nil {
			continue
		}
		claims = append(claims, c)
		block, next = a, 0
		return
	}
	panic("testaddr: no free loopback block in 127.16.0.0-127.199.255.0")
}

// Next returns a loopback address no other process using this package
// (or the conventional softib addresses) uses.
func Next() netip.Addr {
	mu.Lock()
	defer mu.Unlock()
	if !block.IsValid() || next == 254 {
		claim()
	}
	next++
	b := block.As4()
	b[3] = byte(next)
	return netip.AddrFrom4(b)
}

// Block returns the 127.X.Y.0 address of the block Next currently hands
// addresses out of (claiming one if none is yet).
func Block() netip.Addr {
	mu.Lock()
	defer mu.Unlock()
	if !block.IsValid() {
		claim()
	}
	return block
}

// Port reserves a TCP port for the test binary: it listens on the block's
// .0 address on want (or, if that is taken, on a port the kernel picks)
// and keeps that listener open until the process exits, so that no
// wildcard listener elsewhere can take the port while tests use it on the
// block's other addresses. It returns the port.
func Port(want int) int {
	a := Block()
	mu.Lock()
	defer mu.Unlock()
	for _, p := range []int{want, 0} {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(a, uint16(p)).String())
		if err == nil {
			ports = append(ports, ln)
			return ln.Addr().(*net.TCPAddr).Port
		}
	}
	panic(fmt.Sprintf("testaddr: cannot listen on %v", a))
}
