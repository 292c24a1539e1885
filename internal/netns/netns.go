//go:build linux

package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/internal/testenv"
)

// Node is one network namespace with one interface (Dev) towards the
// others.
type Node struct {
	Name  string     // namespace name (as for ip netns exec)
	Dev   string     // the interface inside the namespace
	Addr  netip.Addr // IPv4 address of Dev
	Addr6 netip.Addr // IPv6 address of Dev (invalid if IPv6 is off)
	MTU   int        // MTU of Dev

	// The far end of Dev's veth (the other node, or the hub), where
	// emulated loss is applied on ingress.
	peerNS, peerDev string

	// relay and dir are set for a relay pair: this node's frames travel
	// in direction dir.
	relay *relay
	dir   int
}

// Side selects a node of a Pair.
type Side int

// The two sides of a Pair.
const (
	A Side = iota
	B
)

// PairConfig configures NewPair. The zero value gives defaults.
type PairConfig struct {
	// MTU of the veth link (default 1500).
	MTU int
	// AddrA and AddrB are the IPv4 prefixes of the two ends
	// (default 10.201.0.1/24 and 10.201.0.2/24).
	AddrA, AddrB netip.Prefix
	// Addr6A and Addr6B are the IPv6 prefixes (default fd00:201::1/64
	// and fd00:201::2/64).
	Addr6A, Addr6B netip.Prefix
	// NoIPv6 leaves IPv6 unconfigured.
	NoIPv6 bool
	// Relay joins the namespaces through two TAP devices and a relay in
	// this process instead of a veth pair. SetNetem then applies every
	// impairment (delay, jitter, reorder, corrupt too) in userspace on
	// any kernel, at a lower throughput than veth.
	Relay bool
	// Seed seeds the relay's impairment decisions.
	Seed uint64
}

// Pair is two namespaces joined by one veth link (or a relay).
type Pair struct {
	A, B *Node

	relay *relay
}

// RelayStats returns the relay's counters, or nil for a veth pair.
func (p *Pair) RelayStats() *RelayStats {
	if p.relay == nil {
		return nil
	}
	return &p.relay.stats
}

// Node returns the node of side s.
func (p *Pair) Node(s Side) *Node {
	if s == A {
		return p.A
	}
	return p.B
}

// SetNetem impairs the traffic that side s sends; see Node.SetNetem.
func (p *Pair) SetNetem(s Side, n Netem) error { return p.Node(s).SetNetem(n) }

// Config configures New. The zero value gives two nodes.
type Config struct {
	// N is the number of nodes (default 2). Two nodes are joined by a
	// veth pair; more are joined by veths to a bridge in a hub namespace.
	N int
	// MTU of all links (default 1500).
	MTU int
	// Prefix is the IPv4 subnet; node i gets host address i+1
	// (default 10.202.0.0/24).
	Prefix netip.Prefix
	// Prefix6 is the IPv6 subnet (default fd00:202::/64).
	Prefix6 netip.Prefix
	// NoIPv6 leaves IPv6 unconfigured.
	NoIPv6 bool
}

// Network is N namespaces on one layer-2 segment.
type Network struct {
	Nodes []*Node
	// Hub is the namespace holding the bridge ("" for two nodes).
	Hub string
}

var instance atomic.Uint32 // distinguishes the namespaces of one process

// names returns unique namespace and interface name stems. Interface
// names must stay within IFNAMSIZ-1 = 15 bytes.
func names() (ns, dev string) {
	k := instance.Add(1) % 1000
	pid := os.Getpid()
	return fmt.Sprintf("softib-%d-%d", pid, k), fmt.Sprintf("v%dx%d", pid, k)
}

