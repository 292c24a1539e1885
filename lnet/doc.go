// Package lnet is a Go implementation of the Lustre LNet core, API
// generation of Lustre 2.12 (event queues): network interfaces (NIs) over
// pluggable LNDs, the portal table with match entries (MEs) and memory
// descriptors (MDs), event queues (EQs), PUT/GET with ACK/REPLY, credits,
// the peer table, and the ping responder. It is a library: each *Instance
// is an independent LNet node; there is no global state.
//
// Drivers plug in through package lnet/lnd (see its documentation for the
// contract); the loopback LND (0@lo) is always present. Wire formats are in
// wire/lnetwire. Names follow Lustre: LNetMEAttach is (*Instance).MEAttach,
// LNetPut is Put, LNetEQPoll is EQPoll, and so on.
//
// # Example
//
//	in, err := lnet.New(lnet.Config{
//		LNDs: []lnd.LND{socklnd.New(socklnd.Config{})},
//		Nets: []lnet.NetConfig{{Net: lnetwire.MakeNet(lnetwire.SOCKLND, 0), Interfaces: []string{"eth0"}}},
//	})
//	if err != nil { ... }
//	defer in.Close()
//	eq, _ := in.EQAlloc(64, nil)
//
//	// Receive side: accept one PUT with match bits 0x42 from anyone on portal 10.
//	me, _ := in.MEAttach(10, lnetwire.ProcessIDAny, 0x42, 0, lnet.AutoUnlink, lnet.InsAfter)
//	buf := make([]byte, 1<<20)
//	in.MDAttach(me, lnet.MD{Start: buf, Threshold: 1, Options: lnet.MDOpPut, EQ: eq}, lnet.AutoUnlink)
//
//	// Send side: PUT a buffer and ask for an ACK (threshold 2: SEND + ACK).
//	h, _ := in.MDBind(lnet.MD{Start: data, Threshold: 2, EQ: eq}, lnet.AutoUnlink)
//	peer := lnetwire.ProcessID{NID: lnetwire.MustParseNID("192.168.1.2@tcp"), PID: lnetwire.PIDLustre}
//	in.Put(lnetwire.NIDAny, h, lnet.AckReqYes, peer, 10, 0x42, 0, 0)
//
//	for {
//		ev, _, err := in.EQPoll([]*lnet.EQ{eq}, 5*time.Second)
//		if err != nil { ... } // lnet.ErrTimeout, or lnet.ErrEQOverflow with a valid event
//		if ev.Status != nil { ... } // the operation failed
//		fmt.Println(ev.Type, ev.MLength) // SEND and ACK here; PUT on the receiver
//	}
//
// Example (in example_test.go) runs the same steps between two instances
// joined by the in-memory LND of package lnet/lnd/lndtest.
//
// # Semantics
//
// Matching follows lnet_try_match_md: an incoming PUT or GET matches an ME
// when its initiator fits the ME's (possibly wildcard) NID and PID, when
// ((me bits XOR request bits) AND NOT ignore bits) == 0, and when the MD
// enables the operation; MEs are tried in list order. An MD offers its
// bytes from a running local offset, or from the initiator's offset with
// MDManageRemote; a request larger than the room left is truncated with
// MDTruncate and dropped without it; MDMaxSize caps each operation.
// Every operation decrements the threshold (unless ThreshInf); an
// AutoUnlink MD goes away once exhausted and idle, its last event flagged
// Unlinked. Explicitly unlinking an idle MD posts an UNLINK event.
//
// Sends take a peer credit and an NI credit and wait FIFO when either is
// exhausted; credits go negative while messages wait, and the low-water
// marks are reported by Nets and Peers. Status is carried end to end:
// nothing is reported as success unless the LND delivered it and, for
// incoming data, it matched; a failed send yields a SEND event with a
// non-nil Status and no ACK or REPLY.
//
// Response tracking: a PUT asking for an ACK and a GET arm a deadline of
// Globals.TransactionTimeout on their MD; if the ACK or REPLY has not come
// by then the MD is unlinked and, when idle, reports an UNLINK event with
// Status ErrTimeout (Globals.ResponseTracking selects GET, PUT, both or
// none), and the health of the peer NI the request went to drops.
//
// Discovery (discovery.go): unless SetDiscovery(false) (DiscoveryQuiet),
// the first PUT or GET to a peer that discovery has not brought up to
// date waits while the peer is pinged (and pushed our NIDs, if
// Multi-Rail), then leaves with the peer's NIDs known, or fails with the
// discovery error; responses and the reserved portal's ping and push
// traffic never wait. DiscoveryOff (lnetctl set discovery 0) still pings
// a new peer once, as Lustre's kernel, but learns no NIDs and pushes
// nothing.
//
// Multi-Rail: a node may have several NIs on one net and on several nets;
// a peer (AddPeer, discovery, or traffic) may have several NIDs
// (peer.go). Sends to a Multi-Rail peer choose among its NIs and ours by
// health, UDSP priority (AddUDSP), credits and round robin; a
// non-Multi-Rail peer keeps the NID asked for and the source NID it first
// saw (select.go). A send that fails is resent on another path up to
// Globals.RetryCount times within Globals.TransactionTimeout, the
// failing NI's or peer NI's health drops and recovery pings restore it
// (health.go); the SEND event reports only the last try's outcome.
package lnet
