package rxe

import (
	"net/netip"
	"sort"

	"softib/internal/stats"
	"softib/verbs"
)

// This file is the device's introspection API: counter snapshots under
// Linux rxe's hw_counters names (what `rdma statistic` shows) and a
// snapshot of the device's resources (what `rdma resource show` lists),
// for the tools' control socket and metrics exporter. Everything here
// runs off the data path: it takes locks and allocates.

// Counter is one named counter value.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// rxeCounterNames maps Stats fields to the names Linux rxe gives the same
// events in rxe_hw_counters.c, in that file's order. ack_deferred is
// softib's nearest event: a round that left its ACKs for later (busy-poll
// mode).
var rxeCounterNames = []struct{ field, name string }{
	{"SentPkts", "sent_pkts"},
	{"RcvdPkts", "rcvd_pkts"},
	{"DupReq", "duplicate_request"},
	{"OutOfSeqReq", "out_of_seq_request"},
	{"RcvRNR", "rcvd_rnr_err"},
	{"SndRNR", "send_rnr_err"},
	{"RcvSeqErr", "rcvd_seq_err"},
	{"RespDeferred", "ack_deferred"},
	{"RetryExceeded", "retry_exceeded_err"},
	{"RNRRetryExceeded", "retry_rnr_exceeded_err"},
	{"CompRetry", "completer_retry_err"},
	{"SendErr", "send_err"},
	{"LinkDowned", "link_downed"},
	{"RDMASends", "rdma_sends"},
	{"RDMARecvs", "rdma_recvs"},
}

// Counters returns the device counters: first those Linux rxe has, under
// its names and in its order, then softib's own (receive drop reasons,
// ICRC errors, ...) under snake_case forms of the Stats field names
// (ICRCErr is icrc_err), sorted by name.
func (d *Device) Counters() []Counter {
	m := stats.Snapshot(&d.stats)
	out := make([]Counter, 0, len(m))
	for _, c := range rxeCounterNames {
		out = append(out, Counter{c.name, m[c.field]})
		delete(m, c.field)
	}
	own := make([]Counter, 0, len(m))
	for k, v := range m {
		own = append(own, Counter{SnakeCase(k), v})
	}
	if d.capture != nil {
		own = append(own, Counter{"capture_err", d.capture.errs.Load()})
	}
	sort.Slice(own, func(i, j int) bool { return own[i].Name < own[j].Name })
	return append(out, own...)
}

// ownNames spell softib's own counters where a mechanical conversion
// would split an acronym (BadPKey is bad_pkey, not bad_p_key).
var ownNames = map[string]string{
	"ICRCErr": "icrc_err", "ICRCIPv4ID": "icrc_ipv4_id", "BadTVer": "bad_tver", "BadPKey": "bad_pkey",
	"BadQKey": "bad_qkey", "CQOverrun": "cq_overrun", "NoQP": "no_qp", "BadQPType": "bad_qp_type",
	"BadQPState": "bad_qp_state", "RcvNoRecvWQE": "rcv_no_recv_wqe", "UCDropped": "uc_dropped",
	"RDMASends": "rdma_sends", "RDMARecvs": "rdma_recvs",
	"RemAccessNAK": "rem_access_nak", "InvReqNAK": "inv_req_nak", "RemOpNAK": "rem_op_nak",
	"NPECNMarked": "np_ecn_marked_roce_packets", "NPCNPSent": "np_cnp_sent",
	"RPCNPHandled": "rp_cnp_handled", "RPCNPIgnored": "rp_cnp_ignored",
}

// SnakeCase returns the counter name of a Stats field: its entry in
// ownNames, else the field name in snake_case (RcvdPkts is rcvd_pkts).
func SnakeCase(s string) string {
	if n, ok := ownNames[s]; ok {
		return n
	}
	b := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 && !(s[i-1] >= 'A' && s[i-1] <= 'Z') {
				b = append(b, '_')
			}
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}

// qpStats are the per-QP counters (rdma statistic's per-QP mode): the
// device counters that belong to one QP, under the same names.
type qpStats struct {
	SentPkts         stats.Counter
	RcvdPkts         stats.Counter
	RDMASends        stats.Counter
	RDMARecvs        stats.Counter
	DupReq           stats.Counter
	OutOfSeqReq      stats.Counter
	RcvRNR           stats.Counter
	SndRNR           stats.Counter
	RcvSeqErr        stats.Counter
	CompRetry        stats.Counter
	RetryExceeded    stats.Counter
	RNRRetryExceeded stats.Counter

	// Congestion signalling (congestion.go), under the device
	// counters' names: mlx5 keeps them per port only, softib per QP too
	// so an operator can see which QP is marked and slowed down.
	NPECNMarked  stats.Counter
	NPCNPSent    stats.Counter
	RPCNPHandled stats.Counter
	RPCNPIgnored stats.Counter
}

