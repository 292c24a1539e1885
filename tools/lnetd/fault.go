package lnetd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// This file holds lnetctl's fault injection (`lnetctl fault drop|delay
// add|del|show|reset`, the options of Lustre's lnetctl.c jt_fault_add and
// lctl net_drop_add) and discovery (`lnetctl discover`) commands, client
// and daemon sides.

// FaultArgs are the arguments of fault.add, fault.del, fault.reset and
// fault.show.
type FaultArgs struct {
	Kind     string   `json:"kind"` // "drop" or "delay"
	Src      string   `json:"src,omitempty"`
	Dst      string   `json:"dst,omitempty"`
	Local    string   `json:"local_nid,omitempty"`
	Portals  []int    `json:"portals,omitempty"`
	Messages []string `json:"messages,omitempty"`
	Rate     uint32   `json:"rate,omitempty"`
	Interval uint32   `json:"interval,omitempty"` // seconds
	Latency  uint32   `json:"latency,omitempty"`  // seconds
	DropAll  bool     `json:"drop_all,omitempty"`
	Random   bool     `json:"random,omitempty"`
	All      bool     `json:"all,omitempty"`
	// HealthErrors are lnetctl's --health_error names (drop rules).
	HealthErrors []string `json:"health_errors,omitempty"`
}

// DiscoverArgs are the arguments of discover.
type DiscoverArgs struct {
	NIDs  []string `json:"nids"`
	Force bool     `json:"force,omitempty"`
	// Primary asks for LNetPrimaryNID of each NID instead (softib's
	// extension: discovery runs when the peer is not up to date).
	Primary bool `json:"primary,omitempty"`
}

// listFlag is a repeatable string option (-m PUT -m GET).
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, splitList(s)...); return nil }

// fault is `lnetctl fault drop|delay add|del|show|reset`.
func (c *ctl) fault(ctx context.Context, kind string, args []string) int {
	if kind != "drop" && kind != "delay" {
		return c.usageErr("usage: fault drop|delay add|del|show|reset [options]")
	}
	action := "show"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		action, args = args[0], args[1:]
	}
	fs := c.flags("fault " + kind + " " + action)
	a := FaultArgs{Kind: kind}
	str := func(p *string, short, long, usage string) {
		fs.StringVar(p, short, "", usage)
		fs.StringVar(p, long, "", usage)
	}
	switch action {
	case "add":
		var portals, msgs, healthErrs listFlag
		str(&a.Src, "s", "source", "source NID or *@net of the messages")
		str(&a.Dst, "d", "dest", "destination NID or *@net of the messages")
		str(&a.Local, "o", "local_nid", "local NID they arrive on (drop)")
		for _, n := range []string{"r", "rate"} {
			fs.Func(n, "act on 1 in RATE matched messages", func(s string) error { return parseU32(s, &a.Rate) })
		}
		for _, n := range []string{"i", "interval"} {
			fs.Func(n, "act on one message per INTERVAL seconds", func(s string) error { return parseU32(s, &a.Interval) })
		}
		for _, n := range []string{"l", "latency"} {
			fs.Func(n, "seconds to hold a message (delay)", func(s string) error { return parseU32(s, &a.Latency) })
		}
		fs.Var(&portals, "p", "portal to select (repeatable)")
		fs.Var(&portals, "portal", "portal to select (repeatable)")
		fs.Var(&msgs, "m", "message type PUT|ACK|GET|REPLY (repeatable)")
		fs.Var(&msgs, "message", "message type PUT|ACK|GET|REPLY (repeatable)")
		fs.BoolVar(&a.DropAll, "x", false, "drop every matched message (drop)")
		fs.BoolVar(&a.DropAll, "drop_all", false, "drop every matched message (drop)")
		fs.BoolVar(&a.Random, "n", false, "drop at random, half the matched messages in an interval (drop)")
		fs.BoolVar(&a.Random, "random", false, "same as -n")
		fs.Var(&healthErrs, "e", "fail sent messages with this health status instead of dropping received ones (repeatable; drop)")
		fs.Var(&healthErrs, "health_error", "same as -e")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if kind == "delay" && (a.DropAll || a.Random || a.Local != "" || len(healthErrs) > 0) {
			return c.usageErr("--drop_all, --random, --local_nid and --health_error are drop rule options")
		}
		for _, e := range healthErrs {
			if _, err := lnet.ParseFaultHealthError(e, 0); err != nil {
				return c.usageErr("unknown health error %q (local_interrupt, local_dropped, local_aborted, local_no_route, local_error, local_timeout, remote_error, remote_dropped, remote_timeout, network_timeout, random)", e)
			}
		}
		a.HealthErrors = healthErrs
		if (a.Rate == 0) == (a.Interval == 0) {
			return c.usageErr("please provide either %s rate or interval but not both at the same time.", kind)
		}
		if kind == "delay" && a.Latency == 0 {
			return c.usageErr("latency cannot be zero")
		}
		if kind == "drop" && a.Latency != 0 {
			return c.usageErr("--latency is a delay rule option")
		}
		if a.Src == "" || a.Dst == "" {
			return c.usageErr("Please provide both source and destination of %s rule", kind)
		}
		for _, p := range portals {
			n, err := strconv.ParseUint(p, 0, 32)
			if err != nil || n >= 64 {
				return c.usageErr("invalid portal: %s", p)
			}
			a.Portals = append(a.Portals, int(n))
		}
		a.Messages = msgs
		return c.simple(ctx, "fault.add", a)
	case "del":
		str(&a.Src, "s", "source", "source NID of the rules")
		str(&a.Dst, "d", "dest", "destination NID of the rules")
		fs.BoolVar(&a.All, "a", false, "delete all rules")
		fs.BoolVar(&a.All, "all", false, "delete all rules")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if !a.All && (a.Src == "" || a.Dst == "") {
			return c.usageErr("Failed, please provide source and destination of rule")
		}
		if a.All && (a.Src != "" || a.Dst != "") {
			return c.usageErr("'-s' or '-d' cannot be combined with '-a'")
		}
		return c.simple(ctx, "fault.del", a)
	case "reset":
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		return c.simple(ctx, "fault.reset", a)
	case "show":
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		return c.show(ctx, "fault.show", a)
	}
	return c.usageErr("unknown action %q for fault %s (add, del, show, reset)", action, kind)
}

