package cm

import (
	"bytes"
	"time"

	"softib/wire/mad"
)

// HandleMAD processes one received CM MAD from the given address. The
// port owner calls it for every CM-class MAD (management class 0x07);
// malformed or unexpected MADs are counted and dropped. b is not
// retained.
func (c *CM) HandleMAD(b []byte, from Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	h, m, err := c.scratch.Decode(b)
	if err != nil {
		c.st.Malformed.Inc()
		return
	}
	if h.Method() != mad.MethodSend {
		// The CM agent registers for Send only (cm.c); anything else is
		// the MAD layer's business.
		c.st.Malformed.Inc()
		return
	}
	attr := h.AttrID()
	if attr <= mad.AttrAPR {
		c.st.Received[attr].Inc()
	}
	tid := h.TID()
	switch m := m.(type) {
	case *mad.REQ:
		c.recvREQ(tid, m, from)
	case *mad.REP:
		c.recvREP(m, from)
	case *mad.RTU:
		c.recvRTU(m, from)
	case *mad.REJ:
		c.recvREJ(m, from)
	case *mad.MRA:
		c.recvMRA(m, from)
	case *mad.DREQ:
		c.recvDREQ(tid, m, from)
	case *mad.DREP:
		c.recvDREP(m, from)
	case *mad.LAP:
		c.recvLAP(tid, m, from)
	case *mad.APR:
		c.recvAPR(m, from)
	case *mad.SIDRREQ:
		c.recvSIDRREQ(tid, m, from)
	case *mad.SIDRREP:
		c.recvSIDRREP(m, from)
	default:
		c.st.Unmatched.Inc()
	}
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// lookup finds the live ID a message addresses by its RemoteCommID.
func (c *CM) lookup(localID uint32) *ID {
	id := c.ids[localID]
	if id == nil || id.destroyed {
		c.st.Unmatched.Inc()
		return nil
	}
	return id
}

// swapPath turns the peer's view of a path into ours.
func swapPath(p mad.Path) mad.Path {
	p.LocalLID, p.RemoteLID = p.RemoteLID, p.LocalLID
	p.LocalGID, p.RemoteGID = p.RemoteGID, p.LocalGID
	return p
}

func (c *CM) recvREQ(tid uint64, req *mad.REQ, from Addr) {
	rk := remoteKey{req.LocalCommID, req.LocalCAGUID, from.GID()}
	if lid, ok := c.remoteIDs[rk]; ok {
		c.dupREQ(lid, req, from)
		return
	}
	listener := c.matchListener(req.ServiceID)
	if listener == nil {
		c.send(tid, &mad.REJ{RemoteCommID: req.LocalCommID, MessageRejected: mad.MsgREQ,
			Reason: mad.RejInvalidServiceID}, from)
		return
	}
	qk := qpnKey{from.GID(), req.LocalQPN}
	if old, ok := c.remoteQPNs[qk]; ok {
		// The peer reuses a QPN we still consider connected or in
		// timewait: refuse the new connection (cm_insert_remote_qpn)
		// and take the old one down, so the peer's retry finds the QPN
		// free once that connection's timewait is over.
		c.st.StaleConns.Inc()
		c.send(tid, &mad.REJ{RemoteCommID: req.LocalCommID, MessageRejected: mad.MsgREQ,
			Reason: mad.RejStaleConn}, from)
		c.disconnectStaleLocked(old)
		return
	}
	id := c.newIDLocked(listener.handler, listener.ctx)
	c.setState(id, StateREQRcvd)
	id.tid = tid
	id.remote = from
	id.remoteID = req.LocalCommID
	id.remoteGUID = req.LocalCAGUID
	id.serviceID = req.ServiceID
	id.qpType = req.TransportType
	id.remoteQPN = req.LocalQPN
	id.sqPSN = req.StartingPSN // we send from the PSN the requester expects
	id.respRes, id.initDepth = req.InitiatorDepth, req.ResponderResources
	id.retryCount, id.rnrRetryCount = req.RetryCount, req.RNRRetryCount
	id.pathMTU = req.PathMTU
	id.primary = swapPath(req.Primary)
	id.alt = mad.Path{}
	if req.Alternate.RemoteGID != (mad.GID{}) {
		id.alt = swapPath(req.Alternate)
	}
	id.ackTimeout = req.Primary.LocalAckTimeout
	id.maxCMRetries = int(req.MaxCMRetries)
	// Our replies wait for the requester's processing time
	// (cm_req_handler: timeout_ms from LocalCMResponseTimeout).
	id.timeout = RetransmitInterval(max(req.Primary.LocalAckTimeout, 1)-1, req.LocalCMResponseTimeout)
	id.pkeyIndex = from.PKeyIndex
	c.remoteIDs[rk] = id.localID
	c.remoteQPNs[qk] = id.localID
	ev := &Event{Type: EventREQReceived, Listener: listener, From: from}
	r := *req
	r.PrivateData = clone(req.PrivateData)
	ev.REQ, ev.PrivateData = &r, r.PrivateData
	c.queue(id, ev)
}

// disconnectStaleLocked takes down the connection holding local comm ID
// lid after the peer showed it is stale (it reused the connection's
// remote QPN or comm ID in a new REQ or REP): a connected ID sends a
// DREQ, which the restarted peer answers with a DREP for an unknown
// connection (or which times out), so the ID's owner hears
// DREP_RECEIVED or DREQ_ERROR and tears the connection down. IDs in
// other states are left alone: they are already on their way down or
// will time out.
func (c *CM) disconnectStaleLocked(lid uint32) {
	id := c.ids[lid]
	if id == nil || id.destroyed || !id.state.isConnected() {
		return
	}
	c.cancel(id)
	c.setState(id, StateDREQSent)
	b := c.send(c.formTID(id.localID), &mad.DREQ{LocalCommID: id.localID, RemoteCommID: id.remoteID,
		RemoteQPN: id.remoteQPN}, id.remote)
	c.arm(id, b, id.timeout, id.maxCMRetries)
}

// dupREQ answers a retransmitted REQ for a connection we already track.
func (c *CM) dupREQ(lid uint32, req *mad.REQ, from Addr) {
	c.st.Duplicates.Inc()
	id := c.ids[lid]
	if id == nil {
		if tw := c.timewait[lid]; tw != nil {
			// Destroyed connection still in timewait.
			c.send(c.formTID(lid), &mad.REJ{LocalCommID: lid, RemoteCommID: req.LocalCommID,
				MessageRejected: mad.MsgREQ, Reason: mad.RejStaleConn}, from)
		}
		return
	}
	switch id.state {
	case StateMRAREQSent:
		c.transmit(id.lastReply, id.remote)
	case StateREPSent, StateMRAREPRcvd:
		if id.out != nil {
			c.transmit(id.out, id.remote) // the REP
		}
	case StateTimewait:
		c.sendREJLocked(id, mad.MsgREQ, mad.RejStaleConn, nil, nil)
	}
}

func (c *CM) matchListener(sid uint64) *ID {
	for _, l := range c.listeners {
		if sid&l.serviceMask == l.serviceID {
			return l
		}
	}
	return nil
}

func (c *CM) recvREP(rep *mad.REP, from Addr) {
	id := c.lookup(rep.RemoteCommID)
	if id == nil {
		return
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
	case StateEstablished:
		// Our RTU was lost: send it again (cm_dup_rep_handler).
		c.st.Duplicates.Inc()
		if id.remoteID == rep.LocalCommID && id.lastReply != nil {
			c.transmit(id.lastReply, id.remote)
		}
		return
	case StateMRAREPSent:
		c.st.Duplicates.Inc()
		if id.remoteID == rep.LocalCommID && id.lastReply != nil {
			c.transmit(id.lastReply, id.remote)
		}
		return
	default:
		c.st.Duplicates.Inc()
		return
	}
	rk := remoteKey{rep.LocalCommID, rep.LocalCAGUID, id.remote.GID()}
	qk := qpnKey{id.remote.GID(), rep.LocalQPN}
	oldByID, dupID := c.remoteIDs[rk]
	oldByQPN, dupQPN := c.remoteQPNs[qk]
	if dupID || dupQPN {
		// The responder answers with a comm ID or QPN one of our
		// connections still holds: that connection is stale (the peer
		// restarted). Refuse this REP, fail the attempt and take the
		// old connection down (cm_rep_handler).
		c.st.StaleConns.Inc()
		c.send(id.tid, &mad.REJ{LocalCommID: id.localID, RemoteCommID: rep.LocalCommID,
			MessageRejected: mad.MsgREP, Reason: mad.RejStaleConn}, id.remote)
		c.cancel(id)
		c.setState(id, StateIdle)
		c.queue(id, &Event{Type: EventREQError, From: from, Err: &RejectError{Reason: mad.RejStaleConn}})
		if dupID {
			c.disconnectStaleLocked(oldByID)
		}
		if dupQPN && (!dupID || oldByQPN != oldByID) {
			c.disconnectStaleLocked(oldByQPN)
		}
		return
	}
	c.cancel(id)
	id.remoteID = rep.LocalCommID
	id.remoteGUID = rep.LocalCAGUID
	id.remoteQPN = rep.LocalQPN
	id.sqPSN = rep.StartingPSN
	id.initDepth, id.respRes = rep.ResponderResources, rep.InitiatorDepth
	id.rnrRetryCount = rep.RNRRetryCount
	id.targetAckDelay = rep.TargetAckDelay
	id.srq = rep.SRQ
	if rep.TargetAckDelay != 0 {
		id.ackTimeout = mad.AckTimeout(rep.TargetAckDelay, max(id.primary.LocalAckTimeout, 1)-1)
	}
	c.remoteIDs[rk] = id.localID
	c.remoteQPNs[qk] = id.localID
	c.setState(id, StateREPRcvd)
	r := *rep
	r.PrivateData = clone(rep.PrivateData)
	c.queue(id, &Event{Type: EventREPReceived, From: from, REP: &r, PrivateData: r.PrivateData})
}

func (c *CM) recvRTU(rtu *mad.RTU, from Addr) {
	id := c.lookup(rtu.RemoteCommID)
	if id == nil {
		return
	}
	if id.remoteID != rtu.LocalCommID || (id.state != StateREPSent && id.state != StateMRAREPRcvd) {
		c.st.Dropped.Inc()
		return
	}
	c.cancel(id)
	c.setState(id, StateEstablished)
	r := *rtu
	r.PrivateData = clone(rtu.PrivateData)
	c.queue(id, &Event{Type: EventRTUReceived, From: from, RTU: &r, PrivateData: r.PrivateData})
}

func (c *CM) recvREJ(rej *mad.REJ, from Addr) {
	id := c.lookup(rej.RemoteCommID)
	if id == nil {
		return
	}
	if id.remoteID != 0 && rej.LocalCommID != 0 && id.remoteID != rej.LocalCommID {
		c.st.Dropped.Inc()
		return
	}
	stale := rej.Reason == mad.RejStaleConn
	switch id.state {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent:
		c.cancel(id)
		if stale {
			c.enterTimewait(id)
		} else {
			c.setState(id, StateIdle)
			c.releaseLocked(id)
		}
	case StateDREQSent, StateREPRcvd, StateMRAREPSent, StateEstablished,
		StateLAPSent, StateLAPRcvd, StateMRALAPSent, StateMRALAPRcvd:
		c.enterTimewait(id)
	default:
		c.st.Dropped.Inc()
		return
	}
	r := *rej
	r.ARI, r.PrivateData = clone(rej.ARI), clone(rej.PrivateData)
	c.queue(id, &Event{Type: EventREJReceived, From: from, REJ: &r, PrivateData: r.PrivateData,
		Err: &RejectError{Reason: r.Reason, ARI: r.ARI, PrivateData: r.PrivateData}})
}

func (c *CM) recvMRA(mra *mad.MRA, from Addr) {
	id := c.lookup(mra.RemoteCommID)
	if id == nil {
		return
	}
	var next State
	switch {
	case mra.MessageMRAed == mad.MsgREQ && (id.state == StateREQSent || id.state == StateMRAREQRcvd):
		next = StateMRAREQRcvd
	case mra.MessageMRAed == mad.MsgREP && (id.state == StateREPSent || id.state == StateMRAREPRcvd):
		next = StateMRAREPRcvd
	case mra.MessageMRAed == mad.MsgOther && (id.state == StateLAPSent || id.state == StateMRALAPRcvd):
		next = StateMRALAPRcvd
	default:
		c.st.Dropped.Inc()
		return
	}
	if id.remoteID == 0 {
		id.remoteID = mra.LocalCommID
	}
	// The peer needs serviceTimeout more: push the deadline out without
	// spending a retry (cm_mra_handler).
	if id.out != nil {
		id.deadline = time.Now().Add(convertToDuration(mra.ServiceTimeout) + convertToDuration(id.ackTimeout))
		c.kick()
	}
	if id.state == next {
		c.st.Duplicates.Inc()
		return
	}
	c.setState(id, next)
	r := *mra
	r.PrivateData = clone(mra.PrivateData)
	c.queue(id, &Event{Type: EventMRAReceived, From: from, MRA: &r, PrivateData: r.PrivateData})
}

func (c *CM) recvDREQ(tid uint64, dreq *mad.DREQ, from Addr) {
	id := c.ids[dreq.RemoteCommID]
	if id == nil || id.destroyed || id.remoteID != dreq.LocalCommID {
		if tw := c.timewait[dreq.RemoteCommID]; tw != nil && tw.remote.commID == dreq.LocalCommID {
			// Destroyed connection in timewait: our DREP was lost.
			c.st.Duplicates.Inc()
		} else {
			c.st.Unmatched.Inc()
		}
		// cm_issue_drep: answer DREQs for unknown connections so the
		// peer can finish its disconnect.
		c.send(tid, &mad.DREP{LocalCommID: dreq.RemoteCommID, RemoteCommID: dreq.LocalCommID}, from)
		return
	}
	if dreq.RemoteQPN != id.localQPN {
		c.st.Dropped.Inc()
		return
	}
	switch id.state {
	case StateREPSent, StateMRAREPRcvd, StateDREQSent,
		StateEstablished, StateLAPSent, StateLAPRcvd, StateMRALAPSent, StateMRALAPRcvd:
		c.cancel(id)
		id.tid = tid
		c.setState(id, StateDREQRcvd)
		r := *dreq
		r.PrivateData = clone(dreq.PrivateData)
		c.queue(id, &Event{Type: EventDREQReceived, From: from, DREQ: &r, PrivateData: r.PrivateData})
	case StateTimewait, StateIdle:
		// Our DREP was lost (or timewait is already over): answer again.
		c.st.Duplicates.Inc()
		if id.lastReply != nil && mad.Header(id.lastReply).AttrID() == mad.AttrDREP {
			c.transmit(id.lastReply, id.remote)
		} else {
			c.send(tid, &mad.DREP{LocalCommID: id.localID, RemoteCommID: id.remoteID}, id.remote)
		}
	default:
		c.st.Dropped.Inc()
	}
}

func (c *CM) recvDREP(drep *mad.DREP, from Addr) {
	id := c.lookup(drep.RemoteCommID)
	if id == nil {
		return
	}
	if id.remoteID != drep.LocalCommID || (id.state != StateDREQSent && id.state != StateDREQRcvd) {
		c.st.Dropped.Inc()
		return
	}
	c.enterTimewait(id)
	r := *drep
	r.PrivateData = clone(drep.PrivateData)
	c.queue(id, &Event{Type: EventDREPReceived, From: from, DREP: &r, PrivateData: r.PrivateData})
}

func (c *CM) recvLAP(tid uint64, lap *mad.LAP, from Addr) {
	id := c.lookup(lap.RemoteCommID)
	if id == nil {
		return
	}
	if id.remoteID != lap.LocalCommID {
		c.st.Dropped.Inc()
		return
	}
	switch id.state {
	case StateEstablished:
	case StateMRALAPSent:
		c.st.Duplicates.Inc()
		c.transmit(id.lastReply, id.remote)
		return
	default:
		c.st.Dropped.Inc()
		return
	}
	id.tid = tid
	id.pendingAlt = swapPath(lap.Alternate)
	c.setState(id, StateLAPRcvd)
	r := *lap
	r.PrivateData = clone(lap.PrivateData)
	c.queue(id, &Event{Type: EventLAPReceived, From: from, LAP: &r, PrivateData: r.PrivateData})
}

func (c *CM) recvAPR(apr *mad.APR, from Addr) {
	id := c.lookup(apr.RemoteCommID)
	if id == nil {
		return
	}
	if id.remoteID != apr.LocalCommID || (id.state != StateLAPSent && id.state != StateMRALAPRcvd) {
		c.st.Dropped.Inc()
		return
	}
	c.cancel(id)
	if apr.Status == mad.APRSuccess {
		id.alt = id.pendingAlt
	}
	c.setState(id, StateEstablished)
	r := *apr
	r.Info, r.PrivateData = clone(apr.Info), clone(apr.PrivateData)
	c.queue(id, &Event{Type: EventAPRReceived, From: from, APR: &r, PrivateData: r.PrivateData})
}

func (c *CM) recvSIDRREQ(tid uint64, req *mad.SIDRREQ, from Addr) {
	sk := sidrKey{req.RequestID, from.GID()}
	if _, ok := c.sidrSeen[sk]; ok {
		c.st.Duplicates.Inc()
		return
	}
	listener := c.matchListener(req.ServiceID)
	if listener == nil {
		c.send(tid, &mad.SIDRREP{RequestID: req.RequestID, Status: mad.SIDRUnsupported,
			ServiceID: req.ServiceID}, from)
		return
	}
	id := c.newIDLocked(listener.handler, listener.ctx)
	c.setState(id, StateSIDRREQRcvd)
	id.tid = tid
	id.remote = from
	id.remoteID = req.RequestID
	id.serviceID = req.ServiceID
	id.sidr = sk
	c.sidrSeen[sk] = id.localID
	r := *req
	r.PrivateData = clone(req.PrivateData)
	c.queue(id, &Event{Type: EventSIDRREQReceived, Listener: listener, From: from, SIDRREQ: &r,
		PrivateData: r.PrivateData})
}

func (c *CM) recvSIDRREP(rep *mad.SIDRREP, from Addr) {
	id := c.lookup(rep.RequestID)
	if id == nil {
		return
	}
	if id.state != StateSIDRREQSent {
		c.st.Duplicates.Inc()
		return
	}
	c.cancel(id)
	c.setState(id, StateIdle)
	r := *rep
	r.Info, r.PrivateData = clone(rep.Info), clone(rep.PrivateData)
	c.queue(id, &Event{Type: EventSIDRREPReceived, From: from, SIDRREP: &r, PrivateData: r.PrivateData})
}
