package rxe

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"softib/udp"
	"softib/verbs"
	"softib/wire/roce"
)

// UD multicast (ibv_attach_mcast), as Linux rxe does it (rxe_mcast.c):
//
//	AttachMcast(mgid) ─► group table ─► first QP: join the IP group
//	                                     (IPv4-mapped MGID: its IPv4
//	                                     address; else the IPv6 address)
//	group socket ─► mcastInput ─► checks (opcode UD, DestQP 0xFFFFFF,
//	                ICRC, P_Key) ─► a copy to every attached QP's
//	                inbound ring (rxe_rcv_mcast_pkt clones the skb)
//
// Each copy remembers the group address (packet.group): the receive
// completion's GRH area is the datagram's IP header in Linux rxe, so its
// destination is the group, the MGID, not the receiving device.
//
// The device socket is bound to the device's unicast address, which a
// group's datagrams are not addressed to, so each group gets its own
// receive socket bound to (group, device port) with SO_REUSEADDR (other
// devices and processes on the host may join the same group), joined on
// the interface of the device address. Sending needs nothing special: a
// UD work request whose AH's DGID is the MGID goes to the group address,
// from the interface the source address selects. On a Conn that is not a
// Linux *udp.Socket (a simulated network) groups have no socket; only
// mcastInput delivers to them.

// Multicast limits, as Linux rxe advertises them (rxe_param.h).
const (
	MaxMcastGrp           = 8192
	MaxMcastQPAttach      = 56
	MaxTotalMcastQPAttach = 0x70000
)

// mcastTable is a device's multicast groups.
type mcastTable struct {
	mu     sync.Mutex // guards groups and total; QP.mu may be taken under it (locking.go)
	groups map[verbs.GID]*mcastGroup
	total  int // attachments of all groups
}

// mcastGroup is one multicast group with its attached QPs.
type mcastGroup struct {
	gid  verbs.GID
	addr netip.AddrPort // group address and device port
	// qps is replaced, never modified, under mcastTable.mu, so that the
	// receive goroutine reads it without a lock.
	qps  atomic.Pointer[[]*QP]
	conn udp.Conn      // the group's receive socket; nil without one
	done chan struct{} // closed when the reader has returned
}

// AttachMcast implements verbs.McastAttacher: it attaches the UD QP to
// the group mgid and, for the group's first QP, joins the IP multicast
// group on the device's interface. mlid is ignored (RoCE has no LIDs).
func (q *QP) AttachMcast(mgid verbs.GID, mlid uint16) error {
	if q.typ != verbs.QPTypeUD {
		return fmt.Errorf("rxe: attach multicast: %v QP: %w", q.typ, verbs.ErrInvalidArgument)
	}
	if !mgid.IsMulticast() {
		return fmt.Errorf("rxe: attach multicast: %v is not a multicast GID: %w", mgid, verbs.ErrInvalidArgument)
	}
	d := q.dev
	if mgid.IsIPv4() != d.addr.Is4() {
		return fmt.Errorf("rxe: attach multicast: %v: address family differs from device address %v: %w", mgid, d.addr, verbs.ErrInvalidArgument)
	}
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	// Lock order: mcast.mu, then QP.mu. destroy marks the QP dead
	// before it detaches it (detachAllMcast), so a QP is never left
	// attached after its destruction.
	q.mu.Lock()
	dead := q.dead
	q.mu.Unlock()
	if d.closed.Load() || dead {
		return verbs.ErrClosed
	}
	g := t.groups[mgid]
	if g != nil && slices.Contains(*g.qps.Load(), q) {
		return nil // as rxe_attach_mcg: already a member
	}
	if g != nil && len(*g.qps.Load()) >= MaxMcastQPAttach || t.total >= MaxTotalMcastQPAttach {
		return fmt.Errorf("rxe: attach multicast %v: %w", mgid, verbs.ErrResourceLimit)
	}
	if g == nil {
		if len(t.groups) >= MaxMcastGrp {
			return fmt.Errorf("rxe: attach multicast %v: %d groups: %w", mgid, MaxMcastGrp, verbs.ErrResourceLimit)
		}
		var err error
		if g, err = d.newMcastGroup(mgid); err != nil {
			return fmt.Errorf("rxe: attach multicast %v: %w", mgid, err)
		}
		if t.groups == nil {
			t.groups = map[verbs.GID]*mcastGroup{}
		}
		t.groups[mgid] = g
	}
	qps := append(slices.Clone(*g.qps.Load()), q)
	g.qps.Store(&qps)
	t.total++
	return nil
}

// DetachMcast implements verbs.McastAttacher; the last QP to leave a
// group leaves the IP group too.
func (q *QP) DetachMcast(mgid verbs.GID, mlid uint16) error {
	t := &q.dev.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	if !q.dev.detachLocked(q, mgid) {
		return fmt.Errorf("rxe: detach multicast: QP %#x is not attached to %v: %w", q.qpn, mgid, verbs.ErrInvalidArgument)
	}
	return nil
}

