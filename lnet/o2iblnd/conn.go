package o2iblnd

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"softib/lnet/lnd"
	"softib/rdmacm"
	"softib/verbs"
	"softib/wire/lnetwire"
)

// connState is a connection's state (IBLND_CONN_*).
type connState int32

const (
	connInit connState = iota
	connActiveConnect
	connPassiveWait
	connEstablished
	connClosing
	connDisconnected
)

var connStateNames = [...]string{"INIT", "ACTIVE_CONNECT", "PASSIVE_WAIT", "ESTABLISHED", "CLOSING", "DISCONNECTED"}

func (s connState) String() string {
	if int(s) < len(connStateNames) {
		return connStateNames[s]
	}
	return fmt.Sprintf("connState(%d)", int32(s))
}

// connTransitions[from] lists the states a connection may move to.
var connTransitions = [...][]connState{
	connInit:          {connActiveConnect, connPassiveWait, connClosing},
	connActiveConnect: {connEstablished, connClosing},
	connPassiveWait:   {connEstablished, connClosing},
	connEstablished:   {connClosing},
	connClosing:       {connDisconnected},
	connDisconnected:  {},
}

// rx is a receive descriptor (kib_rx): one 4 KiB buffer of the
// connection's receive MR.
type rx struct {
	conn *conn
	idx  int
	buf  []byte
	sgl  [1]verbs.SGE
	msg  lnetwire.KibMsg // the message while it is being handled
	hdr  lnetwire.Header // its decoded lnet_hdr (no allocation per message)
}

// conn is one RC connection to a peer (kib_conn).
type conn struct {
	d      *Driver
	peer   *peer
	nid    lnetwire.NID
	active bool
	id     *rdmacm.ID

	// Negotiated in setup, then fixed.
	version    uint16
	queueDepth int
	maxFrags   int
	peerStamp  uint64
	deadline   time.Time // connection setup must finish by then

	state  atomic.Int32
	lastRx atomic.Int64 // UnixNano of the last message
	// pending: counted in peer.connecting/accepting (Driver.mu).
	pending bool

	// setupMu serializes building the verbs resources (connd) with
	// tearing them down (destroy): a connection closed while connd sets
	// it up is torn down once setup stopped, and setup refuses to start
	// on a closing connection.
	setupMu sync.Mutex
	cq      verbs.CQ
	qp      verbs.QP
	worker  *verbs.CQWorker
	rxMR    verbs.MR
	rxs     []rx

	mu       sync.Mutex
	flow     *Flow[*tx]
	txs      map[uint64]*tx // queued, sending or waiting, by cookie
	early    []*rx
	closeErr error
	rwr      [1]verbs.RecvWR
	nsent    uint64 // messages posted on this connection
}

func newConn(d *Driver, p *peer, active bool, version uint16, qd, frags int) *conn {
	c := &conn{d: d, peer: p, nid: p.nid, active: active, version: version, queueDepth: qd, maxFrags: frags,
		txs: make(map[uint64]*tx), deadline: time.Now().Add(d.cfg.connectTimeout())}
	return c
}

func (c *conn) getState() connState { return connState(c.state.Load()) }

// setState moves the connection along connTransitions; false if the
// transition is not allowed (e.g. already closing).
func (c *conn) setState(next connState) bool {
	for {
		cur := c.getState()
		ok := false
		for _, s := range connTransitions[cur] {
			if s == next {
				ok = true
			}
		}
		if !ok {
			return false
		}
		if c.state.CompareAndSwap(int32(cur), int32(next)) {
			return true
		}
	}
}

