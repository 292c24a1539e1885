package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/lnet/selftest"
	"softib/lnet/socklnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/tools/devsel"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// DefaultPort is the first socklnd acceptor port the cluster tries: far
// from lnetd's 988 and below the usual ephemeral range, so it needs no
// root and does not meet a running lnetd.
const DefaultPort = 21988

// portTries is how many ports from DefaultPort an automatic pick tries.
const portTries = 32

// ClusterConfig shapes the demo's LNet cluster. The zero value is the
// default: three nodes on 127.0.0.2, .3 and .4, tcp and o2ib.
type ClusterConfig struct {
	// Addrs are the nodes' IPv4 addresses (127.0.0.2, .3, .4); at least two.
	Addrs []netip.Addr
	// Port is the socklnd acceptor port of every node; 0 picks the first
	// port from DefaultPort that is free on every address.
	Port int
	// NoO2IB brings up tcp NIs only.
	NoO2IB bool
	// Log receives the nodes' diagnostics (nil: discarded).
	Log *slog.Logger
}

func (c *ClusterConfig) setDefaults() {
	if len(c.Addrs) == 0 {
		for i := range 3 {
			c.Addrs = append(c.Addrs, netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)}))
		}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Node is one LNet node of the cluster: an instance with a tcp NI, a
// selftest service and, with o2ib, its own rxe device and RDMA CM.
type Node struct {
	Addr netip.Addr
	In   *lnet.Instance
	Svc  *selftest.Service
	TCP  lnetwire.NID
	O2IB lnetwire.NID // zero without o2ib
	dev  verbs.Device
	cm   *rdmacm.Manager
}

// Cluster is the demo's LNet nodes, all in this process.
type Cluster struct {
	Nodes []*Node
	// Port is the socklnd acceptor port in use.
	Port int
	// O2IBSkipped says why the o2ib NIs are missing ("" when they are up).
	O2IBSkipped string
}

// ErrAddrInUse reports an address or port another program holds; the
// message says which flag picks another.
var ErrAddrInUse = errors.New("address in use")

// StartCluster brings the nodes up. A failure to bring up o2ib NIs (other
// than a device address in use) does not fail it: the cluster runs tcp
// only and O2IBSkipped says why.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	cfg.setDefaults()
	if len(cfg.Addrs) < 2 {
		return nil, errors.New("the cluster needs at least two addresses")
	}
	for _, a := range cfg.Addrs {
		if !a.Is4() {
			return nil, fmt.Errorf("address %v: want IPv4", a)
		}
	}
	port := cfg.Port
	if port == 0 {
		var err error
		if port, err = pickPort(cfg.Addrs); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Port: port}
	for _, a := range cfg.Addrs {
		n, err := startNode(a, port, cfg.Log)
		if err != nil {
			c.Close()
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("%w: socklnd acceptor %v:%d: pick another port with --port or other addresses with --addrs", ErrAddrInUse, a, port)
			}
			return nil, fmt.Errorf("node %v: %w", a, err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	if cfg.NoO2IB {
		c.O2IBSkipped = "disabled with --tcp-only"
		return c, nil
	}
	if err := c.addO2IB(ctx); err != nil {
		if errors.Is(err, ErrAddrInUse) {
			c.Close()
			return nil, err
		}
		c.O2IBSkipped = err.Error()
	}
	return c, nil
}

// pickPort returns the first port from DefaultPort free on every address.
func pickPort(addrs []netip.Addr) (int, error) {
next:
	for p := DefaultPort; p < DefaultPort+portTries; p++ {
		var ls []net.Listener
		for _, a := range addrs {
			l, err := net.Listen("tcp4", netip.AddrPortFrom(a, uint16(p)).String())
			if err != nil {
				for _, l := range ls {
					l.Close()
				}
				continue next
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		return p, nil
	}
	return 0, fmt.Errorf("%w: no free TCP port in %d..%d on %v: pick one with --port or other addresses with --addrs",
		ErrAddrInUse, DefaultPort, DefaultPort+portTries-1, addrs)
}

func addrU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func startNode(a netip.Addr, port int, log *slog.Logger) (*Node, error) {
	n := &Node{Addr: a, TCP: lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.SOCKLND, 0), addrU32(a))}
	// Ephemeral source ports and an acceptor taking them: nothing here
	// needs root.
	sc := socklnd.Config{AcceptPort: port, Accept: socklnd.AcceptAll, SourcePort: socklnd.SourcePortAny}
	// --pcap: the tcp NIs' streams go to the devices' capture file.
	var dc verbs.DeviceConfig
	if err := devsel.CaptureConfig(&dc); err != nil {
		return nil, err
	}
	sc.Capture = dc.Capture
	in, err := lnet.New(lnet.Config{
		// o2iblnd without a CM: each o2ib NI brings its own.
		LNDs: []lnd.LND{socklnd.New(sc), o2iblnd.New(o2iblnd.Config{})},
		Nets: []lnet.NetConfig{{Net: n.TCP.Net(), Addr: n.TCP.Addr(), Interfaces: []string{a.String()}, LNDConfig: sc}},
		Log:  log,
	})
	if err != nil {
		return nil, err
	}
	n.In = in
	if n.Svc, err = selftest.NewService(in, selftest.Config{Log: log, RPCTimeout: 10 * time.Second}); err != nil {
		in.Close()
		return nil, err
	}
	return n, nil
}

// addO2IB opens an rxe device and RDMA CM per node, adds an o2ib NI on
// each and checks with an LNet ping from the first node to the others.
func (c *Cluster) addO2IB(ctx context.Context) error {
	for i, n := range c.Nodes {
		dev, err := openRXE(verbs.DeviceConfig{Name: fmt.Sprintf("rxe_demo%d", i), Addr: n.Addr})
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w: rxe device on %v (UDP 4791; another softib device or Linux rdma_rxe?): pick other addresses with --addrs (or run --tcp-only --no-rdma)", ErrAddrInUse, n.Addr)
			}
			return fmt.Errorf("rxe device on %v: %v", n.Addr, err)
		}
		m := rdmacm.NewManager(rdmacm.Config{})
		if err := m.AddDevice(dev); err != nil {
			m.Close()
			CloseDevice(dev)
			return fmt.Errorf("RDMA CM on %v: %v", n.Addr, err)
		}
		n.dev, n.cm = dev, m
		nid := lnetwire.MakeNID(lnetwire.MakeNet(lnetwire.O2IBLND, 0), addrU32(n.Addr))
		// The NI carries its own CM: every node has its own device.
		err = n.In.AddNet(lnet.NetConfig{Net: nid.Net(), Addr: nid.Addr(), LNDConfig: o2iblnd.Config{CM: m}})
		if err != nil {
			return fmt.Errorf("o2ib NI %v: %v", nid, err)
		}
		n.O2IB = nid
	}
	for _, n := range c.Nodes[1:] {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Nodes[0].In.Ping(pctx, lnetwire.ProcessID{NID: n.O2IB, PID: lnetwire.PIDLustre}, 5*time.Second)
		cancel()
		if err != nil {
			return fmt.Errorf("LNet ping %v -> %v failed: %v", c.Nodes[0].O2IB, n.O2IB, err)
		}
	}
	return nil
}

