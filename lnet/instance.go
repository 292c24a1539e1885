package lnet

import (
	"context"
	"crypto/rand"
	"encoding/binary"

	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"softib/lnet/lnd"
	"softib/lnet/lolnd"
	"softib/wire/lnetwire"
)

// NetConfig configures one NI (lnetctl net add).
type NetConfig struct {
	// Net is the network, e.g. lnetwire.ParseNet("tcp1").
	Net lnetwire.Net
	// Addr is the NI's address (IPv4 as uint32 for tcp/o2ib); 0 lets the
	// LND choose, e.g. from the first interface.
	Addr uint32
	// Interfaces are OS interface names (or addresses) for the LND.
	Interfaces []string
	// Tunables override the LND defaults where non-zero.
	Tunables lnd.Tunables
	// LNDConfig is passed to the LND untouched.
	LNDConfig any
}

// Config configures an Instance. The zero value is a loopback-only node
// with PID 12345.
type Config struct {
	// PID is the instance's process id (LNetNIInit's requested pid);
	// 0 means lnetwire.PIDLustre.
	PID lnetwire.PID
	// LNDs are the network drivers available to AddNet; the loopback LND
	// is always present.
	LNDs []lnd.LND
	// Nets are brought up by New, in order, after 0@lo.
	Nets []NetConfig
	// Globals are the initial global settings (zero: defaults).
	Globals Globals
	// Router configures forwarding (off by default) and its buffers.
	Router RouterConfig
	// Log receives diagnostics; nil means slog.Default().
	Log *slog.Logger
}

// Instance is one LNet node: its NIs, portal table, MDs, EQs, peers and
// message engine. It replaces Lustre's the_lnet singleton; several can
// live in one process (tests connect them with lnet/lnd/lndtest).
type Instance struct {
	pid         lnetwire.PID
	log         *slog.Logger
	lnds        *lnd.Registry
	ifaceCookie uint64
	waiters     waiterSet
	start       time.Time

	// mu guards everything below, MDs, MEs, messages and peers. Lock
	// order: mu, then EQ.mu, then waiters.mu. Never held while calling a
	// driver or an event handler.
	mu         sync.Mutex
	closed     bool
	nis        []*netIface // index order; nis[0] is 0@lo
	lo         *netIface
	byNID      map[lnetwire.NID]*netIface
	niOf       map[*lnd.NI]*netIface
	portals    [MaxPortals]portal
	mds        map[uint64]*libMD
	nextCookie uint64
	peers      map[lnetwire.NID]*peer        // every known NID's peer NI (peer.go)
	lpeers     map[lnetwire.NID]*lpeer       // peers by primary NID (peer.go)
	primary    map[lnetwire.NID]lnetwire.NID // learned by Ping
	globals    Globals
	stats      Stats
	ping       pingState
	disc       discState  // discovery.go
	fault      faultState // fault.go
	rsp        rspList
	routes     routeTable  // route.go
	router     routerState // router.go
	rc         rtrChecker  // rtrcheck.go
	mr         mrState     // select.go, health.go, udsp.go
}

// netIface is the core's state of one NI (struct lnet_ni). Guarded by
// Instance.mu.
type netIface struct {
	ni    *lnd.NI
	lnd   lnd.LND
	drv   lnd.Driver
	cfg   NetConfig
	lo    bool
	ready bool // Startup done
	down  bool // shutting down: no new work

	txCredits    int
	minTxCredits int
	maxTxCredits int
	txq          msgQueue

	sendCount, recvCount, dropCount uint64

	// Router NI status (router.c lnet_update_ni_status_locked): the
	// last time a ping from another node arrived on this NI (ns since
	// Instance.start; net_last_alive), and whether this router reports
	// the NI down in its ping replies because none came for
	// RouterPingTimeout + LiveRouterCheckInterval.
	lastPinged int64
	statusDown bool

	mr niMR // Multi-Rail selection and health (select.go, health.go)

	// calls counts driver calls in progress (Send, Recv, EagerRecv), so
	// shutdown can wait for them before Driver.Shutdown.
	calls sync.WaitGroup
}

func (ni *netIface) nid() lnetwire.NID { return ni.ni.NID }
func (ni *netIface) net() lnetwire.Net { return ni.ni.NID.Net() }

