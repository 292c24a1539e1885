package o2iblnd

import (
	"time"

	"softib/rdmacm"
	"softib/wire/lnetwire"
)

// Defaults of the ko2iblnd module parameters (lnet-wire.md §6.13).
const (
	DefaultService        = lnetwire.KibDefaultService // service, the RDMA CM port
	DefaultTimeout        = 50 * time.Second           // timeout
	DefaultKeepalive      = 100 * time.Second          // keepalive
	DefaultCredits        = 256                        // credits (NI)
	DefaultPeerCredits    = 8                          // peer_credits
	MinPeerCredits        = 8
	MaxPeerCredits        = lnetwire.KibMaxQueueDepth
	DefaultNTx            = 512       // ntx
	DefaultRetryCount     = 5         // retry_count
	DefaultRNRRetryCount  = 6         // rnr_retry_count
	DefaultMRCacheSize    = 512       // fmr_pool_size: cached MRs per NI
	DefaultMRFlushTrigger = 384       // fmr_flush_trigger: idle cached MRs kept
	DefaultMRCacheBytes   = 256 << 20 // bytes those MRs may keep alive
	DefaultPeerTimeout    = 180 * time.Second
	DefaultConnsPerPeer   = 1               // conns_per_peer
	MaxConnsPerPeer       = 127             // lnetctl's limit for conns_per_peer
	DefaultWrqSGE         = 16              // wrq_sge: SGEs per RDMA WRITE
	DefaultResolveTimeout = 5 * time.Second // address/route resolution
)

// Protocol limits of this implementation.
const (
	// maxConnRaces is MAX_CONN_RACES_BEFORE_ABORT: after this many lost
	// races the lower NID's connection is let through.
	maxConnRaces = 20
	// reconnHighRace is KIB_RECONN_HIGH_RACE: consecutive reconnects
	// after which further ones wait for the next second.
	reconnHighRace = 10
	// privPortHi/Lo are the source ports an active side tries first
	// (use_privileged_port=1).
	privPortHi = 1023
	privPortLo = 512
)

// Config holds the o2iblnd tunables, named after ko2iblnd's module
// parameters. The zero value means the Lustre defaults, except CM, which
// is required: the RDMA CM whose device owns the NI's IPv4 address.
// Durations that may be disabled take a negative value for "off".
type Config struct {
	// CM is the RDMA connection manager the NI listens and connects
	// through; its devices must include one with the NI's address.
	CM *rdmacm.Manager
	// Service is the RDMA CM port in the TCP port space (service, 987).
	Service int
	// Timeout bounds a message queued or in flight, including the RDMA
	// and the peer's reply; expiry closes the connection (timeout, 50 s).
	// It also bounds connection setup (max(5 s, Timeout/4)).
	Timeout time.Duration
	// Keepalive is the idle time after which a NOOP is sent (keepalive,
	// 100 s); negative disables.
	Keepalive time.Duration
	// PeerCredits is the queue depth proposed to peers (peer_credits);
	// 0 takes the NI's peer credits tunable (8). Clamped to [8, 255]
	// unless AllowSmallQueue.
	PeerCredits int
	// PeerCreditsHiw is the outstanding-credit mark at which credits are
	// returned with a NOOP (peer_credits_hiw; 0 means PeerCredits/2).
	PeerCreditsHiw int
	// ConcurrentSends caps posted sends per connection
	// (concurrent_sends; 0 means PeerCredits), clamped to [Q/2, 2Q].
	ConcurrentSends int
	// NTx is the number of tx descriptors of the NI (ntx, 512).
	NTx int
	// Cksum makes this side checksum the messages it sends (cksum).
	// Received checksums are always verified.
	Cksum bool
	// RetryCount and RNRRetryCount go into the connection parameters
	// (retry_count 5, rnr_retry_count 6).
	RetryCount    int
	RNRRetryCount int
	// MRCacheSize bounds the memory regions the NI keeps registered for
	// LNet buffers (fmr_pool_size, 512).
	MRCacheSize int
	// MRCacheBytes bounds the bytes of idle cached registrations (256 MiB):
	// a cached MR keeps its buffer alive.
	MRCacheBytes int
	// MRFlushTrigger bounds the idle registrations the cache keeps
	// (fmr_flush_trigger, 384: the FMR pool flushed its unmapped
	// mappings once that many had piled up): a new registration that
	// finds that many idle deregisters the least recently used ones
	// first, so at most MRFlushTrigger stay idle. 0 means the default.
	MRFlushTrigger int
	// NoMRCache registers LNet buffers for each transfer and deregisters
	// them when it is done, instead of caching the registrations
	// (fmr_cache=0; ko2iblnd's module parameter: a per-NI 0 there means
	// the module's value).
	NoMRCache bool
	// TOS is the type of service of the connections this side opens
	// (tos, -1 or 0: none; 1..255): the RDMA CM ID's TOS
	// (rdma_set_service_type), i.e. the IP traffic class of the RoCEv2
	// packets both sides send on the connection.
	TOS int
	// IBMTU is the path MTU in bytes for connections (ib_mtu, 0: the
	// device's active MTU). softib's RDMA CM always uses the active MTU,
	// so any other value is refused at Startup.
	IBMTU int
	// AnySourcePort makes active connections use an ephemeral source
	// port instead of trying 1023 down to 512 (use_privileged_port=0).
	AnySourcePort bool
	// Version is the kib_msg version proposed to new peers
	// (lnetwire.KibVersion1 or KibVersion2; 0 means V2).
	Version uint16
	// MaxFrags is the RDMA fragments per descriptor advertised and
	// accepted (257).
	MaxFrags int
	// AllowSmallQueue lets PeerCredits go below 8 (tests of credit
	// exhaustion).
	AllowSmallQueue bool
	// ConnsPerPeer is the number of RC connections (QPs) this side opens
	// to a peer it connects to (conns_per_peer, Lustre 2.15+; 0 takes the
	// NI's lnd.Tunables.ConnsPerPeer, else 1; at most 127). New messages
	// go round-robin over the established ones; a transfer's replies stay
	// on its connection. As in ko2iblnd, the connections are opened when
	// the peer has none, and the passive side accepts however many the
	// peer opens (it opens none of its own while one is up).
	ConnsPerPeer int
	// WrqSGE is the most source pieces one RDMA WRITE gathers (wrq_sge;
	// ko2iblnd's default is 2, softib's 0 means DefaultWrqSGE): a source
	// of many fragments (pages) moves in few work requests. It is the
	// send queue's max_send_sge, so Startup refuses a value above the
	// device's max_sge (ko2iblnd's QPs fail to be created then); the
	// default is capped by it. Local only: nothing on the wire depends on
	// it.
	WrqSGE int
}

