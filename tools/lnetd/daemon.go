package lnetd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/lnet/selftest"
	"softib/lnet/socklnd"
	"softib/rxe"
	"softib/wire/lnetwire"
)

// Options configure a Daemon.
type Options struct {
	// Config is the initial configuration (nil: loopback only).
	Config *Config
	// Log receives the daemon's log; nil means slog.Default().
	Log *slog.Logger
	// PID is the LNet process id (0: lnetwire.PIDLustre).
	PID lnetwire.PID
	// LNDs are drivers to offer besides the built-in loopback, TCP and
	// o2ib ones, for nets of their type; an o2ib LND given here replaces
	// the built-in one (and its NIs get no rxe device from lnetd).
	LNDs []lnd.LND
	// Provider is the verbs provider of the o2ib NIs' devices: "" or
	// "rxe" for softib's Soft-RoCE, "ibverbs" for the kernel RDMA device
	// whose GID table holds the NI's address (a build with -tags
	// ibverbs). Empty means $SOFTIB_PROVIDER.
	Provider string
}

// Daemon is a running LNet node: an *lnet.Instance with the loopback and
// TCP LNDs, the configuration that is not (yet) state of the core
// (routes, configured peers, globals the core does not use, LND tunables),
// and the echo test service. Its Handle method executes control requests.
type Daemon struct {
	log  *slog.Logger
	in   *lnet.Instance
	sock *socklnd.LND
	o2ib *o2iblnd.LND // built-in RDMA LND; nil when Options.LNDs has one
	lnds []lnd.LND    // every network LND offered (sock first)
	test *testService
	st   *selftest.Service // lnet_selftest node side (softib lst)
	// provider is Options.Provider: the o2ib NIs' verbs provider.
	provider string

	// mu guards the stored configuration below.
	mu      sync.Mutex
	global  Settings // every globalTable key
	routing Settings
	buffers Settings
	nis     []niState // configured NIs, in the order added
	routes  []RouteConfig
	peers   []PeerConfig
	closed  bool
}

// niState is what the daemon remembers of an NI it brought up.
type niState struct {
	netType string
	nid     lnetwire.NID
	cfg     NIConfig // as configured, with the NID filled in
	rdma    *rdmaNI  // the rxe device and RDMA CM of a built-in o2ib NI
}

// New starts an LNet node from opts. A configuration the node cannot
// apply gives a *ConfigError naming the offending entry.
func New(opts Options) (*Daemon, error) {
	cfg := opts.Config
	if cfg == nil {
		cfg = &Config{}
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	d := &Daemon{
		log:      log,
		sock:     socklnd.New(socklnd.Config{}),
		global:   globalTable.effective(cfg.Global),
		routing:  routingTable.effective(cfg.Routing),
		buffers:  buffersTable.effective(cfg.Buffers),
		provider: opts.Provider,
	}
	d.lnds = append([]lnd.LND{d.sock}, opts.LNDs...)
	if !slices.ContainsFunc(opts.LNDs, func(l lnd.LND) bool { return l.Type() == lnetwire.O2IBLND }) {
		// No CM here: each o2ib NI brings its own device and CM.
		d.o2ib = o2iblnd.New(o2iblnd.Config{})
		d.lnds = append(d.lnds, d.o2ib)
	}
	in, err := lnet.New(lnet.Config{PID: opts.PID, LNDs: d.lnds, Globals: d.coreGlobals(), Router: d.routerConfig(), Log: log})
	if err != nil {
		return nil, err
	}
	d.in = in
	d.applyDiscovery() // fault.go
	if tp, _ := d.global.Get("test_portal"); tp >= 0 {
		slots, _ := d.global.Get("test_slots")
		d.test, err = startTestService(in, int(tp), int(slots))
		if err != nil {
			in.Close()
			return nil, &ConfigError{Path: "global.test_portal", Msg: err.Error()}
		}
		log.Info("lnetd: echo test service up", "portal", tp, "slots", slots)
	}
	if d.st, err = selftest.NewService(in, selftest.Config{Log: log}); err != nil {
		d.Close()
		return nil, err
	}
	for i, n := range cfg.Nets {
		if err := d.addNet(n, fmt.Sprintf("net[%d]", i)); err != nil {
			d.Close()
			return nil, err
		}
	}
	for i, r := range cfg.Routes {
		if err := d.addRoute(r); err != nil {
			d.Close()
			return nil, &ConfigError{Path: fmt.Sprintf("route[%d]", i), Msg: err.Error()}
		}
	}
	d.peers = slices.Clone(cfg.Peers)
	for i, p := range cfg.Peers {
		if err := d.applyPeer(p); err != nil {
			d.Close()
			return nil, &ConfigError{Path: fmt.Sprintf("peer[%d]", i), Msg: err.Error()}
		}
	}
	return d, nil
}

// Instance returns the node's LNet instance.
func (d *Daemon) Instance() *lnet.Instance { return d.in }

// Close shuts the node down.
func (d *Daemon) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	d.mu.Unlock()
	if d.test != nil {
		d.test.stop()
	}
	if d.st != nil {
		d.st.Close()
	}
	d.in.Close()
	d.mu.Lock()
	nis := d.nis
	d.mu.Unlock()
	for _, s := range nis {
		s.rdma.close()
	}
	d.log.Info("lnetd: LNet stopped")
}