func parseU32(s string, p *uint32) error {
	v, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return err
	}
	*p = uint32(v)
	return nil
}

// discover is `lnetctl discover [--force] NID...`.
func (c *ctl) discover(ctx context.Context, args []string) int {
	fs := c.flags("discover")
	force := fs.Bool("force", false, "ping and push even if the peer is up to date")
	fs.BoolVar(force, "f", false, "same as --force")
	prim := fs.Bool("primary", false, "print LNetPrimaryNID of each NID (softib)")
	nids, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(nids) == 0 {
		return c.usageErr("discover needs at least one NID")
	}
	var doc Map
	if err := c.call(ctx, "discover", DiscoverArgs{NIDs: nids, Force: *force, Primary: *prim}, &doc); err != nil {
		return c.fail(err)
	}
	c.print(doc)
	return 0
}

// handleFault serves the fault.* operations.
func (d *Daemon) handleFault(op string, raw json.RawMessage) (any, *OpError) {
	var a FaultArgs
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, opErr("manage", "fault", errnoInval, "bad arguments for %s: %v", op, err)
		}
	}
	kind := lnet.FaultDrop
	switch a.Kind {
	case "drop":
	case "delay":
		kind = lnet.FaultDelay
	default:
		return nil, opErr("manage", "fault", errnoInval, "fault kind %q is neither drop nor delay", a.Kind)
	}
	nid := func(s string) (lnetwire.NID, *OpError) {
		n, err := lnet.ParseFaultNID(s)
		if err != nil {
			return 0, opErr("add", "fault", errnoInval, "failed to convert nidstring %q to NID: %v", s, err)
		}
		return n, nil
	}
	switch op {
	case "fault.add":
		r := lnet.FaultRule{Kind: kind, Rate: a.Rate, Interval: time.Duration(a.Interval) * time.Second,
			Latency: time.Duration(a.Latency) * time.Second, DropAll: a.DropAll, Random: a.Random}
		for _, e := range a.HealthErrors {
			m, err := lnet.ParseFaultHealthError(e, r.HealthError)
			if err != nil {
				return nil, coreErr("add", "fault", "cannot add drop rule", err)
			}
			r.HealthError = m
		}
		var oe *OpError
		if r.Src, oe = nid(a.Src); oe != nil {
			return nil, oe
		}
		if r.Dst, oe = nid(a.Dst); oe != nil {
			return nil, oe
		}
		if r.Local, oe = nid(a.Local); oe != nil {
			return nil, oe
		}
		for _, p := range a.Portals {
			if p < 0 || p >= 64 {
				return nil, opErr("add", "fault", errnoInval, "invalid portal: %d", p)
			}
			r.PortalMask |= 1 << p
		}
		for _, m := range a.Messages {
			switch strings.ToLower(m) {
			case "put":
				r.MsgMask |= lnet.FaultPUT
			case "ack":
				r.MsgMask |= lnet.FaultACK
			case "get":
				r.MsgMask |= lnet.FaultGET
			case "reply":
				r.MsgMask |= lnet.FaultREPLY
			default:
				return nil, opErr("add", "fault", errnoInval, "unknown message type %s", m)
			}
		}
		if err := d.in.AddFaultRule(r); err != nil {
			return nil, coreErr("add", "fault", "cannot add "+a.Kind+" rule", err)
		}
		d.log.Info("lnetd: fault rule added", "kind", a.Kind, "src", r.Src, "dst", r.Dst)
		return nil, nil
	case "fault.del":
		src, dst := lnetwire.NIDAny, lnetwire.NIDAny
		if !a.All {
			var oe *OpError
			if src, oe = nid(a.Src); oe != nil {
				return nil, oe
			}
			if dst, oe = nid(a.Dst); oe != nil {
				return nil, oe
			}
		}
		if n := d.in.DelFaultRules(kind, src, dst); n == 0 && !a.All {
			return nil, opErr("del", "fault", errnoNoEnt, "no %s rule from %s to %s", a.Kind, a.Src, a.Dst)
		}
		return nil, nil
	case "fault.reset":
		d.in.ResetFaultRules(kind)
		return nil, nil
	case "fault.show":
		return faultDoc(a.Kind, d.in.FaultRules(kind)), nil
	}
	return nil, opErr("manage", op, errnoNoSys, "unknown operation %q", op)
}

