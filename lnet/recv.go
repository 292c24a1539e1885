package lnet

import (
	"fmt"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// host is the Instance as seen by drivers (lnd.Host). A separate type
// keeps Parse and Finalize out of the Instance's public API.
type host Instance

func (h *host) in() *Instance { return (*Instance)(h) }

// Parse implements lnd.Host (lnet_parse).
func (h *host) Parse(lni *lnd.NI, hdr *lnetwire.Header, from lnetwire.NID, private any, rdmaReq bool) error {
	return h.in().parse(lni, hdr, from, private, rdmaReq)
}

// Finalize implements lnd.Host (lnet_finalize).
func (h *host) Finalize(_ *lnd.NI, lm *lnd.Msg, status error) {
	if m := msgOf(lm); m != nil {
		h.in().finalize(m, status)
	}
}

// CreateReplyMsg implements lnd.Host (lnet_create_reply_msg).
func (h *host) CreateReplyMsg(lni *lnd.NI, get *lnd.Msg) (*lnd.Msg, error) {
	return h.in().createReplyMsg(lni, get)
}

// SetReplyMsgLen implements lnd.Host (lnet_set_reply_msg_len).
func (h *host) SetReplyMsgLen(_ *lnd.NI, reply *lnd.Msg, n int) {
	in := h.in()
	m := msgOf(reply)
	if m == nil {
		return
	}
	in.mu.Lock()
	n = max(0, min(n, m.mlen))
	m.mlen = n
	m.ev.MLength = n
	m.ev.RLength = n
	in.mu.Unlock()
}

// NotifyPeer implements lnd.Host (lnet_notify).
func (h *host) NotifyPeer(lni *lnd.NI, nid lnetwire.NID, alive bool, when time.Time) {
	in := h.in()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.niOf[lni] != nil {
		in.notifyGatewayLocked(nid, alive)
	}
	p := in.peers[nid]
	if p == nil {
		return
	}
	in.setPeerAliveLocked(p, alive, when)
}

// parse is lnet_parse: validate the header, match it and start delivery.
func (in *Instance) parse(lni *lnd.NI, hdr *lnetwire.Header, from lnetwire.NID, private any, rdmaReq bool) error {
	switch hdr.Type {
	case lnetwire.MsgPUT, lnetwire.MsgREPLY:
		if hdr.PayloadLength > MTU {
			return fmt.Errorf("%w: %v payload %d > MTU", lnd.ErrProto, hdr.Type, hdr.PayloadLength)
		}
	case lnetwire.MsgGET:
		if hdr.PayloadLength != 0 || hdr.SinkLength > MTU {
			return fmt.Errorf("%w: GET payload %d sink %d", lnd.ErrProto, hdr.PayloadLength, hdr.SinkLength)
		}
	case lnetwire.MsgACK:
		if hdr.PayloadLength != 0 {
			return fmt.Errorf("%w: ACK with payload %d", lnd.ErrProto, hdr.PayloadLength)
		}
	default:
		return fmt.Errorf("%w: unexpected %v", lnd.ErrProto, hdr.Type)
	}
	rlen := int(hdr.PayloadLength)

	in.mu.Lock()
	ni := in.niOf[lni]
	if ni == nil || ni.down || !ni.ready {
		in.mu.Unlock()
		return lnd.ErrShutdown
	}
	in.pingedLocked(ni, hdr)
	if in.faultDropRxLocked(hdr, ni) { // fault.go: simulated message loss
		in.stats.DropCount++
		in.stats.DropLength += uint64(rlen)
		ni.dropCount++
		ni.calls.Add(1)
		in.mu.Unlock()
		in.dropRx(ni, private, rlen)
		return nil
	}
	dst := hdr.DestNID
	if in.byNID[dst] == nil && !(ni.lo && dst == lnetwire.NIDLo0) {
		// Not for us: the rules of lnet_parse for messages to forward.
		switch {
		case dst.Net() == ni.net():
			in.mu.Unlock()
			return fmt.Errorf("%w: message for %v is not local (should have been sent direct)", lnd.ErrProto, dst)
		case rdmaReq && hdr.Type == lnetwire.MsgGET:
			in.mu.Unlock()
			return fmt.Errorf("%w: optimized GET for %v (final destination must be me)", lnd.ErrProto, dst)
		case !in.router.on || ni.lo:
			// Routing not enabled (lnet-wire.md §8.3).
			in.stats.DropCount++
			in.stats.DropLength += uint64(rlen)
			ni.dropCount++
			ni.calls.Add(1)
			in.mu.Unlock()
			in.dropRx(ni, private, rlen)
			return nil
		}
		in.setPeerAliveLocked(in.peerLocked(from, ni), true, time.Now())
		if hdr.SrcNID.Net() != from.Net() {
			in.forwardedFromLocked(from, hdr.SrcNID.Net()) // a chain: from is a router too
		}
		in.parseForwardLocked(ni, hdr, from, private, rdmaReq)
		return nil
	}
	if !ni.lo && dst.Net() != ni.net() {
		// Ours, but on another net: the sender should have used our NID
		// on its own net (lnet_parse refuses it before forwarding).
		in.mu.Unlock()
		return fmt.Errorf("%w: message for %v is my NID but on a different network", lnd.ErrProto, dst)
	}
	if !ni.lo {
		p := in.peerLocked(from, ni)
		in.setPeerAliveLocked(p, true, time.Now())
		if hdr.SrcNID.Net() != from.Net() {
			// Forwarded to us by a router: with drop_asym_route, it
			// must be one we would route src's net through; then it is
			// alive.
			if in.globals.DropAsymRoute && in.asymRouteLocked(hdr.SrcNID, from) {
				in.stats.DropCount++
				in.stats.DropLength += uint64(rlen)
				ni.dropCount++
				ni.calls.Add(1)
				in.mu.Unlock()
				in.log.Warn("lnet: dropping asymmetrical route", "from", from, "src", hdr.SrcNID, "type", hdr.Type)
				in.dropRx(ni, private, rlen)
				return nil
			}
			in.forwardedFromLocked(from, hdr.SrcNID.Net())
		}
	}

	m := in.allocMsgLocked()
	m.rx = true
	m.ni = ni
	m.from = from
	m.private = private
	m.rdmaReq = rdmaReq
	m.Hdr = *hdr
	m.Type = hdr.Type
	m.Msg.Target = lnetwire.ProcessID{NID: hdr.DestNID, PID: hdr.DestPID}
	m.ev = Event{
		Target:    lnetwire.ProcessID{NID: hdr.DestNID, PID: hdr.DestPID},
		Initiator: lnetwire.ProcessID{NID: in.initiatorNIDLocked(hdr.SrcNID), PID: hdr.SrcPID}, // MR: primary NID
		Source:    hdr.SrcNID,
		Sender:    from,
		MatchBits: hdr.MatchBits,
		RLength:   rlen,
	}
	m.hasEvent = true
	if in.faultDelayRxLocked(m) { // fault.go: held (and unlocked), then parseLocalLocked
		return nil
	}
	return in.parseLocalLocked(m)
}

// parseLocalLocked is lnet_parse_local: deliver a received message
// addressed to us by type; it unlocks.
func (in *Instance) parseLocalLocked(m *message) error {
	switch m.Hdr.Type {
	case lnetwire.MsgPUT:
		return in.parsePutLocked(m, m.faultHeld) // a held message had its EagerRecv
	case lnetwire.MsgGET:
		return in.parseGetLocked(m)
	case lnetwire.MsgREPLY:
		return in.parseReplyLocked(m)
	default:
		return in.parseAckLocked(m)
	}
}

// dropRx tells the driver to discard a message's payload (Recv with nil);
// the caller did ni.calls.Add(1).
func (in *Instance) dropRx(ni *netIface, private any, rlen int) {
	_ = ni.drv.Recv(private, nil, false, lnd.IOV{}, rlen)
	ni.calls.Done()
}

// dropMsgLocked drops a received message (lnet_drop_message) and unlocks.
func (in *Instance) dropMsgLocked(m *message) error {
	ni, private, rlen := m.ni, m.private, int(m.Hdr.PayloadLength)
	in.stats.DropCount++
	in.stats.DropLength += uint64(rlen)
	ni.dropCount++
	in.freeMsgLocked(m) // never attached to an MD: drops happen before commitment
	ni.calls.Add(1)
	in.mu.Unlock()
	in.dropRx(ni, private, rlen)
	return nil
}

// recvLocked hands m to the driver's Recv with dst (lnet_ni_recv) and
// unlocks. A Recv error finalizes m.
func (in *Instance) recvLocked(m *message, delayed bool, dst lnd.IOV) {
	ni := m.ni
	ni.calls.Add(1)
	in.mu.Unlock()
	in.recvNow(m, ni, delayed || m.faultHeld, dst) // fault.go held it: a delayed receive
}

func (in *Instance) recvNow(m *message, ni *netIface, delayed bool, dst lnd.IOV) {
	err := ni.drv.Recv(m.private, &m.Msg, delayed, dst, int(m.Hdr.PayloadLength))
	ni.calls.Done()
	if err != nil {
		in.finalize(m, err)
	}
}

// parsePutLocked is lnet_parse_put.
func (in *Instance) parsePutLocked(m *message, eagerDone bool) error {
	h := &m.Hdr
	if h.Portal >= MaxPortals {
		return in.dropMsgLocked(m)
	}
	mi := matchInfo{op: MDOpPut, initiator: m.ev.Initiator, portal: int(h.Portal),
		matchBits: h.MatchBits, roffset: int(h.Offset), rlength: int(h.PayloadLength)}
	for {
		r, md := in.matchLocked(&mi)
		switch r {
		case matchOK:
			in.commitPutLocked(m, md, &mi)
			in.recvLocked(m, false, md.iov(mi.offset, mi.mlength))
			return nil
		case matchDrop:
			return in.dropMsgLocked(m)
		}
		p := &in.portals[mi.portal]
		if !p.lazy {
			return in.dropMsgLocked(m)
		}
		er, ok := m.ni.drv.(lnd.EagerReceiver)
		if !ok || eagerDone {
			p.delayed.push(m)
			in.stats.Delayed++
			in.mu.Unlock()
			return nil
		}
		// Let the driver free its receive buffer, then try again: an ME
		// may have been attached meanwhile (lnet_ni_eager_recv).
		eagerDone = true
		ni := m.ni
		ni.calls.Add(1)
		in.mu.Unlock()
		np, err := er.EagerRecv(m.private, &m.Msg)
		ni.calls.Done()
		in.mu.Lock()
		if err != nil {
			return in.dropMsgLocked(m)
		}
		m.private = np
		if ni.down {
			return in.dropMsgLocked(m)
		}
	}
}

// commitPutLocked fills a matched PUT's event and ACK decision.
func (in *Instance) commitPutLocked(m *message, md *libMD, mi *matchInfo) {
	h := &m.Hdr
	m.md = md
	m.mlen = mi.mlength
	m.ev.Type = EventPut
	m.ev.Portal = mi.portal
	m.ev.MLength = mi.mlength
	m.ev.Offset = mi.offset
	m.ev.HdrData = h.HdrData
	m.ev.MDHandle = md.handle()
	m.ev.MD = md.user
	m.ackWanted = !h.WMD.IsNone() && md.options&MDAckDisable == 0
}

// retryDelayedLocked is the lazy-portal part of lnet_ptl_attach_md: match
// waiting PUTs against the newly attached md, in arrival order. Matched and
// dropped messages are returned (chained) for deliverDelayed.
func (p *portal) retryDelayedLocked(in *Instance, md *libMD) *message {
	if p.delayed.head == nil || md.me == nil {
		return nil
	}
	me := md.me
	var out msgQueue
	var keep msgQueue
	for m := p.delayed.pop(); m != nil; m = p.delayed.pop() {
		if md.zombie || md.me != me || m.ni.down {
			keep.push(m)
			continue
		}
		h := &m.Hdr
		mi := matchInfo{op: MDOpPut, initiator: m.ev.Initiator, portal: p.index,
			matchBits: h.MatchBits, roffset: int(h.Offset), rlength: int(h.PayloadLength)}
		switch in.tryMatchMD(me, md, &mi) {
		case matchOK:
			in.commitPutLocked(m, md, &mi)
			m.queued = false
			m.ni.calls.Add(1)
			out.push(m)
		case matchDrop:
			m.dropped = true
			m.ni.calls.Add(1)
			out.push(m)
		default:
			keep.push(m)
		}
	}
	p.delayed = keep
	return out.head
}

// deliverDelayed runs Recv (or the drop) for messages released from a
// lazy portal; each had ni.calls.Add(1) taken.
func (in *Instance) deliverDelayed(chain *message) {
	for m := chain; m != nil; {
		next := m.next
		m.next = nil
		ni := m.ni
		if m.md == nil {
			in.mu.Lock()
			private, rlen := m.private, int(m.Hdr.PayloadLength)
			in.stats.DropCount++
			in.stats.DropLength += uint64(rlen)
			ni.dropCount++
			in.freeMsgLocked(m)
			in.mu.Unlock()
			in.dropRx(ni, private, rlen)
		} else {
			in.recvNow(m, ni, true, m.md.iov(m.ev.Offset, m.mlen))
		}
		m = next
	}
}

// parseGetLocked is lnet_parse_get: match, then turn the message into the
// REPLY carrying the MD's data; the GET event is posted when the REPLY
// send completes.
func (in *Instance) parseGetLocked(m *message) error {
	h := &m.Hdr
	if h.Portal >= MaxPortals {
		return in.dropMsgLocked(m)
	}
	mi := matchInfo{op: MDOpGet, initiator: m.ev.Initiator, portal: int(h.Portal),
		matchBits: h.MatchBits, roffset: int(h.Offset), rlength: int(h.SinkLength)}
	r, md := in.matchLocked(&mi)
	if r != matchOK {
		return in.dropMsgLocked(m)
	}
	m.md = md
	m.mlen = mi.mlength
	m.ev.Type = EventGet
	m.ev.Portal = mi.portal
	m.ev.RLength = int(h.SinkLength)
	m.ev.MLength = mi.mlength
	m.ev.Offset = mi.offset
	m.ev.MDHandle = md.handle()
	m.ev.MD = md.user
	in.stats.RecvCount++ // the GET request itself was received
	m.ni.recvCount++

	ni, private, rdma := m.ni, m.private, m.rdmaReq
	src := lnetwire.ProcessID{NID: h.SrcNID, PID: h.SrcPID}
	*h = lnetwire.Header{
		Type:          lnetwire.MsgREPLY,
		DestNID:       src.NID,
		DestPID:       src.PID,
		SrcPID:        in.pid,
		WMD:           h.WMD,
		PayloadLength: uint32(mi.mlength),
	}
	m.Type = lnetwire.MsgREPLY
	m.Payload = md.iov(mi.offset, mi.mlength)
	m.rx = false
	m.private = nil
	if rdma {
		// The LND writes the data itself from its Recv (o2iblnd GET_REQ).
		if err := in.selectPathLocked(m, lnetwire.NIDAny); err != nil {
			in.mu.Unlock()
			_ = ni.drv.Recv(private, nil, false, lnd.IOV{}, 0)
			in.finalize(m, err)
			return nil
		}
		ni.calls.Add(1)
		in.mu.Unlock()
		err := ni.drv.Recv(private, &m.Msg, false, m.Payload, mi.mlength)
		ni.calls.Done()
		if err != nil {
			in.finalize(m, err)
		}
		return nil
	}
	r2, err := in.sendLocked(m, lnetwire.NIDAny)
	ni.calls.Add(1)
	in.mu.Unlock()
	in.dropRx(ni, private, 0) // the GET carries no payload
	in.afterSend(m, r2, err)
	return nil
}

// parseReplyLocked is lnet_parse_reply: the REPLY lands at offset 0 of the
// MD named by dst_wmd.
func (in *Instance) parseReplyLocked(m *message) error {
	md := in.lookupWireMDLocked(m.Hdr.WMD)
	if md == nil || md.threshold == 0 || md.me != nil {
		return in.dropMsgLocked(m)
	}
	rlen := int(m.Hdr.PayloadLength)
	mlen := min(rlen, md.length)
	if mlen < rlen && md.options&MDTruncate == 0 {
		return in.dropMsgLocked(m)
	}
	in.responseArrivedLocked(md)
	attachMD(md)
	m.md = md
	m.mlen = mlen
	m.ev.Type = EventReply
	m.ev.MLength = mlen
	m.ev.MDHandle = md.handle()
	m.ev.MD = md.user
	in.recvLocked(m, false, md.iov(0, mlen))
	return nil
}

// parseAckLocked is lnet_parse_ack.
func (in *Instance) parseAckLocked(m *message) error {
	md := in.lookupWireMDLocked(m.Hdr.WMD)
	if md == nil || md.threshold == 0 || md.me != nil {
		return in.dropMsgLocked(m)
	}
	in.responseArrivedLocked(md)
	attachMD(md)
	m.md = md
	m.ev.Type = EventAck
	m.ev.RLength = int(m.Hdr.MLength)
	m.ev.MLength = int(m.Hdr.MLength)
	m.ev.MDHandle = md.handle()
	m.ev.MD = md.user
	in.recvLocked(m, false, lnd.IOV{})
	return nil
}

// createReplyMsg is lnet_create_reply_msg for RDMA GETs: a REPLY receive
// bound to the GET's MD, finalized by the driver.
func (in *Instance) createReplyMsg(lni *lnd.NI, lget *lnd.Msg) (*lnd.Msg, error) {
	get := msgOf(lget)
	in.mu.Lock()
	defer in.mu.Unlock()
	ni := in.niOf[lni]
	if get == nil || ni == nil || get.md == nil || get.Type != lnetwire.MsgGET {
		return nil, ErrInvalid
	}
	md := get.md
	if md.zombie || md.threshold == 0 {
		return nil, ErrNoEnt
	}
	m := in.allocMsgLocked()
	// The LND now owns the reply: its completion (or failure) is the
	// response, so the deadline no longer applies.
	in.responseArrivedLocked(md)
	attachMD(md)
	m.md = md
	m.rx = true
	m.ni = ni
	m.from = get.Msg.Target.NID
	m.mlen = min(md.length, int(get.Hdr.SinkLength))
	m.Type = lnetwire.MsgREPLY
	m.Hdr = lnetwire.Header{Type: lnetwire.MsgREPLY, DestNID: get.Hdr.SrcNID, DestPID: get.Hdr.SrcPID,
		SrcNID: get.Hdr.DestNID, SrcPID: get.Hdr.DestPID, WMD: get.Hdr.WMD, PayloadLength: uint32(m.mlen)}
	m.ev = Event{
		Type:      EventReply,
		Target:    lnetwire.ProcessID{NID: get.Hdr.SrcNID, PID: get.Hdr.SrcPID},
		Initiator: lnetwire.ProcessID{NID: get.Hdr.DestNID, PID: get.Hdr.DestPID},
		Source:    get.Hdr.DestNID,
		Sender:    get.Msg.Target.NID,
		RLength:   m.mlen,
		MLength:   m.mlen,
		MDHandle:  md.handle(),
		MD:        md.user,
	}
	m.hasEvent = true
	return &m.Msg, nil
}