// coreGlobals maps the stored globals onto the core's settings.
func (d *Daemon) coreGlobals() lnet.Globals {
	g := lnet.DefaultGlobals()
	if v, ok := d.global.Get("transaction_timeout"); ok {
		g.TransactionTimeout = time.Duration(v) * time.Second
	}
	if v, ok := d.global.Get("max_intf"); ok {
		g.MaxInterfaces = int(v)
	}
	if v, ok := d.global.Get("response_tracking"); ok {
		g.ResponseTracking = int(v) // 0 none, 1 GET, 2 PUT, 3 both: as lnet.Track*
	}
	if v, ok := d.global.Get("drop_asym_route"); ok {
		g.DropAsymRoute = v != 0
	}
	if v, ok := d.global.Get("router_ping_timeout"); ok {
		g.RouterPingTimeout = time.Duration(v) * time.Second
	}
	if v, ok := d.global.Get("live_router_check_interval"); ok {
		g.LiveRouterCheckInterval = time.Duration(v) * time.Second
		if v <= 0 {
			g.LiveRouterCheckInterval = -1 // off
		}
	}
	if v, ok := d.global.Get("dead_router_check_interval"); ok {
		g.DeadRouterCheckInterval = time.Duration(v) * time.Second
	}
	// Health (lnet/health.go).
	if v, ok := d.global.Get("retry_count"); ok {
		g.RetryCount = int(v)
	}
	if v, ok := d.global.Get("health_sensitivity"); ok {
		g.HealthSensitivity = int(v)
	}
	if v, ok := d.global.Get("recovery_interval"); ok {
		g.RecoveryInterval = time.Duration(v) * time.Second
	}
	if v, ok := d.global.Get("recovery_limit"); ok {
		g.RecoveryLimit = time.Duration(v) * time.Second
	}
	if v, ok := d.global.Get("max_recovery_ping_interval"); ok {
		g.MaxRecoveryPingInterval = time.Duration(v) * time.Second
	}
	return g
}

// routerConfig maps the routing and buffers sections onto the core's
// router configuration.
func (d *Daemon) routerConfig() lnet.RouterConfig {
	var rc lnet.RouterConfig
	if v, _ := d.routing.Get("enable"); v != 0 {
		rc.Enabled = true
	}
	tiny, _ := d.buffers.Get("tiny")
	small, _ := d.buffers.Get("small")
	large, _ := d.buffers.Get("large")
	rc.TinyBuffers, rc.SmallBuffers, rc.LargeBuffers = int(tiny), int(small), int(large)
	return rc
}

