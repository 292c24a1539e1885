//go:build linux

package netemu

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"softib/internal/testenv"
)

// Config configures New. The zero value gives the defaults.
type Config struct {
	// PrefixA and PrefixB are host A's and host B's IPv4 address with
	// their subnet length (default 10.231.0.1/24 and 10.232.0.1/24).
	// The subnets must not overlap. The router's next-hop address on
	// each side is the subnet's second-to-last address (.254 in a /24).
	PrefixA, PrefixB netip.Prefix
	// Prefix6A and Prefix6B are the IPv6 equivalents (default
	// fd00:231::1/64 and fd00:232::1/64).
	Prefix6A, Prefix6B netip.Prefix
	// NoIPv6 leaves IPv6 unconfigured.
	NoIPv6 bool
	// MTU of both links (default 1500).
	MTU int
	// Seed seeds the impairment decisions; the same seed, settings and
	// packet arrival order give the same decisions.
	Seed uint64
}

// Host is an endpoint namespace: A or B.
type Host struct {
	Name    string           // namespace name, as for ip netns exec
	Dev     string           // its interface towards the router
	MAC     net.HardwareAddr // Dev's MAC address
	MTU     int
	Addr    netip.Addr   // IPv4 address of Dev
	Prefix  netip.Prefix // Addr's subnet
	Gateway netip.Addr   // the router's IPv4 next-hop address on this side
	// IPv6 counterparts (invalid with Config.NoIPv6).
	Addr6    netip.Addr
	Prefix6  netip.Prefix
	Gateway6 netip.Addr
}

// Router is an impairing router between two host namespaces. Its
// methods are safe for concurrent use.
type Router struct {
	A, B *Host
	// NS is the router's namespace.
	NS string

	lanes [2]*lane // by direction: AtoB, BtoA
	socks [2]*os.File
	done  chan struct{}
	wg    sync.WaitGroup

	mu         sync.Mutex  // guards kernelDrop and base
	kernelDrop [2]uint64   // per socket (A side, B side)
	base       [2]DirStats // counters at the end of New (its probes), by direction
}

var instance atomic.Uint32 // distinguishes the routers of one process

