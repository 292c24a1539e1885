package lnet

import (
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// libMD is the core's state of an MD (struct lnet_libmd). Guarded by
// Instance.mu.
type libMD struct {
	cookie    uint64
	user      MD       // as given, for events
	frags     [][]byte // IOV, or one[:] for a contiguous MD
	one       [1][]byte
	length    int
	offset    int // md_offset: running local offset
	threshold int
	maxSize   int
	options   MDOptions
	refs      int // messages using the MD
	auto      bool
	zombie    bool // unlinked; freed when refs drops to 0
	me        *ME
	eq        *EQ

	// Response tracking (rsp.go): deadline for the awaited ACK/REPLY,
	// linked in Instance.rsp in deadline order; 0 when not tracked.
	// rspNextHop is the peer NI the tracked request last went to
	// (rspt_next_hop_nid; 0 until it is sent).
	rspDeadline      int64
	rspPrev, rspNext *libMD
	rspNextHop       lnetwire.NID
}

// exhausted is lnet_md_exhausted: no operations left, or with MaxSize no
// room left for a full-size one.
func (md *libMD) exhausted() bool {
	return md.threshold == 0 ||
		(md.options&MDMaxSize != 0 && md.offset+md.maxSize > md.length)
}

// unlinkable is lnet_md_unlinkable.
func (md *libMD) unlinkable() bool {
	return md.refs == 0 && (md.zombie || (md.auto && md.exhausted()))
}

// handle returns the MD's API handle.
func (md *libMD) handle() MDHandle { return MDHandle{md.cookie} }

// iov returns the byte range [off, off+n) of the MD.
func (md *libMD) iov(off, n int) lnd.IOV {
	return lnd.IOV{Frags: md.frags, Offset: off, Len: n}
}

// buildMD validates an MD and builds its core state (lnet_md_build).
func (in *Instance) buildMD(u MD, unlink Unlink) (*libMD, error) {
	if u.Options&^mdKnownOptions != 0 || u.Threshold < ThreshInf || unlink > AutoUnlink {
		return nil, ErrInvalid
	}
	md := &libMD{user: u, threshold: u.Threshold, maxSize: u.MaxSize, options: u.Options, auto: unlink == AutoUnlink, eq: u.EQ}
	if u.IOV != nil {
		if len(u.IOV) > MaxIOV {
			return nil, ErrInvalid
		}
		md.frags = u.IOV
		for _, f := range u.IOV {
			md.length += len(f)
		}
	} else {
		md.one[0] = u.Start
		md.frags = md.one[:]
		md.length = len(u.Start)
	}
	if u.Options&MDMaxSize != 0 && (u.MaxSize < 0 || u.MaxSize > md.length) {
		return nil, ErrInvalid
	}
	if u.EQ != nil && u.EQ.in != in {
		return nil, ErrInvalid
	}
	return md, nil
}

// addMDLocked registers md in the handle table.
func (in *Instance) addMDLocked(md *libMD) error {
	if md.eq != nil && md.eq.freed { // freed is stable under mu
		return ErrInvalid
	}
	in.nextCookie++
	md.cookie = in.nextCookie
	in.mds[md.cookie] = md
	if md.eq != nil {
		md.eq.refs++
	}
	return nil
}

// MDAttach attaches an MD to an ME (LNetMDAttach), making it available to
// incoming operations that match the ME. With unlink == AutoUnlink the MD
// unlinks itself once its threshold (or MaxSize room) is used up and no
// operation is in flight. On a lazy portal, PUTs waiting for a buffer are
// matched against the new MD at once.
func (in *Instance) MDAttach(me *ME, u MD, unlink Unlink) (MDHandle, error) {
	md, err := in.buildMD(u, unlink)
	if err != nil {
		return MDHandle{}, err
	}
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return MDHandle{}, ErrClosed
	}
	if me == nil || me.in != in || me.list == nil {
		in.mu.Unlock()
		return MDHandle{}, ErrNoEnt
	}
	if me.md != nil {
		in.mu.Unlock()
		return MDHandle{}, ErrBusy
	}
	if err := in.addMDLocked(md); err != nil {
		in.mu.Unlock()
		return MDHandle{}, err
	}
	md.me = me
	me.md = md
	h := md.handle()
	ready := in.portals[me.portal].retryDelayedLocked(in, md)
	in.mu.Unlock()
	in.deliverDelayed(ready)
	return h, nil
}

