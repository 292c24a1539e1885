package lnetd

// Multi-Rail peers and health in lnetd: lnetctl peer add/del/show/set,
// net set --health, the health part of net show -v and stats show
// (Lustre 2.17's liblnetconfig output).

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// Errnos of the peer model's errors (lnet/lnet/peer.c).
var (
	errnoPerm = int(syscall.EPERM)
	// errnoNotUniq is Linux's ENOTUNIQ, the number Lustre reports
	// whatever the host softib runs on (other systems have no ENOTUNIQ).
	errnoNotUniq = 76
)

// HealthArgs are the arguments of peer.set and net.set (lnetctl peer set
// --health V --nid N; net set --health V --nid N).
type HealthArgs struct {
	NID    string `json:"nid"`
	Health int    `json:"health"`
}

// peerErr maps peer-model errors onto Lustre's errnos, then coreErr's.
func peerErr(cmd, what string, err error) *OpError {
	switch {
	case errors.Is(err, lnet.ErrPerm):
		return opErr(cmd, "peer", errnoPerm, "%s: %v", what, err)
	case errors.Is(err, lnet.ErrNotUniq):
		return opErr(cmd, "peer", errnoNotUniq, "%s: %v", what, err)
	case errors.Is(err, lnet.ErrNotPrimary):
		return opErr(cmd, "peer", errnoNoDev, "%s: %v", what, err)
	case errors.Is(err, lnet.ErrPeerExists):
		return opErr(cmd, "peer", errnoExist, "%s: %v", what, err)
	}
	return coreErr(cmd, "peer", what, err)
}

// applyPeer configures a stored peer in the core (lnet_user_add_peer_ni).
func (d *Daemon) applyPeer(p PeerConfig) error {
	prim, err := lnetwire.ParseNID(p.PrimaryNID)
	if err != nil {
		return err
	}
	pc := lnet.PeerConfig{Primary: prim, NonMR: !p.MultiRail}
	for _, s := range p.NIDs {
		n, err := lnetwire.ParseNID(s)
		if err != nil {
			return err
		}
		pc.NIDs = append(pc.NIDs, n)
	}
	return d.in.AddPeer(pc)
}

// opPeer is peer.add and peer.del: the core's peer table changes
// (lnet_user_add_peer_ni / lnet_del_peer_ni), the stored configuration
// (export) follows.
func (d *Daemon) opPeer(add bool, a PeerArgs) *OpError {
	cmd := "del"
	if add {
		cmd = "add"
	}
	prim, err := lnetwire.ParseNID(a.PrimaryNID)
	if err != nil {
		return opErr(cmd, "peer", errnoInval, "bad primary NID %q: %v", a.PrimaryNID, err)
	}
	var nids []lnetwire.NID
	for _, s := range a.NIDs {
		n, err := lnetwire.ParseNID(s)
		if err != nil {
			return opErr(cmd, "peer", errnoInval, "bad NID %q: %v", s, err)
		}
		nids = append(nids, n)
	}
	if add {
		pc := lnet.PeerConfig{Primary: prim, NIDs: nids, NonMR: a.NonMR, LockPrimary: a.LockPrim}
		if err := d.in.AddPeer(pc); err != nil {
			return peerErr(cmd, "cannot add peer "+prim.String(), err)
		}
		d.mu.Lock()
		i := slices.IndexFunc(d.peers, func(p PeerConfig) bool { return p.PrimaryNID == prim.String() })
		if i < 0 {
			d.peers = append(d.peers, PeerConfig{PrimaryNID: prim.String(), MultiRail: !a.NonMR, NIDs: []string{prim.String()}})
			i = len(d.peers) - 1
		}
		for _, n := range nids {
			if !slices.Contains(d.peers[i].NIDs, n.String()) {
				d.peers[i].NIDs = append(d.peers[i].NIDs, n.String())
			}
		}
		d.mu.Unlock()
		return nil
	}
	if len(nids) == 0 {
		nids = []lnetwire.NID{lnetwire.NIDAny}
	}
	for _, n := range nids {
		if err := d.in.DelPeerNI(prim, n); err != nil {
			return peerErr(cmd, "cannot delete peer "+prim.String(), err)
		}
	}
	d.mu.Lock()
	if i := slices.IndexFunc(d.peers, func(p PeerConfig) bool { return p.PrimaryNID == prim.String() }); i >= 0 {
		if len(a.NIDs) == 0 || slices.Contains(a.NIDs, prim.String()) {
			d.peers = slices.Delete(d.peers, i, i+1)
		} else {
			d.peers[i].NIDs = slices.DeleteFunc(d.peers[i].NIDs, func(n string) bool { return slices.Contains(a.NIDs, n) })
		}
	}
	d.mu.Unlock()
	return nil
}

