// Package lnetd is softib's LNet daemon and its control tools: `softib
// lnetd` runs an LNet node (an *lnet.Instance with the loopback, TCP and o2ib
// LNDs) configured from YAML in the shape Lustre's lnetctl imports and
// exports; `softib lnetctl` configures and inspects it over a local
// control socket; `softib lnet ping` pings a peer through it or from a
// short-lived node of its own.
//
// # Configuration
//
// The file has lnetctl's sections (lustre/conf/lnet.conf shape):
//
//	net:
//	    - net type: tcp
//	      local NI(s):
//	        - interfaces:
//	              0: eth0            # or an IPv4 address: 0: 127.0.0.2
//	          tunables:
//	              peer_timeout: 180
//	              peer_credits: 8
//	              peer_buffer_credits: 0
//	              credits: 256
//	          lnd tunables:
//	              conns_per_peer: 1
//	route:
//	    - net: o2ib
//	      gateway: 10.0.0.1@tcp
//	      hop: -1
//	      priority: 0
//	peer:
//	    - primary nid: 10.0.0.2@tcp
//	      Multi-Rail: True
//	      peer ni:
//	        - nid: 10.0.0.2@tcp
//	global:
//	    discovery: 1
//	    transaction_timeout: 150
//	    accept_port: 988
//
// The NID of an NI is "nid:" when given, else the IPv4 address of its
// first interface (softib also accepts an address in place of an
// interface name). Every key is checked: an unknown key, a value of the
// wrong type or out of range is an error naming the line and the key
// path (lnet.yaml:7: net[0].local NI(s)[0].tunables.peer_credit: unknown
// key ...). Keys that `lnetctl show` prints but import ignores (status,
// statistics, dev cpt, tcp bonding, peer credits) are accepted, so show
// and export output can be imported back.
//
// "lnd tunables" take the ksocklnd parameters for tcp nets
// (conns_per_peer, sock_timeout, keepalive, nagle, nconnds, min_bulk,
// zc_min_payload, tx/rx_buffer_size, enable_csum, typed_conns,
// min/max_reconnectms) and the ko2iblnd ones for o2ib nets
// (peercredits_hiw, map_on_demand, concurrent_sends, fmr_pool_size,
// fmr_flush_trigger, fmr_cache, ntx, tos, ...).
//
// # o2ib nets
//
// An o2ib net (o2ib, o2ib1, ...) runs the RDMA LND (lnet/o2iblnd) over
// softib's own RDMA stack: each o2ib NI gets a Soft-RoCE device (rxe)
// bound to the NI's IPv4 address (its nid, else its first interface, an
// address or an interface name) on UDP 4791, RoCEv2's port, where peers
// send to, and an RDMA CM over that device. Several nodes on one host
// therefore need distinct addresses (127.0.0.2, 127.0.0.3, ...); the port
// cannot be changed. The listener is the RDMA CM "port" service (987) in
// softib's CM, not a kernel TCP port: no root is needed. "tunables:"
// peer_credits and credits apply as for tcp; of the lnd tunables,
// service, peercredits_hiw, concurrent_sends, ntx, fmr_pool_size (the MR
// cache size), fmr_flush_trigger (the idle registrations it keeps),
// fmr_cache (0: register per transfer), timeout, keepalive (0: none),
// retry_count, rnr_retry_count, conns_per_peer (RC connections per
// peer), wrq_sge (SGEs per RDMA WRITE, softib's default 16, at most the
// device's max_sge), ib_mtu (0, or the device's active MTU: softib's
// RDMA CM sets no other path MTU) and tos (the connections' type of
// service, lnetctl net add --tos) map onto o2iblnd.Config;
// map_on_demand is obsolete as in Lustre 2.17 (always on): any value
// loads, and one other than 1 is logged at NI start as having no effect.
// Values softib cannot honour are refused with the setting named. For
// tcp nets, Lustre 2.17's exported timeout is sock_timeout and tos
// must be -1 (softib's socklnd sets no IP TOS). Deleting the net or
// stopping lnetd closes the NI, then the RDMA CM and the device.
//
// Routes (YAML "route:", lnetctl route add/del) go to the core's route
// table: messages to a remote net leave through the best alive gateway
// (priority, hops, load, round robin), and route show -v gives each
// route's state and type. "routing: enable: 1" (lnetctl set routing 1)
// makes the node forward between its nets with the router buffers of
// "buffers:" (tiny/small/large; lnetctl routing show) and the NIs'
// peer_buffer_credits. Configured peers ("peer:", lnetctl peer add) are
// Multi-Rail peers of the core (lnet/peer.go) unless Multi-Rail: False;
// traffic and discovery add more; peer show -v prints each peer NI's
// credits, statistics and health. Of the globals, transaction_timeout,
// max_intf, response_tracking, drop_asym_route, retry_count,
// health_sensitivity, recovery_interval, recovery_limit and
// max_recovery_ping_interval drive the LNet core (discovery: see
// discover); numa_range has nothing to choose on one NUMA node and
// router_sensitivity is stored and reported, as Lustre 2.17 does with it.
// lnetctl udsp add/del/show set selection priorities (lnet/udsp.go).
//
// softib extensions, all under "global:":
//
//   - router_ping_timeout (50), live_router_check_interval (60) and
//     dead_router_check_interval (60): the router checker's ping timeout
//     and the intervals between pings of alive and dead gateways, in
//     seconds (the lnet module parameters of those names; Lustre 2.17
//     folds the two intervals into alive_router_check_interval);
//     live_router_check_interval <= 0 turns the checker off.
//   - accept_port (988): the TCP acceptor port, also the port peers are
//     dialled on. "lnd tunables: accept_port" overrides it per NI.
//   - accept (secure): secure refuses connections from unprivileged
//     source ports like Lustre; all takes any (needed when nodes run
//     without root); none runs no acceptor.
//   - test_portal (60, -1 off) and test_slots (4): the echo test service.
//
// # Several nodes on one host
//
// Give every node its own loopback address and one common high port:
//
//	node A: interfaces: {0: 127.0.0.2}   global: {accept_port: 7988, accept: all}
//	node B: interfaces: {0: 127.0.0.3}   global: {accept_port: 7988, accept: all}
//
// Each acceptor binds its own address, and peers are dialled on their
// NID's address and the shared port, exactly as Lustre nodes share 988.
// Run each lnetd with its own --socket.
//
// # Control socket
//
// lnetd listens on a Unix-domain socket only, never a network port:
// $XDG_RUNTIME_DIR/softib/lnetd.sock, else /tmp/softib-$UID/lnetd.sock,
// or --socket. The directory is mode 0700, the socket 0600, and
// connections from other users are refused (SO_PEERCRED). The protocol
// is one JSON request and one JSON response per line (see Request,
// Response); show commands answer with a Map in lnetctl's shape, which
// lnetctl prints as YAML, or JSON with --json. Failures carry lnetctl's
// error block (errno, descr) and a hint.
//
// # LNet selftest
//
// Each lnetd also runs the lnet_selftest node service (package
// lnet/selftest, portals 50-52), driven over LNet by `softib lst`; the
// control op "lst.call" sends a console request from this node (lst run
// on the node itself uses it).
//
// # Echo test service
//
// Each lnetd keeps test_slots 1 MiB buffers on test_portal. Match bits N
// select slot N; any peer may PUT into a slot (ACKed; offsets from the
// initiator) and GET it back. From a node's lnetctl:
//
//	softib lnetctl test put --nid 127.0.0.3@tcp --size 1048576 --seed 7
//	softib lnetctl test get --nid 127.0.0.3@tcp --size 1048576
//	softib lnetctl --socket /path/of/B test show     # what B's slots hold
//
// put and get print the events and the CRC32 of the data sent or
// received; test show prints each slot's length and CRC32, so a transfer
// is verified end to end. `test md add` attaches an MD with a chosen
// portal, match bits, threshold and options (events shown by test show),
// and `test lazy` makes a portal lazy, to watch MD semantics on a live
// node.
package lnetd