// addRoute adds a route to the core and, on success, to the stored
// configuration (export). An identical stored route is not an error.
func (d *Daemon) addRoute(r RouteConfig) error {
	net, err := lnetwire.ParseNet(r.Net)
	if err != nil {
		return fmt.Errorf("%w: bad net %q: %v", lnet.ErrInvalid, r.Net, err)
	}
	gw, err := lnetwire.ParseNID(r.Gateway)
	if err != nil {
		return fmt.Errorf("%w: bad gateway %q: %v", lnet.ErrInvalid, r.Gateway, err)
	}
	if r.Hop == 0 {
		r.Hop = -1
	}
	if r.Priority < 0 || r.Priority > maxInt32 {
		return fmt.Errorf("%w: priority %d", lnet.ErrInvalid, r.Priority)
	}
	err = d.in.AddRoute(lnet.RouteConfig{Net: net, Gateway: gw, Hops: int(r.Hop), Priority: uint32(r.Priority)})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.routes = slices.DeleteFunc(d.routes, func(x RouteConfig) bool { return x.Net == r.Net && x.Gateway == r.Gateway })
	d.routes = append(d.routes, r)
	d.mu.Unlock()
	return nil
}

// delRoute removes a route from the core and the stored configuration.
func (d *Daemon) delRoute(r RouteConfig) error {
	net, err := lnetwire.ParseNet(r.Net)
	if err != nil {
		return fmt.Errorf("%w: bad net %q: %v", lnet.ErrInvalid, r.Net, err)
	}
	gw, err := lnetwire.ParseNID(r.Gateway)
	if err != nil {
		return fmt.Errorf("%w: bad gateway %q: %v", lnet.ErrInvalid, r.Gateway, err)
	}
	err = d.in.DelRoute(net, gw)
	d.mu.Lock()
	d.routes = slices.DeleteFunc(d.routes, func(x RouteConfig) bool { return x.Net == r.Net && x.Gateway == r.Gateway })
	d.mu.Unlock()
	return err
}

// addNet brings up every NI of one "net:" entry. path names the entry in
// errors.
func (d *Daemon) addNet(n NetConfig, path string) error {
	net, err := lnetwire.ParseNet(n.Type)
	if err != nil {
		return &ConfigError{Path: path + ".net type", Msg: err.Error()}
	}
	if net.Type() == lnetwire.LOLND {
		return nil // always there
	}
	if !d.hasLND(net.Type()) {
		return &ConfigError{Path: path + ".net type",
			Msg: fmt.Sprintf("net type %s: lnetd has no %s LND (built in: %s); its tunables are accepted, but the net cannot be brought up",
				n.Type, net.Type(), d.lndNames())}
	}
	if len(n.NIs) == 0 {
		return &ConfigError{Path: path + "." + keyLocalNIs, Msg: "no local NI given (add one with interfaces: {0: eth0})"}
	}
	for j, ni := range n.NIs {
		nipath := fmt.Sprintf("%s.%s[%d]", path, keyLocalNIs, j)
		for _, one := range splitInterfaces(ni) {
			if err := d.addNI(net, n.Type, one); err != nil {
				return &ConfigError{Path: nipath, Msg: err.Error()}
			}
		}
	}
	return nil
}

// splitInterfaces turns a local NI with several interfaces and no NID
// into one NI per interface, as lnetctl net add --if eth0,eth1 does since
// Multi-Rail (each interface is a rail with its own NID).
func splitInterfaces(ni NIConfig) []NIConfig {
	if ni.NID != "" || len(ni.Interfaces) < 2 {
		return []NIConfig{ni}
	}
	out := make([]NIConfig, 0, len(ni.Interfaces))
	for _, ifc := range ni.Interfaces {
		one := ni
		one.Interfaces = []string{ifc}
		out = append(out, one)
	}
	return out
}

// hasLND reports whether an LND of type t is offered.
func (d *Daemon) hasLND(t lnetwire.LNDType) bool {
	for _, l := range d.lnds {
		if l.Type() == t {
			return true
		}
	}
	return false
}

