package socklnd

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"softib/wire/lnetwire"
)

// Defaults of the ksocklnd module parameters (lnet-wire.md §7.9).
const (
	DefaultAcceptPort  = 988
	DefaultSockTimeout = 50 * time.Second
	// DefaultAcceptTimeout is LNet's accept_timeout: how long an accepted
	// socket may take to deliver its acceptor request.
	DefaultAcceptTimeout = 5 * time.Second
	// DefaultMaxPendingAccepts bounds accepted sockets still in their
	// handshake; more are closed at once (counted in AcceptOverload).
	DefaultMaxPendingAccepts = 1024
	// DefaultMaxPendingPerAddr bounds the handshakes in progress from one
	// remote IP address, so one host cannot take the whole pending pool.
	DefaultMaxPendingPerAddr = 16
	DefaultKeepalive         = 30 * time.Second
	DefaultKeepaliveIdle     = 30 * time.Second
	DefaultKeepaliveCount    = 5
	DefaultKeepaliveIntvl    = 5 * time.Second
	DefaultNconnds           = 4
	MaxNconnds               = 64
	DefaultMinBulk           = 1024
	DefaultZCMinPayload      = 16 << 10
	DefaultMinReconnect      = 1000 * time.Millisecond
	DefaultMaxReconnect      = 60000 * time.Millisecond
	DefaultCredits           = 256
	DefaultPeerCredits       = 8
)

// Privileged source ports an active side binds, highest first
// (LNET_ACCEPTOR_MAX/MIN_RESERVED_PORT).
const (
	maxReservedPort = 1023
	minReservedPort = 512
)

// AcceptMode is the passive side's source-port policy (ksocklnd/lnet
// `accept=`).
type AcceptMode int

const (
	// AcceptSecure refuses connections from source ports above 1023
	// (the Lustre default).
	AcceptSecure AcceptMode = iota
	// AcceptAll takes connections from any port.
	AcceptAll
	// AcceptNone runs no acceptor: this NI only connects out.
	AcceptNone
)

// String returns the lnet module-parameter spelling.
func (m AcceptMode) String() string {
	switch m {
	case AcceptSecure:
		return "secure"
	case AcceptAll:
		return "all"
	case AcceptNone:
		return "none"
	}
	return fmt.Sprintf("AcceptMode(%d)", int(m))
}

// ParseAcceptMode parses "secure", "all" or "none".
func ParseAcceptMode(s string) (AcceptMode, error) {
	switch s {
	case "secure", "":
		return AcceptSecure, nil
	case "all":
		return AcceptAll, nil
	case "none":
		return AcceptNone, nil
	}
	return 0, fmt.Errorf("socklnd: bad accept mode %q (want secure|all|none)", s)
}

// SourcePortMode says which local port an active connection binds.
type SourcePortMode int

const (
	// SourcePortAuto tries the privileged ports 1023..512 as the kernel
	// does and falls back to an ephemeral port when binding them is not
	// permitted (no root / CAP_NET_BIND_SERVICE).
	SourcePortAuto SourcePortMode = iota
	// SourcePortPrivileged requires a privileged port; connecting fails
	// without permission.
	SourcePortPrivileged
	// SourcePortAny always uses an ephemeral port; an `accept=secure`
	// peer refuses such connections.
	SourcePortAny
)

