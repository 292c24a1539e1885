package rxe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"softib/internal/pool"
	"softib/internal/seqnum"
	"softib/internal/stats"
	"softib/udp"
	"softib/verbs"
	"softib/wire/roce"
)

// Stats are a device's counters, named after rxe's (rxe_hw_counters.c) and
// one per drop reason of the receive checks (roce-wire.md §9).
type Stats struct {
	SentPkts         stats.Counter // packets handed to the socket
	RcvdPkts         stats.Counter // packets that passed the receive checks
	DupReq           stats.Counter // duplicate requests (re-ACKed or replayed)
	OutOfSeqReq      stats.Counter // requests ahead of the expected PSN
	RcvRNR           stats.Counter // RNR NAKs received
	SndRNR           stats.Counter // RNR NAKs sent
	RcvSeqErr        stats.Counter // PSN sequence error NAKs received
	CompRetry        stats.Counter // retransmissions (timeouts and NAKs)
	RetryExceeded    stats.Counter // transport retry counter exhausted
	RNRRetryExceeded stats.Counter // RNR retry counter exhausted
	SendErr          stats.Counter // datagrams the socket failed to send
	LinkDowned       stats.Counter // socket failures that stopped the receiver
	RDMASends        stats.Counter // SEND work requests completed (rxe's rdma_sends)
	RDMARecvs        stats.Counter // receive work requests completed successfully (rdma_recvs)
	CQOverrun        stats.Counter // completions lost to a full CQ
	EventsDropped    stats.Counter // async events dropped (queue full)

	ICRCErr       stats.Counter // bad ICRC, dropped
	ICRCIPv4ID    stats.Counter // IPv4 packets whose ICRC verified with a non-zero IP ID recovered
	HdrTooShort   stats.Counter // shorter than BTH + ext headers + ICRC
	BadTVer       stats.Counter // TVer != 0
	BadOpcode     stats.Counter // opcode not in the table (or RD, XRC)
	BadPad        stats.Counter // payload + pad not a multiple of 4
	BadPayload    stats.Counter // payload or pad on an opcode that carries none
	NoQP          stats.Counter // DestQP unknown or 0
	BadQPType     stats.Counter // opcode transport does not match QP type
	BadQPState    stats.Counter // QP not in a state that receives
	BadPKey       stats.Counter // P_Key mismatch
	BadQKey       stats.Counter // UD Q_Key mismatch
	BadSrcAddr    stats.Counter // RC/UC packet not from the QP's peer
	RxQueueFull   stats.Counter // QP inbound ring full
	RcvNoRecvWQE  stats.Counter // UD/UC message dropped: no receive posted
	BadResp       stats.Counter // unexpected or malformed responses, dropped
	StaleResp     stats.Counter // stale responses dropped: already acknowledged, or sent before the peer saw our retransmission (they follow every retry; no error)
	BadLength     stats.Counter // FIRST/MIDDLE not PMTU long, or LAST/ONLY longer
	UCDropped     stats.Counter // UC packets dropped until the next message
	RemAccessNAK  stats.Counter // remote access error NAKs sent
	InvReqNAK     stats.Counter // invalid request NAKs sent
	RemOpNAK      stats.Counter // remote operational error NAKs sent
	RxTruncated   stats.Counter // busy-poll reads: datagram larger than a packet buffer
	SportFallback stats.Counter // QPs sending from the device port: no socket for their source port

	PollRxBatches stats.Counter // busy-poll: datagram batches a CQ poller received itself
	RespDeferred  stats.Counter // busy-poll: rounds that left responses for the poller's post

	// Congestion signalling (congestion.go), under mlx5's counter names.
	NPECNMarked  stats.Counter // CE-marked packets received (np_ecn_marked_roce_packets)
	NPCNPSent    stats.Counter // CNPs sent (np_cnp_sent)
	RPCNPHandled stats.Counter // CNPs that fed a QP's rate limiter (rp_cnp_handled)
	RPCNPIgnored stats.Counter // CNPs dropped because ECN is off (rp_cnp_ignored)
}

