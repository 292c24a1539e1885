// Package devsel is the device selection shared by every softib tool: the
// flags that say which local address a Soft-RoCE device binds (--addr,
// --port, env SOFTIB_ADDR) and the rdma-core compatible ones (-d device
// name, -i IB port, -g/-x GID index), plus opening the device with error
// messages that say what to do.
package devsel

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"softib/verbs"
)

// EnvProvider is the environment variable that supplies the default
// --provider.
const EnvProvider = "SOFTIB_PROVIDER"

// EnvAddr is the environment variable that supplies the default --addr.
const EnvAddr = "SOFTIB_ADDR"

// DefaultUDPPort is the RoCEv2 UDP port (IANA 4791).
const DefaultUDPPort = 4791

// Options selects and configures the local device. The zero value means
// the defaults: the address from SOFTIB_ADDR or the host's first
// non-loopback IPv4 address, UDP port 4791, IB port 1, no GID index.
type Options struct {
	// Addr is the local IP address the device binds ("" = default).
	Addr string
	// UDPPort is the local UDP port (0 = 4791).
	UDPPort uint
	// PeerUDPPort is the UDP port of the peer device (0 = same as
	// UDPPort). RoCEv2 has no way to tell a peer's port, so tools that
	// talk to a softib device on a non-standard port need it.
	PeerUDPPort uint
	// Name is the device name (-d); "" means the first device ("rxe0").
	Name string
	// IBPort is the port number (-i); 0 means 1.
	IBPort int
	// GIDIndex is the source GID index (-g/-x); -1 means none.
	GIDIndex int
	// NetMTU is the link MTU the device assumes (0 = the MTU of the
	// interface holding the address).
	NetMTU int
	// BusyPoll makes the device spin on its socket for lower latency.
	BusyPoll bool
	// NoRxCoalescing receives without UDP GRO (verbs.DeviceConfig
	// NoRxCoalescing).
	NoRxCoalescing bool
	// RxShards is the number of receive sockets of the device
	// (verbs.DeviceConfig.RxShards; 0 = the provider's default).
	RxShards int
	// ECN turns on RoCEv2 congestion signalling on a Soft-RoCE device:
	// ECT(0) marks, CNPs for CE-marked packets, a DCQCN rate limiter per
	// QP (rxe.ECNConfig with its defaults). Off by default, as on Linux
	// rxe; refused for other providers.
	ECN bool
	// Provider names the verbs provider ("" = $SOFTIB_PROVIDER, else
	// "rxe", softib's Soft-RoCE; "ibverbs" = the kernel's RDMA devices in
	// a build with -tags ibverbs).
	Provider string

	// fallback is the loopback address Open took because the default
	// address's port was in use.
	fallback netip.Addr
}

// NewOptions returns Options with GIDIndex unset (-1).
func NewOptions() *Options { return &Options{GIDIndex: -1} }

