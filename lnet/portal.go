package lnet

import "softib/wire/lnetwire"

// ME is a match entry (struct lnet_me): match criteria on a portal, with
// at most one MD attached. Guarded by Instance.mu.
type ME struct {
	in         *Instance
	portal     int
	match      lnetwire.ProcessID
	matchBits  uint64
	ignoreBits uint64
	unlink     Unlink
	md         *libMD
	list       *meList // nil once unlinked
	prev, next *ME
}

// Portal returns the ME's portal index.
func (me *ME) Portal() int { return me.portal }

// meList is an intrusive doubly linked match list.
type meList struct{ head, tail *ME }

func (l *meList) insertAfter(at, me *ME) { // at == nil: at the head
	me.list = l
	me.prev = at
	if at == nil {
		me.next = l.head
		l.head = me
	} else {
		me.next = at.next
		at.next = me
	}
	if me.next != nil {
		me.next.prev = me
	} else {
		l.tail = me
	}
}

func (l *meList) insertBefore(at, me *ME) { // at == nil: at the tail
	if at == nil {
		l.insertAfter(l.tail, me)
		return
	}
	l.insertAfter(at.prev, me)
}

func (l *meList) remove(me *ME) {
	if me.prev != nil {
		me.prev.next = me.next
	} else {
		l.head = me.next
	}
	if me.next != nil {
		me.next.prev = me.prev
	} else {
		l.tail = me.prev
	}
	me.prev, me.next, me.list = nil, nil, nil
}

// portalKind is set by the first ME attached to a portal.
type portalKind uint8

const (
	portalUnset portalKind = iota
	portalUnique
	portalWildcard
)

// portal is one entry of the portal table (struct lnet_portal). A unique
// portal (MEs with an exact initiator and no ignore bits) keeps its MEs
// in per-match-bits lists so matching is one map lookup; a wildcard portal
// keeps one ordered list.
type portal struct {
	index   int
	kind    portalKind
	lazy    bool
	wild    meList
	unique  map[uint64]*meList
	delayed msgQueue // PUTs waiting on a lazy portal, FIFO
}

// listFor returns the list an ME with these match bits belongs to.
func (p *portal) listFor(mbits uint64, create bool) *meList {
	if p.kind != portalUnique {
		return &p.wild
	}
	l := p.unique[mbits]
	if l == nil && create {
		if p.unique == nil {
			p.unique = make(map[uint64]*meList)
		}
		l = &meList{}
		p.unique[mbits] = l
	}
	return l
}

// MEAttach creates an ME on a portal (LNetMEAttach) at the head
// (InsBefore) or tail (InsAfter, InsLocal) of its match list. match may use
// NIDAny / PIDAny wildcards; an incoming request matches when its
// initiator fits match and ((matchBits ^ bits) &^ ignoreBits) == 0. The
// first ME on a portal fixes its kind: an exact initiator with no ignore
// bits makes it unique, anything else wildcard; later MEs of the other
// kind fail with ErrPortalType.
func (in *Instance) MEAttach(portal int, match lnetwire.ProcessID, matchBits, ignoreBits uint64, unlink Unlink, pos InsPos) (*ME, error) {
	return in.meInsert(nil, portal, match, matchBits, ignoreBits, unlink, pos)
}

// MEInsert creates an ME next to cur on cur's portal (LNetMEInsert):
// before it for InsBefore, after it otherwise.
func (in *Instance) MEInsert(cur *ME, match lnetwire.ProcessID, matchBits, ignoreBits uint64, unlink Unlink, pos InsPos) (*ME, error) {
	if cur == nil {
		return nil, ErrInvalid
	}
	return in.meInsert(cur, cur.portal, match, matchBits, ignoreBits, unlink, pos)
}

func (in *Instance) meInsert(cur *ME, portal int, match lnetwire.ProcessID, matchBits, ignoreBits uint64, unlink Unlink, pos InsPos) (*ME, error) {
	if portal < 0 || portal >= MaxPortals || pos > InsLocal || unlink > AutoUnlink {
		return nil, ErrInvalid
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, ErrClosed
	}
	if cur != nil && (cur.in != in || cur.list == nil) {
		return nil, ErrNoEnt
	}
	p := &in.portals[portal]
	unique := ignoreBits == 0 && match.NID != lnetwire.NIDAny && match.PID != lnetwire.PIDAny
	switch p.kind {
	case portalUnset:
		p.kind = portalWildcard
		if unique {
			p.kind = portalUnique
		}
	case portalUnique:
		if !unique {
			return nil, ErrPortalType
		}
	case portalWildcard:
		if unique {
			return nil, ErrPortalType
		}
	}
	me := &ME{in: in, portal: portal, match: match, matchBits: matchBits, ignoreBits: ignoreBits, unlink: unlink}
	l := p.listFor(matchBits, true)
	switch {
	case cur != nil && cur.list != l:
		// Relative insert into another bucket of a unique portal: the
		// relative order only matters among MEs that can match the same
		// requests, i.e. within one bucket.
		if pos == InsBefore {
			l.insertAfter(nil, me)
		} else {
			l.insertBefore(nil, me)
		}
	case cur != nil && pos == InsBefore:
		l.insertBefore(cur, me)
	case cur != nil:
		l.insertAfter(cur, me)
	case pos == InsBefore:
		l.insertAfter(nil, me)
	default:
		l.insertBefore(nil, me)
	}
	in.stats.MEs++
	return me, nil
}