// Config holds the socklnd tunables. The zero value means the Lustre
// defaults of lnet-wire.md §7.9. Durations that may be disabled take a
// negative value for "off".
type Config struct {
	// Capture, if set, receives a pcap of every connection's traffic
	// with synthesised IPv4/TCP framing (capture.go); captured
	// connections copy payloads instead of splicing them.
	Capture io.Writer
	// AcceptPort is the acceptor's TCP port and the port peers are
	// dialled on (accept_port, 988).
	AcceptPort int
	// Accept is the passive side's source-port policy (accept, secure).
	Accept AcceptMode
	// ListenAddr overrides the address the acceptor binds ("ip:port");
	// empty means the NI's IPv4 address and AcceptPort.
	ListenAddr string
	// SourcePort selects the active side's local port.
	SourcePort SourcePortMode
	// SocketContext, if set, runs every socket creation (the listener and
	// each dial) through f, e.g. netns.Node.Do, so the sockets belong to
	// a network namespace; they are then used from any goroutine.
	SocketContext func(f func() error) error
	// PeerAddr maps a peer NID to the address to dial; nil means the
	// NID's IPv4 address and AcceptPort. Tests use it to run several
	// nodes on distinct ports.
	PeerAddr func(lnetwire.NID) netip.AddrPort

	// SockTimeout bounds connection setup, a stalled write and a stalled
	// partly received message (sock_timeout, 50 s).
	SockTimeout time.Duration
	// Keepalive is the idle time after which a V3 keepalive NOOP is sent
	// to a silent peer (keepalive, 30 s); negative disables.
	Keepalive time.Duration
	// KeepaliveIdle, KeepaliveCount and KeepaliveIntvl configure TCP
	// keepalive (30 s, 5, 5 s); a negative KeepaliveIdle disables it.
	KeepaliveIdle  time.Duration
	KeepaliveCount int
	KeepaliveIntvl time.Duration
	// AcceptTimeout bounds the wait for an accepted socket's acceptor
	// request (LNet's accept_timeout, 5 s); the HELLO that follows has
	// SockTimeout.
	AcceptTimeout time.Duration
	// MaxPendingAccepts bounds the accepted sockets still in their
	// handshake (1024); MaxPendingPerAddr bounds those from one remote
	// IP address (16). Sockets over either limit are closed at once and
	// counted (Stats.AcceptOverload), so a flood of connections or a slow
	// peer that never finishes its handshake cannot starve the others.
	MaxPendingAccepts int
	MaxPendingPerAddr int
	// Nconnds bounds concurrent outgoing connection attempts (nconnds, 4,
	// ≤ 64). Incoming handshakes are bounded by MaxPendingAccepts.
	Nconnds int
	// Nagle enables Nagle's algorithm (nagle, off).
	Nagle bool
	// TxBufferSize and RxBufferSize set SO_SNDBUF/SO_RCVBUF; 0 keeps the
	// kernel's autotuning.
	TxBufferSize int
	RxBufferSize int
	// MinBulk is the message size from which BULK connections are used
	// (min_bulk, 1024).
	MinBulk int
	// ZCMinPayload is the payload size from which a zero-copy ACK is
	// requested (zc_min_payload, 16 KiB).
	ZCMinPayload int
	// DisableZCRequest stops this side asking for zero-copy ACKs. With
	// requests on, a large send completes only once the peer has
	// acknowledged receiving it.
	DisableZCRequest bool
	// MinReconnect and MaxReconnect bound the reconnect backoff
	// (min_reconnectms 1 s, max_reconnectms 60 s).
	MinReconnect time.Duration
	MaxReconnect time.Duration
	// SingleConn turns typed connections off (typed_conns=0): one ANY
	// connection per peer.
	SingleConn bool
	// ConnsPerPeer is the number of BULK_IN and of BULK_OUT connections
	// per peer; 0 takes the NI tunable, else 1 (the automatic rule needs
	// a link speed, which a TCP socket does not have).
	ConnsPerPeer int
	// EnableCsum makes this side checksum what it sends (enable_csum).
	// Received checksums are always verified.
	EnableCsum bool
	// Version is the HELLO version proposed to a peer without history
	// (lnetwire.SockProtoV1..V3); 0 means V3.
	Version uint32
}

// withDefaults returns c with zero fields replaced by defaults and out-of
// range values clamped.
func (c Config) withDefaults() Config {
	if c.AcceptPort == 0 {
		c.AcceptPort = DefaultAcceptPort
	}
	if c.SockTimeout <= 0 {
		c.SockTimeout = DefaultSockTimeout
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.KeepaliveIdle == 0 {
		c.KeepaliveIdle = DefaultKeepaliveIdle
	}
	if c.KeepaliveCount <= 0 {
		c.KeepaliveCount = DefaultKeepaliveCount
	}
	if c.KeepaliveIntvl <= 0 {
		c.KeepaliveIntvl = DefaultKeepaliveIntvl
	}
	if c.AcceptTimeout <= 0 {
		c.AcceptTimeout = DefaultAcceptTimeout
	}
	if c.MaxPendingAccepts <= 0 {
		c.MaxPendingAccepts = DefaultMaxPendingAccepts
	}
	if c.MaxPendingPerAddr <= 0 {
		c.MaxPendingPerAddr = DefaultMaxPendingPerAddr
	}
	c.MaxPendingPerAddr = min(c.MaxPendingPerAddr, c.MaxPendingAccepts)
	if c.Nconnds <= 0 {
		c.Nconnds = DefaultNconnds
	}
	c.Nconnds = min(c.Nconnds, MaxNconnds)
	if c.MinBulk <= 0 {
		c.MinBulk = DefaultMinBulk
	}
	if c.ZCMinPayload <= 0 {
		c.ZCMinPayload = DefaultZCMinPayload
	}
	if c.MinReconnect <= 0 {
		c.MinReconnect = DefaultMinReconnect
	}
	if c.MaxReconnect <= 0 {
		c.MaxReconnect = DefaultMaxReconnect
	}
	c.MaxReconnect = max(c.MaxReconnect, c.MinReconnect)
	if c.Version < lnetwire.SockProtoV1 || c.Version > lnetwire.SockProtoV3 {
		c.Version = lnetwire.SockProtoV3
	}
	return c
}
