package rxe

import (
	"softib/internal/stats"
	"softib/udp"
	"softib/verbs"
)

// CQDeviceStats returns the counters of the device a CQ belongs to.
func CQDeviceStats(cq verbs.CQ) map[string]uint64 { return cq.(*CQ).dev.Stats() }

// QPDebug describes a QP's engine state.
func QPDebug(qp verbs.QP) map[string]any {
	q := qp.(*QP)
	q.mu.Lock()
	defer q.mu.Unlock()
	return map[string]any{"state": q.state, "req.psn": q.req.psn, "comp.psn": q.comp.psn, "resp.psn": q.resp.psn,
		"sq.len": q.sq.len(), "pos": q.req.pos - q.sq.head, "timeoutAt": q.comp.timeoutAt, "now": q.dev.now(),
		"retrying": q.comp.retrying, "rnrUntil": q.req.rnrUntil, "retryCnt": q.comp.retryCnt, "timerAt": q.timerAt}
}

// SockStats returns the udp socket counters of the device behind cq, or
// nil when its Conn is not a *udp.Socket (or a test Conn wrapping one,
// with a UDPSocket method).
func SockStats(cq verbs.CQ) map[string]uint64 {
	conn := cq.(*CQ).dev.conn
	if w, ok := conn.(interface{ UDPSocket() *udp.Socket }); ok {
		conn = w.UDPSocket()
	}
	if s, ok := conn.(*udp.Socket); ok {
		m := stats.Snapshot(&s.Stats)
		for _, sh := range cq.(*CQ).dev.shards[1:] { // the other receive shards
			if o, ok := sh.conn.(*udp.Socket); ok {
				for k, v := range stats.Snapshot(&o.Stats) {
					m[k] += v
				}
			}
		}
		addSportSockStats(cq.(*CQ).dev, m) // the QPs send through these
		return m
	}
	return nil
}
