package rdmacm

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// listenHandler handles requests arriving on a listener's IB CM ID on
// device d: it validates the cma_hdr, enforces the backlog, creates the
// passive ID and reports CONNECT_REQUEST.
func (id *ID) listenHandler(d *device) cm.Handler {
	return func(c *cm.ID, ev *cm.Event) error {
		var pd []byte
		switch ev.Type {
		case cm.EventREQReceived, cm.EventSIDRREQReceived:
			pd = ev.PrivateData
		default:
			return nil
		}
		ud := ev.Type == cm.EventSIDRREQReceived
		var hdr mad.CMAHdr
		if err := hdr.Decode(pd); err != nil || hdr.Version != mad.CMAVersion {
			// Not an RDMA CM request: refuse it (cma_save_net_info fails).
			return rejectRequest(c, ud, fmt.Errorf("rdmacm: bad cma_hdr: %w", ErrInvalid))
		}
		if ud != (id.qpType == verbs.QPTypeUD) {
			return rejectRequest(c, ud, fmt.Errorf("rdmacm: QP type mismatch: %w", ErrInvalid))
		}
		id.mu.Lock()
		if id.state != StateListen || id.pending >= id.backlog {
			id.mu.Unlock()
			return rejectRequest(c, ud, fmt.Errorf("rdmacm: backlog full: %w", ErrInvalid))
		}
		id.pending++
		child := &ID{m: id.m, ch: id.ch, ps: id.ps, qpType: id.qpType, ctx: id.ctx,
			state: StateConnect, dev: d, cmID: c, parent: id, seq: rand.Uint32() & 0xFFFFFF,
			local:  netipPort(hdr.Dst, c.ServiceID()),
			remote: netipPort(hdr.Src, uint64(hdr.SrcPort)),
			path:   c.PrimaryPath(),
		}
		id.mu.Unlock()
		id.m.mu.Lock()
		id.m.ids[child] = struct{}{}
		id.m.mu.Unlock()
		c.SetContext(child)
		c.SetHandler(child.cmHandler)
		e := &Event{Type: EventConnectRequest, ID: child, ListenID: id}
		user := pd[mad.CMAHdrSize:]
		if ud {
			e.UD = UDParam{PrivateData: user, QPNum: 0, QKey: mad.RDMAUDPQKey,
				AH: ahFor(c.PrimaryPath(), d)}
		} else {
			r := ev.REQ
			e.Conn = ConnParam{PrivateData: user,
				// The peer's view swapped: what it initiates we serve.
				ResponderResources: r.InitiatorDepth, InitiatorDepth: r.ResponderResources,
				FlowControl: r.E2EFlowControl, RetryCount: r.RetryCount, RNRRetryCount: r.RNRRetryCount,
				SRQ: r.SRQ, QPNum: r.LocalQPN}
			child.req = e.Conn
		}
		child.emit(e)
		return nil
	}
}

// rejectRequest refuses an incoming request and makes the CM destroy
// its ID (by returning an error, like a failing kernel handler).
func rejectRequest(c *cm.ID, ud bool, why error) error {
	if ud {
		_ = c.SendSIDRREP(&cm.SIDRREPParam{Status: mad.SIDRReject})
	} else {
		_ = c.SendREJ(mad.RejConsumerDefined, nil, nil)
	}
	return why
}

// cmHandler turns IB CM events of a connection into RDMA CM events.
func (id *ID) cmHandler(c *cm.ID, ev *cm.Event) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == StateDestroying {
		return nil
	}
	switch ev.Type {
	case cm.EventREPReceived:
		r := ev.REP
		conn := ConnParam{PrivateData: ev.PrivateData, ResponderResources: r.ResponderResources,
			InitiatorDepth: r.InitiatorDepth, FlowControl: r.E2EFlowControl, RNRRetryCount: r.RNRRetryCount,
			SRQ: r.SRQ, QPNum: r.LocalQPN}
		if id.qp == nil {
			id.emit(&Event{Type: EventConnectResponse, Conn: conn})
			return nil
		}
		if err := id.moveQPLocked(verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS); err != nil {
			id.qpErrLocked()
			_ = c.SendREJ(mad.RejConsumerDefined, nil, nil)
			id.emit(&Event{Type: EventConnectError, Status: -EINVAL, Err: err})
			return nil
		}
		if err := c.SendRTU(nil); err != nil {
			id.emit(&Event{Type: EventConnectError, Status: -EINVAL, Err: err})
			return nil
		}
		id.emit(&Event{Type: EventEstablished, Conn: conn})
	case cm.EventRTUReceived, cm.EventUserEstablished:
		id.emit(&Event{Type: EventEstablished, Conn: id.req})
	case cm.EventREJReceived:
		id.qpErrLocked()
		id.emit(&Event{Type: EventRejected, Status: int(ev.REJ.Reason), Err: ev.Err,
			Conn: ConnParam{PrivateData: ev.PrivateData}})
	case cm.EventREQError, cm.EventREPError:
		id.qpErrLocked()
		st := -ETIMEDOUT
		var re *cm.RejectError
		if errors.As(ev.Err, &re) {
			st = int(re.Reason)
		}
		id.emit(&Event{Type: EventUnreachable, Status: st, Err: ev.Err})
	case cm.EventDREQReceived, cm.EventDREPReceived, cm.EventDREQError:
		if id.state != StateConnect {
			return nil
		}
		if id.setState(StateDisconnect) != nil {
			return nil
		}
		st := 0
		if ev.Type == cm.EventDREQError {
			st = -ETIMEDOUT
		}
		id.emit(&Event{Type: EventDisconnected, Status: st, Err: ev.Err})
	case cm.EventTimewaitExit:
		id.emit(&Event{Type: EventTimewaitExit})
	case cm.EventSIDRREPReceived:
		r := ev.SIDRREP
		if r.Status != mad.SIDRSuccess {
			id.emit(&Event{Type: EventUnreachable, Status: int(r.Status),
				Err: fmt.Errorf("rdmacm: SIDR_REP status %v: %w", r.Status, ErrInvalid),
				UD:  UDParam{PrivateData: ev.PrivateData}})
			return nil
		}
		id.ud = UDParam{PrivateData: ev.PrivateData, AH: ahFor(id.path, id.dev), QPNum: r.QPN, QKey: r.QKey}
		id.emit(&Event{Type: EventEstablished, UD: id.ud})
	case cm.EventSIDRREQError:
		id.emit(&Event{Type: EventUnreachable, Status: -ETIMEDOUT, Err: ev.Err})
	}
	return nil
}

// ahFor returns the address vector reaching the remote end of p.
func ahFor(p mad.Path, d *device) verbs.AHAttr {
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{DGID: verbs.GID(p.RemoteGID), SGIDIndex: d.gidIndex,
			HopLimit: p.HopLimit, TrafficClass: p.TrafficClass, FlowLabel: p.FlowLabel},
		SL: p.SL, IsGlobal: true, PortNum: 1,
	}
}
