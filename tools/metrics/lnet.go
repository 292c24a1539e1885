package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	niLabels    = []string{"nid"}
	peerLabels  = []string{"nid", "ni"}
	routeLabels = []string{"net", "gateway"}

	lnetCounter = func(name, help string) *prometheus.Desc {
		return desc("softib_lnet_"+name, help)
	}
	lnetMsgsAlloc   = lnetCounter("msgs_alloc", "Messages in use now (lnetctl stats show msgs_alloc).")
	lnetMsgsMax     = lnetCounter("msgs_max", "Most messages in use at once.")
	lnetErrors      = lnetCounter("errors_total", "Messages that failed.")
	lnetSend        = lnetCounter("send_count_total", "Messages sent.")
	lnetRecv        = lnetCounter("recv_count_total", "Messages received and delivered.")
	lnetRoute       = lnetCounter("route_count_total", "Messages forwarded.")
	lnetDrop        = lnetCounter("drop_count_total", "Messages dropped.")
	lnetSendLen     = lnetCounter("send_length_bytes_total", "Payload bytes sent.")
	lnetRecvLen     = lnetCounter("recv_length_bytes_total", "Payload bytes received.")
	lnetRouteLen    = lnetCounter("route_length_bytes_total", "Payload bytes forwarded.")
	lnetDropLen     = lnetCounter("drop_length_bytes_total", "Payload bytes dropped.")
	lnetRespTimeout = lnetCounter("response_timeouts_total", "ACKs and REPLYs that did not come within the transaction timeout.")

	niUp          = desc("softib_lnet_ni_up", "1 when the NI is up.", append(niLabels, "lnd")...)
	niTxCredits   = desc("softib_lnet_ni_tx_credits", "Free NI send credits (negative: messages queued).", niLabels...)
	niMinCredits  = desc("softib_lnet_ni_min_tx_credits", "Low-water mark of the NI send credits.", niLabels...)
	niMaxCredits  = desc("softib_lnet_ni_max_tx_credits", "NI send credits (credits tunable).", niLabels...)
	niQueued      = desc("softib_lnet_ni_queued", "Messages waiting for an NI credit.", niLabels...)
	niSend        = desc("softib_lnet_ni_send_count_total", "Messages sent on the NI.", niLabels...)
	niRecv        = desc("softib_lnet_ni_recv_count_total", "Messages received on the NI.", niLabels...)
	niDrop        = desc("softib_lnet_ni_drop_count_total", "Messages dropped on the NI.", niLabels...)
	peerUp        = desc("softib_lnet_peer_up", "1 when the peer is up, 0 when down (absent when aliveness is off).", peerLabels...)
	peerTxCredits = desc("softib_lnet_peer_tx_credits", "Free peer send credits (negative: messages queued).", peerLabels...)
	peerMinTx     = desc("softib_lnet_peer_min_tx_credits", "Low-water mark of the peer send credits.", peerLabels...)
	peerMaxTx     = desc("softib_lnet_peer_max_tx_credits", "Peer send credits (peer_credits).", peerLabels...)
	peerRtr       = desc("softib_lnet_peer_rtr_credits", "Free router buffer credits of the peer.", peerLabels...)
	peerMinRtr    = desc("softib_lnet_peer_min_rtr_credits", "Low-water mark of the peer's router credits.", peerLabels...)
	peerQueueLen  = desc("softib_lnet_peer_queue_len", "Messages queued for the peer.", peerLabels...)
	peerQueueB    = desc("softib_lnet_peer_queue_bytes", "Bytes queued for the peer.", peerLabels...)
	niHealth      = desc("softib_lnet_ni_health", "NI health value (1000 is fully healthy; lnetctl net show -v health value).", niLabels...)
	niFatal       = desc("softib_lnet_ni_fatal_error", "1 when the LND reported a fatal error on the NI.", niLabels...)
	niFailures    = desc("softib_lnet_ni_failures_total", "Local send failures on the NI by kind (net show -v health stats).", append(niLabels, "kind")...)
	niPings       = desc("softib_lnet_ni_recovery_ping_count", "Recovery pings of the NI's current recovery.", niLabels...)
	lnetHealth    = desc("softib_lnet_health_total", "LNet health counters by name (lnetctl stats show health fields).", "counter")
	routeAlive    = desc("softib_lnet_route_up", "1 when the route is up.", routeLabels...)
	routeHops     = desc("softib_lnet_route_hops", "Hops of the route.", routeLabels...)
	routePrio     = desc("softib_lnet_route_priority", "Priority of the route (0 is the highest).", routeLabels...)
)