// New builds the three namespaces
//
//	nsA ──veth── nsR ──veth── nsB
//
// with addresses, routes and permanent neighbour entries (no ARP or ND
// is ever needed), starts the forwarder with no impairment, and removes
// everything when the test ends. It needs root and the ip tool.
func New(t testing.TB, cfg Config) *Router {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	if err := cfg.fill(); err != nil {
		t.Fatalf("netemu: %v", err)
	}
	k := instance.Add(1) % 1000
	pid := os.Getpid()
	stem := fmt.Sprintf("nemu-%d-%d", pid, k)
	dev := fmt.Sprintf("n%dx%d", pid%10000000, k) // IFNAMSIZ: at most 15 bytes
	r := &Router{
		NS:   stem + "-r",
		A:    newHost(stem+"-a", dev+"a", cfg.PrefixA, cfg.Prefix6A, cfg),
		B:    newHost(stem+"-b", dev+"b", cfg.PrefixB, cfg.Prefix6B, cfg),
		done: make(chan struct{}),
	}
	rDev := [2]string{dev + "ra", dev + "rb"}
	rMAC := [2]net.HardwareAddr{{0x02, 0x6e, 0x65, 0, 0, 0x0a}, {0x02, 0x6e, 0x65, 0, 0, 0x0b}}
	r.A.MAC = net.HardwareAddr{0x02, 0x6e, 0x65, 0, 0, 0x01}
	r.B.MAC = net.HardwareAddr{0x02, 0x6e, 0x65, 0, 0, 0x02}

	for _, ns := range []string{r.A.Name, r.NS, r.B.Name} {
		must(t, run("ip", "netns", "add", ns))
		t.Cleanup(func() {
			if err := run("ip", "netns", "del", ns); err != nil {
				t.Errorf("netemu cleanup: %v", err)
			}
		})
		must(t, run("ip", "-n", ns, "link", "set", "lo", "up"))
	}
	// The router's kernel must neither forward nor answer: IPv4
	// forwarding off (a new namespace may inherit it from the host) and
	// IPv6 off on its links, so that not even an ICMPv6 "no route"
	// comes back. The Go process does all forwarding.
	must(t, doIn(r.NS, func() error {
		return writeSysctls(map[string]string{
			"net/ipv4/ip_forward":                "0",
			"net/ipv6/conf/all/forwarding":       "0",
			"net/ipv6/conf/default/disable_ipv6": "1",
		})
	}))
	for i, h := range []*Host{r.A, r.B} {
		must(t, run("ip", "link", "add", h.Dev, "address", h.MAC.String(), "mtu", fmt.Sprint(cfg.MTU),
			"netns", h.Name, "type", "veth", "peer", "name", rDev[i], "address", rMAC[i].String(),
			"mtu", fmt.Sprint(cfg.MTU), "netns", r.NS))
		must(t, run("ip", "-n", r.NS, "link", "set", rDev[i], "up"))
		h.configure(t, rMAC[i], []*Host{r.B, r.A}[i])
	}

	pool := newPacketPool(vnetLen + ethLen + cfg.MTU)
	var fds [2]int
	must(t, doIn(r.NS, func() error {
		for i := range 2 {
			fd, err := openPacketSocket(rDev[i])
			if err != nil {
				if i == 1 {
					unix.Close(fds[0])
				}
				return err
			}
			fds[i] = fd
		}
		return nil
	}))
	var raw [2]syscall.RawConn
	for i := range 2 {
		r.socks[i] = os.NewFile(uintptr(fds[i]), "packet:"+rDev[i])
		var err error
		if raw[i], err = r.socks[i].SyscallConn(); err != nil {
			r.socks[0].Close()
			r.socks[1].Close()
			t.Fatalf("netemu: %v", err)
		}
	}
	// Lane AtoB reads socket 0 (A side) and sends on socket 1 (B side).
	for d := range 2 {
		in, out := d, 1-d
		peer := []*Host{r.B, r.A}[d]
		dst6 := peer.Prefix6
		if cfg.NoIPv6 {
			dst6 = netip.Prefix{}
		}
		l := newLane(newSockSender(raw[out]), pool, cfg.Seed, Dir(1<<d))
		r.lanes[d] = l
		fw := newForwarder(l, rMAC[in], rMAC[out], peer.MAC, peer.Prefix.Masked(), dst6.Masked(), cfg.MTU)
		r.wg.Add(2)
		go func() { defer r.wg.Done(); l.run(r.done) }()
		go func() { defer r.wg.Done(); r.readLoop(raw[in], fw) }()
	}
	t.Cleanup(r.close) // runs before the namespaces are deleted
	r.waitReady(t)
	return r
}

// waitReady returns once a datagram has crossed the router each way, and
// makes the counters start from there.
//
// "ip link set up" returns before the kernel has activated the links:
// carrier-on reaches a veth's transmit queue through the link-watch
// worker, and until it runs the queue's qdisc is noop, which drops
// everything (tx_dropped, kfree_skb reason QDISC_DROP). On a loaded
// machine that worker ran late enough for the first 64 datagrams a test
// sent through the router to vanish on the router's B-side veth. A probe
// that got through both veths of a direction proves them active.
// Unimpaired lanes draw no random numbers, so the probes leave the
// impairment decisions of the seed unchanged.
func (r *Router) waitReady(t testing.TB) {
	t.Helper()
	for _, d := range []struct{ from, to *Host }{{r.A, r.B}, {r.B, r.A}} {
		if err := probe(d.from, d.to); err != nil {
			t.Fatalf("netemu: %s → %s: %v", d.from.Name, d.to.Name, err)
		}
	}
	s := r.Stats()
	r.mu.Lock()
	r.base = [2]DirStats{s.AtoB, s.BtoA}
	r.mu.Unlock()
}