// Device is an open Soft-RoCE device.
type Device struct {
	cfg   Config
	conn  udp.Conn
	laddr netip.AddrPort // local UDP address (IP = device address)
	addr  netip.Addr     // device IP (unmapped)
	guid  uint64
	gids  [2]verbs.GID
	mtu   verbs.MTU
	keys  keyTable
	pool  pool.Pool[packet] // receive and send buffers
	// sports are the send-only sockets of the QPs' source ports (sport.go).
	sports sportTable
	// mcast are the multicast groups QPs are attached to (mcast.go).
	mcast mcastTable
	// ctl is what the control verbs changed (control.go).
	ctl devCtl

	// shards are the receive sockets (shard.go); shards[0].conn is conn.
	// pollShards are those with a udp.Reader, which CQ pollers read
	// (busypoll.go).
	shards     []*rxShard
	pollShards []*rxShard
	spinPolls  int32 // empty Polls in a row before Poll reads a shard (0: busy-poll)

	// QPs whose responses wait for the application's post (see
	// QP.unlockAndSend); nDeferred mirrors len(deferred) for a lock-free
	// check.
	defMu     sync.Mutex
	deferred  []*QP
	nDeferred atomic.Int32

	epoch time.Time

	qpTable qpTable // QPN -> QP, lock-free reads (writes under mu)
	gsi     atomic.Pointer[QP]

	mu      sync.Mutex // guards the fields below and qpTable writes
	nextQPN uint32
	cqs     map[*CQ]struct{}
	qps     map[*QP]struct{}

	pds    atomic.Int32
	ahs    atomic.Int32 // live AHs (MaxAH)
	srqs   atomic.Int32 // live SRQs (MaxSRQ = MaxQP)
	events chan verbs.AsyncEvent
	evMu   sync.Mutex
	closed atomic.Bool
	qpWG   sync.WaitGroup

	stats   Stats
	capture *capturer // DeviceConfig.Capture (capture.go); nil: off
}

var _ verbs.Device = (*Device)(nil)

// Open opens a Soft-RoCE device.
func Open(cfg Config) (verbs.Device, error) {
	c := cfg.withDefaults()
	var uc udp.Config
	if c.Conn == nil {
		if !c.Addr.IsValid() {
			return nil, fmt.Errorf("rxe: open: Addr is required: %w", verbs.ErrInvalidArgument)
		}
		if c.UDP != nil {
			uc = *c.UDP
		}
		uc.BusyPoll = uc.BusyPoll || c.BusyPoll
		// GRO is on by default (15-40% more bandwidth), busy-poll
		// devices included: the receive token's reader splits GRO
		// super-datagrams too, and a ping-pong reply that leaves with
		// its ACK as one GSO send then arrives as one datagram
		// (busy-poll ping-pong measured no slower with GRO).
		if c.NoRxCoalescing {
			uc.DisableGRO = true
		}
	}
	if err := c.prepareECN(&uc); err != nil { // congestion.go
		return nil, err
	}
	conns, err := openShards(&c, &uc)
	if err != nil {
		return nil, fmt.Errorf("rxe: open %s: %w", c.Name, err)
	}
	closeAll := func() {
		for _, cn := range conns {
			cn.Close()
		}
	}
	conn := conns[0]
	la := conn.LocalAddr()
	for _, cn := range conns[1:] {
		if cn.LocalAddr() != la {
			closeAll()
			return nil, fmt.Errorf("rxe: open %s: shard bound to %v, not %v: %w", c.Name, cn.LocalAddr(), la, verbs.ErrInvalidArgument)
		}
	}
	addr := c.Addr.Unmap()
	if !addr.IsValid() {
		addr = la.Addr().Unmap()
	}
	if !addr.IsValid() || addr.IsUnspecified() {
		closeAll()
		return nil, fmt.Errorf("rxe: open: no usable local address: %w", verbs.ErrInvalidArgument)
	}
	if c.NetMTU == 0 {
		c.NetMTU = linkNetMTU(conn)
	}
	if c.NetMTU < 256+hdrOverhead {
		closeAll()
		return nil, fmt.Errorf("rxe: open: NetMTU %d too small: %w", c.NetMTU, verbs.ErrInvalidArgument)
	}
	d := &Device{
		cfg:     c,
		conn:    conn,
		laddr:   netip.AddrPortFrom(addr, la.Port()),
		addr:    addr,
		mtu:     min(verbs.MTUFromBytes(c.NetMTU-hdrOverhead), verbs.MTU4096),
		epoch:   time.Now(),
		nextQPN: firstUserQPN,
		cqs:     map[*CQ]struct{}{},
		qps:     map[*QP]struct{}{},
		events:  make(chan verbs.AsyncEvent, eventQueueLen),
	}
	d.guid = nodeGUID(addr, la.Port())
	d.sports.init(conn, addr, c.FixedSourcePort)
	d.gids[0] = verbs.LinkLocalGID(d.guid)
	d.gids[1] = verbs.GIDFromAddr(addr)
	for i, cn := range conns {
		sh := d.newShard(i, cn)
		d.shards = append(d.shards, sh)
		if sh.sr != nil && (c.BusyPoll || c.PollRxAfter >= 0) {
			d.pollShards = append(d.pollShards, sh)
		}
	}
	if !c.BusyPoll {
		d.spinPolls = int32(c.PollRxAfter)
	}
	if c.Capture != nil {
		var err error
		if d.capture, err = newCapturer(d); err != nil {
			d.closeShards()
			return nil, fmt.Errorf("rxe: open: capture: %w", err)
		}
	}
	d.raise(verbs.AsyncEvent{Type: verbs.EventPortActive, Port: 1})
	for _, sh := range d.shards {
		go sh.rxLoop()
	}
	return d, nil
}

