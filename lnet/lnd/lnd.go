package lnd

import (
	"errors"
	"time"

	"softib/wire/lnetwire"
)

// LND is a network driver type: socklnd, o2iblnd, lolnd, lndtest. One LND
// value serves every NI of its type; Startup creates the per-NI driver
// (Lustre's lnd_startup). The core finds LNDs by Type in its Registry.
type LND interface {
	// Type returns the LND type number this driver serves (lnetwire.SOCKLND...).
	Type() lnetwire.LNDType
	// Startup brings up one NI. It may complete ni.NID's address part (for
	// example from the interface's IPv4 address) and must return only when
	// the driver is ready for Send and may call ni.Parse. The core has
	// filled ni's net, interfaces and tunables (defaults applied).
	Startup(ni *NI) (Driver, error)
}

// Driver is one started NI of an LND (Lustre's lnd ops bound to ni_data).
// The core calls Send and Recv from any goroutine, concurrently, never
// while holding core locks; they may block briefly but should hand long
// work to driver goroutines.
type Driver interface {
	// Send transmits msg (lnd_send). msg.Hdr is the complete header and
	// msg.Payload the bytes to send (Payload.Len == Hdr.PayloadLength);
	// msg.Target.NID is the peer to hand it to. The core has already taken
	// NI and peer credits.
	//
	// If Send returns an error, the core finalizes msg with it and the
	// driver must forget msg. If it returns nil, the driver owns msg until
	// it calls ni.Finalize(msg, status) exactly once: nil once the LND has
	// delivered it (written to the socket, or completed the RDMA), an error
	// otherwise. Finalize may be called before Send returns.
	Send(msg *Msg) error

	// Recv delivers the payload of a message the driver passed to
	// ni.Parse (lnd_recv). private is the value given to Parse (or
	// returned by EagerRecv). rlen is the payload length the sender put on
	// the wire; the driver places the first dst.Len bytes (mlen, ≤ rlen)
	// into dst and discards the rest.
	//
	// msg == nil means the core drops the message: the driver discards
	// rlen bytes and must not call Finalize. Otherwise, as for Send: an
	// error return makes the core finalize msg; nil means the driver calls
	// ni.Finalize(msg, status) exactly once when the payload is in place
	// (possibly before Recv returns).
	//
	// delayed is true when the core calls Recv after Parse returned (the
	// message waited on a lazy portal), possibly from another goroutine.
	//
	// RDMA GET (o2iblnd): when Parse was called with rdmaReq for a GET,
	// Recv gets the REPLY message instead: dst then names the local data
	// to write to the requester (Len bytes), and the driver sends it and
	// finalizes msg when done. For rdmaReq PUTs Recv is the point where the
	// driver pulls the payload into dst.
	Recv(private any, msg *Msg, delayed bool, dst IOV, rlen int) error

	// Shutdown stops the NI (lnd_shutdown). Before it returns the driver
	// has finalized (with an error such as ErrShutdown) every message it
	// owned and will not call ni.Parse or ni.Finalize again.
	Shutdown()
}

// EagerReceiver is an optional Driver interface (lnd_eager_recv). The core
// calls EagerRecv before delaying an incoming message (lazy portal) so the
// driver can copy the payload out of a scarce receive buffer and free it;
// the returned value replaces private in the later Recv call. Drivers
// without it simply keep the payload (and stop reading that connection)
// until Recv.
type EagerReceiver interface {
	EagerRecv(private any, msg *Msg) (newPrivate any, err error)
}

// PeerQuerier is an optional Driver interface (lnd_query): it reports
// when the driver last heard from nid, zero if never, so the core can judge
// peer aliveness against the NI's PeerTimeout. The core calls Query with
// its lock held: it must not block or call back into the NI.
type PeerQuerier interface {
	Query(nid lnetwire.NID) (lastAlive time.Time)
}

// PeerDownNotifier is an optional Driver interface (lnd_notify_peer_down):
// the core tells the driver that the peer is considered dead so it can
// close connections and fail queued messages.
type PeerDownNotifier interface {
	NotifyPeerDown(nid lnetwire.NID)
}

// TunableDefaulter is an optional LND interface: the LND's defaults for
// tunables the configuration leaves at zero (socklnd: credits 256, peer
// credits 8; o2iblnd: its own). The core falls back to DefaultTunables.
type TunableDefaulter interface {
	DefaultTunables() Tunables
}

// Host is the core side of the contract: what an NI forwards to. The lnet
// package implements it; LND unit tests may implement it themselves (see
// NewNI). Drivers call the NI methods, not Host directly.
type Host interface {
	// Parse is lnet_parse: see NI.Parse.
	Parse(ni *NI, hdr *lnetwire.Header, from lnetwire.NID, private any, rdmaReq bool) error
	// Finalize is lnet_finalize: see NI.Finalize.
	Finalize(ni *NI, msg *Msg, status error)
	// CreateReplyMsg is lnet_create_reply_msg: see NI.CreateReplyMsg.
	CreateReplyMsg(ni *NI, get *Msg) (*Msg, error)
	// SetReplyMsgLen is lnet_set_reply_msg_len: see NI.SetReplyMsgLen.
	SetReplyMsgLen(ni *NI, reply *Msg, n int)
	// NotifyPeer is lnet_notify: see NI.NotifyPeer.
	NotifyPeer(ni *NI, nid lnetwire.NID, alive bool, when time.Time)
}

// Errors shared by the core and drivers as message status. Drivers may
// return others (wrapped net errors); any non-nil status is a failure.
var (
	// ErrShutdown finalizes messages the NI held when it stopped.
	ErrShutdown = errors.New("lnd: NI shut down")
	// ErrTimeout is a transmit or receive that timed out (ETIMEDOUT).
	ErrTimeout = errors.New("lnd: timed out")
	// ErrPeerDown is a message to or from a peer that is unreachable or
	// whose connection failed (EHOSTUNREACH / ECONNRESET).
	ErrPeerDown = errors.New("lnd: peer unreachable")
	// ErrProto is a protocol violation by the peer (EPROTO).
	ErrProto = errors.New("lnd: protocol error")
	// ErrTooBig is a message larger than the LND or peer accepts (EMSGSIZE).
	ErrTooBig = errors.New("lnd: message too large")
	// ErrNoMem is a failure to get a buffer or credit (ENOMEM).
	ErrNoMem = errors.New("lnd: out of resources")
)