// probe sends a UDP datagram from one host to the other every 10 ms
// until one arrives (hang guard: 30 s).
func probe(from, to *Host) error {
	var rx, tx *net.UDPConn
	if err := to.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(to.Addr, 0)))
		return err
	}); err != nil {
		return err
	}
	defer rx.Close()
	if err := from.Do(func() (err error) {
		tx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from.Addr, 0)))
		return err
	}); err != nil {
		return err
	}
	defer tx.Close()
	dst := rx.LocalAddr().(*net.UDPAddr)
	buf := make([]byte, 16)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := tx.WriteToUDP([]byte("netemu probe"), dst); err != nil {
			return err
		}
		rx.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := rx.Read(buf); err == nil {
			return nil
		} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			return err
		}
	}
	return errors.New("no probe datagram crossed the router")
}

// fill applies defaults and checks the addresses.
func (c *Config) fill() error {
	def := func(p *netip.Prefix, s string) {
		if !p.IsValid() {
			*p = netip.MustParsePrefix(s)
		}
	}
	def(&c.PrefixA, "10.231.0.1/24")
	def(&c.PrefixB, "10.232.0.1/24")
	def(&c.Prefix6A, "fd00:231::1/64")
	def(&c.Prefix6B, "fd00:232::1/64")
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.MTU < 1280 || c.MTU > 65000 {
		return fmt.Errorf("MTU %d out of range 1280..65000", c.MTU)
	}
	for _, p := range [][2]netip.Prefix{{c.PrefixA, c.PrefixB}, {c.Prefix6A, c.Prefix6B}} {
		if p[0].Addr().Is4() != p[1].Addr().Is4() || p[0].Overlaps(p[1]) {
			return fmt.Errorf("prefixes %v and %v overlap or differ in family", p[0], p[1])
		}
		for _, q := range p {
			if gw := gateway(q); !gw.IsValid() || gw == q.Addr() || !q.Contains(q.Addr()) {
				return fmt.Errorf("prefix %v has no room for a gateway", q)
			}
		}
	}
	if !c.PrefixA.Addr().Is4() || c.Prefix6A.Addr().Is4() {
		return errors.New("PrefixA/B must be IPv4 and Prefix6A/B IPv6")
	}
	return nil
}

func newHost(name, dev string, p4, p6 netip.Prefix, cfg Config) *Host {
	h := &Host{Name: name, Dev: dev, MTU: cfg.MTU, Addr: p4.Addr(), Prefix: p4.Masked(), Gateway: gateway(p4)}
	if !cfg.NoIPv6 {
		h.Addr6, h.Prefix6, h.Gateway6 = p6.Addr(), p6.Masked(), gateway(p6)
	}
	return h
}

// configure gives h its addresses, a route to peer's subnets via the
// router and permanent neighbour entries for the router's next hops.
func (h *Host) configure(t testing.TB, routerMAC net.HardwareAddr, peer *Host) {
	t.Helper()
	ip := func(args ...string) { must(t, run("ip", append([]string{"-n", h.Name}, args...)...)) }
	ip("addr", "add", netip.PrefixFrom(h.Addr, h.Prefix.Bits()).String(), "dev", h.Dev)
	if h.Addr6.IsValid() {
		// nodad: usable at once instead of after duplicate detection.
		ip("addr", "add", netip.PrefixFrom(h.Addr6, h.Prefix6.Bits()).String(), "dev", h.Dev, "nodad")
	}
	ip("link", "set", h.Dev, "up")
	ip("neigh", "replace", h.Gateway.String(), "lladdr", routerMAC.String(), "dev", h.Dev, "nud", "permanent")
	ip("route", "add", peer.Prefix.String(), "via", h.Gateway.String(), "dev", h.Dev)
	if h.Addr6.IsValid() {
		ip("-6", "neigh", "replace", h.Gateway6.String(), "lladdr", routerMAC.String(), "dev", h.Dev, "nud", "permanent")
		ip("-6", "route", "add", peer.Prefix6.String(), "via", h.Gateway6.String(), "dev", h.Dev)
	}
}

