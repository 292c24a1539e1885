package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"

	"softib/verbs"
	"softib/wire/mad"
)

// Multicast (rdma_join_multicast, rdma_leave_multicast) on RoCEv2, as
// the kernel's rdma_cm does it for RoCEv2 GIDs (cma_iboe_join_multicast):
// the MGID is the group's IP address (IPv4-mapped for IPv4,
// cma_iboe_set_mgid), the Q_Key is RDMA_UDP_QKEY, the hop limit 64
// (IPV6_DEFAULT_HOPLIMIT) and the traffic class the ID's TOS. Joining
// the IP group is the device's business (rxe joins it when the first QP
// attaches). As librdmacm does on the join event, the ID's QP, if it has
// one, is attached to the MGID, and detached on leave. Linux 6.1
// refuses IPv6 groups on RoCEv2 (ENOTSUPP), and so does JoinMulticast
// (verbs.ErrNotSupported); QPs can still be attached to IPv6 MGIDs
// through verbs.AttachMcast.

// mcastHopLimit is the hop limit of a RoCEv2 group's address vector.
const mcastHopLimit = 64

// ErrNotJoined means LeaveMulticast named a group the ID has not joined
// (EADDRNOTAVAIL).
var ErrNotJoined = errors.New("rdmacm: multicast group not joined")

// MGID returns the MGID of the multicast group at IP address group on
// RoCEv2 (cma_iboe_set_mgid).
func MGID(group netip.Addr) verbs.GID { return verbs.GIDFromAddr(group.Unmap()) }

// JoinMulticast joins the multicast group at IP address group
// (rdma_join_multicast). The ID must be bound to a device (ADDR_BOUND
// with a local address, or ADDR_RESOLVED) and be of a UD port space.
// MULTICAST_JOIN follows on the channel, with McastAddr and McastContext
// (ctx) set and UD holding how to send to the group: the AH to the MGID,
// QPNum 0xFFFFFF and QKey RDMA_UDP_QKEY; MULTICAST_ERROR if the QP
// cannot be attached.
func (id *ID) JoinMulticast(group netip.Addr, ctx any) error {
	if id.k != nil {
		return fmt.Errorf("rdmacm: join multicast on a kernel device: %w", verbs.ErrNotSupported)
	}
	group = group.Unmap()
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateAddrBound && id.state != StateAddrResolved || id.dev == nil {
		return fmt.Errorf("rdmacm: join multicast in %v: %w", id.state, ErrState)
	}
	if id.qpType != verbs.QPTypeUD {
		return fmt.Errorf("rdmacm: join multicast on a %v ID: %w", id.qpType, ErrInvalid)
	}
	if !group.IsMulticast() || group.Is4() != id.dev.addr.Is4() {
		return fmt.Errorf("rdmacm: join multicast %v from %v: %w", group, id.dev.addr, ErrInvalid)
	}
	if !group.Is4() {
		return fmt.Errorf("rdmacm: join multicast %v: IPv6 groups on RoCEv2 (as Linux 6.1): %w", group, verbs.ErrNotSupported)
	}
	if _, dup := id.mcs[group]; dup {
		return fmt.Errorf("rdmacm: join multicast %v: %w", group, ErrAddrInUse)
	}
	mgid := MGID(group)
	ev := &Event{Type: EventMulticastJoin, McastAddr: group, McastContext: ctx}
	if id.qp != nil {
		if err := verbs.AttachMcast(id.qp, mgid, 0); err != nil {
			ev.Type, ev.Err, ev.Status = EventMulticastError, err, -EINVAL
			if errors.Is(err, verbs.ErrNotSupported) {
				ev.Status = -ENOSYS
			}
			id.emit(ev)
			return nil
		}
	}
	if id.mcs == nil {
		id.mcs = map[netip.Addr]any{}
	}
	id.mcs[group] = ctx
	ah := verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: mgid, SGIDIndex: id.dev.gidIndex,
		HopLimit: mcastHopLimit, TrafficClass: id.tos}}
	if a, ok := id.dev.dev.(interface{ Addr() netip.AddrPort }); ok && a.Addr().Port() != 4791 {
		ah.DPort = a.Addr().Port() // softib devices on another port join the group there
	}
	ev.UD = UDParam{AH: ah, QPNum: verbs.MulticastQPN, QKey: mad.RDMAUDPQKey}
	id.emit(ev)
	return nil
}

// LeaveMulticast leaves a group joined with JoinMulticast
// (rdma_leave_multicast), detaching the ID's QP. No event follows.
func (id *ID) LeaveMulticast(group netip.Addr) error {
	if id.k != nil {
		return fmt.Errorf("rdmacm: leave multicast on a kernel device: %w", verbs.ErrNotSupported)
	}
	group = group.Unmap()
	id.mu.Lock()
	defer id.mu.Unlock()
	if _, ok := id.mcs[group]; !ok {
		return fmt.Errorf("rdmacm: leave multicast %v: %w", group, ErrNotJoined)
	}
	delete(id.mcs, group)
	if id.qp != nil {
		if err := verbs.DetachMcast(id.qp, MGID(group), 0); err != nil && !errors.Is(err, verbs.ErrClosed) {
			return err
		}
	}
	return nil
}

// leaveAllLocked leaves every group (Destroy, DestroyQP; id.mu held).
func (id *ID) leaveAllLocked() {
	for group := range id.mcs {
		if id.qp != nil {
			_ = verbs.DetachMcast(id.qp, MGID(group), 0) // a destroyed QP is detached already
		}
		delete(id.mcs, group)
	}
}
