package lnet

import (
	"softib/wire/lnetwire"
)

// Put sends the whole of a bound MD to target's portal (LNetPut). The
// data lands offset bytes into the remote MD (if it manages remote
// offsets). self picks the local NID to send from (NIDAny: best NI). With
// ack == AckReqYes the target answers with an ACK event unless its MD
// disables ACKs. The MD gets a SEND event when the message has left
// (Status nil) or failed; an MD that should also receive the ACK needs a
// threshold of 2.
//
// Put returns an error only for bad arguments; network failures (no
// route, peer down, LND errors) arrive as the SEND event's Status.
func (in *Instance) Put(self lnetwire.NID, mdh MDHandle, ack AckReq, target lnetwire.ProcessID, portal int, matchBits uint64, offset int, hdrData uint64) error {
	if portal < 0 || portal >= MaxPortals || offset < 0 || uint64(offset) > 0xFFFFFFFF || ack > AckReqNo {
		return ErrInvalid
	}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return ErrClosed
	}
	md := in.mds[mdh.Cookie]
	if md == nil || md.zombie || md.threshold == 0 || md.me != nil {
		in.mu.Unlock()
		return ErrNoEnt
	}
	if md.length > MTU {
		in.mu.Unlock()
		return ErrTooBig
	}
	m := in.allocMsgLocked()
	attachMD(md)
	m.md = md
	wmd := lnetwire.WireHandleNone
	if ack == AckReqYes {
		wmd = in.wireHandle(md)
	}
	m.Type = lnetwire.MsgPUT
	m.Hdr = lnetwire.Header{
		Type: lnetwire.MsgPUT, DestNID: target.NID, DestPID: target.PID, SrcPID: in.pid,
		PayloadLength: uint32(md.length), WMD: wmd, MatchBits: matchBits, HdrData: hdrData,
		Portal: uint32(portal), Offset: uint32(offset),
	}
	m.Payload = md.iov(0, md.length)
	m.ev = Event{
		Type: EventSend, Target: target, Initiator: lnetwire.ProcessID{NID: self, PID: in.pid}, Source: self,
		Portal: portal, MatchBits: matchBits, RLength: md.length, MLength: md.length, Offset: offset,
		MDHandle: mdh, MD: md.user, HdrData: hdrData, Sender: lnetwire.NIDAny,
	}
	m.hasEvent = true
	if ack == AckReqYes {
		in.trackLocked(md, TrackPut)
	}
	r, err := in.sendLocked(m, self)
	if err == nil && m.Hdr.SrcNID != 0 { // 0: held for discovery, set when released
		m.ev.Initiator.NID = m.Hdr.SrcNID
	}
	in.mu.Unlock()
	in.afterSend(m, r, err)
	return nil
}

// Get asks target's portal for as many bytes as the bound MD holds,
// starting at the remote offset (LNetGet). The MD gets a SEND event when
// the request has left (or failed) and a REPLY event when the data has
// arrived at offset 0; give it a threshold of 2 for both. A GET the target
// does not match produces no REPLY: after Globals.TransactionTimeout the
// MD is unlinked with an UNLINK event carrying ErrTimeout (response
// tracking), or callers time out earlier and MDUnlink.
func (in *Instance) Get(self lnetwire.NID, mdh MDHandle, target lnetwire.ProcessID, portal int, matchBits uint64, offset int) error {
	return in.get(self, mdh, target, portal, matchBits, offset, false)
}

// get is Get; recovery marks a health recovery ping (health.go), sent to
// exactly target's NID and never resent.
func (in *Instance) get(self lnetwire.NID, mdh MDHandle, target lnetwire.ProcessID, portal int, matchBits uint64, offset int, recovery bool) error {
	if portal < 0 || portal >= MaxPortals || offset < 0 || uint64(offset) > 0xFFFFFFFF {
		return ErrInvalid
	}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return ErrClosed
	}
	md := in.mds[mdh.Cookie]
	if md == nil || md.zombie || md.threshold == 0 || md.me != nil {
		in.mu.Unlock()
		return ErrNoEnt
	}
	if md.length > MTU {
		in.mu.Unlock()
		return ErrTooBig
	}
	m := in.allocMsgLocked()
	attachMD(md)
	m.md = md
	m.Type = lnetwire.MsgGET
	m.Hdr = lnetwire.Header{
		Type: lnetwire.MsgGET, DestNID: target.NID, DestPID: target.PID, SrcPID: in.pid,
		WMD: in.wireHandle(md), MatchBits: matchBits, Portal: uint32(portal),
		Offset: uint32(offset), SinkLength: uint32(md.length),
	}
	m.Sink = md.iov(0, md.length)
	m.ev = Event{
		Type: EventSend, Target: target, Initiator: lnetwire.ProcessID{NID: self, PID: in.pid}, Source: self,
		Portal: portal, MatchBits: matchBits, RLength: md.length, Offset: offset,
		MDHandle: mdh, MD: md.user, Sender: lnetwire.NIDAny,
	}
	m.hasEvent = true
	m.recovery = recovery
	in.trackLocked(md, TrackGet)
	r, err := in.sendLocked(m, self)
	if err == nil && m.Hdr.SrcNID != 0 { // 0: held for discovery, set when released
		m.ev.Initiator.NID = m.Hdr.SrcNID
	}
	in.mu.Unlock()
	in.afterSend(m, r, err)
	return nil
}