// lndNames lists the net types lnetd can bring up.
func (d *Daemon) lndNames() string {
	names := []string{"lo"}
	for _, l := range d.lnds {
		names = append(names, l.Type().String())
	}
	return strings.Join(names, ", ")
}

// addNI starts one NI.
func (d *Daemon) addNI(net lnetwire.Net, netType string, ni NIConfig) error {
	nc := lnet.NetConfig{Net: net, Interfaces: slices.Clone(ni.Interfaces)}
	if ni.NID != "" {
		nid, err := lnetwire.ParseNID(ni.NID)
		if err != nil {
			return err
		}
		if nid.Net() != net {
			return fmt.Errorf("NID %s is not on net %s", nid, net)
		}
		nc.Addr = nid.Addr()
	}
	if len(nc.Interfaces) == 0 && nc.Addr == 0 {
		return errors.New("no interfaces and no NID address: give interfaces: {0: eth0} (or an IP address)")
	}
	tun := ni.Tunables
	get := func(s Settings, k string) int64 { v, _ := s.Get(k); return v }
	nc.Tunables = lnd.Tunables{
		Credits:           int(get(tun, "credits")),
		PeerCredits:       int(get(tun, "peer_credits")),
		PeerBufferCredits: int(get(tun, "peer_buffer_credits")),
		ConnsPerPeer:      int(get(ni.LNDTunables, "conns_per_peer")),
	}
	if v, ok := tun.Get("peer_timeout"); ok {
		nc.Tunables.PeerTimeout = time.Duration(v) * time.Second
		if v == 0 {
			nc.Tunables.PeerTimeout = -1 // Lustre: 0 turns aliveness off
		}
	}
	var sc socklnd.Config
	if net.Type() == lnetwire.SOCKLND {
		d.mu.Lock()
		sc = d.socklndConfig(ni.LNDTunables)
		d.mu.Unlock()
		nc.LNDConfig = sc
	}
	var rdma *rdmaNI
	if net.Type() == lnetwire.O2IBLND && d.o2ib != nil {
		oc, r, err := openO2IB(ni, ni.LNDTunables, d.provider)
		if err != nil {
			return err
		}
		if v, ok := ni.LNDTunables.Get("map_on_demand"); ok && v != 1 {
			d.log.Warn("lnetd: map_on_demand is obsolete, as in Lustre 2.17: LNet buffers are always mapped on demand (MR cache, fast registration); the value has no effect",
				"ni", ni.Interfaces, "map_on_demand", v)
		}
		nc.LNDConfig, rdma = oc, r
	}
	// Other LNDs (Options.LNDs) get their own defaults: their lnd
	// tunables are stored and exported, not mapped.
	before := d.in.NIDs()
	if err := d.in.AddNet(nc); err != nil {
		rdma.close()
		return explainAddNet(err, ni, sc)
	}
	var nid lnetwire.NID
	for _, x := range d.in.NIDs() {
		if !slices.Contains(before, x) && x.Net() == net {
			nid = x
		}
	}
	cfg := ni
	cfg.NID = nid.String()
	cfg.Interfaces = slices.Clone(ni.Interfaces)
	d.mu.Lock()
	d.nis = append(d.nis, niState{netType: netType, nid: nid, cfg: cfg, rdma: rdma})
	d.mu.Unlock()
	attrs := []any{"nid", nid, "interfaces", ni.Interfaces}
	if net.Type() == lnetwire.SOCKLND {
		attrs = append(attrs, "accept_port", sc.AcceptPort, "accept", sc.Accept)
	}
	if drv := d.sock.Driver(nid); drv != nil && drv.ListenAddr() != nil {
		attrs = append(attrs, "listen", drv.ListenAddr().String())
	}
	if rdma != nil {
		svc := nc.LNDConfig.(o2iblnd.Config).Service
		if svc == 0 {
			svc = o2iblnd.DefaultService
		}
		if rd, ok := rdma.dev.(*rxe.Device); ok {
			attrs = append(attrs, "rxe", rd.Name(), "roce", rd.Addr().String())
		} else {
			attrs = append(attrs, "device", rdma.dev.Name()) // a kernel RDMA device ($SOFTIB_PROVIDER)
		}
		attrs = append(attrs, "service", svc)
	}
	d.log.Info("lnetd: NI up", attrs...)
	return nil
}