// New creates an instance, starts the loopback NI, the ping responder,
// and the configured nets (LNetNIInit). On error nothing is left running.
func New(cfg Config) (*Instance, error) {
	in := &Instance{
		pid:     cfg.PID,
		log:     cfg.Log,
		byNID:   make(map[lnetwire.NID]*netIface),
		niOf:    make(map[*lnd.NI]*netIface),
		mds:     make(map[uint64]*libMD),
		peers:   make(map[lnetwire.NID]*peer),
		lpeers:  make(map[lnetwire.NID]*lpeer),
		primary: make(map[lnetwire.NID]lnetwire.NID),
		globals: cfg.Globals.withDefaults(),
		start:   time.Now(),
	}
	if in.pid == 0 {
		in.pid = lnetwire.PIDLustre
	}
	in.router.init(cfg.Router)
	in.disc.init()
	in.fault.init()
	in.rc.ctx, in.rc.cancel = context.WithCancel(context.Background())
	if in.router.on {
		in.mu.Lock()
		in.startNIStatusLocked()
		in.mu.Unlock()
	}
	if in.log == nil {
		in.log = slog.Default()
	}
	var cookie [8]byte
	_, _ = rand.Read(cookie[:])
	// The interface cookie tells our wire handles from a previous
	// incarnation's; never the "none" value.
	in.ifaceCookie = binary.LittleEndian.Uint64(cookie[:]) &^ (1 << 63)
	for i := range in.portals {
		in.portals[i].index = i
	}
	in.lnds = lnd.NewRegistry(lolnd.LND{})
	for _, l := range cfg.LNDs {
		if l == nil {
			return nil, fmt.Errorf("%w: nil LND in Config.LNDs", ErrInvalid)
		}
		if l.Type() == lnetwire.LOLND {
			continue
		}
		if err := in.lnds.Register(l); err != nil {
			return nil, err
		}
	}
	if err := in.AddNet(NetConfig{Net: lnetwire.MakeNet(lnetwire.LOLND, 0)}); err != nil {
		return nil, err
	}
	if err := in.startPing(); err != nil {
		in.Close()
		return nil, err
	}
	for _, nc := range cfg.Nets {
		if err := in.AddNet(nc); err != nil {
			in.Close()
			return nil, err
		}
	}
	return in, nil
}

// PID returns the instance's process id.
func (in *Instance) PID() lnetwire.PID { return in.pid }

// AddNet starts an NI (lnetctl net add). Several NIs may share a net if
// they get different NIDs.
func (in *Instance) AddNet(nc NetConfig) error {
	l, ok := in.lnds.Lookup(nc.Net.Type())
	if !ok {
		return fmt.Errorf("%w: %v", ErrNoLND, nc.Net)
	}
	if nc.Net.Type() == lnetwire.LOLND && nc.Net.Num() != 0 {
		return fmt.Errorf("%w: loopback net must be lo", ErrInvalid)
	}
	defaults := lnd.DefaultTunables
	if td, ok := l.(lnd.TunableDefaulter); ok {
		defaults = td.DefaultTunables().WithDefaults(lnd.DefaultTunables)
	}
	tun := nc.Tunables.WithDefaults(defaults)
	if tun.Credits < 1 || tun.PeerCredits < 1 {
		return fmt.Errorf("%w: credits %d, peer credits %d", ErrInvalid, tun.Credits, tun.PeerCredits)
	}
	nc.Interfaces = slices.Clone(nc.Interfaces)
	ni := &netIface{lnd: l, cfg: nc, lo: nc.Net.Type() == lnetwire.LOLND,
		txCredits: tun.Credits, minTxCredits: tun.Credits, maxTxCredits: tun.Credits,
		lastPinged: int64(time.Since(in.start))}
	ni.ni = lnd.NewNI((*host)(in), lnd.NIConfig{
		NID:        lnetwire.MakeNID(nc.Net, nc.Addr),
		PID:        in.pid,
		Interfaces: nc.Interfaces,
		Tunables:   tun,
		LNDConfig:  nc.LNDConfig,
		Log:        in.log.With("ni", nc.Net.String()),
	})
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return ErrClosed
	}
	if (ni.lo && in.lo != nil) || (nc.Addr != 0 && in.byNID[ni.ni.NID] != nil) {
		in.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrNetExists, ni.ni.NID)
	}
	in.niOf[ni.ni] = ni // Parse before ready is refused
	in.mu.Unlock()

	drv, err := l.Startup(ni.ni)
	in.mu.Lock()
	if err == nil {
		nid := ni.ni.NID
		switch {
		case nid.Net() != nc.Net:
			err = fmt.Errorf("%w: LND set NID %v outside net %v", ErrInvalid, nid, nc.Net)
		case in.byNID[nid] != nil:
			err = fmt.Errorf("%w: %v", ErrNetExists, nid)
		case in.closed:
			err = ErrClosed
		}
		if err != nil {
			in.mu.Unlock()
			drv.Shutdown()
			in.mu.Lock()
		}
	}
	if err != nil {
		delete(in.niOf, ni.ni)
		in.mu.Unlock()
		return err
	}
	ni.drv = drv
	ni.ready = true
	in.byNID[ni.ni.NID] = ni
	in.nis = append(in.nis, ni)
	in.applyUDSPToNILocked(ni) // udsp.go
	if ni.lo {
		in.lo = ni
	}
	in.updatePingLocked()
	in.mu.Unlock()
	in.log.Debug("lnet: NI up", "nid", ni.ni.NID)
	return nil
}

