package rxe

import (
	"softib/internal/stats"
	"softib/udp"
	"softib/verbs"
)

// QPSourcePort returns the source port a QP's next packet leaves from
// and whether it has its own socket for it (false: the device socket),
// opening the sender a Modify chose as the next packet would.
func QPSourcePort(qp verbs.QP) (port uint16, own bool) {
	q := qp.(*QP)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sport.pending {
		q.openSport()
	}
	return q.srcAddr().Port(), q.sport.sock != nil
}

// QPSportPending reports whether a QP's sender is still to be opened.
func QPSportPending(qp verbs.QP) bool {
	q := qp.(*QP)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sport.pending
}

// SportSockets returns the number of open source-port sockets of d.
func SportSockets(d *Device) int {
	d.sports.mu.Lock()
	defer d.sports.mu.Unlock()
	return len(d.sports.socks)
}

// SetSportOpener replaces how d opens source-port sockets (fault
// injection); call it before creating QPs.
func SetSportOpener(d *Device, open func(port uint16) (udp.Conn, error)) { d.sports.open = open }

// addSportSockStats adds the counters of d's source-port sockets to m.
func addSportSockStats(d *Device, m map[string]uint64) {
	d.sports.mu.Lock()
	defer d.sports.mu.Unlock()
	for _, s := range d.sports.socks {
		if us, ok := s.conn.(*udp.Socket); ok {
			for k, v := range stats.Snapshot(&us.Stats) {
				m[k] += v
			}
		}
	}
}

// TxDatagrams returns the datagrams d's sockets (its own and the
// source-port ones) have sent.
func TxDatagrams(d *Device) uint64 {
	m := map[string]uint64{}
	if s, ok := d.conn.(*udp.Socket); ok {
		m["TxDatagrams"] = s.Stats.TxDatagrams.Load()
	}
	addSportSockStats(d, m)
	return m["TxDatagrams"]
}

// SetSportLimit changes the most source-port sockets d keeps open.
func SetSportLimit(d *Device, n int) {
	d.sports.mu.Lock()
	d.sports.limit = n
	d.sports.mu.Unlock()
}