// setup creates the CQ, the QP on id and the receive buffers, and posts
// them all (kiblnd_create_conn). Called with c.setupMu held.
func (c *conn) setup(id *rdmacm.ID) error {
	d := c.d
	if c.getState() >= connClosing {
		return errConnClosed
	}
	nrx := RxBuffers(c.version, c.queueDepth)
	cs := ConcurrentSends(c.version, d.cfg.ConcurrentSends, d.cfg.PeerCredits, c.queueDepth)
	sq := min(d.dev.Query().MaxQPWR, (2*c.maxFrags+2)*cs)
	cq, err := d.dev.CreateCQ(verbs.CQAttr{CQE: nrx + sq, Channel: verbs.NewCompChannel(1)})
	if err != nil {
		return err
	}
	c.cq = cq
	qp, err := id.CreateQP(d.pd, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: sq, MaxRecvWR: nrx, MaxSendSGE: d.wrqSGE, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	c.qp = qp
	mem := make([]byte, nrx*lnetwire.KibMsgSize)
	if c.rxMR, err = d.pd.RegMR(mem, verbs.AccessLocalWrite); err != nil {
		return err
	}
	c.rxs = make([]rx, nrx)
	for i := range c.rxs {
		r := &c.rxs[i]
		r.conn, r.idx = c, i
		r.buf = mem[i*lnetwire.KibMsgSize : (i+1)*lnetwire.KibMsgSize : (i+1)*lnetwire.KibMsgSize]
		r.sgl[0] = c.rxMR.SGE(i*lnetwire.KibMsgSize, lnetwire.KibMsgSize)
		if err := c.postRx(r); err != nil {
			return err
		}
	}
	c.worker, err = verbs.StartCQWorker(cq, 64, c.onWC)
	return err
}

// postRx posts r's buffer.
func (c *conn) postRx(r *rx) error {
	r.msg = nil
	c.rwr[0] = verbs.RecvWR{ID: wridRx | uint64(r.idx), SGL: r.sgl[:]}
	_, err := c.qp.PostRecv(c.rwr[:])
	return err
}

// repost gives r back to the QP and accounts the credit (kiblnd_post_rx).
func (c *conn) repost(r *rx, k RxRepost) {
	c.mu.Lock()
	if c.getState() != connEstablished {
		c.mu.Unlock()
		return
	}
	if err := c.postRx(r); err != nil {
		c.mu.Unlock()
		c.close(fmt.Errorf("%w: post receive: %w", errConnClosed, err))
		return
	}
	c.flow.Reposted(k)
	failed := c.checkSendsLocked(time.Now())
	c.mu.Unlock()
	if failed != nil {
		c.close(failed)
	}
}

// flowParams are the connection's negotiated flow parameters.
func (c *conn) flowParams() FlowParams {
	cfg := &c.d.cfg
	return FlowParams{
		Version:         c.version,
		QueueDepth:      c.queueDepth,
		HighWater:       HighWater(c.version, cfg.PeerCreditsHiw, cfg.PeerCredits, c.queueDepth),
		ConcurrentSends: ConcurrentSends(c.version, cfg.ConcurrentSends, cfg.PeerCredits, c.queueDepth),
		Keepalive:       max(cfg.Keepalive, 0),
	}
}

// queueTx hands t to the connection (kiblnd_queue_tx).
func (c *conn) queueTx(t *tx) {
	c.mu.Lock()
	if c.getState() != connEstablished {
		c.mu.Unlock()
		c.d.txDone(t, errConnClosed)
		return
	}
	t.conn = c
	t.queued = true
	c.txs[t.cookie] = t
	if n := int64(len(c.txs)); n > c.d.stats.PeakConnTxs.Load() {
		c.d.stats.PeakConnTxs.Store(n) // under c.mu: racy across conns, a statistic
	}
	c.flow.Enqueue(t, t.typ)
	failed := c.checkSendsLocked(time.Now())
	c.mu.Unlock()
	if failed != nil {
		c.close(failed)
	}
}

// checkSendsLocked posts what the flow releases (kiblnd_check_sends).
// It returns an error when a post failed: the caller closes the
// connection once it dropped the lock.
func (c *conn) checkSendsLocked(now time.Time) error {
	d := c.d
	for {
		p, ok := c.flow.Next(now)
		if !ok {
			return nil
		}
		t := p.Tx
		if p.Noop {
			if t = d.txs.get(); t == nil {
				c.flow.Unpost(p)
				return nil // retried on the next completion or tick
			}
			t.typ, t.nob, t.conn = lnetwire.KibNOOP, lnetwire.KibHdrLen, c
			t.deadline = now.Add(d.cfg.Timeout)
			c.txs[t.cookie] = t
			d.stats.TxNoops.Add(1)
			if p.Credits == 0 {
				d.stats.Keepalives.Add(1) // nothing to return: a keepalive
			}
		}
		t.queued = false
		h := lnetwire.KibMsgHdr{Version: c.version, Type: t.typ, Credits: p.Credits, Nob: uint32(t.nob),
			SrcNID: d.nid, SrcStamp: d.incarnation, DstNID: c.nid, DstStamp: c.peerStamp}
		lnetwire.PackKibHdr(t.buf, &h)
		if d.cfg.Cksum {
			lnetwire.SetKibCksum(t.buf[:t.nob])
		}
		t.msgSGL[0] = t.sge
		t.msgSGL[0].Length = uint32(t.nob)
		wrs := append(t.wrs, verbs.SendWR{ID: wridTx | uint64(t.idx), Opcode: verbs.WRSend,
			Flags: verbs.SendSignaled, SGL: t.msgSGL[:]})
		t.wrs = wrs[:0]
		if _, err := c.qp.PostSend(wrs); err != nil {
			c.flow.Unpost(p)
			t.status = fmt.Errorf("%w: post send: %w", errConnClosed, err)
			return t.status
		}
		t.sending++
		c.nsent++
		d.stats.TxMsgs.Add(1)
	}
}

// onWC handles one completion on the CQ worker goroutine.
func (c *conn) onWC(wc *verbs.WC) {
	switch wc.WRID & wridMask {
	case wridRx:
		idx := int(wc.WRID &^ wridMask)
		if idx < len(c.rxs) {
			c.rxComplete(&c.rxs[idx], wc)
		}
	case wridTx, wridRDMA:
		idx := int(wc.WRID &^ wridMask)
		if idx < len(c.d.txs.all) {
			c.txComplete(c.d.txs.all[idx], wc)
		}
	}
}

// txComplete handles a send completion (kiblnd_tx_complete). RDMA WRITEs
// are unsignaled: only their failures arrive here.
func (c *conn) txComplete(t *tx, wc *verbs.WC) {
	failed := wc.Status != verbs.WCSuccess
	if wc.WRID&wridMask == wridRDMA {
		if failed {
			c.mu.Lock()
			if t.status == nil {
				t.status = fmt.Errorf("%w: RDMA: %w", errConnClosed, wc.Err())
			}
			c.mu.Unlock()
			c.close(errConnClosed)
		}
		return
	}
	c.mu.Lock()
	t.sending--
	if c.flow != nil {
		c.flow.SendDone(t.typ)
	}
	if failed {
		if t.status == nil {
			t.status = fmt.Errorf("%w: %w", errConnClosed, wc.Err())
		}
		t.waiting = false
	}
	done := t.sending == 0 && !t.waiting && !t.queued
	if done {
		delete(c.txs, t.cookie)
	}
	var postErr error
	if !failed && c.getState() == connEstablished {
		postErr = c.checkSendsLocked(time.Now())
	}
	c.mu.Unlock()
	if done {
		c.d.txDone(t, nil)
	}
	if failed && wc.Status != verbs.WCWRFlushErr {
		c.close(errConnClosed)
	}
	if postErr != nil {
		c.close(postErr)
	}
}

// rxComplete handles a receive completion (kiblnd_rx_complete).
func (c *conn) rxComplete(r *rx, wc *verbs.WC) {
	d := c.d
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			c.close(fmt.Errorf("%w: receive: %w", errConnClosed, wc.Err()))
		}
		return
	}
	m, err := lnetwire.UnpackKibMsg(r.buf[:wc.ByteLen])
	if err != nil {
		d.stats.Malformed.Add(1)
		d.log.Warn("bad message", "peer", c.nid, "err", err)
		c.close(errProto)
		return
	}
	r.msg = m
	d.stats.RxMsgs.Add(1)
	c.mu.Lock()
	if st := c.getState(); st != connEstablished {
		// Before ESTABLISHED (the peer may send as soon as it saw our
		// RTU): handled once the connection is up.
		if st < connEstablished {
			d.stats.EarlyRx.Add(1)
			c.early = append(c.early, r)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.checkAndHandle(r)
}

// checkAndHandle applies the stamp checks of every received message
// (srcnid, dstnid, both incarnations), then handles it.
func (c *conn) checkAndHandle(r *rx) {
	d, m := c.d, r.msg
	if m.SrcNID() != c.nid || m.DstNID() != d.nid || m.SrcStamp() != c.peerStamp || m.DstStamp() != d.incarnation {
		d.stats.Stale.Add(1)
		c.close(errStaleConn)
		return
	}
	c.handleRx(r)
}

// handleRx processes a received message of an established connection
// (kiblnd_handle_rx).
func (c *conn) handleRx(r *rx) {
	d := c.d
	m := r.msg
	c.lastRx.Store(time.Now().UnixNano())
	c.mu.Lock()
	if err := c.flow.Received(m.Type(), m.Credits()); err != nil {
		c.mu.Unlock()
		d.stats.CreditOverflow.Add(1)
		d.log.Warn("bad credits", "peer", c.nid, "err", err)
		c.close(errProto)
		return
	}
	postErr := c.checkSendsLocked(time.Now())
	c.mu.Unlock()
	if postErr != nil {
		c.close(postErr)
		return
	}
	switch t := m.Type(); t {
	case lnetwire.KibNOOP:
		d.stats.RxNoops.Add(1)
		c.repost(r, RepostFor(c.version, t, false, m.Credits()))
	case lnetwire.KibIMMEDIATE, lnetwire.KibPUTREQ, lnetwire.KibGETREQ:
		err := r.hdr.Decode(m.LNetHdr())
		if err == nil {
			err = d.ni.Parse(&r.hdr, c.nid, r, t != lnetwire.KibIMMEDIATE)
		}
		if err != nil {
			d.stats.ParseRejects.Add(1)
			c.repost(r, RepostPeerCredit)
			c.close(errProto)
		}
	case lnetwire.KibPUTACK:
		c.handlePutAck(r)
	case lnetwire.KibPUTNAK, lnetwire.KibPUTDONE, lnetwire.KibGETDONE:
		want := lnetwire.KibPUTREQ
		switch t {
		case lnetwire.KibPUTNAK:
			d.stats.PutNaks.Add(1)
		case lnetwire.KibPUTDONE:
			want = lnetwire.KibPUTACK
		case lnetwire.KibGETDONE:
			want = lnetwire.KibGETREQ
		}
		cookie, status := m.CompletionCookie(), m.CompletionStatus()
		c.repost(r, RepostFor(c.version, t, false, 0))
		c.handleCompletion(want, cookie, status)
	default:
		d.stats.Malformed.Add(1)
		c.close(errProto)
	}
}

// handleCompletion ends the wait of the tx of type want with cookie
// (kiblnd_handle_completion).
func (c *conn) handleCompletion(want lnetwire.KibMsgType, cookie uint64, status int32) {
	d := c.d
	c.mu.Lock()
	t := c.txs[cookie]
	if t == nil || !t.waiting || t.typ != want {
		c.mu.Unlock()
		d.stats.UnmatchedCompletions.Add(1)
		c.close(errProto)
		return
	}
	switch {
	case status < 0:
		if status == -eNODATA {
			t.status = errNoData
		} else {
			t.status = fmt.Errorf("%w: peer completion status %d", lnd.ErrPeerDown, status)
		}
	case want == lnetwire.KibGETREQ:
		d.ni.SetReplyMsgLen(t.lntmsg[1], int(status))
	}
	t.waiting = false
	done := t.sending == 0 && !t.queued
	if done {
		delete(c.txs, t.cookie)
	}
	c.mu.Unlock()
	if done {
		d.txDone(t, nil)
	}
}

// handlePutAck starts the RDMA of a PUT into the peer's sink and queues
// the PUT_DONE behind it.
func (c *conn) handlePutAck(r *rx) {
	d := c.d
	m := r.msg
	c.mu.Lock()
	t := c.txs[m.AckSrcCookie()]
	if t == nil || !t.waiting || t.typ != lnetwire.KibPUTREQ {
		c.mu.Unlock()
		d.stats.UnmatchedCompletions.Add(1)
		c.close(errProto)
		return
	}
	rd := m.RD()
	t.rdKey = rd.Key()
	t.rdFrags = t.rdFrags[:0]
	for i := range rd.NFrags() {
		t.rdFrags = append(t.rdFrags, rd.Frag(i))
	}
	dst := m.AckDstCookie()
	c.mu.Unlock()
	c.repost(r, RepostReservedCredit)

	// Write what the sink takes: it may have matched fewer bytes than
	// the PUT carries (truncation).
	src := t.lntmsg[0].Payload
	if sz := rd.Size(); int64(src.Len) > sz {
		src = src.Slice(0, int(sz))
	}
	nob, err := d.initRDMA(t, src)
	status := int32(nob)
	if err != nil {
		t.status = err
		t.wrs = t.wrs[:0]
		status = -eMSGSIZE
	}
	lnetwire.PutCompletion(t.buf, dst, status)
	d.stats.RDMABytes.Add(uint64(max(nob, 0)))
	c.mu.Lock()
	if c.getState() != connEstablished || c.txs[t.cookie] != t {
		c.mu.Unlock()
		return // closing: the teardown fails t
	}
	t.typ, t.nob = lnetwire.KibPUTDONE, lnetwire.KibCompletionLen
	t.waiting = false
	t.queued = true
	c.flow.Enqueue(t, t.typ)
	postErr := c.checkSendsLocked(time.Now())
	c.mu.Unlock()
	if postErr != nil {
		c.close(postErr)
	}
}

// recv is Driver.Recv for a message received on c.
func (c *conn) recv(r *rx, msg *lnd.Msg, dst lnd.IOV, rlen int) error {
	d := c.d
	m := r.msg
	if m == nil || c.getState() != connEstablished {
		if msg == nil {
			return nil
		}
		return errConnClosed
	}
	switch m.Type() {
	case lnetwire.KibIMMEDIATE:
		p := m.Payload()
		if rlen > len(p) {
			c.repost(r, RepostPeerCredit)
			c.close(errProto)
			if msg == nil {
				return nil
			}
			return errProto
		}
		if msg != nil {
			dst.CopyFrom(p[:min(dst.Len, rlen)])
		}
		c.repost(r, RepostPeerCredit)
		if msg != nil {
			d.ni.Finalize(msg, nil)
		}
		return nil
	case lnetwire.KibPUTREQ:
		cookie := m.ReqCookie()
		if msg == nil {
			c.repost(r, RepostPeerCredit)
			c.sendCompletion(lnetwire.KibPUTNAK, -eNODATA, cookie)
			return nil
		}
		if dst.Len == 0 {
			c.repost(r, RepostPeerCredit)
			d.ni.Finalize(msg, nil)
			c.sendCompletion(lnetwire.KibPUTNAK, 0, cookie)
			return nil
		}
		t := d.txs.get()
		if t == nil {
			d.stats.NoTx.Add(1)
			c.repost(r, RepostPeerCredit)
			c.sendCompletion(lnetwire.KibPUTNAK, -eNOMEM, cookie)
			return lnd.ErrNoMem
		}
		key, err := d.mapSink(t, dst)
		if err != nil {
			d.unmap(t, false)
			d.txs.put(t)
			c.repost(r, RepostPeerCredit)
			c.sendCompletion(lnetwire.KibPUTNAK, -eIO, cookie)
			return fmt.Errorf("%w: %w", lnd.ErrNoMem, err)
		}
		if t.bounce != nil {
			d.stats.Bounced.Add(1)
		}
		t.lntmsg[0] = msg
		t.typ = lnetwire.KibPUTACK
		lnetwire.PutAckCookies(t.buf, cookie, t.cookie)
		t.nob = lnetwire.KibPutAckBaseLen - lnetwire.KibRDMADescBaseLen +
			lnetwire.PutRDMADesc(t.buf[lnetwire.KibPutAckBaseLen-lnetwire.KibRDMADescBaseLen:], key, t.frags)
		t.waiting = true
		t.deadline = time.Now().Add(d.cfg.Timeout)
		// The buffer goes back without a credit: it returns with PUT_DONE.
		c.repost(r, RepostNoCredit)
		c.queueTx(t)
		return nil
	case lnetwire.KibGETREQ:
		cookie := m.ReqCookie()
		if msg == nil {
			c.repost(r, RepostPeerCredit)
			c.sendCompletion(lnetwire.KibGETDONE, -eNODATA, cookie)
			return nil
		}
		t := d.txs.get()
		if t == nil {
			d.stats.NoTx.Add(1)
			c.repost(r, RepostPeerCredit)
			c.sendCompletion(lnetwire.KibGETDONE, -eNOMEM, cookie)
			return lnd.ErrNoMem
		}
		rd := m.RD()
		t.rdKey = rd.Key()
		for i := range rd.NFrags() {
			t.rdFrags = append(t.rdFrags, rd.Frag(i))
		}
		c.repost(r, RepostPeerCredit)
		t.lntmsg[0] = msg
		nob, err := d.initRDMA(t, dst)
		status := int32(nob)
		if err != nil {
			t.status = err
			t.wrs = t.wrs[:0]
			status = -eMSGSIZE
		}
		d.stats.RDMABytes.Add(uint64(max(nob, 0)))
		lnetwire.PutCompletion(t.buf, cookie, status)
		t.typ, t.nob = lnetwire.KibGETDONE, lnetwire.KibCompletionLen
		t.deadline = time.Now().Add(d.cfg.Timeout)
		c.queueTx(t)
		return nil
	}
	return fmt.Errorf("o2iblnd: Recv for a %v", m.Type())
}

// sendCompletion sends a PUT_NAK or GET_DONE without LNet message.
func (c *conn) sendCompletion(typ lnetwire.KibMsgType, status int32, cookie uint64) {
	d := c.d
	t := d.txs.get()
	if t == nil {
		d.stats.NoTx.Add(1)
		c.close(errConnClosed) // the peer would wait forever
		return
	}
	lnetwire.PutCompletion(t.buf, cookie, status)
	t.typ, t.nob = typ, lnetwire.KibCompletionLen
	t.deadline = time.Now().Add(d.cfg.Timeout)
	c.queueTx(t)
}

// check runs the connection's timers: a setup past its deadline, txs
// past theirs (closing the connection, "Timed out tx/RDMA"), and the
// keepalive NOOP.
func (c *conn) check(now time.Time) {
	st := c.getState()
	if st == connActiveConnect || st == connPassiveWait || st == connInit {
		if now.After(c.deadline) {
			c.d.stats.ConnectFailures.Add(1)
			c.close(fmt.Errorf("%w: connection setup", errTxTimeout))
		}
		return
	}
	if st != connEstablished {
		return
	}
	c.mu.Lock()
	var expired bool
	for _, t := range c.txs {
		if now.After(t.deadline) {
			expired = true
			break
		}
	}
	var postErr error
	if !expired {
		postErr = c.checkSendsLocked(now)
	}
	c.mu.Unlock()
	if expired {
		c.d.stats.TxTimeouts.Add(1)
		c.d.log.Warn("timed out tx/RDMA", "peer", c.nid)
		c.close(errTxTimeout)
	}
	if postErr != nil {
		c.close(postErr)
	}
}

// close starts tearing the connection down (kiblnd_close_conn): every
// message it holds fails with err once the QP is drained.
func (c *conn) close(err error) {
	for {
		st := c.getState()
		if st >= connClosing {
			return
		}
		if c.state.CompareAndSwap(int32(st), int32(connClosing)) {
			break
		}
	}
	c.mu.Lock()
	c.closeErr = err
	c.mu.Unlock()
	c.d.stats.ConnsClosed.Add(1)
	c.d.connClosing(c, err)
	go c.destroy()
}

// destroy drains the QP, fails what the connection still holds, frees
// its resources and lets a reconnect start (the zombie is gone).
func (c *conn) destroy() {
	d := c.d
	c.setupMu.Lock()
	defer c.setupMu.Unlock()
	if c.id != nil && c.qp != nil {
		_ = c.id.Disconnect()
	}
	if c.qp != nil {
		_ = c.qp.Drain()
	}
	if c.worker != nil {
		c.worker.Stop()
	}
	if c.cq != nil {
		wcs := make([]verbs.WC, 16)
		for {
			n, _ := c.cq.Poll(wcs)
			for i := range n {
				c.onWC(&wcs[i])
			}
			if n == 0 {
				break
			}
		}
	}
	c.mu.Lock()
	err := c.closeErr
	var fail []*tx
	for k, t := range c.txs {
		fail = append(fail, t)
		delete(c.txs, k)
	}
	if c.flow != nil {
		c.flow.Drain(nil) // the txs are all in c.txs
	}
	c.early = nil
	c.mu.Unlock()
	for _, t := range fail {
		d.txDone(t, err)
	}
	if c.id != nil {
		_ = c.id.DestroyQP()
		_ = c.id.Destroy()
	}
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
	if c.rxMR != nil {
		_ = c.rxMR.Dereg()
	}
	c.setState(connDisconnected)
	d.connDestroyed(c)
}