// detachLocked removes q from group mgid and reports whether it was
// attached (mcast.mu held).
func (d *Device) detachLocked(q *QP, mgid verbs.GID) bool {
	t := &d.mcast
	g := t.groups[mgid]
	if g == nil {
		return false
	}
	old := *g.qps.Load()
	i := slices.Index(old, q)
	if i < 0 {
		return false
	}
	qps := slices.Delete(slices.Clone(old), i, i+1)
	g.qps.Store(&qps)
	t.total--
	if len(qps) == 0 {
		delete(t.groups, mgid)
		g.close()
	}
	return true
}

// detachAllMcast detaches a QP being destroyed from every group (as
// rxe_qp_do_cleanup via rxe_cleanup_mcast... ib_uverbs detaches first).
func (d *Device) detachAllMcast(q *QP) {
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	for gid, g := range t.groups {
		if slices.Contains(*g.qps.Load(), q) {
			d.detachLocked(q, gid)
		}
	}
}

// closeMcast leaves every group (device Close).
func (d *Device) closeMcast() {
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	for gid, g := range t.groups {
		delete(t.groups, gid)
		g.close()
	}
	t.total = 0
}

// McastGroups returns the multicast groups the device has QPs attached
// to, for tools and tests.
func (d *Device) McastGroups() []verbs.GID {
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]verbs.GID, 0, len(t.groups))
	for gid := range t.groups {
		out = append(out, gid)
	}
	slices.SortFunc(out, func(a, b verbs.GID) int { return slices.Compare(a[:], b[:]) })
	return out
}

// newMcastGroup creates the group mgid with its receive socket joined
// (mcast.mu held).
func (d *Device) newMcastGroup(mgid verbs.GID) (*mcastGroup, error) {
	g := &mcastGroup{gid: mgid, addr: netip.AddrPortFrom(mgid.Addr(), d.laddr.Port()), done: make(chan struct{})}
	g.qps.Store(&[]*QP{})
	c, err := joinGroup(d.conn, d.addr, g.addr)
	if err != nil {
		return nil, err
	}
	if c == nil {
		close(g.done)
		return g, nil
	}
	g.conn = c
	go d.mcastReader(g)
	return g, nil
}

// close leaves the IP group and waits for the reader.
func (g *mcastGroup) close() {
	if g.conn != nil {
		g.conn.Close()
	}
	<-g.done
}

// mcastReader receives the group's datagrams until the socket closes.
func (d *Device) mcastReader(g *mcastGroup) {
	defer close(g.done)
	n := max(g.conn.BatchSize(), 1)
	msgs := make([]udp.Message, n)
	pkts := make([]*packet, n)
	for i := range pkts {
		pkts[i] = d.getPacket()
		msgs[i].Buf = pkts[i].buf[:]
	}
	defer func() {
		for _, p := range pkts {
			d.putPacket(p)
		}
	}()
	var enc encapCache // this goroutine's alone
	for {
		k, err := g.conn.ReadBatch(msgs)
		if err != nil {
			return
		}
		for i := range k {
			if msgs[i].N < 0 {
				d.stats.RxTruncated.Inc()
				continue
			}
			p := pkts[i]
			p.n, p.addr = msgs[i].N, msgs[i].Addr
			d.mcastInput(g, p, &enc)
		}
	}
}

// mcastInput runs rxe's receive checks on a datagram sent to group g and
// queues a copy on every attached QP; p stays the caller's.
func (d *Device) mcastInput(g *mcastGroup, p *packet, enc *encapCache) {
	if err := p.parse(); err != nil {
		d.countParseErr(err)
		return
	}
	bth := roce.BTH(p.buf[:])
	if bth.DestQP() != verbs.MulticastQPN {
		d.stats.NoQP.Inc()
		return
	}
	if p.op.Transport() != roce.TransportUD {
		d.stats.BadQPType.Inc()
		return
	}
	id, err := enc.get(p.addr, g.addr).VerifyICRCAnyID(p.buf[:p.n])
	if err != nil {
		d.stats.ICRCErr.Inc()
		return
	}
	if id != 0 {
		d.stats.ICRCIPv4ID.Inc()
	}
	if !pkeyMatch(bth.PKey(), DefaultPKey) {
		d.stats.BadPKey.Inc()
		return
	}
	for _, q := range *g.qps.Load() {
		c := d.getPacket()
		copy(c.buf[:p.n], p.buf[:p.n])
		// No traffic class: the group socket does not read one, and a
		// pooled packet's would be stale (a CE there would send a CNP
		// to the sender's UD QP: congestion.go).
		c.n, c.addr, c.group, c.cls = p.n, p.addr, g.addr.Addr(), ipClass{}
		if c.parse() != nil || !q.enqueue(c) {
			d.putPacket(c)
			d.stats.RxQueueFull.Inc()
			continue
		}
		q.kick()
	}
}
