package lnet

import (
	"time"

	"softib/wire/lnetwire"
)

// Response tracking (LNet health's response_tracking, Lustre 2.12+): a
// PUT that asked for an ACK, or a GET, arms a deadline of
// Globals.TransactionTimeout on its MD. If the ACK or REPLY has not
// arrived by then, the MD is unlinked: an idle MD gets an UNLINK event
// whose Status is ErrTimeout (Lustre reports status 0 there; softib makes
// the failure explicit), a busy one flags its last event Unlinked. Like
// Lustre, an MD tracks one response at a time: a newer operation on the
// same MD re-arms it.
//
// A response that does not come also counts against the peer NI the
// request was sent to (the next hop: a router for a routed request), as
// lnet_finalize_expired_responses does: response_timeout_count goes up
// and that peer NI's health drops by health_sensitivity
// (lnet_handle_remote_failure_locked: no health-status counter, no
// resend), which puts it on the recovery queue.

// Response-tracking modes (Globals.ResponseTracking, lnet's
// response_tracking module parameter).
const (
	TrackNone = 0 // no tracking
	TrackGet  = 1 // GETs awaiting a REPLY
	TrackPut  = 2 // PUTs awaiting an ACK
	TrackBoth = 3 // both (the default)
)

// rspList is the intrusive list of tracked MDs in deadline order (the
// timeout is the same for all, so appending keeps the order), plus the
// instance's single timer.
type rspList struct {
	head, tail *libMD
	timer      *time.Timer
}

func (l *rspList) remove(md *libMD) {
	if md.rspDeadline == 0 {
		return
	}
	if md.rspPrev != nil {
		md.rspPrev.rspNext = md.rspNext
	} else {
		l.head = md.rspNext
	}
	if md.rspNext != nil {
		md.rspNext.rspPrev = md.rspPrev
	} else {
		l.tail = md.rspPrev
	}
	md.rspPrev, md.rspNext, md.rspDeadline, md.rspNextHop = nil, nil, 0, 0
}

func (l *rspList) append(md *libMD, deadline int64) {
	md.rspDeadline = deadline
	md.rspPrev = l.tail
	if l.tail != nil {
		l.tail.rspNext = md
	} else {
		l.head = md
	}
	l.tail = md
}

// trackLocked arms the response deadline of md for an operation of kind
// (TrackGet or TrackPut) if the globals say so.
func (in *Instance) trackLocked(md *libMD, kind int) {
	mode, timeout := in.globals.ResponseTracking, in.globals.TransactionTimeout
	if mode&kind == 0 || timeout <= 0 || in.closed {
		return
	}
	in.rsp.remove(md)
	wasEmpty := in.rsp.head == nil
	in.rsp.append(md, int64(time.Since(in.start)+timeout))
	if wasEmpty {
		if in.rsp.timer == nil {
			in.rsp.timer = time.AfterFunc(timeout, in.expireResponses)
		} else {
			in.rsp.timer.Reset(timeout)
		}
	}
}

// responseArrivedLocked disarms md's deadline (an ACK or REPLY matched it).
func (in *Instance) responseArrivedLocked(md *libMD) { in.rsp.remove(md) }

// expireResponses unlinks the MDs whose response is overdue, then re-arms
// the timer for the next deadline. Runs on the timer's goroutine.
func (in *Instance) expireResponses() {
	for {
		var d delivery
		in.mu.Lock()
		md := in.rsp.head
		now := int64(time.Since(in.start))
		if md == nil || in.closed {
			in.mu.Unlock()
			return
		}
		if md.rspDeadline > now {
			in.rsp.timer.Reset(time.Duration(md.rspDeadline - now))
			in.mu.Unlock()
			return
		}
		nextHop := md.rspNextHop
		in.rsp.remove(md)
		in.stats.ResponseTimeouts++
		in.responseTimeoutHealthLocked(nextHop)
		if md.refs == 0 {
			in.unlinkEventLocked(md, &d, ErrTimeout)
		}
		in.unlinkMDLocked(md)
		in.mu.Unlock()
		d.run()
	}
}

// trackNextHopLocked records the peer NI a tracked request goes to
// (lnet_handle_send's rspt_next_hop_nid), on every send and resend.
func trackNextHopLocked(m *message) {
	if md := m.md; md != nil && md.rspDeadline != 0 && !m.rx && !isResponse(m) && m.peer != nil {
		md.rspNextHop = m.peer.nid
	}
}

// responseTimeoutHealthLocked lowers the health of the peer NI a request
// whose response did not come went to. A request never sent (failed
// before selection, e.g. by discovery) or sent to ourselves has none.
func (in *Instance) responseTimeoutHealthLocked(nid lnetwire.NID) {
	if nid == 0 || nid == lnetwire.NIDLo0 || in.byNID[nid] != nil {
		return
	}
	if p := in.peers[nid]; p != nil {
		in.peerDecHealthLocked(p)
	}
}
