// Package lnd is the contract between the LNet core (package lnet) and its
// network drivers (LNDs: lnet/lolnd, lnet/socklnd, lnet/o2iblnd, and the
// in-memory lnet/lnd/lndtest). It mirrors Lustre's struct lnet_lnd
// operations in Go; a driver imports only this package and wire/lnetwire,
// never lnet, and the core never imports a network LND.
//
// # Lifecycle
//
// An LND value is registered in an Instance's Registry (lnet.Config.LNDs).
// For each configured net of its type the core builds an *NI (NewNI) with
// the net, interfaces, tunables (defaults applied) and LND-specific config,
// then calls LND.Startup(ni), which returns the per-NI Driver. Startup may
// fill in the address part of ni.NID. Driver.Shutdown stops the NI; before
// returning it finalizes every message it still owns (ErrShutdown) and
// stops calling into the NI. The core refuses (ErrShutdown) Parse calls
// made before Startup has returned or once shutdown has begun.
//
// # Sending
//
// The core builds the LNet header, takes NI and peer credits (queueing
// FIFO when they run out), then calls Driver.Send(msg). msg.Target.NID is
// the peer NI to deliver to; msg.Hdr is the header to put on the wire
// (encode with msg.Hdr.Encode/Append, 72 bytes); msg.Payload is the data.
// Send either fails synchronously (error return: the core finalizes) or
// accepts the message, in which case the driver calls ni.Finalize(msg,
// status) exactly once later. Status nil means the LND delivered it; the
// core then releases credits, and reports SEND/ACK/REPLY events: nothing is
// reported as success unless every step succeeded.
//
// # Receiving
//
// For each incoming LNet message the driver decodes the header
// (lnetwire.Header.Decode) and calls
//
//	err := ni.Parse(&hdr, fromNID, rxContext, rdmaReq)
//
// fromNID is the peer NI the message arrived from. If err != nil the core
// refused the header: drop the payload (Recv will not be called). If nil,
// the core calls Driver.Recv(rxContext, msg, delayed, dst, rlen) exactly
// once, usually from inside Parse, or later (delayed=true) from another
// goroutine when the message had to wait for a lazy portal. msg == nil in
// Recv means "discard rlen payload bytes" (no Finalize). Otherwise copy
// min(dst.Len, rlen) bytes into dst, skip the remainder, and call
// ni.Finalize(msg, status) (or return an error from Recv instead).
// A driver must not read the next message from the same connection until
// Recv for the current one has returned, unless it implements
// EagerReceiver and has copied the payload aside.
//
// Payload buffers are IOVs: a window (Offset, Len) over an MD's fragment
// list, never copied by the core. IOV.Walk, AppendBuffers, CopyTo,
// CopyFrom and CopyIOV move bytes without allocating.
//
// # RDMA LNDs
//
// For o2iblnd-style drivers: on a GET Send, msg.Sink is the local reply
// buffer; the driver may call ni.CreateReplyMsg(getMsg) to obtain a REPLY
// message it finalizes itself once the peer RDMA-wrote the data (after
// ni.SetReplyMsgLen). On the passive side Parse(..., rdmaReq=true) for a
// GET makes the core call Recv with the REPLY message and dst = the data
// to write back; for a PUT it makes Recv the moment to fetch the payload.
//
// # Peer health
//
// Drivers report connection outcomes with ni.NotifyPeer(nid, alive, when).
// Optional interfaces PeerQuerier and PeerDownNotifier let the core ask
// when a peer was last heard from and tell the driver a peer is dead.
//
// # Concurrency
//
// The core never holds its locks while calling Send, Recv, EagerRecv or
// NotifyPeerDown; drivers may call Parse, Finalize and NotifyPeer from any
// goroutine, including from inside Send or Recv. Query is the exception:
// the core calls it with its lock held (deciding whether to send to a peer
// marked down), so Query must be quick, must not block, and must not call
// back into the NI.
//
// # Change history
//
//   - v1 (initial): LND, Driver, NI, Msg, IOV, Host, Registry, Tunables,
//     optional EagerReceiver, PeerQuerier, PeerDownNotifier,
//     TunableDefaulter.
//   - v1.1: Query may be called with the core lock held (see Concurrency);
//     no signature changes.
//   - v1.2: documented that Parse before Startup returns is refused; no
//     code changes.
package lnd

// Limits every driver must honour (lnet-wire.md §1.7).
const (
	// MaxPayload is LNET_MTU: the largest LNet payload (1 MiB).
	MaxPayload = 1 << 20
	// MaxIOV is LNET_MAX_IOV: the most fragments in an MD.
	MaxIOV = 256
)