// DelNet stops every NI on net (lnetctl net del). Messages queued for
// credits and PUTs waiting on lazy portals from those NIs fail; the driver
// fails the ones it holds.
func (in *Instance) DelNet(net lnetwire.Net) error {
	if net.Type() == lnetwire.LOLND {
		return fmt.Errorf("%w: the loopback net cannot be removed", ErrInvalid)
	}
	in.mu.Lock()
	var victims []*netIface
	for _, ni := range in.nis {
		if ni.net() == net {
			victims = append(victims, ni)
		}
	}
	in.mu.Unlock()
	if len(victims) == 0 {
		return fmt.Errorf("%w: net %v", ErrNoEnt, net)
	}
	for _, ni := range victims {
		in.stopNI(ni)
	}
	return nil
}

// stopNI shuts one NI down (lnet_shutdown_lndni).
func (in *Instance) stopNI(ni *netIface) {
	in.mu.Lock()
	if ni.down {
		in.mu.Unlock()
		return
	}
	ni.down = true
	delete(in.byNID, ni.ni.NID)
	in.nis = slices.DeleteFunc(in.nis, func(x *netIface) bool { return x == ni })
	if in.lo == ni {
		in.lo = nil
	}
	var failed msgQueue
	for m := ni.txq.pop(); m != nil; m = ni.txq.pop() {
		failed.push(m)
	}
	var routed msgQueue
	in.unbindNILocked(ni, &failed, &routed)
	for i := range in.router.pools {
		pool := &in.router.pools[i]
		chain := pool.msgs.removeIf(func(m *message) bool { return m.rxNI == ni })
		for m := chain; m != nil; {
			next := m.next
			m.rxNI.calls.Add(1)
			routed.push(m)
			m = next
		}
	}
	var dropped msgQueue
	for i := range in.portals {
		chain := in.portals[i].delayed.removeIf(func(m *message) bool { return m.ni == ni })
		for m := chain; m != nil; {
			next := m.next
			dropped.push(m)
			m = next
		}
	}
	in.updatePingLocked()
	in.mu.Unlock()

	for m := failed.pop(); m != nil; m = failed.pop() {
		in.finalize(m, lnd.ErrShutdown)
	}
	in.dropRouted(&routed, lnd.ErrShutdown)
	for m := dropped.pop(); m != nil; m = dropped.pop() {
		private, rlen := m.private, int(m.Hdr.PayloadLength)
		in.mu.Lock()
		in.stats.DropCount++
		in.stats.DropLength += uint64(rlen)
		in.freeMsgLocked(m)
		in.mu.Unlock()
		_ = ni.drv.Recv(private, nil, true, lnd.IOV{}, rlen)
	}
	in.faultFlushNI(ni)
	ni.calls.Wait()
	ni.drv.Shutdown()
	in.mu.Lock()
	delete(in.niOf, ni.ni)
	in.mu.Unlock()
	in.log.Debug("lnet: NI down", "nid", ni.ni.NID)
}