// explainAddNet adds what to do to an AddNet failure.
func explainAddNet(err error, ni NIConfig, sc socklnd.Config) error {
	var oe *net.OpError
	switch {
	case errors.Is(err, lnet.ErrNetExists):
		return fmt.Errorf("%w (an NI with this NID is already up)", err)
	case errors.As(err, &oe) && oe.Op == "listen" && (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)) && sc.AcceptPort < 1024:
		return fmt.Errorf("%w (port %d is privileged: run lnetd as root or with CAP_NET_BIND_SERVICE, or set global accept_port above 1023 on every node)", err, sc.AcceptPort)
	case errors.As(err, &oe) && oe.Op == "listen":
		return fmt.Errorf("%w (is another node using port %d on this address? set global accept_port or lnd tunables accept_port)", err, sc.AcceptPort)
	}
	return fmt.Errorf("%w (interfaces %v)", err, ni.Interfaces)
}

// socklndConfig builds the TCP LND settings of an NI: the acceptor from
// the globals, then each lnd tunable set in the file by its ksocklnd
// module-parameter name (socklnd.Config.SetParam). Called with d.mu held.
func (d *Daemon) socklndConfig(lt Settings) socklnd.Config {
	var c socklnd.Config
	port, _ := d.global.Get("accept_port")
	accept, _ := d.global.Get("accept")
	acceptKey, _ := globalTable.lookup("accept")
	_ = c.SetParam("accept_port", strconv.FormatInt(port, 10))
	_ = c.SetParam("accept", fmt.Sprint(acceptKey.format(accept)))
	c.Capture = socklndCapture() // --pcap
	for _, s := range lt {
		if s.Name == "accept_port" && s.Value == 0 {
			continue // 0: the global port
		}
		if k, _ := socklndTable.lookup(s.Name); k.local {
			continue // tos: checked when parsed (only -1)
		}
		if err := c.SetParam(s.Name, strconv.FormatInt(s.Value, 10)); err != nil {
			// The table only holds names SetParam knows (a test checks).
			d.log.Warn("lnetd: socklnd tunable ignored", "name", s.Name, "err", err)
		}
		if s.Name == "zc_min_payload" && s.Value == 0 {
			c.DisableZCRequest = true // 0: never ask for zero-copy ACKs
		}
	}
	return c
}

// delNet stops every NI of a net.
func (d *Daemon) delNet(name string) error {
	net, err := lnetwire.ParseNet(name)
	if err != nil {
		return err
	}
	if err := d.in.DelNet(net); err != nil {
		return err
	}
	d.mu.Lock()
	var gone []*rdmaNI
	d.nis = slices.DeleteFunc(d.nis, func(s niState) bool {
		if s.nid.Net() == net {
			gone = append(gone, s.rdma)
			return true
		}
		return false
	})
	d.mu.Unlock()
	for _, r := range gone {
		r.close() // the NI is down: nothing uses its device any more
	}
	d.log.Info("lnetd: net removed", "net", net)
	return nil
}

// hasNI reports whether an NI of netType with the same NID or interfaces
// is already up (import skips those).
func (d *Daemon) hasNI(netType string, ni NIConfig) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	want, _ := lnetwire.ParseNet(netType)
	for _, s := range d.nis {
		if s.nid.Net() != want {
			continue
		}
		if ni.NID != "" && ni.NID == s.nid.String() {
			return true
		}
		if ni.NID == "" && slices.Equal(ni.Interfaces, s.cfg.Interfaces) {
			return true
		}
	}
	return false
}