// MEUnlink removes an ME (LNetMEUnlink); its MD, if any, is unlinked too,
// with an UNLINK event if it had no operation in flight.
func (in *Instance) MEUnlink(me *ME) error {
	if me == nil || me.in != in {
		return ErrInvalid
	}
	in.mu.Lock()
	if me.list == nil {
		in.mu.Unlock()
		return ErrNoEnt
	}
	var d delivery
	if md := me.md; md != nil && md.refs == 0 {
		in.unlinkEventLocked(md, &d, nil)
	}
	in.unlinkMELocked(me)
	in.mu.Unlock()
	d.run()
	return nil
}

// unlinkMELocked is lnet_me_unlink.
func (in *Instance) unlinkMELocked(me *ME) {
	l := me.list
	if l == nil {
		return
	}
	l.remove(me)
	in.stats.MEs--
	p := &in.portals[me.portal]
	if p.kind == portalUnique && l.head == nil {
		delete(p.unique, me.matchBits)
	}
	if md := me.md; md != nil {
		me.md = nil
		md.me = nil
		in.unlinkMDLocked(md)
	}
}

// matchInfo is one incoming request to match (struct lnet_match_info).
type matchInfo struct {
	op        MDOptions // MDOpPut or MDOpGet
	initiator lnetwire.ProcessID
	portal    int
	matchBits uint64
	roffset   int
	rlength   int
	// outputs
	offset  int
	mlength int
}

type matchResult uint8

const (
	matchNone matchResult = iota
	matchOK
	matchDrop
)

// tryMatchMD is lnet_try_match_md: check md (on me) against the request and
// commit to it on a match. autoUnlinked reports an MD exhausted by this
// match and unlinked at once so no later request sees it.
func (in *Instance) tryMatchMD(me *ME, md *libMD, mi *matchInfo) matchResult {
	if md.exhausted() || md.zombie {
		return matchNone
	}
	if md.options&mi.op == 0 {
		return matchNone
	}
	if (me.matchBits^mi.matchBits)&^me.ignoreBits != 0 {
		return matchNone
	}
	if me.match.PID != lnetwire.PIDAny && me.match.PID != mi.initiator.PID {
		return matchNone
	}
	if me.match.NID != lnetwire.NIDAny && me.match.NID != mi.initiator.NID && !in.samePeerLocked(me.match.NID, mi.initiator.NID) {
		return matchNone
	}
	offset := md.offset
	if md.options&MDManageRemote != 0 {
		offset = mi.roffset
	}
	var mlength int
	if md.options&MDMaxSize != 0 {
		mlength = md.maxSize
	} else {
		mlength = md.length - offset
	}
	if offset > md.length {
		mlength = 0 // a remote offset past the end leaves no room
	} else {
		mlength = min(mlength, md.length-offset)
	}
	mlength = max(mlength, 0)
	if mi.rlength <= mlength {
		mlength = mi.rlength
	} else if md.options&MDTruncate == 0 {
		return matchDrop // too big and truncation not allowed
	}
	mi.offset = offset
	mi.mlength = mlength
	attachMD(md)
	md.offset = offset + mlength
	if md.exhausted() && md.auto {
		// Unlink now so the ME goes too; the MD itself lives until the
		// message using it completes.
		in.unlinkMDLocked(md)
	}
	return matchOK
}

// samePeerLocked reports whether two different NIDs belong to one peer,
// lnet_try_match_md's fallback for an ME posted for another NID of the
// initiator: the initiator is the sender's primary NID (parse), while an
// upper layer may have posted its ME for the NID it addressed, as
// lnet_selftest does for a console group's NID, a Multi-Rail peer's
// secondary. (The kernel reaches this fallback only on wildcard portals:
// its unique portals hash MEs by the ME's NID and look the bucket up by
// the initiator's, so there an ME for a secondary NID is not found and
// the PUT is dropped, the GET answered with ENODATA. softib keeps a
// unique portal's MEs by match bits, so it accepts the same peer there
// too.)
func (in *Instance) samePeerLocked(a, b lnetwire.NID) bool {
	lp := in.lpeerLocked(a)
	return lp != nil && lp == in.lpeerLocked(b)
}

// attachMD is the threshold/refcount part of lnet_msg_attach_md.
func attachMD(md *libMD) {
	if md.threshold != ThreshInf {
		md.threshold--
	}
	md.refs++
}

// matchLocked is lnet_ptl_match_md: walk the portal's match list in order.
func (in *Instance) matchLocked(mi *matchInfo) (matchResult, *libMD) {
	p := &in.portals[mi.portal]
	l := p.listFor(mi.matchBits, false)
	if l == nil {
		return matchNone, nil
	}
	for me := l.head; me != nil; {
		next := me.next // me may be unlinked by an auto-unlink match
		if md := me.md; md != nil {
			switch in.tryMatchMD(me, md, mi) {
			case matchOK:
				return matchOK, md
			case matchDrop:
				return matchDrop, nil
			}
		}
		me = next
	}
	return matchNone, nil
}