// Register adds the device flags to fs. gidFlags names the GID index flags
// of the tool ("g" for the pingpong tools, "x" for perftest); gidDefault is
// the value they start with (-1 = none).
func (o *Options) Register(fs *flag.FlagSet, gidDefault int, gidFlags ...string) {
	fs.StringVar(&o.Addr, "addr", o.Addr, "local IP `address` the device binds (default $"+EnvAddr+", else the first non-loopback IPv4 address, else 127.0.0.1)")
	fs.UintVar(&o.UDPPort, "udp-port", o.UDPPort, "local RoCEv2 UDP `port` (default 4791)")
	fs.UintVar(&o.PeerUDPPort, "peer-udp-port", o.PeerUDPPort, "the peer device's RoCEv2 UDP `port` (default: same as --udp-port)")
	for _, n := range []string{"d", "ib-dev"} {
		fs.StringVar(&o.Name, n, o.Name, "device `name` (default rxe0)")
	}
	for _, n := range []string{"i", "ib-port"} {
		fs.IntVar(&o.IBPort, n, 1, "IB `port` of the device")
	}
	o.GIDIndex = gidDefault
	for _, n := range gidFlags {
		fs.IntVar(&o.GIDIndex, n, gidDefault, "GID `index` (1 = the IPv4-mapped GID, as on Linux rxe)")
	}
	fs.IntVar(&o.NetMTU, "net-mtu", o.NetMTU, "link `MTU` the device assumes (default: the MTU of the interface holding --addr, as Linux rxe; 4096-byte IB MTU needs 4176 or more, a 1500 link gives 1024)")
	fs.BoolVar(&o.BusyPoll, "busy-poll", o.BusyPoll, "busy-poll the device socket (lower latency, one CPU spinning)")
	RegisterObserve(fs) // --pcap, --metrics (observe.go)
	fs.StringVar(&o.Provider, "provider", o.Provider, "verbs `provider`: rxe (softib's Soft-RoCE, the default) or ibverbs (kernel RDMA devices; needs a build with -tags ibverbs) (default $"+EnvProvider+", else rxe)")
	fs.IntVar(&o.RxShards, "rx-shards", o.RxShards, "receive `sockets` of the device, each read by its own goroutine (SO_REUSEPORT; default GOMAXPROCS)")
	fs.BoolVar(&o.NoRxCoalescing, "no-gro", o.NoRxCoalescing, "receive without UDP GRO (one datagram per packet; GRO coalesces a peer's GSO bursts, and a polling tool reads the socket itself either way)")
	o.registerECN(fs)
}

// registerECN adds --ecn to fs.
func (o *Options) registerECN(fs *flag.FlagSet) {
	fs.BoolVar(&o.ECN, "ecn", o.ECN, "RoCEv2 congestion signalling: mark packets ECN-capable (ECT(0)), answer CE-marked packets with CNPs, and slow a QP that receives CNPs down with a DCQCN rate limiter (off by default, as on Linux rxe, which has none of it)")
}

// RegisterCM adds the long device flags of the RDMA CM tools (rping,
// mckey), whose short flags are their own (rping's -d is debug): --addr,
// with addrFallback naming the tool's flag the address otherwise comes
// from, --provider, --udp-port, --ib-dev, --net-mtu, --busy-poll and
// --rx-shards.
func (o *Options) RegisterCM(fs *flag.FlagSet, addrFallback string) {
	fs.StringVar(&o.Addr, "addr", o.Addr, "local IP `address` the device binds (default $"+EnvAddr+", else "+addrFallback+", else the first non-loopback IPv4 address)")
	fs.StringVar(&o.Provider, "provider", o.Provider, "verbs `provider`: rxe (default) or ibverbs (kernel RDMA devices, in a build with -tags ibverbs) (default $"+EnvProvider+")")
	fs.UintVar(&o.UDPPort, "udp-port", o.UDPPort, "local RoCEv2 UDP `port` (default 4791)")
	fs.StringVar(&o.Name, "ib-dev", o.Name, "device `name` (default rxe0)")
	fs.IntVar(&o.NetMTU, "net-mtu", o.NetMTU, "link `MTU` the device assumes (default: the MTU of the interface holding --addr, as Linux rxe)")
	fs.BoolVar(&o.BusyPoll, "busy-poll", o.BusyPoll, "busy-poll the device socket")
	fs.IntVar(&o.RxShards, "rx-shards", o.RxShards, "receive `sockets` of the device, each read by its own goroutine (SO_REUSEPORT; default GOMAXPROCS)")
	o.registerECN(fs)
}

// checkECN refuses --ecn for a provider other than rxe, naming why.
func (o *Options) checkECN(provider string) error {
	if o.ECN && provider != "rxe" {
		return fmt.Errorf("--ecn: provider %q does not take it (only rxe, softib's Soft-RoCE; a kernel device's congestion control is the driver's)", provider)
	}
	return nil
}

// Port returns the IB port number (1 when unset).
func (o *Options) Port() uint8 {
	if o.IBPort <= 0 {
		return 1
	}
	return uint8(o.IBPort)
}

