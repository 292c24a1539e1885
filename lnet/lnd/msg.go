package lnd

import "softib/wire/lnetwire"

// Msg is one LNet message as a driver sees it (the LND-visible part of
// struct lnet_msg). The core allocates and pools Msgs: a driver must not
// keep a *Msg after finalizing it or after Recv/Send returned an error.
type Msg struct {
	// Type is Hdr.Type, repeated for convenience.
	Type lnetwire.MsgType
	// Hdr is the full LNet header: for Send the header to put on the wire;
	// for Recv the header received in Parse.
	Hdr lnetwire.Header
	// Target is where the driver must deliver a Send: Target.NID is the
	// peer NI (next hop; equal to Hdr.DestNID when not routed) and
	// Target.PID the destination process.
	Target lnetwire.ProcessID
	// Payload is the data to send (Send; Payload.Len == Hdr.PayloadLength).
	// It aliases the caller's MD: do not modify.
	Payload IOV
	// Sink is set on a Send of a GET: the local buffer (reply MD range,
	// Sink.Len = the most the REPLY may carry) where an RDMA LND may write
	// the reply data directly (see NI.CreateReplyMsg). Other LNDs ignore it.
	Sink IOV
	// LNDPrivate is free for the driver while it owns the message.
	LNDPrivate any

	owner any
}

// Owner returns the value set with SetOwner; reserved for the core.
func (m *Msg) Owner() any { return m.owner }

// SetOwner records the core's own message state; reserved for the core
// and Host implementations in tests.
func (m *Msg) SetOwner(o any) { m.owner = o }
