// Package netemu is a userspace netem: an impairing IP router in its own
// network namespace, for tests that must run softib's protocols (RoCEv2
// over UDP 4791, LNet over TCP) over real kernel network paths with
// loss, delay, jitter, reordering, duplication and corruption.
//
// # Why
//
// The kernel that runs softib's tests (a Firecracker 6.18 kernel, here
// and in CI) has no sch_netem and no NFQUEUE, and loads no modules, so
// "tc qdisc add ... netem" fails and packets cannot be handed to
// userspace by netfilter either. internal/netns falls back to nftables,
// which can only drop and duplicate. netemu puts a Go process on the
// path instead:
//
//	nsA (A.Addr) ──veth── nsR (this process) ──veth── nsB (B.Addr)
//	10.231.0.1/24          no kernel forwarding          10.232.0.1/24
//
// A and B sit in different subnets and route to each other via the
// router's next-hop address on their side (.254), which has a permanent
// neighbour entry pointing at the router's veth MAC, so no ARP or
// neighbour discovery ever happens. In nsR the kernel does not forward
// (net.ipv4.ip_forward=0, IPv6 disabled on the links): packets cross
// only because the router reads them from an AF_PACKET socket on one
// veth and writes them to the other. Packets keep their IP source and
// destination (RoCE checks that the source equals the QP's address);
// like a router, netemu decrements the TTL or hop limit, fixes the IPv4
// header checksum (RoCE's ICRC masks both) and rewrites the Ethernet
// addresses. Both endpoints send and receive through their unmodified
// kernel stacks: UDP, TCP and their checksums, socket buffers, GSO.
//
// # Data path
//
// The packet sockets are SOCK_RAW with PACKET_VNET_HDR. The endpoints'
// veths hand the router what a NIC driver would get: GSO super-packets
// (TSO, UDP GSO) and packets whose L4 checksum is left to "hardware".
// The router does that hardware's work in userspace: it splits
// super-packets into MTU-sized segments and completes checksums, so
// each segment is impaired separately, as on a real wire. Per direction,
// one goroutine reads the ingress socket and runs the impairment model
// (math/rand/v2 PCG seeded with Config.Seed, so decisions are
// reproducible for a given packet order); packets due at once leave at
// the end of each batch of frames read, delayed ones wait in a heap
// that one scheduler goroutine per direction sends when due. Frames are
// read with recvmmsg and written with sendmmsg. The sockets are created on an
// OS thread that entered nsR (runtime.LockOSThread + setns, see
// Host.Do); a socket stays in the namespace it was created in, so the
// goroutines using it afterwards may run on any thread. Steady-state
// forwarding allocates nothing per packet.
//
// # Use
//
//	r := netemu.New(t, netemu.Config{})     // nsA, nsR, nsB; forwarder running
//	r.A.Do(func() error { ... })              // Go code in nsA (sockets stay there)
//	cmd := r.B.Command("lnetctl", "ping", ...) // subprocess in nsB
//	r.SetImpairment(netemu.AtoB|netemu.BtoA, netemu.Impairment{
//		Loss: 0.1, Delay: 2 * time.Millisecond, Jitter: time.Millisecond,
//		Reorder: 0.2, Duplicate: 0.05,
//		Match: netemu.Filter{Proto: 17, Port: 4791}, // only RoCEv2
//	})
//	s := r.Stats() // s.AtoB.Dropped, s.AtoB.Reordered, ...
//
// rxe tests open a softib RoCE device's UDP socket on r.A.Addr inside
// r.A.Do and its peer on r.B.Addr inside r.B.Do (or, on a kernel with
// rdma_rxe, attach kernel rxe to r.B.Dev with r.B.Command("rdma", "link",
// "add", ...)); GIDs are the IPv4-mapped A.Addr and B.Addr. socklnd
// and lnetd tests run their TCP NIs the same way (NIDs A.Addr@tcp and
// B.Addr@tcp), lnetd as a subprocess via Command. Impairments can
// change while traffic flows, e.g. to cut the link (Loss: 1) and heal
// it again, and Match confines them to one protocol or port.
//
// Limits: IPv6 extension headers are forwarded but not looked into (a
// port Filter does not match such packets, and GSO behind them is
// dropped as Malformed); no ICMP is generated (TTL expiry is counted);
// throughput is below a bare veth. The userspace work is about 0.35µs
// per packet (0.6µs impaired, BenchmarkHandle); the system calls around
// it dominate, so frames are read with recvmmsg and written with
// sendmmsg in batches. On a 2-vCPU VM shared with other jobs, 64-byte
// datagrams crossed at 40,000 to 170,000 packets/s depending on load,
// limited by the sender rather than the router (BenchmarkForward). A
// sender that outpaces the router loses packets in the router's socket
// buffer (8 MiB), counted as KernelDrop. New needs root
// (testenv.RequireRoot) and the ip tool, and removes every namespace
// with t.Cleanup.
//
// The namespace parts are Linux-only; the impairment model builds
// everywhere.
package netemu
