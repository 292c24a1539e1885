package socklnd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Message statuses handed to the core; prebuilt so failure paths do not
// allocate and all match lnd sentinels.
var (
	errStatusCsum = fmt.Errorf("%w: %w", lnd.ErrProto, ErrCsum)
	errConnLost   = fmt.Errorf("%w: connection closed", lnd.ErrPeerDown)
)

const (
	// hdrRoom is a tx's header headroom: ksock_msg_hdr then lnet_hdr.
	hdrRoom = lnetwire.SockMsgHdrLen + lnetwire.HdrSize
	// maxBatchTx bounds the sends gathered into one writev.
	maxBatchTx = 64
	// rxBufSize is the reader's buffer: many small messages per read(2);
	// large payloads bypass it.
	rxBufSize = 64 << 10
)

// spliceAt is a kept payload the writer splices after the iovecs before
// index at.
type spliceAt struct {
	at int
	p  *keptPayload
}

// tx is one message to write: an LNET send (msg != nil) or a NOOP. Its
// header headroom is filled in place. Descriptors are pooled.
type tx struct {
	msg      *lnd.Msg
	buf      [hdrRoom]byte
	nob      int
	deadline time.Time // while queued on a peer without a connection
	// Zero-copy state: cookie and conn are set under Driver.mu when the
	// send waits for a ZC-ACK; refs counts the writer and the pending map,
	// the last one to let go finalizes the message with zcStatus (set by
	// whoever took the send off the map: the ACK, a failed write, the
	// close) and recycles the descriptor. The message is done only when
	// both let go, as ksocknal_tx_done after the last tx reference: the
	// peer's ACK can arrive before the writer is back from the write that
	// carried the payload, and the payload must not be released (and a
	// router buffer reused) under that write.
	cookie   uint64
	conn     *conn
	refs     atomic.Int32
	zcStatus error
	zcDone   bool
	// kept is a forwarded payload to splice from (keep_linux.go), taken
	// off the message by the writer.
	kept *keptPayload
}

func (d *Driver) getTx() *tx {
	select {
	case t := <-d.txPool:
		return t
	default:
		return new(tx)
	}
}

func (d *Driver) putTx(t *tx) {
	t.msg, t.conn, t.cookie, t.nob, t.deadline, t.kept = nil, nil, 0, 0, time.Time{}, nil
	t.zcStatus, t.zcDone = nil, false
	select {
	case d.txPool <- t:
	default:
	}
}

// release drops one reference of a zero-copy send; the last one
// finalizes its message (if zcComplete ran) and recycles it.
func (d *Driver) release(t *tx) {
	if t.refs.Add(-1) == 0 {
		if t.zcDone {
			d.ni.Finalize(t.msg, t.zcStatus)
		}
		d.putTx(t)
	}
}

// zcComplete records how a zero-copy send ended (its taker removed it
// from the pending map) and drops the map's reference.
func (d *Driver) zcComplete(t *tx, status error) {
	t.zcStatus, t.zcDone = status, true
	d.release(t)
}

// rxReq is what Recv hands to the reader: where the payload goes.
type rxReq struct {
	msg  *lnd.Msg
	dst  lnd.IOV
	rlen int
	keep bool // RecvKept: the payload may stay in a pipe (keep_linux.go)
}

// conn is one established TCP connection. One writer and one reader
// goroutine own it; the reader also owns the rx fields, the writer the w
// fields.
type conn struct {
	d       *Driver
	p       *peer
	nc      net.Conn
	src     capReader       // nc under br
	raw     syscall.RawConn // nc's socket for splice(2); nil if not a kernel socket
	br      *bufio.Reader
	typ     lnetwire.SockConnType // local view
	version uint32
	swapped bool   // peer is big-endian: swap ksock_msg headers
	peerInc uint64 // peer's incarnation
	active  bool

	registered bool // in p.conns (guarded by Driver.mu)

	queued atomic.Int64  // sends queued, for load balancing
	lastRx atomic.Int64  // unix ns of the last message
	rxMsgs atomic.Uint64 // LNET messages received

	mu       sync.Mutex // guards txq, acks, ping, closed
	txq      []*tx
	acks     []uint64
	ping     bool
	closed   bool
	closeErr error

	kick    chan struct{} // cap 1: wake the writer
	closing chan struct{} // closed on close

	rxMu   sync.Mutex // guards rxDone against Recv
	rxDone bool
	rxCh   chan rxReq // cap 1: Recv → reader

	// writer-owned
	wq    []*tx
	wacks []uint64
	iov   [][]byte
	bufs  net.Buffers
	zcTx  []*tx
	noops []*tx
	// kept payloads of the batch: each spliced after iov[:at]
	splices []spliceAt
	sout    spliceIO
	more    moreIO // sendmsg(MSG_MORE) of the bytes before a splice

	// reader-owned
	capNext bool     // the last payload was kept: read the next header alone
	sin     spliceIO // splice into a pipe in progress
	rxbuf   [hdrRoom]byte
	hdr     lnetwire.Header
	rxIov   [][]byte
	zcDone  []*tx
}

