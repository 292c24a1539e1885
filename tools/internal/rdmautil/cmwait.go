package rdmautil

import (
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"softib/cm"
	"softib/rdmacm"
	"softib/wire/mad"
)

// CMConnectTimeout is how long an RDMA CM connect waits for the peer's
// CM with cfg: the REQ goes out 1 + MaxCMRetries times, each after the
// retransmit interval (2 × packet life time + the response timeout; with
// Linux's defaults, 16 × 4.6 s, about 74 s).
func CMConnectTimeout(cfg rdmacm.Config) time.Duration {
	plt, rto, retries := cfg.PacketLifeTime, cfg.ResponseTimeout, cfg.MaxCMRetries
	if plt == 0 {
		plt = mad.CMAIBoEPacketLifeTime
	}
	if rto == 0 {
		rto = mad.CMAResponseTimeout
	}
	if retries <= 0 {
		retries = mad.CMAMaxCMRetries
	}
	return time.Duration(retries+1) * cm.RetransmitInterval(plt, rto)
}

// CMProgressEvery is how often CMProgress reports a connect still waiting
// (more often when the CM's timeout is short: four lines per timeout).
const CMProgressEvery = 5 * time.Second

// CMProgress prints to w, every CMProgressEvery while a connect to peer
// waits for the peer's CM, how long it has waited of the CM's timeout, so
// that a run whose peer is not answering (a server without -R, no device
// at that address) does not sit silent for a minute. Call the returned
// function when the wait ends. A nil w prints nothing.
func CMProgress(w io.Writer, tool string, peer netip.Addr, timeout time.Duration) (stop func()) {
	if w == nil {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(max(min(CMProgressEvery, timeout/4), time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "%s: no RDMA CM reply from %v yet (%.0f s of the CM's %.0f s; it resends its request meanwhile)\n",
					tool, peer, time.Since(start).Seconds(), timeout.Seconds())
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// CMNoReplyHint names the likely causes when a connect to peer got no CM
// answer within the CM's timeout (RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT).
func CMNoReplyHint(peer netip.Addr, timeout time.Duration) string {
	return fmt.Sprintf("no RDMA CM reply from %v in %.0f s: no softib or rxe device at that address, or the peer runs no RDMA CM "+
		"(a perftest server without -R; an rping that is not a server, -s)", peer, timeout.Seconds())
}