// nodeGUID derives an EUI-64 node GUID from the device address, the way
// rxe derives it from the netdev MAC: a locally administered pseudo-MAC
// 02:pp:a:b:c:d (pp folds a non-default port in; a:b:c:d is the IPv4
// address or a hash of the IPv6 one) expanded with FF:FE in the middle and
// the U/L bit flipped.
func nodeGUID(a netip.Addr, port uint16) uint64 {
	var low [4]byte
	if a.Is4() {
		low = a.As4()
	} else {
		h := fnv.New32a()
		b := a.As16()
		h.Write(b[:])
		binary.BigEndian.PutUint32(low[:], h.Sum32())
	}
	pp := byte(port ^ RoCEv2Port)
	mac := [6]byte{0x02, pp, low[0], low[1], low[2], low[3]}
	g := [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]}
	return binary.BigEndian.Uint64(g[:])
}

// Name returns the device name.
func (d *Device) Name() string { return d.cfg.Name }

// Addr returns the device's UDP address.
func (d *Device) Addr() netip.AddrPort { return d.laddr }

// Stats returns a snapshot of the device counters by name.
func (d *Device) Stats() map[string]uint64 { return stats.Snapshot(&d.stats) }

// Query returns the device attributes (rxe's values, roce-wire.md §10).
func (d *Device) Query() verbs.DeviceAttr {
	return verbs.DeviceAttr{
		FWVer:           "softib",
		NodeGUID:        d.guid,
		SysImageGUID:    d.guid,
		MaxMRSize:       ^uint64(0),
		PageSizeCap:     0xFFFFF000,
		VendorID:        vendorID,
		MaxQP:           MaxQP,
		MaxQPWR:         MaxQPWR,
		DeviceCapFlags:  deviceCapFlags,
		MaxSGE:          MaxSGE,
		MaxSGERd:        MaxSGE,
		MaxCQ:           MaxCQ,
		MaxCQE:          MaxCQE,
		MaxMR:           MaxMR,
		MaxPD:           MaxPD,
		MaxQPRdAtom:     MaxRdAtom,
		MaxResRdAtom:    MaxRdAtom * 1024,
		MaxQPInitRdAtom: MaxRdAtom,
		AtomicCap:       verbs.AtomicHCA,
		MaxAH:           MaxAH,
		MaxSRQ:          MaxQP,
		MaxSRQWR:        MaxSRQWR,
		MaxSRQSGE:       MaxSRQSGE,
		MaxPKeys:        PKeyTableLen,
		LocalCAAckDelay: LocalAckDelay,
		PhysPortCnt:     1,
		MaxInlineData:   MaxInline,
		MaxMsgSize:      MaxMsgSize,
		MaxMW:           MaxMW,

		MaxFastRegPageListLen: MaxFastRegPageList,

		MaxMcastGrp:           MaxMcastGrp, // mcast.go
		MaxMcastQPAttach:      MaxMcastQPAttach,
		MaxTotalMcastQPAttach: MaxTotalMcastQPAttach,
	}
}