// NewPair creates two namespaces joined by a veth link, with addresses
// configured and links up, removed again at the end of the test.
func NewPair(t testing.TB, cfg PairConfig) *Pair {
	t.Helper()
	requireRoot(t)
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	def := func(p *netip.Prefix, s string) {
		if !p.IsValid() {
			*p = netip.MustParsePrefix(s)
		}
	}
	def(&cfg.AddrA, "10.201.0.1/24")
	def(&cfg.AddrB, "10.201.0.2/24")
	def(&cfg.Addr6A, "fd00:201::1/64")
	def(&cfg.Addr6B, "fd00:201::2/64")
	ns, dev := names()
	a := &Node{Name: ns + "-a", Dev: dev + "a", Addr: cfg.AddrA.Addr(), MTU: cfg.MTU}
	b := &Node{Name: ns + "-b", Dev: dev + "b", Addr: cfg.AddrB.Addr(), MTU: cfg.MTU}
	a.peerNS, a.peerDev = b.Name, b.Dev
	b.peerNS, b.peerDev = a.Name, a.Dev
	addNS(t, a.Name)
	addNS(t, b.Name)
	p := &Pair{A: a, B: b}
	if cfg.Relay {
		var taps [2]*os.File
		for i, n := range []*Node{a, b} {
			err := n.Do(func() (err error) { taps[i], err = openTap(n.Dev); return err })
			if err != nil {
				if taps[0] != nil {
					taps[0].Close()
				}
				t.Fatalf("netns: %v", err)
			}
			must(t, ip("-n", n.Name, "link", "set", n.Dev, "mtu", fmt.Sprint(cfg.MTU)))
		}
		p.relay = newRelay(taps[0], taps[1], cfg.Seed)
		t.Cleanup(p.relay.close)
		a.relay, a.dir = p.relay, 0
		b.relay, b.dir = p.relay, 1
	} else {
		must(t, ip("link", "add", a.Dev, "netns", a.Name, "mtu", fmt.Sprint(cfg.MTU),
			"type", "veth", "peer", "name", b.Dev, "netns", b.Name, "mtu", fmt.Sprint(cfg.MTU)))
	}
	for _, c := range []struct {
		n      *Node
		p4, p6 netip.Prefix
	}{{a, cfg.AddrA, cfg.Addr6A}, {b, cfg.AddrB, cfg.Addr6B}} {
		if !cfg.NoIPv6 {
			c.n.Addr6 = c.p6.Addr()
		}
		c.n.configure(t, c.p4, c.p6, cfg.NoIPv6)
	}
	if !cfg.Relay {
		waitLink(t, a, b)
	}
	return p
}