// faultDoc renders rules as the kernel's netlink reply to lnetctl fault
// show (api-ni.c lnet_fault_show_dump's keys).
func faultDoc(kind string, rules []lnet.FaultRuleInfo) Map {
	l := List{}
	for _, r := range rules {
		m := Map{}.add("rule_type", kind).add("fa_src", r.Src.String()).add("fa_dst", r.Dst.String()).
			add("fa_ptl_mask", int64(r.PortalMask)).add("fa_msg_mask", int64(r.MsgMask))
		if r.Kind == lnet.FaultDrop {
			m = m.add("da_rate", int64(r.Rate)).add("da_interval", int64(r.Interval/time.Second)).
				add("ds_dropped", int64(r.Stats.Fired))
		} else {
			m = m.add("la_rate", int64(r.Rate)).add("la_interval", int64(r.Interval/time.Second)).
				add("la_latency", int64(r.Latency/time.Second)).add("ls_delayed", int64(r.Stats.Fired))
		}
		m = m.add("fs_count", int64(r.Stats.Count)).add("fs_put", int64(r.Stats.Put)).add("fs_ack", int64(r.Stats.Ack)).
			add("fs_get", int64(r.Stats.Get)).add("fs_reply", int64(r.Stats.Reply))
		l = append(l, m)
	}
	return Map{}.add("fault", l)
}

// opDiscover runs lnetctl discover: one discovery round per NID; the
// reply lists each peer as the kernel's lnet_ping_cmd does (primary nid,
// Multi-Rail, peer_ni), and a NID that failed as an error entry.
func (d *Daemon) opDiscover(ctx context.Context, raw json.RawMessage) (any, *OpError) {
	var a DiscoverArgs
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, opErr("manage", "discover", errnoInval, "bad arguments for discover: %v", err)
		}
	}
	if len(a.NIDs) == 0 {
		return nil, opErr("manage", "discover", errnoInval, "no NID to discover")
	}
	if a.Primary {
		l := List{}
		for _, s := range a.NIDs {
			nid, err := lnetwire.ParseNID(s)
			if err != nil {
				return nil, opErr("discover", "peer", errnoInval, "cannot parse NID '%s'", s)
			}
			l = append(l, Map{}.add("nid", nid.String()).add(keyPrimaryNID, d.in.PrimaryNIDContext(ctx, nid).String()))
		}
		return Map{}.add("primary_nid", l), nil
	}
	l := List{}
	var fails List
	for _, s := range a.NIDs {
		nid, err := lnetwire.ParseNID(s)
		if err != nil {
			fails = append(fails, Map{}.add("nid", s).add("errno", int64(-errnoInval)).
				add("descr", fmt.Sprintf("cannot parse NID '%s'", s)))
			continue
		}
		r, err := d.in.Discover(ctx, nid, a.Force)
		if err != nil {
			oe := coreErr("discover", "peer", "failed to discover "+nid.String(), err)
			fails = append(fails, Map{}.add("nid", nid.String()).add("errno", int64(oe.Errno)).add("descr", oe.Descr))
			continue
		}
		nis := List{}
		for _, n := range r.NIDs {
			nis = append(nis, Map{}.add("nid", n.String()))
		}
		l = append(l, Map{}.add(keyPrimaryNID, r.Primary.String()).add(keyMultiRail, r.MultiRail).add("peer_ni", nis))
	}
	if len(l) == 0 && len(fails) > 0 {
		f := fails[0].(Map)
		return nil, &OpError{Cmd: "discover", Obj: "peer", Errno: int(f.Get("errno").(int64)), Descr: f.Get("descr").(string)}
	}
	doc := Map{}.add("discover", l)
	if len(fails) > 0 {
		doc = doc.add("errors", fails)
	}
	return doc, nil
}

// applyDiscovery gives the core the discovery global (lnetctl set
// discovery, YAML global: discovery). 0 is the kernel's discovery off
// (lnet.DiscoveryOff): a new peer is still pinged once, nothing pushed.
func (d *Daemon) applyDiscovery() {
	d.mu.Lock()
	v, ok := d.global.Get("discovery")
	d.mu.Unlock()
	m := lnet.DiscoveryOn
	if ok && v == 0 {
		m = lnet.DiscoveryOff
	}
	if err := d.in.SetDiscoveryMode(m); err != nil {
		d.log.Warn("lnetd: discovery", "err", err)
	}
}