// withDefaults returns c with zero fields replaced by the Lustre defaults
// and out-of-range values clamped; peerCredits is the NI's tunable.
func (c Config) withDefaults(peerCredits int) Config {
	if c.Service <= 0 || c.Service > 0xFFFF {
		c.Service = DefaultService
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.PeerCredits <= 0 {
		c.PeerCredits = peerCredits
	}
	if c.PeerCredits <= 0 {
		c.PeerCredits = DefaultPeerCredits
	}
	if !c.AllowSmallQueue {
		c.PeerCredits = max(c.PeerCredits, MinPeerCredits)
	}
	c.PeerCredits = min(c.PeerCredits, MaxPeerCredits)
	if c.NTx <= 0 {
		c.NTx = DefaultNTx
	}
	if c.RetryCount <= 0 {
		c.RetryCount = DefaultRetryCount
	}
	if c.RNRRetryCount <= 0 {
		c.RNRRetryCount = DefaultRNRRetryCount
	}
	c.RetryCount, c.RNRRetryCount = min(c.RetryCount, 7), min(c.RNRRetryCount, 7)
	if c.MRCacheSize <= 0 {
		c.MRCacheSize = DefaultMRCacheSize
	}
	if c.MRCacheBytes <= 0 {
		c.MRCacheBytes = DefaultMRCacheBytes
	}
	if c.MRFlushTrigger <= 0 {
		c.MRFlushTrigger = DefaultMRFlushTrigger
	}
	if c.Version != lnetwire.KibVersion1 {
		c.Version = lnetwire.KibVersion2
	}
	if c.ConnsPerPeer == 0 {
		c.ConnsPerPeer = DefaultConnsPerPeer
	}
	if c.WrqSGE <= 0 {
		c.WrqSGE = DefaultWrqSGE
	}
	if c.MaxFrags <= 0 || c.MaxFrags > lnetwire.KibMaxRDMAFrags {
		c.MaxFrags = lnetwire.KibMaxRDMAFrags
	}
	return c
}

// connectTimeout is max(5 s, timeout/4) (LU-17480).
func (c *Config) connectTimeout() time.Duration { return max(5*time.Second, c.Timeout/4) }