// setGlobal sets a global (lnetctl set). name is the lnetctl set name or
// the global show key.
func (d *Daemon) setGlobal(name, value string) error {
	section, key := setName(name)
	t := globalTable
	switch section {
	case "routing":
		t = routingTable
	case "buffers":
		t = buffersTable
	}
	k, ok := t.lookup(key)
	if !ok {
		return fmt.Errorf("unknown tunable %q (known: %v)", name, settableNames())
	}
	if key == "test_portal" || key == "test_slots" {
		return fmt.Errorf("%s can only be set in the configuration file (restart lnetd)", key)
	}
	v, err := k.parse(value)
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	d.mu.Lock()
	switch section {
	case "routing":
		d.routing.Set(key, v)
	case "buffers":
		d.buffers.Set(key, v)
	default:
		d.global.Set(key, v)
	}
	g := d.coreGlobals()
	rc := d.routerConfig()
	d.mu.Unlock()
	d.in.SetGlobals(g)
	d.applyDiscovery()
	if section != "global" {
		d.in.SetRouter(rc)
	}
	d.log.Info("lnetd: set", "tunable", name, "value", k.format(v))
	return nil
}

// setName maps lnetctl set names onto sections and keys.
func setName(name string) (section, key string) {
	switch name {
	case "max_interfaces", "max_intf":
		return "global", "max_intf"
	case "routing":
		return "routing", "enable"
	case "tiny_buffers", "small_buffers", "large_buffers":
		return "buffers", name[:len(name)-len("_buffers")]
	}
	return "global", name
}

func settableNames() []string {
	out := []string{"max_interfaces", "routing", "tiny_buffers", "small_buffers", "large_buffers"}
	for _, k := range globalTable {
		if k.name != "max_intf" && k.name != "test_portal" && k.name != "test_slots" {
			out = append(out, k.name)
		}
	}
	return out
}

// Export returns the running configuration. backup gives only what
// import needs; otherwise it also carries the show-style fields (status,
// statistics) import ignores.
func (d *Daemon) Export(backup bool) Map {
	c := d.config()
	if backup {
		return c.Doc(true)
	}
	doc := Map{}.add(keyNet, d.netsDoc("", true).Get(keyNet))
	full := c.Doc(true)
	for _, f := range full {
		if f.Key != keyNet {
			doc = append(doc, f)
		}
	}
	return doc
}

// config assembles the running configuration.
func (d *Daemon) config() *Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := &Config{
		Routes:  slices.Clone(d.routes),
		Peers:   slices.Clone(d.peers),
		Global:  slices.Clone(d.global),
		Routing: slices.Clone(d.routing),
		Buffers: slices.Clone(d.buffers),
	}
	infos := d.in.Nets()
	for _, s := range d.nis {
		ni := s.cfg
		for _, inf := range infos {
			if inf.NID == s.nid {
				ni.Tunables = tunablesOf(inf.Tunables)
			}
		}
		ni.LNDTunables = lndTable(lndName(s.netType)).effective(ni.LNDTunables)
		i := slices.IndexFunc(c.Nets, func(n NetConfig) bool { return n.Type == s.netType })
		if i < 0 {
			c.Nets = append(c.Nets, NetConfig{Type: s.netType})
			i = len(c.Nets) - 1
		}
		c.Nets[i].NIs = append(c.Nets[i].NIs, ni)
	}
	return c
}

// tunablesOf renders effective core tunables as the "tunables:" section.
func tunablesOf(t lnd.Tunables) Settings {
	pt := int64(t.PeerTimeout / time.Second)
	if t.PeerTimeout < 0 {
		pt = 0
	}
	return Settings{
		{"peer_timeout", pt},
		{"peer_credits", int64(t.PeerCredits)},
		{"peer_buffer_credits", int64(t.PeerBufferCredits)},
		{"credits", int64(t.Credits)},
	}
}

