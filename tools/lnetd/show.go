package lnetd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/lnet/selftest"
	"softib/lnet/socklnd"
	"softib/wire/lnetwire"
)

// NetArgs are the arguments of net.add (lnetctl net add).
type NetArgs struct {
	Net         string   `json:"net"`
	Interfaces  []string `json:"interfaces,omitempty"`
	NID         string   `json:"nid,omitempty"`
	Tunables    Settings `json:"tunables,omitempty"`
	LNDTunables Settings `json:"lnd_tunables,omitempty"`
	CPT         string   `json:"cpt,omitempty"`
}

// ShowArgs select what net.show and peer.show print.
type ShowArgs struct {
	Net     string `json:"net,omitempty"`
	NID     string `json:"nid,omitempty"`
	Verbose bool   `json:"verbose,omitempty"`
}

// PingArgs are the arguments of ping.
type PingArgs struct {
	NID     string        `json:"nid"`
	Timeout time.Duration `json:"timeout,omitempty"`
	// Source, when set, must be one of the node's NIDs; the core picks
	// the NI for the peer's net, which is then checked against it.
	Source string `json:"source,omitempty"`
}

// PingReply is what a ping learned.
type PingReply struct {
	Primary   string        `json:"primary_nid"`
	PID       uint32        `json:"pid"`
	MultiRail bool          `json:"multi_rail"`
	NIDs      []PingNI      `json:"peer_ni"`
	RTT       time.Duration `json:"rtt_ns"`
	Source    string        `json:"source,omitempty"`
}

// PingNI is one NID of a ping reply.
type PingNI struct {
	NID    string `json:"nid"`
	Status string `json:"status"`
}

// Doc renders the reply as one entry of lnetctl ping's "ping:" list.
func (r *PingReply) Doc() Map {
	nis := List{}
	for _, n := range r.NIDs {
		nis = append(nis, Map{}.add("nid", n.NID))
	}
	return Map{}.add(keyPrimaryNID, r.Primary).add(keyMultiRail, r.MultiRail).add(keyPeerNI, nis)
}

// SetArgs are the arguments of set (lnetctl set <tunable> <value>).
type SetArgs struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ImportArgs are the arguments of import.
type ImportArgs struct {
	Config *Config `json:"config"`
	Del    bool    `json:"del,omitempty"`
}

// ImportResult lists the items import could not apply.
type ImportResult struct {
	Errors []*OpError `json:"errors,omitempty"`
}

// PeerArgs are the arguments of peer.add and peer.del.
type PeerArgs struct {
	PrimaryNID string   `json:"primary_nid"`
	NIDs       []string `json:"nids,omitempty"`
	NonMR      bool     `json:"non_mr,omitempty"`
	LockPrim   bool     `json:"lock_prim,omitempty"`
}