// Nets returns the networks the selftest runs on: tcp, then o2ib when up.
func (c *Cluster) Nets() []string {
	if c.O2IBSkipped != "" {
		return []string{"tcp"}
	}
	return []string{"tcp", "o2ib"}
}

// nid returns node n's NID on net ("tcp" or "o2ib").
func (n *Node) nid(net string) lnetwire.NID {
	if net == "o2ib" {
		return n.O2IB
	}
	return n.TCP
}

// Close stops every node and device.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Svc.Close()
		n.In.Close()
		if n.cm != nil {
			n.cm.Close()
		}
		if n.dev != nil {
			CloseDevice(n.dev)
		}
	}
	c.Nodes = nil
}

// caller sends console requests from the first node's selftest service,
// as lst does through a node's lnetd (selftest.Service.ProxyCall).
func (c *Cluster) caller() selftest.Caller {
	svc := c.Nodes[0].Svc
	return func(ctx context.Context, to lnetwire.NID, req, bulk []byte, timeout time.Duration) ([]byte, error) {
		raw, err := json.Marshal(selftest.ProxyArgs{NID: to.String(), Req: req, Bulk: bulk, Timeout: timeout})
		if err != nil {
			return nil, err
		}
		r, err := svc.ProxyCall(ctx, raw)
		if err != nil {
			return nil, err
		}
		return r.Rep, nil
	}
}

// Stack describes the layers the cluster runs on, in one line.
func (c *Cluster) Stack() string {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr.String())
	}
	s := fmt.Sprintf("%d LNet nodes in one process (%s); tcp: socklnd over kernel TCP, acceptors on port %d",
		len(c.Nodes), strings.Join(addrs, ", "), c.Port)
	if c.O2IBSkipped == "" {
		s += "; o2ib: o2iblnd over RDMA CM over rxe Soft-RoCE (RoCEv2, UDP 4791), one device per node"
	} else {
		s += "; no o2ib"
	}
	return s + "; lnet_selftest console on " + c.Nodes[0].TCP.String()
}

// openRXE opens a Soft-RoCE device with rxe's defaults (UDP GRO on) and
// publishes it as the CLI's tools do (tools/devsel): `softib stat` and
// `softib res` see it from another terminal, --pcap captures it and
// --metrics exports it. CloseDevice undoes that.
func openRXE(dc verbs.DeviceConfig) (verbs.Device, error) {
	if err := devsel.CaptureConfig(&dc); err != nil {
		return nil, err
	}
	dev, err := rxe.Open(rxe.Config{DeviceConfig: dc})
	if err != nil {
		return nil, err
	}
	if err := devsel.Observe(dev); err != nil {
		dev.Close()
		return nil, err
	}
	return dev, nil
}

// CloseDevice withdraws a device of the demo from softib stat/res and
// --metrics, and closes it.
func CloseDevice(dev verbs.Device) {
	devsel.Unobserve(dev)
	dev.Close()
}
