package verbs

import "fmt"

// MulticastQPN is the destination QPN of a datagram sent to a multicast
// group (IBA: QP 0xFFFFFF); the device hands it to every QP attached to
// the group.
const MulticastQPN = 0xFFFFFF

// IsMulticast reports whether g is a multicast GID: an IPv4-mapped GID
// of an address in 224.0.0.0/4, or an IPv6 GID in ff00::/8 (as the
// kernel's rdma_is_multicast_addr).
func (g GID) IsMulticast() bool {
	a := g.Addr()
	if a.Is4() {
		return a.IsMulticast()
	}
	return g[0] == 0xff
}

// McastAttacher is implemented by the QPs of providers that support UD
// multicast (ibv_attach_mcast, ibv_detach_mcast). Use AttachMcast and
// DetachMcast, which report ErrNotSupported for other providers.
type McastAttacher interface {
	// AttachMcast attaches the (UD) QP to the multicast group mgid; on
	// RoCE mlid is ignored. Attaching twice is not an error.
	AttachMcast(mgid GID, mlid uint16) error
	// DetachMcast detaches the QP from mgid; ErrInvalidArgument if it
	// is not attached.
	DetachMcast(mgid GID, mlid uint16) error
}

// AttachMcast attaches qp to the multicast group mgid: datagrams sent to
// the group (destination QPN MulticastQPN) reach it, as with
// ibv_attach_mcast. The provider must implement McastAttacher.
func AttachMcast(qp QP, mgid GID, mlid uint16) error {
	m, ok := qp.(McastAttacher)
	if !ok {
		return fmt.Errorf("verbs: attach multicast: %w", ErrNotSupported)
	}
	return m.AttachMcast(mgid, mlid)
}

// DetachMcast detaches qp from the multicast group mgid (ibv_detach_mcast).
func DetachMcast(qp QP, mgid GID, mlid uint16) error {
	m, ok := qp.(McastAttacher)
	if !ok {
		return fmt.Errorf("verbs: detach multicast: %w", ErrNotSupported)
	}
	return m.DetachMcast(mgid, mlid)
}