// MDBind creates a free-floating MD for use as the source of a Put or the
// sink of a Get (LNetMDBind).
func (in *Instance) MDBind(u MD, unlink Unlink) (MDHandle, error) {
	md, err := in.buildMD(u, unlink)
	if err != nil {
		return MDHandle{}, err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return MDHandle{}, ErrClosed
	}
	if err := in.addMDLocked(md); err != nil {
		return MDHandle{}, err
	}
	return md.handle(), nil
}

// MDUnlink unlinks an MD (LNetMDUnlink). With no operation in flight its
// EQ gets an UNLINK event now; otherwise the last in-flight operation's
// event carries Unlinked. An ME created with AutoUnlink goes too. It fails
// with ErrNoEnt for an unknown or already unlinked MD.
func (in *Instance) MDUnlink(h MDHandle) error {
	in.mu.Lock()
	md := in.mds[h.Cookie]
	if md == nil || md.zombie {
		in.mu.Unlock()
		return ErrNoEnt
	}
	var d delivery
	if md.refs == 0 {
		in.unlinkEventLocked(md, &d, nil)
	}
	in.unlinkMDLocked(md)
	in.mu.Unlock()
	d.run()
	return nil
}

// unlinkEventLocked queues an UNLINK event for md (lnet_build_unlink_event)
// with the given status (nil for an explicit unlink).
func (in *Instance) unlinkEventLocked(md *libMD, d *delivery, status error) {
	if md.eq == nil && md.user.Handler == nil {
		return
	}
	d.ev = Event{Type: EventUnlink, MDHandle: md.handle(), MD: md.user, Unlinked: true, Status: status,
		Target: lnetwire.ProcessID{NID: lnetwire.NIDAny, PID: in.pid}, Initiator: lnetwire.ProcessID{NID: lnetwire.NIDAny, PID: in.pid}, Source: lnetwire.NIDAny}
	d.queueLocked(md)
}

// unlinkMDLocked is lnet_md_unlink: detach from the ME (unlinking an
// AutoUnlink ME), invalidate the handle, free when idle.
func (in *Instance) unlinkMDLocked(md *libMD) {
	if !md.zombie {
		md.zombie = true
		in.rsp.remove(md)
		if me := md.me; me != nil {
			md.me = nil
			me.md = nil
			if me.unlink == AutoUnlink {
				in.unlinkMELocked(me)
			}
		}
	}
	if md.refs != 0 {
		return
	}
	if in.mds[md.cookie] == md {
		delete(in.mds, md.cookie)
		if md.eq != nil {
			md.eq.refs--
		}
	}
}

// lookupWireMDLocked finds the MD named by a wire handle from a peer
// (ACK/REPLY dst_wmd); stale or foreign handles miss.
func (in *Instance) lookupWireMDLocked(w lnetwire.WireHandle) *libMD {
	if w.InterfaceCookie != in.ifaceCookie {
		return nil
	}
	md := in.mds[w.ObjectCookie]
	if md == nil || md.zombie {
		return nil
	}
	return md
}

// wireHandle returns the wire form of md's handle.
func (in *Instance) wireHandle(md *libMD) lnetwire.WireHandle {
	return lnetwire.WireHandle{InterfaceCookie: in.ifaceCookie, ObjectCookie: md.cookie}
}

// delivery carries one event out of the locked section: the ring enqueue
// happens under the lock (so sequence order is completion order), the
// handlers run after unlocking.
type delivery struct {
	ev      Event
	eq      *EQ
	handler func(*Event)
	queued  bool
}

// queueLocked stamps and enqueues d.ev for md.
func (d *delivery) queueLocked(md *libMD) {
	d.eq = md.eq
	d.handler = md.user.Handler
	if d.eq != nil {
		d.eq.enqueue(&d.ev)
	}
	d.queued = true
}

// run calls the handlers of a queued event. Handlers get a private copy
// (the only allocation on the event path, and only when a handler exists).
func (d *delivery) run() {
	if !d.queued {
		return
	}
	d.queued = false
	if d.eq != nil && d.eq.handler != nil {
		ev := d.ev
		d.eq.handler(&ev)
	}
	if d.handler != nil {
		ev := d.ev
		d.handler(&ev)
	}
}