// Handle executes one control request. It is the Handler lnetd serves.
func (d *Daemon) Handle(ctx context.Context, op string, raw json.RawMessage) (any, *OpError) {
	dec := func(v any) *OpError {
		if len(raw) == 0 {
			return nil
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return opErr("manage", op, errnoInval, "bad arguments for %s: %v", op, err)
		}
		return nil
	}
	switch op {
	case "net.add":
		var a NetArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return nil, d.opNetAdd(a)
	case "net.del":
		var a NetArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		if lndName(a.Net) == "lo" {
			return nil, opErr("del", "net", errnoInval, "cannot delete network: the loopback net is always there")
		}
		if !d.netUp(a.Net) {
			return nil, opErr("del", "net", errnoNoEnt, "cannot delete network: net %s is not configured", a.Net)
		}
		if err := d.delNet(a.Net); err != nil {
			return nil, coreErr("del", "net", "cannot delete network", err)
		}
		return nil, nil
	case "net.show":
		var a ShowArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		if a.Net != "" && lndName(a.Net) != "lo" && !d.netUp(a.Net) {
			return nil, opErr("show", "net", errnoNoEnt, "net %s is not configured", a.Net)
		}
		return d.netsDoc(a.Net, a.Verbose), nil
	case "peer.show":
		var a ShowArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return d.peersDoc(a.NID, a.Verbose)
	case "udsp.add", "udsp.del", "udsp.show":
		a := UDSPArgs{Idx: -1}
		if e := dec(&a); e != nil {
			return nil, e
		}
		if op == "udsp.show" {
			return d.udspDoc(a.Idx)
		}
		return nil, d.opUDSP(op == "udsp.add", a)
	case "peer.set", "net.set":
		var a HealthArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return nil, d.opHealth(strings.TrimSuffix(op, ".set"), a)
	case "peer.add", "peer.del":
		var a PeerArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return nil, d.opPeer(op == "peer.add", a)
	case "route.add", "route.del":
		var a RouteConfig
		if e := dec(&a); e != nil {
			return nil, e
		}
		return nil, d.opRoute(op == "route.add", a)
	case "route.show":
		var a RouteShowArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return d.routesDoc(a), nil
	case "routing.show":
		return d.routingDoc(), nil
	case "ping":
		var a PingArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		return d.opPing(ctx, a)
	case "stats.show":
		return statsDoc(d.in.Stats()), nil
	case "stats.reset":
		d.in.ResetStats()
		return nil, nil
	case "global.show":
		d.mu.Lock()
		doc := Map{}.add("global", settingsDoc(d.global, globalTable, true))
		d.mu.Unlock()
		return doc, nil
	case "set":
		var a SetArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		if err := d.setGlobal(a.Name, a.Value); err != nil {
			return nil, opErr("set", a.Name, errnoInval, "%v", err)
		}
		return nil, nil
	case "export":
		var a struct {
			Backup bool `json:"backup"`
		}
		if e := dec(&a); e != nil {
			return nil, e
		}
		return d.Export(a.Backup), nil
	case "import":
		var a ImportArgs
		if e := dec(&a); e != nil {
			return nil, e
		}
		if a.Config == nil {
			return nil, opErr("import", "config", errnoInval, "no configuration given")
		}
		return ImportResult{Errors: d.Import(a.Config, a.Del)}, nil
	}
	if strings.HasPrefix(op, "fault.") { // fault.go
		return d.handleFault(op, raw)
	}
	if op == "discover" { // fault.go
		return d.opDiscover(ctx, raw)
	}
	if op == selftest.ProxyOp && d.st != nil { // softib lst's console RPCs
		r, err := d.st.ProxyCall(ctx, raw)
		if err != nil {
			return nil, coreErr("lst", "call", "selftest console RPC", err)
		}
		return r, nil
	}
	if strings.HasPrefix(op, "test.") && d.test != nil {
		return d.test.handle(ctx, op, dec)
	}
	if strings.HasPrefix(op, "test.") {
		return nil, opErr("manage", "test", errnoNoSys, "the echo test service is off (global test_portal: -1)")
	}
	return nil, opErr("manage", op, errnoNoSys, "unknown operation %q (is lnetd older than lnetctl?)", op)
}

// netUp reports whether a net (by name) has an NI up.
func (d *Daemon) netUp(name string) bool {
	net, err := lnetwire.ParseNet(name)
	if err != nil {
		return false
	}
	for _, nid := range d.in.NIDs() {
		if nid.Net() == net {
			return true
		}
	}
	return false
}

func (d *Daemon) opNetAdd(a NetArgs) *OpError {
	net, err := lnetwire.ParseNet(a.Net)
	if err != nil {
		return opErr("add", "net", errnoInval, "cannot add network: %q is not a net (like tcp or tcp1): %v", a.Net, err)
	}
	if net.Type() == lnetwire.LOLND {
		return opErr("add", "net", errnoExist, "cannot add network: the loopback net is always there")
	}
	ni := NIConfig{NID: a.NID, Interfaces: a.Interfaces, Tunables: a.Tunables, LNDTunables: a.LNDTunables, CPT: a.CPT}
	for _, s := range a.Tunables {
		k, ok := tunablesTable.lookup(s.Name)
		if !ok {
			return opErr("add", "net", errnoInval, "cannot add network: unknown tunable %q", s.Name)
		}
		if _, err := k.parse(fmt.Sprint(s.Value)); err != nil {
			return opErr("add", "net", errnoInval, "cannot add network: %s: %v", s.Name, err)
		}
	}
	if lt := lndTable(net.Type().String()); lt != nil {
		for _, s := range a.LNDTunables {
			if _, ok := lt.lookup(s.Name); !ok {
				return opErr("add", "net", errnoInval, "cannot add network: unknown lnd tunable %q for %s", s.Name, net.Type())
			}
		}
	}
	if err := d.addNet(NetConfig{Type: net.String(), NIs: []NIConfig{ni}}, "net"); err != nil {
		oe := opErr("add", "net", errnoInval, "cannot add network: %v", err)
		if strings.Contains(err.Error(), "already") {
			oe.Errno = -errnoExist
		}
		return oe
	}
	return nil
}

