package lnet

// User Defined Selection Policies (lnet/lnet/udsp.c; lnetctl udsp
// add/del/show; lnet-wire.md §8.7).
//
// A rule matches local NIs (--src), peer NIs (--dst) or both, by a NID
// expression: a net ("tcp1": the whole net) or addr@net where each dotted
// part of an IPv4 address is a number, "*" or a bracketed list of
// numbers and ranges ("10.0.0.[1-4,9]@tcp", "*@o2ib"). Its action is a
// priority (0 is the best):
//
//	--src net        the local net's selection priority
//	--src nid-expr   the matching local NIs' priority
//	--dst net        the matching peer nets' priority
//	--dst nid-expr   the matching peer NIs' priority
//	--src X --dst Y  the local NIs matching X become preferred NIDs of the
//	                 peer NIs matching Y (a NID pair)
//	--dst X --rte Y  the gateways (by primary NID) matching Y become the
//	                 preferred routers of the peer NIs matching X: a
//	                 routed message to such a peer NI takes an alive route
//	                 through a preferred router before any other, ahead
//	                 of route priority and hops (lnet_compare_routes)
//
// Selection (select.go) ranks by these after health. Rules are kept in
// index order; they are applied from the last to the first, so where two
// match the lower index wins. As lnetctl parses them: --priority makes a
// priority rule; without it a --src or --dst rule has priority 0 and a
// --src --dst or --dst --rte rule is a preferred list; --rte needs --dst
// and takes neither --src nor --priority (the kernel would keep such a
// rule and apply nothing: softib refuses it).
//
// Router rules are evaluated when a route is chosen rather than copied
// into per-peer-NI lists when the rule is added (lnet_udsp_apply_rte_list_on_lpni),
// so routes and gateways added later count too; the result is the same
// as the kernel's after it applies the rules again.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"softib/wire/lnetwire"
)

// UDSPRule is one rule as lnetctl udsp add gives it and udsp show prints
// it: NID expressions (empty: none) and the priority.
type UDSPRule struct {
	Src, Dst, Rte string
	Priority      uint32
	// Preferred is lnetctl's "pref" action (no --priority): a NID pair
	// or router rule. A --src or --dst rule without a priority is given
	// priority 0 instead, as lnetctl does.
	Preferred bool
}

// udspRule is a parsed rule.
type udspRule struct {
	cfg           UDSPRule
	src, dst, rte *nidExpr
}

// nidExpr is a parsed NID expression.
type nidExpr struct {
	net     lnetwire.Net
	netOnly bool
	parts   [][][2]uint32 // per address part: ranges [lo, hi]; nil part: "*"
}

// parseNIDExpr parses a net name or addr@net with *, numbers and
// bracketed range lists in the address.
func parseNIDExpr(s string) (*nidExpr, error) {
	s = strings.TrimSpace(s)
	addr, netName, hasAt := strings.Cut(s, "@")
	if !hasAt {
		netName, addr = s, ""
	}
	net, err := lnetwire.ParseNet(netName)
	if err != nil {
		return nil, fmt.Errorf("%w: NID expression %q: %v", ErrInvalid, s, err)
	}
	e := &nidExpr{net: net, netOnly: !hasAt}
	if !hasAt {
		return e, nil
	}
	if addr == "*" {
		return e, nil
	}
	fields := []string{addr}
	if t := net.Type(); t == lnetwire.SOCKLND || t == lnetwire.O2IBLND {
		fields = strings.Split(addr, ".")
		if len(fields) != 4 {
			return nil, fmt.Errorf("%w: NID expression %q: an IPv4 address has four parts", ErrInvalid, s)
		}
	}
	for _, f := range fields {
		if f == "*" {
			e.parts = append(e.parts, nil)
			continue
		}
		list := f
		if strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]") {
			list = f[1 : len(f)-1]
		}
		var rs [][2]uint32
		for _, item := range strings.Split(list, ",") {
			lo, hi, isRange := strings.Cut(item, "-")
			a, err1 := strconv.ParseUint(lo, 10, 32)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.ParseUint(hi, 10, 32)
			}
			if err1 != nil || err2 != nil || b < a {
				return nil, fmt.Errorf("%w: NID expression %q: bad address part %q", ErrInvalid, s, f)
			}
			rs = append(rs, [2]uint32{uint32(a), uint32(b)})
		}
		e.parts = append(e.parts, rs)
	}
	return e, nil
}