// LocalAddr resolves the address to bind: Addr, else $SOFTIB_ADDR, else
// the first non-loopback IPv4 address of the host, else 127.0.0.1.
func (o *Options) LocalAddr() (netip.Addr, error) {
	s := o.Addr
	if s == "" {
		s = os.Getenv(EnvAddr)
	}
	if s == "" && o.fallback.IsValid() {
		return o.fallback, nil
	}
	if s == "" {
		return defaultAddr(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bad --addr %q: want an IP address such as 127.0.0.2", s)
	}
	return a.Unmap(), nil
}

// Explicit reports whether the address was chosen (--addr or
// $SOFTIB_ADDR) rather than defaulted. Tools bind their TCP exchange
// sockets to a chosen address, and listen on every address otherwise, as
// perftest does.
func (o *Options) Explicit() bool {
	return o.Addr != "" || os.Getenv(EnvAddr) != ""
}

// BindAddr is the address the tool's TCP exchange sockets bind: the
// device's address when it was chosen, else the zero Addr (any).
func (o *Options) BindAddr() netip.Addr {
	if !o.Explicit() {
		return netip.Addr{}
	}
	a, err := o.LocalAddr()
	if err != nil {
		return netip.Addr{}
	}
	return a
}

// defaultAddr is DefaultAddr; tests point it at an address of their own.
var defaultAddr = DefaultAddr

// DefaultAddr returns the host's first non-loopback IPv4 address, or
// 127.0.0.1 when there is none.
func DefaultAddr() netip.Addr {
	ifs, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				if pn, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(pn.IP); ok && ip.Unmap().Is4() && !ip.IsLoopback() {
						return ip.Unmap()
					}
				}
			}
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// UDPPortOrDefault returns the local UDP port (4791 when unset).
func (o *Options) UDPPortOrDefault() uint16 {
	if o.UDPPort == 0 {
		return DefaultUDPPort
	}
	return uint16(o.UDPPort)
}

// PeerPort returns the UDP port for address vectors toward the peer: 0
// (meaning 4791) unless a non-standard port is in use.
func (o *Options) PeerPort() uint16 {
	p := o.PeerUDPPort
	if p == 0 {
		p = o.UDPPort
	}
	if p == 0 || p == DefaultUDPPort {
		return 0
	}
	return uint16(p)
}

// Config returns the verbs.DeviceConfig for Open.
func (o *Options) Config() (verbs.DeviceConfig, error) {
	a, err := o.LocalAddr()
	if err != nil {
		return verbs.DeviceConfig{}, err
	}
	if o.RxShards < 0 {
		return verbs.DeviceConfig{}, fmt.Errorf("--rx-shards %d: want 1 or more (0: the default)", o.RxShards)
	}
	if o.UDPPort > 65535 || o.PeerUDPPort > 65535 {
		return verbs.DeviceConfig{}, fmt.Errorf("UDP port out of range (0-65535)")
	}
	prov := o.Provider
	if prov == "" {
		prov = os.Getenv(EnvProvider)
	}
	if prov == "" {
		prov = "rxe"
	}
	if !slices.Contains(verbs.Providers(), prov) {
		hint := ""
		if prov == "ibverbs" {
			hint = " (this softib was built without it: go build -tags ibverbs ./cmd/softib, with libibverbs-dev installed)"
		}
		return verbs.DeviceConfig{}, fmt.Errorf("--provider %q: not in this build%s; providers: %s", prov, hint, strings.Join(verbs.Providers(), ", "))
	}
	cfg := verbs.DeviceConfig{Provider: prov, Name: o.Name, Addr: a, Port: uint16(o.UDPPort), NetMTU: o.NetMTU, BusyPoll: o.BusyPoll, NoRxCoalescing: o.NoRxCoalescing, RxShards: o.RxShards, ECN: o.ECN}
	if prov != "rxe" {
		// A kernel device: the name, or an address given, picks it (the
		// provider refuses the Soft-RoCE socket settings).
		if o.Addr == "" && os.Getenv(EnvAddr) == "" {
			cfg.Addr = netip.Addr{}
		}
	}
	return cfg, nil
}