// deviceCapFlags are ibv_device_cap_flags rxe sets: BAD_PKEY_CNTR,
// BAD_QKEY_CNTR, SYS_IMAGE_GUID, RC_RNR_NAK_GEN, SRQ_RESIZE,
// MEM_MGT_EXTENSIONS (fastreg.go), MEM_WINDOW and MEM_WINDOW_TYPE_2B
// (mw.go).
const deviceCapFlags = 1<<1 | 1<<2 | 1<<11 | 1<<12 | 1<<13 | verbs.DeviceMemMgtExtensions |
	verbs.DeviceMemWindow | verbs.DeviceMemWindowType2B

func (d *Device) checkPort(port uint8) error {
	if port != 1 {
		return fmt.Errorf("rxe: port %d: %w", port, verbs.ErrInvalidArgument)
	}
	return nil
}

// QueryPort returns port 1's attributes.
func (d *Device) QueryPort(port uint8) (verbs.PortAttr, error) {
	if err := d.checkPort(port); err != nil {
		return verbs.PortAttr{}, err
	}
	a := verbs.PortAttr{
		State:        verbs.PortActive,
		MaxMTU:       verbs.MTU4096,
		ActiveMTU:    d.mtu,
		GIDTblLen:    GIDTableLen,
		PortCapFlags: portCapCMSup,
		MaxMsgSize:   MaxMsgSize,
		PKeyTblLen:   PKeyTableLen,
		MaxVLNum:     1,
		ActiveWidth:  1,
		ActiveSpeed:  1,
		PhysState:    5, // LinkUp
		LinkLayer:    verbs.LinkLayerEthernet,
	}
	d.ctl.port(&a, &d.stats) // control.go
	return a, nil
}

// QueryGID returns a GID table entry; unpopulated indices give zero.
func (d *Device) QueryGID(port uint8, index int) (verbs.GID, error) {
	if err := d.checkPort(port); err != nil {
		return verbs.GID{}, err
	}
	if index < 0 || index >= GIDTableLen {
		return verbs.GID{}, fmt.Errorf("rxe: GID index %d: %w", index, verbs.ErrInvalidArgument)
	}
	if index < len(d.gids) {
		return d.gids[index], nil
	}
	return verbs.GID{}, nil
}

// GIDTable lists the populated GIDs: 0 the fe80:: link-local GID, 1 the
// device address (IPv4-mapped for IPv4).
func (d *Device) GIDTable(port uint8) ([]verbs.GIDEntry, error) {
	if err := d.checkPort(port); err != nil {
		return nil, err
	}
	return []verbs.GIDEntry{
		{Index: 0, GID: d.gids[0], Type: verbs.GIDTypeRoCEv2},
		{Index: 1, GID: d.gids[1], Type: verbs.GIDTypeRoCEv2},
	}, nil
}

// QueryPKey returns a P_Key table entry: 0xFFFF at index 0, 0 elsewhere.
func (d *Device) QueryPKey(port uint8, index int) (uint16, error) {
	if err := d.checkPort(port); err != nil {
		return 0, err
	}
	if index < 0 || index >= PKeyTableLen {
		return 0, fmt.Errorf("rxe: P_Key index %d: %w", index, verbs.ErrInvalidArgument)
	}
	if index == 0 {
		return DefaultPKey, nil
	}
	return 0, nil
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	if d.pds.Add(1) > MaxPD {
		d.pds.Add(-1)
		return nil, fmt.Errorf("rxe: alloc PD: %w", verbs.ErrResourceLimit)
	}
	return &PD{dev: d}, nil
}