// Do runs f on a goroutine whose OS thread has entered the host's
// namespace and returns f's error. Sockets f creates belong to the
// namespace for their whole life and may be used from any goroutine
// afterwards; goroutines f starts do NOT run in the namespace. The
// thread is never unlocked, so the Go runtime retires it afterwards
// instead of reusing it elsewhere.
func (h *Host) Do(f func() error) error { return doIn(h.Name, f) }

// Command returns a command that runs name inside the host's namespace
// (ip netns exec). The caller starts and waits for it as usual.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// SetImpairment sets the impairment of the selected directions,
// replacing the previous one. Packets already queued keep the fate
// decided on arrival.
func (r *Router) SetImpairment(d Dir, im Impairment) {
	for i, l := range r.lanes {
		if d&Dir(1<<i) != 0 {
			l.set(im)
		}
	}
}

// Impairment returns the impairment of one direction (AtoB or BtoA),
// with defaults filled in.
func (r *Router) Impairment(d Dir) Impairment {
	if d == BtoA {
		return r.lanes[1].get()
	}
	return r.lanes[0].get()
}

// Queued returns how many packets wait in the router (delayed, rate
// limited or held for reordering), both directions together.
func (r *Router) Queued() int { return r.lanes[0].queued() + r.lanes[1].queued() }

// Stats returns the counters of both directions since New returned (its
// readiness probes are not counted).
func (r *Router) Stats() Stats {
	r.mu.Lock()
	for i, f := range r.socks {
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		rc.Control(func(fd uintptr) {
			// Reading PACKET_STATISTICS resets it; keep the total.
			if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				r.kernelDrop[i] += uint64(st.Drops)
			}
		})
	}
	// Frames dropped on socket 0 (A side) were on their way from A to B.
	kd := r.kernelDrop
	base := r.base
	r.mu.Unlock()
	s := Stats{AtoB: r.lanes[0].c.snapshot(), BtoA: r.lanes[1].c.snapshot()}
	s.AtoB.KernelDrop += kd[0]
	s.BtoA.KernelDrop += kd[1]
	s.AtoB, s.BtoA = s.AtoB.minus(base[0]), s.BtoA.minus(base[1])
	return s
}

// minus returns s with every counter less b's (the counts since b).
func (s DirStats) minus(b DirStats) DirStats {
	sv, bv := reflect.ValueOf(&s).Elem(), reflect.ValueOf(b)
	for i := range sv.NumField() {
		sv.Field(i).SetUint(sv.Field(i).Uint() - bv.Field(i).Uint())
	}
	return s
}

// close stops the forwarder and closes its sockets.
func (r *Router) close() {
	close(r.done)
	for _, f := range r.socks {
		f.Close() // wakes the readers
	}
	r.wg.Wait()
	for _, l := range r.lanes {
		l.drain()
	}
}

// readBatch is how many frames readLoop takes per recvmmsg(2) call.
const readBatch = 16

// readLoop feeds fw with the frames read from socket rc until it is
// closed. Each buffer takes the largest GSO super-packet veth may pass.
// Frames are read in batches with recvmmsg, so a router that fell
// behind catches up with fewer system calls.
func (r *Router) readLoop(rc syscall.RawConn, fw *forwarder) {
	const bufLen = vnetLen + ethLen + 1<<16 + 1
	var (
		hdrs  [readBatch]unix.Mmsghdr
		iovs  [readBatch]unix.Iovec
		bufs  [readBatch][]byte
		n     int
		errno syscall.Errno
	)
	for i := range hdrs {
		bufs[i] = make([]byte, bufLen)
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(bufLen)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	read := func(fd uintptr) bool {
		m, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), readBatch,
			unix.MSG_DONTWAIT, 0, 0)
		n, errno = int(m), e
		return e != unix.EAGAIN
	}
	for {
		if err := rc.Read(read); err != nil {
			return // closed
		}
		if errno != 0 {
			if errno == unix.EBADF {
				return
			}
			fw.c.RxErrors.Inc()
			continue
		}
		for i := range n {
			h := &hdrs[i]
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 || int(h.Len) >= bufLen {
				fw.c.Malformed.Inc()
				continue
			}
			fw.route(bufs[i][:h.Len])
			h.Hdr.Flags = 0
		}
		fw.lane.pushLocked()
	}
}