// opHealth is peer.set / net.set --health (lnetctl's test knob).
func (d *Daemon) opHealth(obj string, a HealthArgs) *OpError {
	nid, err := lnetwire.ParseNID(a.NID)
	if err != nil {
		return opErr("set", obj, errnoInval, "bad NID %q: %v", a.NID, err)
	}
	if a.Health < 0 || a.Health > lnet.MaxHealthValue {
		return opErr("set", obj, errnoInval, "health %d out of range [0, %d]", a.Health, lnet.MaxHealthValue)
	}
	if obj == "peer" {
		err = d.in.SetPeerNIHealth(nid, a.Health)
	} else {
		err = d.in.SetNIHealth(nid, a.Health)
	}
	if err != nil {
		return coreErr("set", obj, "cannot set the health of "+a.NID, err)
	}
	return nil
}

// nextPingSecs renders a planned recovery ping as seconds from now
// (0: none planned).
func nextPingSecs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(0, int64(time.Until(t).Round(time.Second)/time.Second))
}

// niHealthDoc is net show -v's "health stats" of a local NI.
func niHealthDoc(inf lnet.NetInfo) Map {
	fatal := int64(0)
	if inf.FatalError {
		fatal = 1
	}
	return Map{}.add("fatal_error", fatal).add("health value", int64(inf.Health)).
		add("interrupts", inf.Interrupts).add("dropped", inf.Dropped).add("aborted", inf.Aborted).
		add("no route", inf.NoRoute).add("timeouts", inf.Timeouts).add("error", inf.Errors).
		add("ping_count", int64(inf.PingCount)).add("next_ping", nextPingSecs(inf.NextPing))
}

// peersDoc renders lnetctl peer show [-v] [--nid]: every peer with its
// peer NIs; -v adds credits, statistics and health.
func (d *Daemon) peersDoc(filter string, verbose bool) (Map, *OpError) {
	var peers []lnet.PeerDetail
	if filter != "" {
		n, err := lnetwire.ParseNID(filter)
		if err != nil {
			return nil, opErr("show", "peer", errnoInval, "bad NID %q: %v", filter, err)
		}
		p, ok := d.in.PeerOf(n)
		if !ok {
			return nil, opErr("show", "peer", errnoNoEnt, "no peer %s (traffic or peer add creates one)", filter)
		}
		peers = append(peers, p)
	} else {
		peers = d.in.PeerList()
	}
	list := List{}
	for _, p := range peers {
		m := Map{}.add(keyPrimaryNID, p.Primary.String()).add(keyMultiRail, p.MultiRail)
		if verbose {
			m = m.add("peer state", int64(p.State))
		}
		nis := List{}
		for _, ni := range p.NIs {
			nm := Map{}.add("nid", ni.NID.String()).add("state", ni.State)
			if verbose {
				nm = nm.add("max_ni_tx_credits", int64(ni.MaxTxCredits)).
					add("available_tx_credits", int64(ni.TxCredits)).
					add("min_tx_credits", int64(ni.MinTxCredits)).
					add("tx_q_num_of_buf", ni.QueueBytes).
					add("available_rtr_credits", int64(ni.RtrCredits)).
					add("min_rtr_credits", int64(ni.MinRtrCredits)).
					add("refcount", int64(ni.Refs)).
					add("statistics", Map{}.add("send_count", ni.SendCount).
						add("recv_count", ni.RecvCount).add("drop_count", ni.DropCount)).
					add("health stats", Map{}.add("health value", int64(ni.Health)).
						add("dropped", ni.Dropped).add("timeout", ni.Timeout).add("error", ni.Error).
						add("network timeout", ni.NetworkTimeout).add("ping_count", int64(ni.PingCount)).
						add("next_ping", nextPingSecs(ni.NextPing)))
				if len(ni.PrefNIDs) > 0 {
					var pref []string
					for _, n := range ni.PrefNIDs {
						pref = append(pref, n.String())
					}
					nm = nm.add("preferred local NIDs", strings.Join(pref, ","))
				}
			}
			nis = append(nis, nm)
		}
		list = append(list, m.add(keyPeerNI, nis))
	}
	return Map{}.add("peer", list), nil
}