// qpOwnCounters are the per-QP counters that are softib's own (not in
// rxeCounterNames), in the order QPInfo lists them after rxe's.
var qpOwnCounters = []string{"NPECNMarked", "NPCNPSent", "RPCNPHandled", "RPCNPIgnored"}

// QPInfo is a snapshot of one QP (rdma resource show qp).
type QPInfo struct {
	QPN       uint32         `json:"qpn"`
	Type      string         `json:"type"`
	State     string         `json:"state"`
	PDN       int            `json:"pdn"`
	DestQPN   uint32         `json:"dest_qpn,omitempty"`
	Peer      netip.AddrPort `json:"peer,omitzero"`
	SQPSN     uint32         `json:"sq_psn"`      // next PSN the requester sends
	RQPSN     uint32         `json:"rq_psn"`      // next PSN the responder expects
	UnackPSN  uint32         `json:"unacked_psn"` // oldest PSN not yet acknowledged
	PathMTU   int            `json:"path_mtu"`
	SQDepth   int            `json:"sq_depth"` // max send WRs
	SQUsed    int            `json:"sq_used"`  // send WRs not yet completed
	RQDepth   int            `json:"rq_depth"`
	RQUsed    int            `json:"rq_used"`
	RetryLeft int            `json:"retry_left"` // transport retries left for the oldest WR
	RNRLeft   int            `json:"rnr_retry_left"`
	SendCQN   int            `json:"send_cqn"`
	RecvCQN   int            `json:"recv_cqn"`
	SRQ       bool           `json:"srq,omitempty"`
	Counters  []Counter      `json:"counters"`
	// Congestion is the QP's DCQCN state, nil until the QP has met a
	// CE-marked packet or a CNP on a device with ECN on.
	Congestion *QPCongestion `json:"congestion,omitempty"`
}

// QPCongestion is a QP's congestion-control state (congestion.go): its
// DCQCN rate limiter, as of the snapshot. Rates are in bits per second.
type QPCongestion struct {
	// Limiting: a CNP came and the rate has not recovered to MaxRate;
	// the requester is paced at Rate.
	Limiting bool `json:"limiting"`
	// Rate and TargetRate are the limiter's current and target rates,
	// Alpha its congestion estimate, MinRate the lowest rate since it
	// became active (all 0 while not limiting).
	Rate       float64 `json:"rate_bps,omitempty"`
	TargetRate float64 `json:"target_rate_bps,omitempty"`
	Alpha      float64 `json:"alpha,omitempty"`
	MinRate    float64 `json:"min_rate_bps,omitempty"`
	// RateCuts counts the rate cuts and SendsHeld the sends the limiter
	// held back (the requester waited for tokens), over the QP's life.
	RateCuts  int `json:"rate_cuts"`
	SendsHeld int `json:"sends_held"`
}

// CQInfo is a snapshot of one CQ (rdma resource show cq).
type CQInfo struct {
	CQN     int    `json:"cqn"`
	CQE     int    `json:"cqe"`     // capacity
	Used    int    `json:"used"`    // completions waiting to be polled
	Users   int    `json:"users"`   // QPs using it
	Armed   bool   `json:"armed"`   // ReqNotify pending
	Overrun bool   `json:"overrun"` // a completion was lost to a full CQ
	Poll    string `json:"poll"`    // "channel", "handler" or "poll"
}

// MRInfo is a snapshot of one MR (rdma resource show mr).
type MRInfo struct {
	PDN    int    `json:"pdn"`
	LKey   uint32 `json:"lkey"`
	RKey   uint32 `json:"rkey"`
	Addr   uint64 `json:"iova"`
	Length int    `json:"mrlen"`
	Access string `json:"access"`
}

// PDInfo is a snapshot of one PD (rdma resource show pd).
type PDInfo struct {
	PDN   int `json:"pdn"`
	Users int `json:"users"` // MRs, QPs, SRQs and AHs using it
}

// Resources is a snapshot of a device's resources.
type Resources struct {
	QPs []QPInfo `json:"qps"`
	CQs []CQInfo `json:"cqs"`
	MRs []MRInfo `json:"mrs"`
	PDs []PDInfo `json:"pds"`
	// PDCount counts every live PD, including those no QP or MR uses
	// (which a snapshot cannot see: PDs are not listed by the device).
	PDCount int `json:"pd_count"`
}