// writeBatch is the most frames sockSender passes to one sendmmsg(2).
const writeBatch = 64

// sockSender writes frames to a packet socket, waiting in the poller if
// its send buffer is full.
type sockSender struct {
	rc    syscall.RawConn
	b     []byte
	err   error
	write func(fd uintptr) bool // made once: no allocation per send

	hdrs      [writeBatch]unix.Mmsghdr
	iovs      [writeBatch]unix.Iovec
	k, sent   int
	errno     syscall.Errno
	writeMany func(fd uintptr) bool
}

func newSockSender(rc syscall.RawConn) *sockSender {
	s := &sockSender{rc: rc}
	s.write = func(fd uintptr) bool {
		_, s.err = unix.Write(int(fd), s.b)
		return s.err != unix.EAGAIN
	}
	for i := range s.hdrs {
		s.hdrs[i].Hdr.Iov = &s.iovs[i]
		s.hdrs[i].Hdr.SetIovlen(1)
	}
	s.writeMany = func(fd uintptr) bool {
		m, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.hdrs[0])), uintptr(s.k), 0, 0, 0)
		s.sent, s.errno = int(m), e
		return e != unix.EAGAIN
	}
	return s
}

// sendBatch sends ps with as few sendmmsg calls as it can. A frame the
// kernel refuses is counted as failed and skipped.
func (s *sockSender) sendBatch(ps []*packet) (failed int) {
	for len(ps) > 0 {
		s.k = min(len(ps), writeBatch)
		for i, p := range ps[:s.k] {
			s.iovs[i].Base = &p.buf[0]
			s.iovs[i].SetLen(p.n)
		}
		if err := s.rc.Write(s.writeMany); err != nil {
			failed += len(ps) // socket closed
			break
		}
		if s.errno != 0 || s.sent <= 0 {
			failed++ // the first frame failed
			ps = ps[1:]
			continue
		}
		ps = ps[min(s.sent, len(ps)):]
	}
	for i := range s.iovs {
		s.iovs[i].Base = nil // keep no packet alive
	}
	return failed
}

func (s *sockSender) send(b []byte) error {
	s.b = b
	err := s.rc.Write(s.write)
	s.b = nil
	if err != nil {
		return err
	}
	return s.err
}

// openPacketSocket opens a SOCK_RAW packet socket with virtio headers
// on interface dev of the calling thread's namespace. It ignores the
// frames it sends itself.
func openPacketSocket(dev string) (int, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return -1, err
	}
	// Protocol 0 receives nothing until bind, so no frame of another
	// interface slips in.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("packet socket: %w", err)
	}
	opts := []struct {
		level, opt, v int
		name          string
	}{
		{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"},
		{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING"},
		{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8 << 20, "SO_RCVBUFFORCE"},
		{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4 << 20, "SO_SNDBUFFORCE"},
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("packet socket %s: %w", o.name, err)
		}
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("packet socket bind %s: %w", dev, err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// doIn runs f on a locked OS thread that has entered namespace ns.
func doIn(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's namespace is changed for good
		defer func() {
			if v := recover(); v != nil {
				errc <- fmt.Errorf("netemu: panic in namespace %s: %v", ns, v)
			}
		}()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netemu: namespace %s: %w", ns, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("netemu: setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// writeSysctls sets /proc/sys entries of the calling thread's network
// namespace (/proc/sys/net follows the opening thread's namespace).
func writeSysctls(kv map[string]string) error {
	for k, v := range kv {
		err := os.WriteFile("/proc/sys/"+k, []byte(v), 0)
		if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(k, "net/ipv6/") {
			continue // a kernel without IPv6 has nothing to turn off
		}
		if err != nil {
			return fmt.Errorf("sysctl %s: %w", k, err)
		}
	}
	return nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("netemu: %v", err)
	}
}
