package lnet

import (
	"context"
	"fmt"
	"time"

	"softib/wire/lnetwire"
)

// pingFeatures are the feature bits this node always advertises: NI
// status and Multi-Rail, as Lustre's lnet_ping_buffer_alloc sets them;
// pingInfoLocked adds "routing disabled" unless it forwards (a gateway
// whose reply carries RTE_DISABLED is not used by its peers' routes) and
// DISCOVERY unless discovery is off (lnet_ping_target_update). BASE
// ("just a ping") is kept for peers that test it.
const pingFeatures = lnetwire.PingFeatBase | lnetwire.PingFeatNIStatus | lnetwire.PingFeatMultiRail

// pingState is the ping responder: an ME on the reserved portal matching
// the ping bits from anyone, with an MD holding lnet_ping_info.
type pingState struct {
	me  *ME
	md  *libMD
	seq uint32
}

// startPing attaches the ping ME and its first buffer.
func (in *Instance) startPing() error {
	me, err := in.MEAttach(ReservedPortal, lnetwire.ProcessIDAny, lnetwire.PingMatchBits, 0, Retain, InsAfter)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.ping.me = me
	in.updatePingLocked()
	in.mu.Unlock()
	return in.startPushTarget()
}

// pingInfoLocked builds this node's lnet_ping_info: 0@lo first with the
// sequence number as its status, then the NIs that are up.
func (in *Instance) pingInfoLocked() lnetwire.PingInfo {
	info := lnetwire.PingInfo{Features: pingFeatures, PID: in.pid}
	if !in.router.on {
		info.Features |= lnetwire.PingFeatRteDisabled
	}
	if !in.disc.off {
		info.Features |= lnetwire.PingFeatDiscovery
	}
	info.NIs = append(info.NIs, lnetwire.PingNI{NID: lnetwire.NIDLo0, Status: in.ping.seq})
	for _, ni := range in.nis {
		if ni.lo || !ni.ready || ni.down {
			continue
		}
		st := lnetwire.PingStatusUp
		if ni.statusDown && in.router.on {
			st = lnetwire.PingStatusDown
		}
		info.NIs = append(info.NIs, lnetwire.PingNI{NID: ni.nid(), Status: st})
	}
	return info
}

// updatePingLocked swaps in a fresh ping buffer after the NIs changed. A
// reply in flight keeps the old buffer until it completes.
func (in *Instance) updatePingLocked() {
	me := in.ping.me
	if me == nil || me.list == nil {
		return
	}
	in.ping.seq++
	info := in.pingInfoLocked()
	md, err := in.buildMD(MD{Start: info.Append(nil), Threshold: ThreshInf,
		Options: MDOpGet | MDTruncate | MDManageRemote}, Retain)
	if err != nil {
		return // cannot happen: the MD is well formed
	}
	if old := in.ping.md; old != nil && !old.zombie {
		in.unlinkMDLocked(old)
	}
	_ = in.addMDLocked(md) // no EQ: cannot fail
	md.me = me
	me.md = md
	in.ping.md = md
	in.pushAfterChangeLocked()
}

// PingResult is what a ping learned about a peer.
type PingResult struct {
	// Target is the process that answered (its PID from the reply).
	Target lnetwire.ProcessID
	// NIDs are the peer's NIDs from the reply, primary first, 0@lo
	// omitted, each with its status.
	NIDs []lnetwire.PingNI
	// Features are the reply's feature bits.
	Features uint32
	// Seq is the peer's ping buffer sequence number (the status of its
	// 0@lo entry).
	Seq uint32
	// RTT is the time from sending the GET to the REPLY event.
	RTT time.Duration
}

// Ping asks target for its NIDs (LNetGet on the reserved portal with the
// ping match bits) and waits up to timeout (≤ 0: Globals().
// TransactionTimeout) or ctx's end. A PIDAny target means PIDLustre. The
// primary NID learned is used by PrimaryNID afterwards.
func (in *Instance) Ping(ctx context.Context, target lnetwire.ProcessID, timeout time.Duration) (PingResult, error) {
	if target.PID == lnetwire.PIDAny {
		target.PID = lnetwire.PIDLustre
	}
	g := in.Globals()
	if timeout <= 0 {
		timeout = g.TransactionTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	buf := make([]byte, lnetwire.PingInfoHdrSize+lnetwire.PingInfoEntrySize*(g.MaxInterfaces+1))
	events := make(chan Event, 3)
	h, err := in.MDBind(MD{Start: buf, Threshold: 2, Options: MDTruncate, Handler: func(ev *Event) {
		select {
		case events <- *ev:
		default:
		}
	}}, AutoUnlink)
	if err != nil {
		return PingResult{}, err
	}
	start := time.Now()
	if err := in.Get(lnetwire.NIDAny, h, target, ReservedPortal, lnetwire.PingMatchBits, 0); err != nil {
		_ = in.MDUnlink(h)
		return PingResult{}, err
	}
	for {
		select {
		case <-ctx.Done():
			_ = in.MDUnlink(h)
			if ctx.Err() == context.DeadlineExceeded {
				return PingResult{}, fmt.Errorf("ping %v: %w", target, ErrTimeout)
			}
			return PingResult{}, ctx.Err()
		case ev := <-events:
			if ev.Status != nil {
				_ = in.MDUnlink(h)
				return PingResult{}, fmt.Errorf("ping %v: %w", target, ev.Status)
			}
			if ev.Type != EventReply {
				continue
			}
			return in.pingReply(target, buf[:ev.MLength], time.Since(start))
		}
	}
}

// pingReply decodes and checks a ping reply. What the reply says about
// the peer's NIDs reaches the peer model through discovery only.
func (in *Instance) pingReply(target lnetwire.ProcessID, b []byte, rtt time.Duration) (PingResult, error) {
	info, err := lnetwire.ParsePingInfo(b)
	if err != nil {
		return PingResult{}, fmt.Errorf("%w from %v: %w", ErrBadPingInfo, target, err)
	}
	if info.Features&lnetwire.PingFeatNIStatus == 0 {
		return PingResult{}, fmt.Errorf("%w from %v: no NI status feature", ErrBadPingInfo, target)
	}
	res := PingResult{Target: lnetwire.ProcessID{NID: target.NID, PID: info.PID}, Features: info.Features, RTT: rtt}
	for _, e := range info.NIs {
		if e.NID == lnetwire.NIDLo0 {
			res.Seq = e.Status
			continue
		}
		res.NIDs = append(res.NIDs, e)
	}
	return res, nil
}