func newConn(d *Driver, nc net.Conn) *conn {
	c := &conn{
		d:       d,
		nc:      nc,
		raw:     rawConn(nc),
		kick:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		rxCh:    make(chan rxReq, 1),
	}
	c.src = capReader{r: nc, raw: c.raw}
	c.br = bufio.NewReaderSize(&c.src, rxBufSize)
	return c
}

// capReader is the connection as the read buffer sees it: max > 0 caps
// one read, so that after a payload kept in a pipe the reader fetches the
// next header alone rather than up to rxBufSize of a payload it would
// then copy into the next pipe.
//
// With raw set (a kernel socket) reads are raw system calls
// (keep_linux.go rawRead says why); p, n, err and fn are their state.
type capReader struct {
	r   io.Reader
	max int
	raw syscall.RawConn
	p   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

func (r *capReader) Read(p []byte) (int, error) {
	if r.max > 0 && len(p) > r.max {
		p = p[:r.max]
	}
	if r.raw == nil {
		return r.r.Read(p)
	}
	return r.rawRead(p)
}

func (c *conn) String() string {
	return fmt.Sprintf("%s %v v%d %s->%s", c.p.nid, c.typ, c.version, c.nc.LocalAddr(), c.nc.RemoteAddr())
}

func (c *conn) touch() { c.lastRx.Store(time.Now().UnixNano()) }

func (c *conn) lastRxTime() time.Time {
	if n := c.lastRx.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func (c *conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// enqueue queues t for the writer; false if the connection is closing.
func (c *conn) enqueue(t *tx) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.txq = append(c.txq, t)
	c.mu.Unlock()
	c.queued.Add(1)
	c.wake()
	return true
}

// queueAck asks the writer to acknowledge a zero-copy cookie.
func (c *conn) queueAck(cookie uint64) {
	c.mu.Lock()
	if !c.closed {
		c.acks = append(c.acks, cookie)
	}
	c.mu.Unlock()
	c.wake()
}

// queueKeepalive asks the writer for a keepalive NOOP.
func (c *conn) queueKeepalive() {
	c.mu.Lock()
	c.ping = true
	c.mu.Unlock()
	c.wake()
}

// close shuts the connection once: it fails queued sends and the
// zero-copy sends waiting on it, unregisters it from its peer and tells
// the core when the peer has no connection left.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeErr = err
	q := c.txq
	c.txq = nil
	c.mu.Unlock()
	close(c.closing)
	c.nc.Close()

	d := c.d
	var zc []*tx
	last := false
	d.mu.Lock()
	if c.registered {
		p := c.p
		c.registered = false
		for i, x := range p.conns {
			if x == c {
				p.conns = append(p.conns[:i], p.conns[i+1:]...)
				break
			}
		}
		for k, t := range p.zc {
			if t.conn == c {
				delete(p.zc, k)
				zc = append(zc, t)
			}
		}
		if t := c.lastRxTime(); t.After(p.lastRx) {
			p.lastRx = t
		}
		last = len(p.conns) == 0
		d.stats.ConnsActive.Add(-1)
		d.stats.ConnsClosed.Add(1)
	}
	d.mu.Unlock()

	status := errConnLost
	if errors.Is(err, lnd.ErrShutdown) {
		status = lnd.ErrShutdown
	}
	c.queued.Add(-int64(len(q)))
	d.failTxs(q, status)
	for _, t := range zc {
		d.zcComplete(t, status)
	}
	if c.p != nil {
		d.log.Debug("connection closed", "conn", c, "err", err)
	}
	if last && !errors.Is(err, lnd.ErrShutdown) && !errors.Is(err, errStale) {
		d.ni.NotifyPeer(c.p.nid, false, time.Now())
	}
}

// start launches the reader and writer of a registered connection.
func (c *conn) start() {
	c.d.wg.Add(2)
	go c.writer()
	go c.reader()
}

// writer drains the queue into batched writev calls until the connection
// closes.
func (c *conn) writer() {
	defer c.d.wg.Done()
	for {
		select {
		case <-c.kick:
		case <-c.closing:
			return
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		c.wq, c.txq = c.txq, c.wq[:0]
		c.wacks, c.acks = c.acks, c.wacks[:0]
		ping := c.ping
		c.ping = false
		c.mu.Unlock()
		for i := 0; i < len(c.wq) || len(c.wacks) > 0 || ping; {
			n := min(len(c.wq)-i, maxBatchTx)
			err := c.flush(c.wq[i:i+n], ping)
			ping = false
			clear(c.wq[i : i+n])
			i += n
			if err != nil {
				rest := c.wq[i:]
				c.queued.Add(-int64(len(rest)))
				c.d.failTxs(rest, errConnLost)
				c.close(err)
				return
			}
		}
		c.wq = c.wq[:0]
	}
}

// flush writes one batch: NOOPs for pending ACKs and keepalive, then the
// sends, in a single vectored write. It finalizes what it wrote (or
// hands zero-copy sends to the pending map) and on error everything it
// owned.
func (c *conn) flush(batch []*tx, ping bool) error {
	d := c.d
	v1 := c.version == lnetwire.SockProtoV1
	for _, t := range batch {
		t.kept = d.takeKept(t.msg)
	}
	// Register zero-copy requests before the bytes leave: the ACK may
	// come back before Write returns. A kept payload asks none: splice
	// hands its pages to the socket by reference, which the kernel
	// counts, so nothing waits for the peer before it can be reused.
	c.zcTx = c.zcTx[:0]
	if !v1 && !d.cfg.DisableZCRequest {
		for _, t := range batch {
			if t.msg != nil && t.kept == nil && t.msg.Payload.Len >= d.cfg.ZCMinPayload {
				c.zcTx = append(c.zcTx, t)
			}
		}
		if len(c.zcTx) > 0 {
			d.mu.Lock()
			for _, t := range c.zcTx {
				t.cookie = c.p.zcNext
				c.p.zcNext++
				t.conn = c
				t.refs.Store(2)
				c.p.zc[t.cookie] = t
			}
			d.mu.Unlock()
		}
	}

	// Header fields, ACK piggybacking.
	ai := 0
	for _, t := range batch {
		h := lnetwire.SockMsgHdr(t.buf[:lnetwire.SockMsgHdrLen])
		h.SetType(lnetwire.SockMsgLNet)
		h.SetCsum(0)
		h.SetZCReq(t.cookie)
		ack := uint64(0)
		if !v1 && ai < len(c.wacks) {
			ack = c.wacks[ai]
			ai++
			d.stats.ZCAcksSent.Add(1)
		}
		h.SetZCAck(ack)
	}
	c.noops = c.noops[:0]
	if !v1 {
		c.buildAckNoops(c.wacks[ai:])
		if ping && c.version >= lnetwire.SockProtoV3 {
			t := d.getTx()
			lnetwire.SockMsgHdr(t.buf[:lnetwire.SockMsgHdrLen]).Encode(&lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCAck: lnetwire.SockKeepalivePing})
			c.noops = append(c.noops, t)
			d.stats.KeepalivesSent.Add(1)
		}
	}
	c.wacks = c.wacks[:0]

	c.iov = c.iov[:0]
	for _, t := range c.noops {
		c.iov = append(c.iov, t.buf[:lnetwire.SockMsgHdrLen])
	}
	for _, t := range batch {
		start := len(c.iov)
		if v1 {
			c.iov = append(c.iov, t.buf[lnetwire.SockMsgHdrLen:])
		} else {
			c.iov = append(c.iov, t.buf[:])
		}
		if t.kept != nil {
			c.splices = append(c.splices, spliceAt{at: len(c.iov), p: t.kept})
			t.kept = nil
		} else {
			c.iov = t.msg.Payload.AppendBuffers(c.iov)
		}
		if d.cfg.EnableCsum && !v1 {
			h := lnetwire.SockMsgHdr(t.buf[:lnetwire.SockMsgHdrLen])
			sum := lnetwire.SockCsum(0).UpdateHdr(h).Update(t.buf[lnetwire.SockMsgHdrLen:])
			for _, b := range c.iov[start+1:] {
				sum = sum.Update(b)
			}
			h.SetCsum(sum.Sum())
		}
	}
	if d.cfg.EnableCsum {
		for _, t := range c.noops {
			h := lnetwire.SockMsgHdr(t.buf[:lnetwire.SockMsgHdrLen])
			h.SetCsum(lnetwire.SockCsum(0).UpdateHdr(h).Sum())
		}
	}

	c.nc.SetWriteDeadline(time.Now().Add(d.cfg.SockTimeout))
	err := c.write()

	d.stats.TxNoops.Add(uint64(len(c.noops)))
	for i, t := range c.noops {
		d.putTx(t)
		c.noops[i] = nil
	}
	c.queued.Add(-int64(len(batch)))
	if err != nil {
		// Zero-copy sends still pending are ours to fail.
		var failed []*tx
		if len(c.zcTx) > 0 {
			d.mu.Lock()
			for _, t := range c.zcTx {
				if c.p.zc[t.cookie] == t {
					delete(c.p.zc, t.cookie)
					failed = append(failed, t)
				}
			}
			d.mu.Unlock()
		}
		for _, t := range failed {
			d.zcComplete(t, errConnLost)
		}
		for _, t := range batch {
			if t.conn == nil {
				d.ni.Finalize(t.msg, errConnLost)
				d.putTx(t)
			}
		}
		for _, t := range c.zcTx {
			d.release(t)
		}
		clear(c.zcTx)
		return err
	}
	for _, t := range batch {
		d.stats.TxMsgs.Add(1)
		// Not t.msg: a ZC-ACK may already have finalized it.
		d.stats.TxBytes.Add(uint64(t.nob - hdrRoom))
		if t.conn == nil {
			d.ni.Finalize(t.msg, nil)
			d.putTx(t)
		}
	}
	// Read t.conn above before letting go: after release the ACK path may
	// recycle the descriptor.
	for _, t := range c.zcTx {
		d.release(t)
	}
	clear(c.zcTx)
	return nil
}

// write writes the batch's iovecs (sendmsg on a kernel socket, else
// writev), splicing kept payloads in their places, and gives the pipes
// back.
func (c *conn) write() error {
	var err error
	start := 0
	for i := range c.splices {
		sp := &c.splices[i]
		if err == nil {
			err = c.writeMore(c.iov[start:sp.at])
		}
		if err == nil {
			err = c.spliceOut(sp.p, sp.at < len(c.iov) || i+1 < len(c.splices))
		}
		sp.p.l.putPipe(sp.p)
		start = sp.at
	}
	if err == nil && c.raw != nil {
		err = c.sendBufs(c.iov[start:], false)
	} else if err == nil {
		c.bufs = c.iov[start:]
		_, err = c.bufs.WriteTo(c.nc)
	}
	clear(c.iov)
	c.bufs = nil
	clear(c.splices)
	c.splices = c.splices[:0]
	return err
}

// buildAckNoops turns the ACKs not piggybacked into NOOPs: V3 packs a run
// of consecutive cookies as a range [lo, hi] (zc_cookies = {lo, hi}) and
// two others as a pair ({hi, lo}); V2 sends one cookie per NOOP.
func (c *conn) buildAckNoops(acks []uint64) {
	d := c.d
	for len(acks) > 0 {
		m := lnetwire.SockMsg{Type: lnetwire.SockMsgNOOP, ZCAck: acks[0]}
		used := 1
		if c.version >= lnetwire.SockProtoV3 && len(acks) > 1 {
			run := 1
			for run < len(acks) && acks[run] == acks[0]+uint64(run) {
				run++
			}
			switch {
			case run > 1:
				m.ZCReq, m.ZCAck = acks[0], acks[run-1]
				used = run
			case acks[1] > acks[0]:
				m.ZCReq, m.ZCAck = acks[1], acks[0]
				used = 2
			case acks[1] < acks[0]:
				m.ZCReq, m.ZCAck = acks[0], acks[1]
				used = 2
			}
		}
		t := d.getTx()
		lnetwire.SockMsgHdr(t.buf[:lnetwire.SockMsgHdrLen]).Encode(&m)
		c.noops = append(c.noops, t)
		d.stats.ZCAcksSent.Add(uint64(used))
		acks = acks[used:]
	}
}

// reader receives messages until the connection fails, then closes it
// and fails a Recv that raced with the end.
func (c *conn) reader() {
	defer c.d.wg.Done()
	err := c.readLoop()
	c.close(err)
	c.rxMu.Lock()
	c.rxDone = true
	var pending rxReq
	select {
	case pending = <-c.rxCh:
	default:
	}
	c.rxMu.Unlock()
	if pending.msg != nil {
		c.d.ni.Finalize(pending.msg, errConnLost)
	}
}

// malformed counts a framing error and returns the error that closes the
// connection.
func (c *conn) malformed(what string, err error) error {
	c.d.stats.Malformed.Add(1)
	c.d.log.Warn("malformed message, closing connection", "conn", c, "what", what, "err", err)
	return fmt.Errorf("%w: %s: %v", ErrMalformed, what, err)
}

func (c *conn) readLoop() error {
	d := c.d
	sh := lnetwire.SockMsgHdr(c.rxbuf[:lnetwire.SockMsgHdrLen])
	lh := c.rxbuf[lnetwire.SockMsgHdrLen:]
	for {
		var sum lnetwire.SockCsum
		var want uint32
		var zcReq uint64
		if c.version >= lnetwire.SockProtoV2 {
			if c.capNext && c.br.Buffered() == 0 {
				c.src.max = hdrRoom
			}
			if _, err := io.ReadFull(c.br, c.rxbuf[:lnetwire.SockMsgHdrLen]); err != nil {
				return err
			}
			if c.swapped {
				lnetwire.SwapSockMsgHdr(c.rxbuf[:lnetwire.SockMsgHdrLen])
			}
			if _, err := lnetwire.ParseSockMsgHdr(sh); err != nil {
				return c.malformed("ksock_msg header", err)
			}
			c.touch()
			if want = sh.Csum(); want != 0 {
				sum = sum.UpdateHdr(sh)
			}
			if sh.Type() == lnetwire.SockMsgNOOP {
				if want != 0 && sum.Sum() != want {
					d.stats.CsumErrors.Add(1)
					return ErrCsum
				}
				d.stats.RxNoops.Add(1)
				if acks, ok := sh.ZCAcks(); ok && !sh.IsKeepalive() {
					d.handleZCAck(c, acks)
				}
				continue
			}
			if acks, ok := sh.ZCAcks(); ok {
				d.handleZCAck(c, acks)
			}
			zcReq = sh.ZCReq()
		}
		if _, err := io.ReadFull(c.br, lh); err != nil {
			return err
		}
		c.src.max = 0
		if want != 0 {
			sum = sum.Update(lh)
		}
		if err := c.hdr.Decode(lh); err != nil {
			return c.malformed("lnet_hdr", err)
		}
		if c.hdr.Type == lnetwire.MsgHELLO {
			return c.malformed("lnet_hdr", errors.New("HELLO on an established connection"))
		}
		rlen := int(c.hdr.PayloadLength)
		if rlen > lnd.MaxPayload {
			d.stats.Oversized.Add(1)
			d.stats.Malformed.Add(1)
			d.log.Warn("oversized message, closing connection", "conn", c, "payload_length", c.hdr.PayloadLength)
			return fmt.Errorf("%w: payload_length %d > %d", ErrMalformed, rlen, lnd.MaxPayload)
		}
		c.touch()
		if rlen > 0 {
			c.nc.SetReadDeadline(time.Now().Add(d.cfg.SockTimeout))
		}
		if err := d.ni.Parse(&c.hdr, c.p.nid, c, false); err != nil {
			d.stats.ParseRejects.Add(1)
			d.log.Warn("header refused, closing connection", "conn", c, "hdr", c.hdr.String(), "err", err)
			return fmt.Errorf("%w: %v", lnd.ErrProto, err)
		}
		var req rxReq
		select {
		case req = <-c.rxCh:
		case <-c.closing:
			return errConnLost
		}
		var n int
		var err error
		var kept *keptPayload
		if req.keep && req.msg != nil && want == 0 {
			kept, err = c.readKept(req.dst, rlen)
			if err == nil {
				n = rlen
				if kept != nil {
					req.msg.LNDPrivate = kept
				}
			}
			c.capNext = kept != nil
		} else {
			n, err = c.readPayload(req, rlen, &sum, want != 0)
			c.capNext = false
		}
		if rlen > 0 {
			c.nc.SetReadDeadline(time.Time{})
		}
		if err != nil {
			if req.msg != nil {
				d.ni.Finalize(req.msg, errConnLost)
			}
			return err
		}
		if want != 0 && sum.Sum() != want {
			d.stats.CsumErrors.Add(1)
			if req.msg != nil {
				d.ni.Finalize(req.msg, errStatusCsum)
			}
			return ErrCsum
		}
		d.stats.RxMsgs.Add(1)
		c.rxMsgs.Add(1)
		d.stats.RxBytes.Add(uint64(n))
		if req.msg != nil {
			d.ni.Finalize(req.msg, nil)
		}
		if zcReq != 0 {
			c.queueAck(zcReq)
		}
	}
}

// readPayload reads rlen payload bytes: the first dst.Len straight into
// the destination, the rest discarded. It returns the bytes placed.
func (c *conn) readPayload(req rxReq, rlen int, sum *lnetwire.SockCsum, csum bool) (int, error) {
	n := 0
	if req.msg != nil && req.dst.Len > 0 {
		dst := req.dst.Slice(0, min(req.dst.Len, rlen))
		c.rxIov = dst.AppendBuffers(c.rxIov[:0])
		for _, b := range c.rxIov {
			if _, err := io.ReadFull(c.br, b); err != nil {
				clear(c.rxIov)
				return n, err
			}
			if csum {
				*sum = sum.Update(b)
			}
			n += len(b)
		}
		clear(c.rxIov)
	}
	for left := rlen - n; left > 0; {
		if !csum {
			k, err := c.br.Discard(left)
			left -= k
			if err != nil {
				return n, err
			}
			continue
		}
		b, err := c.br.Peek(min(left, c.br.Size()))
		if len(b) == 0 && err != nil {
			return n, err
		}
		if len(b) == 0 {
			b, err = c.br.Peek(1)
			if err != nil {
				return n, err
			}
		}
		*sum = sum.Update(b)
		c.br.Discard(len(b))
		left -= len(b)
	}
	return n, nil
}

// handleZCAck completes the sends a peer acknowledged. Called by c's
// reader only (it uses the reader-owned scratch slice).
func (d *Driver) handleZCAck(c *conn, a lnetwire.SockZCAcks) {
	done := c.zcDone[:0]
	d.mu.Lock()
	zc := c.p.zc
	switch {
	case !a.Range:
		done = takeZC(zc, a.Lo, done)
		if a.Hi != a.Lo {
			done = takeZC(zc, a.Hi, done)
		}
	case a.Count() <= uint64(len(zc)):
		for k := a.Lo; ; k++ {
			done = takeZC(zc, k, done)
			if k == a.Hi {
				break
			}
		}
	default:
		// A range wider than what is pending: scan the map instead.
		for k, t := range zc {
			if a.Contains(k) {
				delete(zc, k)
				done = append(done, t)
			}
		}
	}
	d.mu.Unlock()
	d.stats.ZCAcksRecv.Add(uint64(len(done)))
	if unknown := a.Count() - uint64(len(done)); unknown > 0 {
		d.stats.ZCAcksUnknown.Add(unknown)
	}
	for i, t := range done {
		d.zcComplete(t, nil)
		done[i] = nil
	}
	c.zcDone = done[:0]
}

// takeZC moves the pending send with cookie k, if any, from zc to done.
func takeZC(zc map[uint64]*tx, k uint64, done []*tx) []*tx {
	if t, ok := zc[k]; ok {
		delete(zc, k)
		done = append(done, t)
	}
	return done
}