func (d *Daemon) opRoute(add bool, r RouteConfig) *OpError {
	if add {
		if r.Hop == 0 {
			// lnetctl sends --hop 0 to the kernel, which refuses it
			// (no --hop is -1, the undefined count).
			return opErr("add", "route", errnoInval, "cannot add route to %s via %s: invalid hop count 0, must be between 1 and 255", r.Net, r.Gateway)
		}
		if err := d.addRoute(r); err != nil {
			return coreErr("add", "route", "cannot add route to "+r.Net+" via "+r.Gateway, err)
		}
		d.log.Info("lnetd: route added", "net", r.Net, "gateway", r.Gateway, "hop", r.Hop, "priority", r.Priority)
		return nil
	}
	if err := d.delRoute(r); err != nil {
		return coreErr("del", "route", "cannot delete route to "+r.Net+" via "+r.Gateway, err)
	}
	return nil
}

// RouteShowArgs are the arguments of route show.
type RouteShowArgs struct {
	Net     string `json:"net,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	Hop     int64  `json:"hop,omitempty"`
	// Priority shows only the routes of this priority (nil: all).
	Priority *int64 `json:"priority,omitempty"`
	Verbose  bool   `json:"verbose,omitempty"`
}

// routesDoc renders lnetctl route show [-v] (lustre_lnet_show_route):
// net and gateway; with -v also hop, priority, state (up/down) and type
// (single-hop/multi-hop).
func (d *Daemon) routesDoc(a RouteShowArgs) Map {
	list := List{}
	for _, r := range d.in.Routes() {
		if a.Net != "" {
			if n, err := lnetwire.ParseNet(a.Net); err != nil || n != r.Net {
				continue
			}
		}
		if a.Gateway != "" {
			if g, err := lnetwire.ParseNID(a.Gateway); err != nil || g != r.Gateway {
				continue
			}
		}
		if a.Hop > 0 && int64(r.Hops) != a.Hop {
			continue
		}
		if a.Priority != nil && int64(r.Priority) != *a.Priority {
			continue
		}
		m := Map{}.add(keyNet, r.Net.String()).add("gateway", r.Gateway.String())
		if a.Verbose {
			state, typ := "down", "single-hop"
			if r.Alive {
				state = "up"
			}
			if r.MultiHop {
				typ = "multi-hop"
			}
			m = m.add("hop", int64(r.Hops)).add("priority", int64(r.Priority)).
				add("health_sensitivity", int64(1)).add("state", state).add("type", typ)
		}
		list = append(list, m)
	}
	return Map{}.add("route", list)
}

// routingDoc renders lnetctl routing show: the buffer pools of each CPT
// (one here), the routing switch, and the buffers section.
func (d *Daemon) routingDoc() Map {
	cpt := Map{}
	var total [3]int64
	for i, p := range d.in.RouterPools() {
		cpt = cpt.add(p.Name, Map{}.add("npages", int64(p.NPages)).add("nbuffers", int64(p.NBuffers)).
			add("credits", int64(p.Credits)).add("mincredits", int64(p.MinCredits)))
		total[i] = int64(p.NBuffers)
	}
	enable := int64(0)
	if d.in.Router().Enabled {
		enable = 1
	}
	routing := List{Map{}.add("cpt[0]", cpt), Map{}.add("enable", enable)}
	return Map{}.add("routing", routing).
		add("buffers", Map{}.add("tiny", total[0]).add("small", total[1]).add("large", total[2]))
}

func (d *Daemon) opPing(ctx context.Context, a PingArgs) (any, *OpError) {
	nid, err := lnetwire.ParseNID(a.NID)
	if err != nil {
		return nil, opErr("manage", "ping", errnoInval, "failed to ping %s: not a NID: %v", a.NID, err)
	}
	var src lnetwire.NID
	if _, s, _, err := d.in.Dist(nid); err == nil {
		src = s
	}
	if a.Source != "" {
		want, err := lnetwire.ParseNID(a.Source)
		if err != nil || !d.in.IsPeerLocal(want) {
			return nil, opErr("manage", "ping", errnoInval, "failed to ping %s: source %s is not a local NID", a.NID, a.Source)
		}
		if src != want {
			return nil, opErr("manage", "ping", errnoInval,
				"failed to ping %s: the node sends from %s (one NI per net); source %s cannot be used", a.NID, src, a.Source)
		}
	}
	res, err := d.in.Ping(ctx, lnetwire.ProcessID{NID: nid, PID: lnetwire.PIDAny}, a.Timeout)
	if err != nil {
		oe := coreErr("manage", "ping", "failed to ping "+nid.String(), err)
		oe.Hint = "check that the peer's lnetd runs and that both use the same acceptor port"
		return nil, oe
	}
	return pingReplyOf(res, src), nil
}

func pingReplyOf(res lnet.PingResult, src lnetwire.NID) *PingReply {
	r := &PingReply{PID: uint32(res.Target.PID), RTT: res.RTT,
		MultiRail: res.Features&lnetwire.PingFeatMultiRail != 0}
	if src != 0 {
		r.Source = src.String()
	}
	for _, n := range res.NIDs {
		st := "up"
		if n.Status != lnetwire.PingStatusUp {
			st = "down"
		}
		r.NIDs = append(r.NIDs, PingNI{NID: n.NID.String(), Status: st})
	}
	if len(r.NIDs) > 0 {
		r.Primary = r.NIDs[0].NID
	} else {
		r.Primary = res.Target.NID.String()
	}
	return r
}

// netsDoc renders lnetctl net show [-v] for one net or all.
func (d *Daemon) netsDoc(filter string, verbose bool) Map {
	var want lnetwire.Net
	if filter != "" {
		want, _ = lnetwire.ParseNet(filter)
	}
	d.mu.Lock()
	nis := slices.Clone(d.nis)
	d.mu.Unlock()
	nets := List{}
	index := map[lnetwire.Net]int{}
	for _, inf := range d.in.Nets() {
		if filter != "" && inf.Net != want {
			continue
		}
		m := Map{}.add("nid", inf.NID.String()).add("status", inf.Status)
		var st *niState
		for i := range nis {
			if nis[i].nid == inf.NID {
				st = &nis[i]
			}
		}
		if len(inf.Interfaces) > 0 {
			ifs := Map{}
			for i, s := range inf.Interfaces {
				ifs = ifs.add(fmt.Sprint(i), s)
			}
			m = m.add(keyInterfaces, ifs)
		}
		if verbose {
			m = m.add("statistics", Map{}.add("send_count", inf.SendCount).
				add("recv_count", inf.RecvCount).add("drop_count", inf.DropCount))
			if inf.LND != "lo" {
				m = m.add("health stats", niHealthDoc(inf))
			}
			tun := tunablesOf(inf.Tunables)
			if inf.LND == "lo" {
				tun = tunablesOf(lnd.Tunables{})
			}
			m = m.add(keyTunables, settingsDoc(tun, tunablesTable, false))
			var lt Map
			if st != nil {
				lt = settingsDoc(lndTable(inf.LND).effective(st.cfg.LNDTunables), lndTable(inf.LND), false)
			}
			m = m.add(keyLNDTunables, lt)
			if inf.LND != "lo" {
				m = m.add("tx credits", Map{}.add("max", int64(inf.MaxTxCredits)).add("available", int64(inf.TxCredits)).
					add("min", int64(inf.MinTxCredits)).add("queued", int64(inf.Queued)))
			}
			if drv := d.sock.Driver(inf.NID); drv != nil {
				m = m.add("lnd statistics", socklndStats(drv.Stats(), drv.Incarnation()))
			} else if d.o2ib != nil {
				if drv := d.o2ib.Driver(inf.NID); drv != nil {
					m = m.add("lnd statistics", o2iblndStats(drv.Stats(), drv.Incarnation()))
				}
			}
			cpt := "[0]"
			if st != nil && st.cfg.CPT != "" {
				cpt = st.cfg.CPT
			}
			m = m.add("dev cpt", int64(-1)).add("CPT", cpt)
		}
		i, ok := index[inf.Net]
		if !ok {
			nets = append(nets, Map{}.add(keyNetType, inf.Net.String()).add(keyLocalNIs, List{}))
			i = len(nets) - 1
			index[inf.Net] = i
		}
		nm := nets[i].(Map)
		nm[1].Value = append(nm[1].Value.(List), m)
	}
	return Map{}.add(keyNet, nets)
}

// o2iblndStats renders the RDMA LND counters (softib extension of net
// show -v, like socklndStats); stale counts connections found stale (kib_rej
// STALE, CM STALE_CONN), peer_reboots new incarnations of peers.
func o2iblndStats(s *o2iblnd.Stats, incarnation uint64) Map {
	var rejSent, rejRecv uint64
	for i := range s.RejectsSent {
		rejSent += s.RejectsSent[i].Load()
		rejRecv += s.RejectsRecv[i].Load()
	}
	return Map{}.add("incarnation", fmt.Sprintf("%#x", incarnation)).
		add("conns_active", s.ConnsActive.Load()).
		add("conns_established", s.ConnsEstablished.Load()).
		add("conns_closed", s.ConnsClosed.Load()).
		add("connect_failures", s.ConnectFailures.Load()).
		add("races", s.Races.Load()).
		add("reconnects", s.Reconnects.Load()).
		add("rejects_sent", rejSent).add("rejects_received", rejRecv).
		add("stale", s.Stale.Load()).
		add("peer_reboots", s.PeerReboots.Load()).
		add("tx_msgs", s.TxMsgs.Load()).add("rx_msgs", s.RxMsgs.Load()).
		add("tx_immediate", s.TxImmediate.Load()).add("tx_rdma", s.TxRDMA.Load()).
		add("rdma_bytes", s.RDMABytes.Load()).
		add("noops_sent", s.TxNoops.Load()).add("noops_received", s.RxNoops.Load()).
		add("keepalives_sent", s.Keepalives.Load()).
		add("malformed", s.Malformed.Load()).
		add("credit_overflow", s.CreditOverflow.Load()).
		add("tx_timeouts", s.TxTimeouts.Load()).
		add("put_naks", s.PutNaks.Load())
}

// socklndStats renders the TCP LND counters (softib extension of
// net show -v); peer_reboots counts incarnation changes seen; spliced_rx
// and spliced_tx count forwarded payloads a router moved through a pipe
// without copying, splice_fallbacks those it had to copy after all.
func socklndStats(s *socklnd.Stats, incarnation uint64) Map {
	return Map{}.add("incarnation", fmt.Sprintf("%#x", incarnation)).
		add("conns_active", s.ConnsActive.Load()).
		add("conns_established", s.ConnsEstablished.Load()).
		add("conns_closed", s.ConnsClosed.Load()).
		add("connect_failures", s.ConnectFailures.Load()).
		add("races", s.Races.Load()).
		add("accept_refused", s.AcceptRefused.Load()).
		add("peer_reboots", s.PeerReboots.Load()).
		add("tx_msgs", s.TxMsgs.Load()).add("rx_msgs", s.RxMsgs.Load()).
		add("tx_bytes", s.TxBytes.Load()).add("rx_bytes", s.RxBytes.Load()).
		add("keepalives_sent", s.KeepalivesSent.Load()).
		add("csum_errors", s.CsumErrors.Load()).
		add("malformed", s.Malformed.Load()).
		add("tx_timeouts", s.TxTimeouts.Load()).
		add("spliced_rx", s.KeptRx.Load()).add("spliced_tx", s.KeptTx.Load()).
		add("splice_fallbacks", s.KeptFallbacks.Load())
}