// Events delivers asynchronous events.
func (d *Device) Events() <-chan verbs.AsyncEvent { return d.events }

// raise queues an async event, dropping the oldest when the queue is full.
func (d *Device) raise(ev verbs.AsyncEvent) {
	ev.Time = time.Now()
	d.evMu.Lock()
	defer d.evMu.Unlock()
	for {
		select {
		case d.events <- ev:
			return
		default:
		}
		select {
		case <-d.events:
			d.stats.EventsDropped.Inc()
		default:
		}
	}
}

// Close destroys every QP (flushing them), closes the socket and waits
// for the device's goroutines.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return verbs.ErrClosed
	}
	verbs.Retire(d) // clients' Remove callbacks (verbs/registry.go)
	d.mu.Lock()
	qps := make([]*QP, 0, len(d.qps))
	for q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.Unlock()
	for _, q := range qps {
		q.destroy()
	}
	d.closeSports()
	d.closeMcast()
	err := d.closeShards()
	for _, sh := range d.shards {
		<-sh.done
	}
	d.qpWG.Wait()
	return err
}

// closeShards closes the receive Conns (shard 0's is the device's send
// socket) and returns the first error.
func (d *Device) closeShards() error {
	var err error
	for _, sh := range d.shards {
		if e := sh.conn.Close(); err == nil {
			err = e
		}
	}
	return err
}

// now returns the device clock: nanoseconds since Open (monotonic).
func (d *Device) now() int64 { return int64(time.Since(d.epoch)) }

// lookupQP returns the QP with number qpn, or nil.
func (d *Device) lookupQP(qpn uint32) *QP {
	if qpn == 1 {
		return d.gsi.Load()
	}
	return d.qpTable.get(qpn)
}

// rxBatch is a receive vector: datagram slots backed by packets, which
// it lends to the QPs the packets are for and takes back (packet.loan),
// and the QPs the last batch touched.
type rxBatch struct {
	msgs    []udp.Message
	pkts    []*packet
	touched []*QP
}

func (d *Device) newRxBatch(c udp.Conn) *rxBatch {
	bs := max(c.BatchSize(), 1)
	b := &rxBatch{msgs: make([]udp.Message, bs), pkts: make([]*packet, bs), touched: make([]*QP, 0, bs)}
	for i := range b.msgs {
		b.pkts[i] = d.getPacket()
		b.msgs[i].Buf = b.pkts[i].buf[:]
	}
	return b
}

func (d *Device) freeRxBatch(b *rxBatch) {
	for _, p := range b.pkts {
		d.putPacket(p)
	}
}

// linkDown reports a receive failure that was not a Close.
func (d *Device) linkDown() {
	if !d.closed.Load() {
		d.stats.LinkDowned.Inc()
		d.raise(verbs.AsyncEvent{Type: verbs.EventPortErr, Port: 1})
	}
}

// runBatch processes the QPs queueBatch touched, inline or through their
// loops; mode is passed on to runInline.
func (d *Device) runBatch(b *rxBatch, n int, mode sendMode) {
	// A batch for one QP is processed here whatever its size: the QP
	// loop could not run it in parallel with anything, and the hand-off
	// would cost a goroutine switch per batch (measured: a 10-20% lower
	// single-QP WRITE bandwidth).
	inline := d.cfg.InlineRx >= 0 && (n <= d.cfg.InlineRx || len(b.touched) == 1)
	for i, q := range b.touched {
		if inline {
			q.runInline(mode)
		} else {
			q.kick()
		}
		b.touched[i] = nil
	}
	d.reclaim(b, n)
}