// Import applies a configuration (lnetctl import): nets not yet up are
// added, globals set, peers and routes stored. With del it removes the
// listed nets, peers and routes instead. It returns one error per item
// that failed; the rest is applied.
func (d *Daemon) Import(c *Config, del bool) []*OpError {
	var errs []*OpError
	if del {
		for _, n := range c.Nets {
			if lndName(n.Type) == "lo" {
				continue
			}
			if err := d.delNet(n.Type); err != nil {
				errs = append(errs, coreErr("del", "net", "cannot delete network "+n.Type, err))
			}
		}
		d.mu.Lock()
		for _, p := range c.Peers {
			d.peers = slices.DeleteFunc(d.peers, func(x PeerConfig) bool { return x.PrimaryNID == p.PrimaryNID })
		}
		d.mu.Unlock()
		for _, p := range c.Peers {
			if prim, err := lnetwire.ParseNID(p.PrimaryNID); err == nil {
				_ = d.in.DelPeerNI(prim, lnetwire.NIDAny) // unknown: nothing to delete
			}
		}
		for _, r := range c.Routes {
			_ = d.delRoute(r) // a route gone with its net is no error
		}
		return errs
	}
	for _, s := range c.Global {
		k, _ := globalTable.lookup(s.Name)
		if s.Name == "test_portal" || s.Name == "test_slots" {
			continue // fixed at start
		}
		if err := d.setGlobal(s.Name, fmt.Sprint(k.format(s.Value))); err != nil {
			errs = append(errs, opErr("import", "global", errnoInval, "%v", err))
		}
	}
	for _, s := range c.Routing {
		_ = d.setGlobal("routing", strconv.FormatInt(s.Value, 10))
	}
	for _, s := range c.Buffers {
		_ = d.setGlobal(s.Name+"_buffers", strconv.FormatInt(s.Value, 10))
	}
	for i, n := range c.Nets {
		if lndName(n.Type) == "lo" {
			continue
		}
		todo := n
		todo.NIs = slices.DeleteFunc(slices.Clone(n.NIs), func(ni NIConfig) bool { return d.hasNI(n.Type, ni) })
		if len(todo.NIs) == 0 {
			continue
		}
		if err := d.addNet(todo, fmt.Sprintf("net[%d]", i)); err != nil {
			errs = append(errs, opErr("add", "net", errnoInval, "cannot add network: %v", err))
		}
	}
	for _, p := range c.Peers {
		if err := d.applyPeer(p); err != nil {
			errs = append(errs, peerErr("add", "cannot add peer "+p.PrimaryNID, err))
		}
	}
	d.mu.Lock()
	for _, p := range c.Peers {
		d.peers = slices.DeleteFunc(d.peers, func(x PeerConfig) bool { return x.PrimaryNID == p.PrimaryNID })
		d.peers = append(d.peers, p)
	}
	stored := slices.Clone(d.routes)
	d.mu.Unlock()
	for _, r := range c.Routes {
		if slices.Contains(stored, r) {
			continue
		}
		if err := d.addRoute(r); err != nil {
			errs = append(errs, coreErr("add", "route", "cannot add route to "+r.Net+" via "+r.Gateway, err))
		}
	}
	return errs
}

// coreErr maps an lnet error onto an OpError with the matching errno.
func coreErr(cmd, obj, what string, err error) *OpError {
	errno := errnoInval
	switch {
	case errors.Is(err, lnet.ErrNoEnt):
		errno = errnoNoEnt
	case errors.Is(err, lnet.ErrBusy):
		errno = errnoBusy
	case errors.Is(err, lnet.ErrNetExists):
		errno = errnoExist
	case errors.Is(err, lnet.ErrNoLND):
		errno = errnoNoDev
	case errors.Is(err, lnet.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		errno = errnoTimedOut
	case errors.Is(err, lnet.ErrNoRoute):
		errno = errnoHostUnr
	case errors.Is(err, lnet.ErrPeerDown), errors.Is(err, lnet.ErrDropped):
		errno = errnoIO
	case errors.Is(err, lnet.ErrBadPingInfo):
		errno = errnoProto
	}
	return opErr(cmd, obj, errno, "%s: %v", what, err)
}
