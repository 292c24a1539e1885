package rxe

import "softib/verbs"

// ECNSendCE makes a device opened with c send CE-marked packets instead
// of ECT(0): a path that marks every packet, without a router.
func ECNSendCE(c *ECNConfig) { c.sendCE = true }

// QPRate returns the QP's DCQCN state: whether its limiter is active, the
// current rate (bits/s), the lowest rate since it became active, and the
// number of rate cuts.
func QPRate(qp verbs.QP) (active bool, rate, minRate float64, cuts int) {
	active, rate, minRate, cuts, _ = QPRateHeld(qp)
	return
}

// QPRateHeld is QPRate and the number of sends the limiter held back.
func QPRateHeld(qp verbs.QP) (active bool, rate, minRate float64, cuts, held int) {
	q := qp.(*QP)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cc == nil {
		return false, 0, 0, 0, 0
	}
	r := &q.cc.rp
	r.advance(q.dev.now())
	return r.active, r.rc, r.minRate, r.cuts, r.held
}