// waitLink returns once the veth carries traffic in each direction: an
// IPv4 ping, and when both nodes have IPv6 addresses, the sender's IPv6
// multicast route and an IPv6 ping. `ip link set up` returns before the
// kernel attaches the veth's qdisc, and until then the link drops what
// is sent (a test sending datagrams without retransmission at once lost
// its first ones); IPv6 finds the link ready later still, and until it
// adds the interface's ff00::/8 route (local table) it drops every IPv6
// multicast datagram it receives (Ip6InNoRoutes; TestMcastIPv6Netns in
// rxe lost all 16 to it). The relay mode's link is up when its file
// descriptors are, and probing it would draw from its seeded impairment.
// New's bridged nodes are waited for the same way, each with node 0.
func waitLink(t testing.TB, a, b *Node) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	poll := func(what string, ok func() error) {
		for {
			err := ok()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("netns: %s over the new veth: %v", what, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	dirs := [][2]*Node{{a, b}, {b, a}}
	for _, d := range dirs {
		from, to := d[0], d[1]
		poll(fmt.Sprintf("%s cannot reach %s", from.Name, to.Addr), func() error {
			return run(nil, "ip", "netns", "exec", from.Name, "ping", "-n", "-q", "-c", "1", "-W", "1", to.Addr.String())
		})
	}
	if !a.Addr6.IsValid() || !b.Addr6.IsValid() {
		return
	}
	// Both ends IPv6-ready first: a ping sent to a node that is not
	// yet would wait out its whole -W second.
	for _, n := range []*Node{a, b} {
		poll(fmt.Sprintf("%s has no IPv6 multicast route on %s", n.Name, n.Dev), n.checkMcastRoute6)
	}
	for _, d := range dirs {
		from, to := d[0], d[1]
		poll(fmt.Sprintf("%s cannot reach %s", from.Name, to.Addr6), func() error {
			return run(nil, "ip", "netns", "exec", from.Name, "ping", "-6", "-n", "-q", "-c", "1", "-W", "1", to.Addr6.String())
		})
	}
}

// checkMcastRoute6 returns an error until n.Dev has its IPv6 multicast
// route, ff00::/8 in the local table.
func (n *Node) checkMcastRoute6() error {
	out, err := exec.Command("ip", "-n", n.Name, "-6", "route", "show", "table", "local", "type", "multicast", "dev", n.Dev).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip route: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "ff00::/8") {
		return errors.New("no ff00::/8 route yet")
	}
	return nil
}

// New creates cfg.N namespaces on one segment: a veth pair for two
// nodes, a bridge in an extra hub namespace for more.
func New(t testing.TB, cfg Config) *Network {
	t.Helper()
	requireRoot(t)
	if cfg.N <= 0 {
		cfg.N = 2
	}
	if cfg.N > 250 {
		t.Fatalf("netns: %d nodes is too many", cfg.N)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if !cfg.Prefix.IsValid() {
		cfg.Prefix = netip.MustParsePrefix("10.202.0.0/24")
	}
	if !cfg.Prefix6.IsValid() {
		cfg.Prefix6 = netip.MustParsePrefix("fd00:202::/64")
	}
	host := func(p netip.Prefix, i int) netip.Prefix {
		a := p.Masked().Addr()
		for range i + 1 {
			a = a.Next()
		}
		return netip.PrefixFrom(a, p.Bits())
	}
	if cfg.N == 2 {
		p := NewPair(t, PairConfig{MTU: cfg.MTU, AddrA: host(cfg.Prefix, 0), AddrB: host(cfg.Prefix, 1),
			Addr6A: host(cfg.Prefix6, 0), Addr6B: host(cfg.Prefix6, 1), NoIPv6: cfg.NoIPv6})
		return &Network{Nodes: []*Node{p.A, p.B}}
	}
	ns, dev := names()
	nw := &Network{Hub: ns + "-hub"}
	addNS(t, nw.Hub)
	must(t, ip("-n", nw.Hub, "link", "add", "br0", "mtu", fmt.Sprint(cfg.MTU), "type", "bridge"))
	must(t, ip("-n", nw.Hub, "link", "set", "br0", "up"))
	for i := range cfg.N {
		n := &Node{
			Name: fmt.Sprintf("%s-%d", ns, i),
			Dev:  fmt.Sprintf("%s%d", dev, i),
			Addr: host(cfg.Prefix, i).Addr(),
			MTU:  cfg.MTU,
		}
		hubDev := fmt.Sprintf("%sh%d", dev, i)
		n.peerNS, n.peerDev = nw.Hub, hubDev
		if !cfg.NoIPv6 {
			n.Addr6 = host(cfg.Prefix6, i).Addr()
		}
		addNS(t, n.Name)
		must(t, ip("link", "add", n.Dev, "netns", n.Name, "mtu", fmt.Sprint(cfg.MTU),
			"type", "veth", "peer", "name", hubDev, "netns", nw.Hub, "mtu", fmt.Sprint(cfg.MTU)))
		must(t, ip("-n", nw.Hub, "link", "set", hubDev, "master", "br0", "up"))
		n.configure(t, host(cfg.Prefix, i), host(cfg.Prefix6, i), cfg.NoIPv6)
		nw.Nodes = append(nw.Nodes, n)
	}
	// Each node's veth and bridge port carry traffic both ways once it
	// and node 0 reach each other (see waitLink).
	for _, n := range nw.Nodes[1:] {
		waitLink(t, nw.Nodes[0], n)
	}
	return nw
}

func requireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
}

// addNS creates namespace name and registers its removal.
func addNS(t testing.TB, name string) {
	t.Helper()
	must(t, ip("netns", "add", name))
	t.Cleanup(func() {
		// Deleting the namespace also deletes its veth ends.
		if err := ip("netns", "del", name); err != nil {
			t.Errorf("netns cleanup: %v", err)
		}
	})
	must(t, ip("-n", name, "link", "set", "lo", "up"))
}

// configure brings n.Dev up with its addresses.
func (n *Node) configure(t testing.TB, p4, p6 netip.Prefix, noIPv6 bool) {
	t.Helper()
	must(t, ip("-n", n.Name, "addr", "add", p4.String(), "dev", n.Dev))
	if !noIPv6 {
		// nodad: usable at once instead of after duplicate detection.
		must(t, ip("-n", n.Name, "addr", "add", p6.String(), "dev", n.Dev, "nodad"))
	}
	must(t, ip("-n", n.Name, "link", "set", n.Dev, "up"))
}

// ip runs the ip tool and returns its error output as the error.
func ip(args ...string) error { return run(nil, "ip", args...) }

func run(stdin []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
}

// Do runs f on a goroutine whose OS thread has entered the namespace and
// returns f's error (see Run).
func (n *Node) Do(f func() error) error { return Run(n.Name, f) }

// Run runs f on a goroutine whose OS thread has entered the named network
// namespace (/run/netns/name, as `ip netns add` makes it) and returns f's
// error. Sockets f creates belong to the namespace for their whole life
// and may be used from any goroutine after Run returns. Goroutines that f
// starts do NOT run in the namespace.
//
// The thread stays locked and is never unlocked: once its network
// namespace has changed it must not run other goroutines, so the Go
// runtime discards it when f returns.
func Run(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // deliberately never unlocked, see above
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("netns %s: panic in Run: %v", name, r)
			}
		}()
		fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", name, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("netns %s: setns: %w", name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Command returns a command that runs name inside the namespace
// (ip netns exec). The caller starts and waits for it as usual.
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// ErrNetemUnsupported is returned by SetNetem when the kernel has no
// netem qdisc and the requested impairment cannot be emulated with
// nftables. A relay pair (PairConfig.Relay) supports every impairment.
var ErrNetemUnsupported = errors.New("netns: impairment not supported by this kernel (no sch_netem; use PairConfig.Relay)")