// recv runs the receive checks on p and queues it on its QP, which it
// returns; it returns nil (and recycles nothing) when p was dropped.
// enc is the calling reader's ICRC template cache.
func (d *Device) recv(p *packet, enc *encapCache) *QP {
	if err := p.parse(); err != nil {
		d.countParseErr(err)
		return nil
	}
	bth := roce.BTH(p.buf[:])
	qpn := bth.DestQP()
	q := d.lookupQP(qpn)
	if q == nil {
		d.stats.NoQP.Inc()
		return nil
	}
	if !q.acceptsTransport(p.op) {
		d.stats.BadQPType.Inc()
		return nil
	}
	// As rxe's check_addr: a connected QP takes packets from its peer's
	// address only. Checked before the ICRC and the inbound ring, so a
	// flood from elsewhere costs neither CRC work nor ring slots.
	if q.typ == verbs.QPTypeRC || q.typ == verbs.QPTypeUC {
		if ip := q.peerIP.Load(); ip != nil && p.addr.Addr().Unmap() != *ip {
			d.stats.BadSrcAddr.Inc()
			return nil
		}
	}
	if !d.checkICRC(p, enc) {
		return nil
	}
	if !pkeyMatch(bth.PKey(), DefaultPKey) && qpn != 1 {
		d.stats.BadPKey.Inc()
		return nil
	}
	if !q.enqueue(p) {
		d.stats.RxQueueFull.Inc()
		return nil
	}
	return q
}

// pkeyMatch applies the IBA P_Key match rule: equal base keys, and at
// least one full member.
func pkeyMatch(a, b uint16) bool {
	return a&0x7FFF == b&0x7FFF && (a|b)&0x8000 != 0
}

// checkICRC verifies p's ICRC, dropping and counting it when bad. For
// IPv4 the IP ID, which a UDP socket hides and kernel rxe varies, is
// solved for (roce.Encap.VerifyICRCAnyID): the packet passes when some ID
// makes its ICRC right, which leaves a 2^-16 chance that a corruption
// passes; IPv6 ICRCs are checked exactly.
func (d *Device) checkICRC(p *packet, enc *encapCache) bool {
	// enc is one reader's (a shard's token holder, or a test feeding
	// packets in its place), so it needs no lock.
	id, err := enc.get(p.addr, d.laddr).VerifyICRCAnyID(p.buf[:p.n])
	if err != nil {
		d.stats.ICRCErr.Inc()
		return false
	}
	if id != 0 {
		d.stats.ICRCIPv4ID.Inc()
	}
	return true
}

// errTransport rejects a known opcode of a transport rxe does not serve
// (RD, XRC): counted with the unknown ones in BadOpcode.
var errTransport = errors.New("rxe: opcode of an unsupported transport")

// countParseErr counts a receive-check rejection by its typed reason
// (roce.ParseError from roce.Parse, or errTransport).
func (d *Device) countParseErr(err error) {
	var pe roce.ParseError
	if !errors.As(err, &pe) {
		if err == errTransport {
			d.stats.BadOpcode.Inc()
		}
		return
	}
	switch pe {
	case roce.ErrTruncated:
		d.stats.HdrTooShort.Inc()
	case roce.ErrBadVersion:
		d.stats.BadTVer.Inc()
	case roce.ErrUnknownOpcode:
		d.stats.BadOpcode.Inc()
	case roce.ErrBadPad:
		d.stats.BadPad.Inc()
	case roce.ErrUnexpectedPayload:
		d.stats.BadPayload.Inc()
	}
}

// packet is a pooled datagram buffer with the parse results of a received
// packet.
type packet struct {
	buf  [pktBufSize]byte
	n    int
	addr netip.AddrPort // source (received) or destination (sent)
	cls  ipClass        // sent: IP traffic class and hop limit (tclass.go)
	// group is the multicast group address a received datagram was sent
	// to (mcastInput), zero for unicast: the GRH area's destination.
	group netip.Addr

	op  roce.Opcode
	hdr int // BTH + extension headers
	pay int // payload length
	psn seqnum.PSN

	// loan is the state of a received packet that a receive batch slot
	// lent to a QP (loanNone for every other packet): see lend.
	loan atomic.Uint32
}