// statsDoc renders lnetctl stats show: Lustre 2.17's lnet_counters_common
// and lnet_counters_health, in its order.
func statsDoc(s lnet.Stats) Map {
	h := s.Health
	return Map{}.add("statistics", Map{}.
		add("msgs_alloc", s.MsgsAlloc).add("msgs_max", s.MsgsMax).add("rst_alloc", s.RstAlloc).
		add("errors", s.Errors).add("send_count", s.SendCount).
		add("resend_count", h.ResendCount).add("response_timeout_count", h.ResponseTimeoutCount).
		add("local_interrupt_count", h.LocalInterruptCount).add("local_dropped_count", h.LocalDroppedCount).
		add("local_aborted_count", h.LocalAbortedCount).add("local_no_route_count", h.LocalNoRouteCount).
		add("local_timeout_count", h.LocalTimeoutCount).add("local_error_count", h.LocalErrorCount).
		add("remote_dropped_count", h.RemoteDroppedCount).add("remote_error_count", h.RemoteErrorCount).
		add("remote_timeout_count", h.RemoteTimeoutCount).add("network_timeout_count", h.NetworkTimeoutCount).
		add("failed_resends", h.FailedResends).add("successful_resends", h.SuccessfulResends).
		add("recv_count", s.RecvCount).
		add("route_count", s.RouteCount).add("drop_count", s.DropCount).
		add("send_length", s.SendLength).add("recv_length", s.RecvLength).
		add("route_length", s.RouteLength).add("drop_length", s.DropLength))
}

// UDSPArgs are the arguments of udsp.add/del/show (lnetctl udsp).
type UDSPArgs struct {
	Src      string `json:"src,omitempty"`
	Dst      string `json:"dst,omitempty"`
	Rte      string `json:"rte,omitempty"`
	Priority int64  `json:"priority"` // -1 (add): none, lnetctl's "pref" action
	Idx      int    `json:"idx"`      // -1: append (add), all (del, show)
}

// opUDSP is udsp.add and udsp.del.
func (d *Daemon) opUDSP(add bool, a UDSPArgs) *OpError {
	if add {
		if a.Priority < -1 || a.Priority > int64(^uint32(0)>>1) {
			return opErr("add", "udsp", errnoInval, "priority %d out of range", a.Priority)
		}
		r := lnet.UDSPRule{Src: a.Src, Dst: a.Dst, Rte: a.Rte, Preferred: a.Priority < 0}
		if a.Priority >= 0 {
			r.Priority = uint32(a.Priority)
		}
		if err := d.in.AddUDSP(r, a.Idx); err != nil {
			return coreErr("add", "udsp", "cannot add udsp", err)
		}
		return nil
	}
	if err := d.in.DelUDSP(a.Idx); err != nil {
		return coreErr("del", "udsp", "cannot delete udsp", err)
	}
	return nil
}

// udspDoc renders lnetctl udsp show [--idx n] as liblnetconfig does.
func (d *Daemon) udspDoc(idx int) (Map, *OpError) {
	rules := d.in.UDSPs()
	list := List{}
	for i, r := range rules {
		if idx >= 0 && i != idx {
			continue
		}
		m := Map{}.add("idx", int64(i))
		if r.Src != "" {
			m = m.add("src", r.Src)
		}
		if r.Dst != "" {
			m = m.add("dst", r.Dst)
		}
		if r.Rte != "" {
			m = m.add("rte", r.Rte)
		}
		if r.Preferred {
			// liblnetconfig prints an action for priority rules only.
			list = append(list, m)
			continue
		}
		list = append(list, m.add("action", Map{}.add("priority", int64(r.Priority))))
	}
	if idx >= 0 && len(list) == 0 {
		return nil, opErr("show", "udsp", errnoNoEnt, "no udsp %d", idx)
	}
	return Map{}.add("udsp", list), nil
}