type lnetCollector struct{ e *Exporter }

// Describe sends nothing: the collector is unchecked.
func (lnetCollector) Describe(chan<- *prometheus.Desc) {}

func (c lnetCollector) Collect(ch chan<- prometheus.Metric) {
	_, ins := c.e.snapshot()
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	k := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for _, in := range ins {
		st := in.Stats()
		g(lnetMsgsAlloc, float64(st.MsgsAlloc))
		g(lnetMsgsMax, float64(st.MsgsMax))
		k(lnetErrors, st.Errors)
		k(lnetSend, st.SendCount)
		k(lnetRecv, st.RecvCount)
		k(lnetRoute, st.RouteCount)
		k(lnetDrop, st.DropCount)
		k(lnetSendLen, st.SendLength)
		k(lnetRecvLen, st.RecvLength)
		k(lnetRouteLen, st.RouteLength)
		k(lnetDropLen, st.DropLength)
		k(lnetRespTimeout, st.ResponseTimeouts)
		h := st.Health
		for name, v := range map[string]uint64{
			"resend_count": h.ResendCount, "response_timeout_count": h.ResponseTimeoutCount,
			"local_interrupt_count": h.LocalInterruptCount, "local_dropped_count": h.LocalDroppedCount,
			"local_aborted_count": h.LocalAbortedCount, "local_no_route_count": h.LocalNoRouteCount,
			"local_timeout_count": h.LocalTimeoutCount, "local_error_count": h.LocalErrorCount,
			"remote_dropped_count": h.RemoteDroppedCount, "remote_error_count": h.RemoteErrorCount,
			"remote_timeout_count": h.RemoteTimeoutCount, "network_timeout_count": h.NetworkTimeoutCount,
			"failed_resends": h.FailedResends, "successful_resends": h.SuccessfulResends,
		} {
			k(lnetHealth, v, name)
		}
		for _, ni := range in.Nets() {
			nid := ni.NID.String()
			g(niHealth, float64(ni.Health), nid)
			g(niFatal, b2f(ni.FatalError), nid)
			g(niPings, float64(ni.PingCount), nid)
			for kind, v := range map[string]uint64{"interrupt": ni.Interrupts, "dropped": ni.Dropped, "aborted": ni.Aborted,
				"no_route": ni.NoRoute, "timeout": ni.Timeouts, "error": ni.Errors} {
				k(niFailures, v, nid, kind)
			}
			g(niUp, b2f(ni.Status == "up"), nid, ni.LND)
			g(niTxCredits, float64(ni.TxCredits), nid)
			g(niMinCredits, float64(ni.MinTxCredits), nid)
			g(niMaxCredits, float64(ni.MaxTxCredits), nid)
			g(niQueued, float64(ni.Queued), nid)
			k(niSend, ni.SendCount, nid)
			k(niRecv, ni.RecvCount, nid)
			k(niDrop, ni.DropCount, nid)
		}
		for _, p := range in.Peers() {
			l := []string{p.NID.String(), p.NI.String()}
			if p.State == "up" || p.State == "down" {
				g(peerUp, b2f(p.State == "up"), l...)
			}
			g(peerTxCredits, float64(p.TxCredits), l...)
			g(peerMinTx, float64(p.MinTxCredits), l...)
			g(peerMaxTx, float64(p.MaxTxCredits), l...)
			g(peerRtr, float64(p.RtrCredits), l...)
			g(peerMinRtr, float64(p.MinRtrCredits), l...)
			g(peerQueueLen, float64(p.QueueLen), l...)
			g(peerQueueB, float64(p.QueueBytes), l...)
		}
		for _, r := range in.Routes() {
			l := []string{r.Net.String(), r.Gateway.String()}
			g(routeAlive, b2f(r.Alive), l...)
			g(routeHops, float64(r.Hops), l...)
			g(routePrio, float64(r.Priority), l...)
		}
	}
}