// matchNID reports whether nid fits the expression (a net-only one
// matches every NID on the net).
func (e *nidExpr) matchNID(nid lnetwire.NID) bool {
	if nid.Net() != e.net {
		return false
	}
	if len(e.parts) == 0 {
		return true
	}
	addr := nid.Addr()
	vals := []uint32{addr}
	if len(e.parts) == 4 {
		vals = []uint32{addr >> 24, addr >> 16 & 0xff, addr >> 8 & 0xff, addr & 0xff}
	}
	for i, rs := range e.parts {
		if rs == nil {
			continue
		}
		if !slices.ContainsFunc(rs, func(r [2]uint32) bool { return vals[i] >= r[0] && vals[i] <= r[1] }) {
			return false
		}
	}
	return true
}

// AddUDSP inserts a rule at index idx (< 0 or past the end: appended)
// and applies the rules again (lnetctl udsp add).
func (in *Instance) AddUDSP(r UDSPRule, idx int) error {
	switch {
	case r.Src == "" && r.Dst == "" && r.Rte == "":
		return fmt.Errorf("%w: a rule needs --src, --dst or --rte", ErrInvalid)
	case r.Rte != "" && r.Src != "":
		return fmt.Errorf("%w: src and rte cannot be combined", ErrInvalid)
	case r.Rte != "" && r.Dst == "":
		return fmt.Errorf("%w: an --rte rule needs --dst (the peer NIs whose routers it prefers)", ErrInvalid)
	case r.Rte != "" && !r.Preferred:
		return fmt.Errorf("%w: an --rte rule is a preferred-router list and takes no --priority", ErrInvalid)
	case r.Preferred && r.Rte == "" && (r.Src == "") != (r.Dst == ""):
		// lnetctl: a priority is expected but not given.
		r.Preferred, r.Priority = false, 0
	}
	ur := &udspRule{cfg: r}
	var err error
	if r.Rte != "" {
		if ur.rte, err = parseNIDExpr(r.Rte); err != nil {
			return err
		}
	}
	if r.Src != "" {
		if ur.src, err = parseNIDExpr(r.Src); err != nil {
			return err
		}
	}
	if r.Dst != "" {
		if ur.dst, err = parseNIDExpr(r.Dst); err != nil {
			return err
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if idx < 0 || idx > len(in.mr.udsp) {
		idx = len(in.mr.udsp)
	}
	in.mr.udsp = slices.Insert(in.mr.udsp, idx, ur)
	in.applyUDSPLocked()
	return nil
}

// DelUDSP removes the rule at idx, or all with idx < 0 (lnetctl udsp
// del --idx n / --all); ErrNoEnt when there is no such rule.
func (in *Instance) DelUDSP(idx int) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case idx < 0:
		in.mr.udsp = nil
	case idx >= len(in.mr.udsp):
		return fmt.Errorf("%w: udsp %d", ErrNoEnt, idx)
	default:
		in.mr.udsp = slices.Delete(in.mr.udsp, idx, idx+1)
	}
	in.applyUDSPLocked()
	return nil
}

// UDSPs returns the rules in index order (lnetctl udsp show).
func (in *Instance) UDSPs() []UDSPRule {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]UDSPRule, len(in.mr.udsp))
	for i, r := range in.mr.udsp {
		out[i] = r.cfg
	}
	return out
}

