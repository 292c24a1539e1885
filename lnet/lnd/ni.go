package lnd

import (
	"log/slog"
	"time"

	"softib/wire/lnetwire"
)

// Tunables are the per-NI settings of lnetctl net add (lnet-wire.md §8.2).
// Zero fields take the LND's defaults (TunableDefaulter), then
// DefaultTunables.
type Tunables struct {
	// Credits is the NI's transmit credits (messages in flight on the NI).
	Credits int
	// PeerCredits is the transmit credits per peer NI.
	PeerCredits int
	// PeerBufferCredits is the per-peer router buffer credits (routers).
	PeerBufferCredits int
	// PeerTimeout is how long a silent peer stays alive; negative disables
	// aliveness checks.
	PeerTimeout time.Duration
	// ConnsPerPeer is the LND connections per peer (socklnd, o2iblnd);
	// 0 lets the LND decide.
	ConnsPerPeer int
}

// DefaultTunables are the generic defaults (socklnd's module defaults).
var DefaultTunables = Tunables{
	Credits:           256,
	PeerCredits:       8,
	PeerBufferCredits: 8,
	PeerTimeout:       180 * time.Second,
}

// WithDefaults returns t with zero fields filled from d.
func (t Tunables) WithDefaults(d Tunables) Tunables {
	if t.Credits == 0 {
		t.Credits = d.Credits
	}
	if t.PeerCredits == 0 {
		t.PeerCredits = d.PeerCredits
	}
	if t.PeerBufferCredits == 0 {
		t.PeerBufferCredits = d.PeerBufferCredits
		if t.PeerBufferCredits == 0 {
			t.PeerBufferCredits = t.PeerCredits
		}
	}
	if t.PeerTimeout == 0 {
		t.PeerTimeout = d.PeerTimeout
	}
	if t.ConnsPerPeer == 0 {
		t.ConnsPerPeer = d.ConnsPerPeer
	}
	return t
}

// NIConfig is what the core knows about an NI before Startup.
type NIConfig struct {
	// NID is the NI's NID. The core sets the net; the address is set when
	// configured explicitly, else the driver fills it in Startup.
	NID lnetwire.NID
	// PID is the owning instance's process id (src_pid of its messages,
	// e.g. in socklnd HELLOs).
	PID lnetwire.PID
	// Interfaces are the OS interfaces named in the net config
	// ("tcp0(eth0,eth1)"); drivers may also accept IP addresses.
	Interfaces []string
	// Tunables are the effective tunables (defaults applied).
	Tunables Tunables
	// LNDConfig is LND-specific configuration (e.g. a *socklnd.Config),
	// passed through untouched; nil means the LND's defaults.
	LNDConfig any
	// Log is the logger for the NI; nil means slog.Default().
	Log *slog.Logger
}

// NI is a network interface as a driver sees it: its identity and
// settings, plus the entry points into the core. A driver may write
// ni.NID only inside Startup; all other fields are read-only for it.
type NI struct {
	NIConfig
	host Host
}

// NewNI binds an NI configuration to a Host. The core calls it; LND unit
// tests may call it with their own Host to exercise a driver alone.
func NewNI(h Host, c NIConfig) *NI {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return &NI{NIConfig: c, host: h}
}

// Net returns the NI's network.
func (ni *NI) Net() lnetwire.Net { return ni.NID.Net() }

// Parse hands an incoming message to the core (lnet_parse). hdr is the
// decoded LNet header (the core copies it); from is the NID of the peer
// NI it came from on this LND (the previous hop); private is the driver's
// receive context, given back in Recv; rdmaReq says the payload is not in
// hand but will be fetched by the driver in Recv (o2iblnd PUT_REQ/GET_REQ).
//
// nil: the core took the message and will call Recv exactly once for
// private, either before Parse returns or later with delayed=true (the
// driver must keep the payload readable until then); a dropped message
// gets Recv with msg == nil. Error: the header was unacceptable (not for
// this NI, malformed); Recv will not be called, the driver discards the
// payload and may close the connection.
func (ni *NI) Parse(hdr *lnetwire.Header, from lnetwire.NID, private any, rdmaReq bool) error {
	return ni.host.Parse(ni, hdr, from, private, rdmaReq)
}

// Finalize reports that the driver is done with msg (lnet_finalize):
// status nil means sent (Send) or payload placed (Recv); any error fails
// the message and the core reports it in the events.
func (ni *NI) Finalize(msg *Msg, status error) { ni.host.Finalize(ni, msg, status) }

// CreateReplyMsg is for RDMA LNDs that move a GET's reply data
// themselves (lnet_create_reply_msg): called on a GET being sent, it
// returns a REPLY message bound to the GET's sink MD. The driver then
// calls SetReplyMsgLen with the byte count and Finalize(reply, status)
// when the data has landed in get.Sink (or failed).
func (ni *NI) CreateReplyMsg(get *Msg) (*Msg, error) { return ni.host.CreateReplyMsg(ni, get) }

// SetReplyMsgLen records how many bytes an RDMA GET reply delivered.
func (ni *NI) SetReplyMsgLen(reply *Msg, n int) { ni.host.SetReplyMsgLen(ni, reply, n) }

// NotifyPeer reports a peer NI's aliveness as the driver learns it
// (lnet_notify): alive=false after a connection failure, true when a
// connection is (re)established; when is the time of the observation.
func (ni *NI) NotifyPeer(nid lnetwire.NID, alive bool, when time.Time) {
	ni.host.NotifyPeer(ni, nid, alive, when)
}