// Close shuts the instance down (LNetNIFini): every NI stops, and later
// calls fail with ErrClosed. Events already queued stay readable.
func (in *Instance) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return ErrClosed
	}
	nis := slices.Clone(in.nis)
	in.mu.Unlock()
	in.rc.cancel() // router-checker pings in flight end now
	// Stop the network NIs first so their traffic drains, loopback last.
	slices.Reverse(nis)
	for _, ni := range nis {
		in.stopNI(ni)
	}
	in.mu.Lock()
	in.closed = true
	if in.rsp.timer != nil {
		in.rsp.timer.Stop()
	}
	if in.rc.timer != nil {
		in.rc.timer.Stop()
	}
	if in.router.statusTimer != nil {
		in.router.statusTimer.Stop()
	}
	in.mu.Unlock()
	in.rc.wg.Wait()
	return nil
}

// GetID returns the process id of the index'th NI (LNetGetId): index 0 is
// 0@lo, then the NIs in configuration order. Past the end it fails with
// ErrNoEnt.
func (in *Instance) GetID(index int) (lnetwire.ProcessID, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if index < 0 || index >= len(in.nis) {
		return lnetwire.ProcessID{}, ErrNoEnt
	}
	return lnetwire.ProcessID{NID: in.nis[index].nid(), PID: in.pid}, nil
}

// NIDs returns the NIDs of all NIs, 0@lo first.
func (in *Instance) NIDs() []lnetwire.NID {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]lnetwire.NID, 0, len(in.nis))
	for _, ni := range in.nis {
		out = append(out, ni.nid())
	}
	return out
}

// Dist reports how far nid is (LNetDist, lnet-wire.md §1.8): for one of
// our NIDs dist is 0 (1 if Globals.LocalNIDDistZero is off), src is nid
// and order 0 for 0@lo, 1 otherwise; for a directly connected net dist is
// 1, src the local NI's NID and order 2 + the NI's index; for a net
// reached through routes dist is the shortest route's hops + 1 (an
// undefined hop count is 1), src the first NI on its gateway's net and
// the order after the local NIs, by remote net in the order routes were
// first added. Unreachable NIDs give ErrNoRoute.
func (in *Instance) Dist(nid lnetwire.NID) (dist int, src lnetwire.NID, order int, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	local := 0
	if !in.globals.LocalNIDDistZero {
		local = 1
	}
	for _, ni := range in.nis {
		if ni.nid() == nid {
			if ni.lo {
				return local, nid, 0, nil
			}
			return local, nid, 1, nil
		}
	}
	order = 2
	for _, ni := range in.nis {
		if ni.net() == nid.Net() {
			return 1, ni.nid(), order, nil
		}
		order++
	}
	if d, src, o, ok := in.distRouteLocked(nid.Net(), order); ok {
		return d, src, o, nil
	}
	return 0, 0, 0, ErrNoRoute
}

// IsPeerLocal reports whether nid is one of this node's NIDs
// (LNetIsPeerLocal).
func (in *Instance) IsPeerLocal(nid lnetwire.NID) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.byNID[nid] != nil
}

// SetLazyPortal makes unmatched PUTs on portal wait for an ME instead of
// being dropped (LNetSetLazyPortal).
func (in *Instance) SetLazyPortal(portal int) error {
	if portal < 0 || portal >= MaxPortals {
		return ErrInvalid
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.portals[portal].lazy = true
	return nil
}

// ClearLazyPortal turns lazy off and drops the PUTs that were waiting
// (LNetClearLazyPortal).
func (in *Instance) ClearLazyPortal(portal int) error {
	if portal < 0 || portal >= MaxPortals {
		return ErrInvalid
	}
	in.mu.Lock()
	p := &in.portals[portal]
	p.lazy = false
	var q msgQueue
	for m := p.delayed.pop(); m != nil; m = p.delayed.pop() {
		m.ni.calls.Add(1)
		q.push(m)
	}
	in.mu.Unlock()
	in.deliverDelayed(q.head)
	return nil
}