// Loan states of a received packet (packet.loan).
//
// A receive batch's slots keep their packets across reads: queueBatch
// lends a slot's packet to the QP it queues it on (loanOut), the QP
// gives it back when its round is done with it (releaseRx: loanBack),
// and at the end of the batch (reclaim) the slot takes it back for the
// next read. Usually the QP's round runs inline in the same goroutine
// (runBatch), so a packet goes round the slot's socket read, the QP and
// back with two atomic operations and no pool round trip, and its
// buffer stays warm in this core's cache. When the round runs later (the
// QP's loop was kicked), reclaim finds the packet still out, marks it
// abandoned and refills the slot from the pool; the QP then pools the
// packet itself. The compare-and-swaps on loan decide, for every lent
// packet, which of the two owns it (and order the QP's last reads of the
// buffer before the slot's next socket read).
const (
	loanNone      uint32 = iota // owned by whoever holds it; pooled on release
	loanOut                     // lent by a receive batch slot to a QP
	loanBack                    // the QP is done: the slot reuses it
	loanAbandoned               // the slot took a new packet: the QP pools it
)

func (d *Device) getPacket() *packet { return d.pool.Get() }

// releaseRx disposes of a received packet its QP is done with: back to
// the batch slot that lent it, else to the pool.
func (d *Device) releaseRx(p *packet) {
	if p.loan.CompareAndSwap(loanOut, loanBack) {
		return // the slot's; nothing of p may be touched from here on
	}
	p.loan.Store(loanNone) // not lent, or abandoned: p is ours alone
	d.putPacket(p)
}

// reclaim takes back the packets of b's first n slots that queueBatch
// lent to QPs (see loanOut), refilling from the pool the slots whose
// packets are still in a QP's hands.
func (d *Device) reclaim(b *rxBatch, n int) {
	for i := range n {
		p := b.pkts[i]
		for p.loan.Load() != loanNone {
			if p.loan.CompareAndSwap(loanBack, loanNone) {
				break // returned: the slot reads into it again
			}
			if p.loan.CompareAndSwap(loanOut, loanAbandoned) {
				b.pkts[i] = d.getPacket()
				b.msgs[i].Buf = b.pkts[i].buf[:]
				break
			}
		}
	}
}

func (d *Device) putPacket(p *packet) {
	p.group = netip.Addr{} // only mcastInput sets it
	d.pool.Put(p)
}

// grhDst is the destination of the GRH area of a received UD datagram:
// as Linux rxe copies the datagram's IP header there (rxe_resp.c), it
// is the group address for a multicast datagram and dev otherwise.
func (p *packet) grhDst(dev netip.Addr) netip.Addr {
	if p.group.IsValid() {
		return p.group
	}
	return dev
}

// parse validates the datagram with roce.Parse, wire/roce's one codec
// path (header stack against the opcode table, so that no accessor reads
// past the datagram; pad and payload rules), keeps the transports rxe
// serves, and fills the parse fields. Errors are roce.ParseError values
// or errTransport, for countParseErr.
func (p *packet) parse() error {
	if p.n > len(p.buf) {
		return roce.ErrTruncated // the socket cut it to the buffer
	}
	pk, err := roce.Parse(p.buf[:p.n])
	if err != nil {
		return err
	}
	op := pk.Opcode()
	if t := op.Transport(); t != roce.TransportRC && t != roce.TransportUC && t != roce.TransportUD && op != roce.CNP {
		return errTransport // (a CNP goes to its QP: congestion.go)
	}
	p.op, p.hdr, p.pay, p.psn = op, pk.HeaderLen(), pk.PayloadLen(), pk.PSN()
	return nil
}

func (p *packet) bth() roce.BTH { return roce.BTH(p.buf[:roce.BTHSize]) }

// ext returns extension header k (which the opcode must carry).
func (p *packet) ext(k roce.HeaderKind) []byte {
	off := p.op.Info().Offset(k)
	return p.buf[off:p.hdr]
}

func (p *packet) payload() []byte { return p.buf[p.hdr : p.hdr+p.pay] }