// Open opens the device the options describe and checks the IB port and
// GID index. Errors explain the likely cause and the fix.
func (o *Options) Open() (verbs.Device, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	if err := CaptureConfig(&cfg); err != nil {
		return nil, err
	}
	if err := o.checkECN(cfg.Provider); err != nil {
		return nil, err
	}
	dev, err := verbs.Open(cfg)
	if err != nil && errors.Is(err, syscall.EADDRINUSE) && !o.Explicit() && o.UDPPort == 0 {
		// Two terminals on one host: the first process holds the
		// default address's UDP 4791, as a Linux rxe device would for
		// all of them. A softib device is per process, so a later one
		// takes a loopback address of its own, which reaches every
		// local address (the server's too) but no other host.
		taken := netip.AddrPortFrom(cfg.Addr, DefaultUDPPort)
		for i := 1; i < 255; i++ {
			cfg.Addr = netip.AddrFrom4([4]byte{127, 0, 1, byte(i)})
			if dev, err = verbs.Open(cfg); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
				break
			}
		}
		if err == nil {
			o.fallback = cfg.Addr
			fmt.Fprintf(os.Stderr, "softib: %v is taken (another softib process, or the kernel's rdma_rxe); this process uses %v, "+
				"which reaches this host only (pass --addr to choose)\n", taken, cfg.Addr)
		}
	}
	if err != nil {
		return nil, Explain(err, cfg)
	}
	if _, err := dev.QueryPort(o.Port()); err != nil {
		dev.Close()
		return nil, fmt.Errorf("device %s has no IB port %d (-i): %w", dev.Name(), o.Port(), err)
	}
	if o.GIDIndex >= 0 {
		if _, err := o.GID(dev); err != nil {
			dev.Close()
			return nil, err
		}
	}
	// Control socket, metrics, --pcap's provider check (observe.go).
	if err := Observe(dev); err != nil {
		dev.Close()
		return nil, err
	}
	return dev, nil
}

// GID returns the local GID at the selected index, or the zero GID when
// no index is selected. An empty table entry is an error that lists the
// populated entries.
func (o *Options) GID(dev verbs.Device) (verbs.GID, error) {
	if o.GIDIndex < 0 {
		return verbs.GID{}, nil
	}
	g, err := dev.QueryGID(o.Port(), o.GIDIndex)
	if err != nil || g.IsZero() {
		return verbs.GID{}, fmt.Errorf("GID index %d of %s port %d is empty%s; populated: %s (use 1 for the IPv4-mapped GID)",
			o.GIDIndex, dev.Name(), o.Port(), errSuffix(err), gidList(dev, o.Port()))
	}
	return g, nil
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}

func gidList(dev verbs.Device, port uint8) string {
	tbl, err := dev.GIDTable(port)
	if err != nil || len(tbl) == 0 {
		return "none"
	}
	var parts []string
	for _, e := range tbl {
		parts = append(parts, strconv.Itoa(e.Index)+"="+e.GID.Addr().String())
	}
	return strings.Join(parts, ", ")
}

// Explain turns a failed verbs.Open into a message that names the
// address and says what to try.
func Explain(err error, cfg verbs.DeviceConfig) error {
	port := cfg.Port
	if port == 0 {
		port = DefaultUDPPort
	}
	ap := netip.AddrPortFrom(cfg.Addr, port)
	if cfg.Provider == "ibverbs" {
		return fmt.Errorf("cannot open a kernel RDMA device: %w", err)
	}
	switch {
	case errors.Is(err, verbs.ErrNoProvider):
		return fmt.Errorf("no RDMA provider: %w", err)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("cannot bind %v: address in use — is another softib or the kernel rdma_rxe using it? use --udp-port or --addr (%w)", ap, err)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("cannot bind %v: no local interface has this address — pick one of this host's addresses with --addr or $%s (%w)", ap, EnvAddr, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("cannot bind %v: permission denied (%w)", ap, err)
	}
	return fmt.Errorf("cannot open device on %v: %w", ap, err)
}