// Resources returns a snapshot of the device's QPs, CQs, MRs and PDs.
// CQ and PD numbers are assigned in the order of the snapshot (rxe's
// numbers come from its object pools; softib keeps none), so they are
// consistent within one snapshot only.
func (d *Device) Resources() Resources {
	d.mu.Lock()
	qps := make([]*QP, 0, len(d.qps))
	for q := range d.qps {
		qps = append(qps, q)
	}
	cqs := make([]*CQ, 0, len(d.cqs))
	for c := range d.cqs {
		cqs = append(cqs, c)
	}
	d.mu.Unlock()
	sort.Slice(qps, func(i, j int) bool { return qps[i].qpn < qps[j].qpn })

	d.keys.mu.RLock()
	mrs := make([]*MR, 0, len(d.keys.m))
	for _, mr := range d.keys.m {
		mrs = append(mrs, mr)
	}
	d.keys.mu.RUnlock()
	sort.Slice(mrs, func(i, j int) bool { return mrs[i].key < mrs[j].key })

	var r Resources
	pdn := map[*PD]int{}
	pdOf := func(pd *PD) int {
		n, ok := pdn[pd]
		if !ok {
			n = len(pdn)
			pdn[pd] = n
			r.PDs = append(r.PDs, PDInfo{PDN: n, Users: int(pd.users.Load())})
		}
		return n
	}
	cqn := map[*CQ]int{}
	cqOf := func(c *CQ) int {
		n, ok := cqn[c]
		if !ok {
			n = len(cqn)
			cqn[c] = n
		}
		return n
	}
	// Number CQs by their first QP, so a QP's CQs read in order.
	for _, q := range qps {
		cqOf(q.sendCQ)
		cqOf(q.recvCQ)
	}
	for _, c := range cqs {
		cqOf(c)
	}
	for _, q := range qps {
		r.QPs = append(r.QPs, q.info(pdOf(q.pd), cqn[q.sendCQ], cqn[q.recvCQ]))
	}
	for _, mr := range mrs {
		r.MRs = append(r.MRs, MRInfo{PDN: pdOf(mr.pd), LKey: mr.key, RKey: mr.key, Addr: mr.addr,
			Length: len(mr.buf), Access: mr.access.String()})
	}
	r.CQs = make([]CQInfo, len(cqn))
	for c, n := range cqn {
		r.CQs[n] = c.info(n)
	}
	r.PDCount = int(d.pds.Load())
	return r
}

func (q *QP) info(pdn, scqn, rcqn int) QPInfo {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := QPInfo{
		QPN: q.qpn, Type: q.typ.String(), State: q.state.String(), PDN: pdn,
		SQPSN: uint32(q.req.psn), RQPSN: uint32(q.resp.psn), UnackPSN: uint32(q.comp.psn),
		PathMTU: q.mtu, SQDepth: q.cap.MaxSendWR, SQUsed: q.sq.len(),
		RQDepth: q.cap.MaxRecvWR, RQUsed: q.rq.len(),
		RetryLeft: int(q.comp.retryCnt), RNRLeft: int(q.comp.rnrRetry),
		SendCQN: scqn, RecvCQN: rcqn, SRQ: q.srq != nil,
	}
	if q.typ == verbs.QPTypeRC || q.typ == verbs.QPTypeUC {
		i.DestQPN, i.Peer = q.attr.DestQPN, q.dst
	}
	m := stats.Snapshot(&q.stats)
	for _, c := range rxeCounterNames {
		if v, ok := m[c.field]; ok {
			i.Counters = append(i.Counters, Counter{c.name, v})
		}
	}
	for _, f := range qpOwnCounters {
		i.Counters = append(i.Counters, Counter{SnakeCase(f), m[f]})
	}
	if q.cc != nil {
		i.Congestion = q.cc.rp.snapshot(q.dev.now())
	}
	return i
}

// snapshot is the limiter's state at now (mu held). It advances a copy:
// the limiter's own state moves only on the QP's rounds, with their
// clock, so looking never changes what the engine does.
func (r *rateLimiter) snapshot(now int64) *QPCongestion {
	c := *r
	c.advance(now)
	s := &QPCongestion{Limiting: c.active, RateCuts: c.cuts, SendsHeld: c.held}
	if c.active {
		s.Rate, s.TargetRate, s.Alpha, s.MinRate = c.rc, c.rt, c.alpha, c.minRate
	}
	return s
}

func (cq *CQ) info(n int) CQInfo {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	i := CQInfo{CQN: n, CQE: cq.cqe, Used: cq.n, Users: int(cq.users.Load()), Armed: cq.armed, Overrun: cq.overrun, Poll: "poll"}
	switch {
	case cq.handler != nil:
		i.Poll = "handler"
	case cq.ch != nil:
		i.Poll = "channel"
	}
	return i
}