// applyUDSPLocked resets every selection priority and UDSP preferred NID
// and applies the rules from the last to the first.
func (in *Instance) applyUDSPLocked() {
	in.mr.rteRules = slices.ContainsFunc(in.mr.udsp, func(r *udspRule) bool { return r.rte != nil })
	for _, ln := range in.mr.nets {
		ln.selPriority = maxSelPriority
	}
	for _, ni := range in.nis {
		ni.mr.prioSet = false
	}
	for _, lp := range in.lpeers {
		for _, pn := range lp.nets {
			pn.selPriority = maxSelPriority
		}
	}
	for _, p := range in.peers {
		p.selPriority = maxSelPriority
		if !p.nonMRPref {
			p.prefNIDs = nil
		}
	}
	for i := len(in.mr.udsp) - 1; i >= 0; i-- {
		r := in.mr.udsp[i]
		switch {
		case r.rte != nil:
			// Router rules: preferredRouteLocked.
		case r.src != nil && r.dst == nil && r.src.netOnly:
			in.localNetOf(r.src.net).selPriority = r.cfg.Priority
		case r.src != nil && r.dst == nil:
			for _, ni := range in.nis {
				if r.src.matchNID(ni.nid()) {
					ni.mr.selPriority, ni.mr.prioSet = r.cfg.Priority, true
				}
			}
		case r.src == nil && r.dst.netOnly:
			for _, lp := range in.lpeers {
				if pn := lp.netOf(r.dst.net); pn != nil {
					pn.selPriority = r.cfg.Priority
				}
			}
		default:
			for _, p := range in.peers {
				in.applyUDSPRuleToPeerNILocked(r, p)
			}
		}
	}
}

// applyUDSPToPeerNILocked applies the peer rules to a new peer NI (and
// its peer net), as lnet_peer_attach_peer_ni does.
func (in *Instance) applyUDSPToPeerNILocked(p *peer) {
	for i := len(in.mr.udsp) - 1; i >= 0; i-- {
		r := in.mr.udsp[i]
		switch {
		case r.dst == nil || r.rte != nil:
		case r.src == nil && r.dst.netOnly:
			if p.lp != nil && r.dst.net == p.nid.Net() {
				if pn := p.lp.netOf(r.dst.net); pn != nil {
					pn.selPriority = r.cfg.Priority
				}
			}
		default:
			in.applyUDSPRuleToPeerNILocked(r, p)
		}
	}
}

// applyUDSPRuleToPeerNILocked applies a --dst rule (with or without
// --src) to one peer NI.
func (in *Instance) applyUDSPRuleToPeerNILocked(r *udspRule, p *peer) {
	if !r.dst.matchNID(p.nid) {
		return
	}
	if r.src == nil {
		p.selPriority = r.cfg.Priority
		return
	}
	for _, ni := range in.nis {
		if !ni.lo && r.src.matchNID(ni.nid()) && !p.prefers(ni.nid()) {
			p.prefNIDs = append(p.prefNIDs, ni.nid())
		}
	}
}

// applyUDSPToNILocked applies the source rules to a new local NI.
func (in *Instance) applyUDSPToNILocked(ni *netIface) {
	for i := len(in.mr.udsp) - 1; i >= 0; i-- {
		r := in.mr.udsp[i]
		if r.src != nil && r.dst == nil && !r.src.netOnly && r.src.matchNID(ni.nid()) {
			ni.mr.selPriority, ni.mr.prioSet = r.cfg.Priority, true
		}
	}
}

// preferredRouterLocked reports whether gw is a preferred router of the
// peer NI dst (lnet_peer_is_pref_rtr_locked). dst's list is the one the
// lowest-index router rule matching dst gives it: the gateways of all
// routes whose primary NID matches the rule's --rte. A rule whose --rte
// matches no gateway sets no list (the kernel clears a peer NI's list
// only on the first match), so the next rule counts. false when no rule
// gives dst a list.
func (in *Instance) preferredRouterLocked(dst lnetwire.NID, gw *gateway) bool {
	if !in.mr.rteRules || dst == 0 {
		return false
	}
	for _, r := range in.mr.udsp {
		if r.rte == nil || !r.dst.matchNID(dst) {
			continue
		}
		if r.rte.matchNID(in.knownPrimaryLocked(gw.nid)) {
			return true
		}
		if in.anyGatewayMatchesLocked(r.rte) {
			return false // dst's list is this rule's, without gw
		}
	}
	return false
}

// anyGatewayMatchesLocked reports whether the primary NID of some route's
// gateway matches e.
func (in *Instance) anyGatewayMatchesLocked(e *nidExpr) bool {
	for _, gw := range in.routes.gateways {
		if len(gw.routes) > 0 && e.matchNID(in.knownPrimaryLocked(gw.nid)) {
			return true
		}
	}
	return false
}
