// Package rping implements rping (rdma-core's librdmacm/examples/rping)
// on softib: an RDMA CM connection in the TCP port space (default port
// 7174) and the ping loop of tool-protocols.md §4, so that either end may
// be the real rping on Linux rxe.
//
// One iteration, every SEND being a 16-byte big-endian [Info]:
//
//	client: SEND info of its start buffer (the ping data)
//	server: RDMA READ of it, then SEND "go ahead"
//	client: SEND info of its sink (rdma) buffer
//	server: RDMA WRITE of the data (strlen + 1 bytes), then SEND "go ahead"
//	client: with -V compare the start and sink buffers
//
// The data is "rdma-ping-N: " followed by characters cycling through
// 'A'..'z' (see [Pattern]); -v prints it as rping does ("ping data: ..."
// on the client, "server ping data: ..." on the server).
package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"softib/rdmacm"
	"softib/tools/internal/rdmautil"
	"softib/verbs"
)

// Config is one rping run. Zero values mean rping's defaults.
type Config struct {
	// Server selects -s; otherwise this end is the client (-c).
	Server bool
	// Addr is -a: the address the server binds (unspecified: every
	// device) or the server the client connects to.
	Addr netip.Addr
	// Source is -I: the client's source address (zero: any).
	Source netip.Addr
	// Port is -p (7174).
	Port uint16
	// Count is -C: pings of the client (0 = until interrupted).
	Count int
	// Size is -S: ping data size (64; MinSize..MaxSize).
	Size int
	// Verbose (-v) prints the ping data; Validate (-V) compares it.
	Verbose, Validate bool
	// Debug (-d) prints rping's debug lines.
	Debug bool
	// Persistent (-P) keeps the server accepting connections.
	Persistent bool
	// SelfQP (-q) creates and moves the QP itself instead of through
	// RDMA CM (rdma_init_qp_attr + rdma_establish).
	SelfQP bool
	// Out and Err receive rping's stdout and stderr lines (nil: discard).
	Out, Err io.Writer
	// Progress, if set, receives a line every few seconds while the
	// client's connect waits for the server's CM.
	Progress io.Writer
	// CMTimeout is how long the manager's CM waits for a reply to a
	// connect (0: rdmacm's default, about 74 s); progress lines and the
	// no-reply message quote it.
	CMTimeout time.Duration
	// Ready, if set, is called with the listening address once the
	// server listens.
	Ready func(netip.AddrPort)
}

// Result counts what a run did.
type Result struct {
	// Pings is the number of completed iterations (all connections).
	Pings int
	// Conns is the number of connections served or made.
	Conns int
}

// Errors of a run; test with errors.Is.
var (
	// ErrMismatch is -V finding the sink different from the start buffer.
	ErrMismatch = errors.New("rping: data mismatch")
	// ErrCM reports a failed RDMA CM step (REJECTED, UNREACHABLE, ...).
	ErrCM = errors.New("rping: connection failed")
	// ErrCompletion reports a failed work completion.
	ErrCompletion = errors.New("rping: completion error")
)

// errDisconnected ends a loop when the peer disconnects (rping's
// DISCONNECTED state, 10).
var errDisconnected = errors.New("rping: disconnected")

// stateDisconnected is rping's numeric DISCONNECTED state, printed in
// its "wait for ... state %d" lines.
const stateDisconnected = 10

func (c *Config) setDefaults() {
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Err == nil {
		c.Err = io.Discard
	}
	if !c.Addr.IsValid() && c.Server {
		c.Addr = netip.IPv4Unspecified()
	}
}

func (c *Config) validate() error {
	if c.Size < MinSize || c.Size > MaxSize {
		return fmt.Errorf("invalid size %d (valid range is %d to %d)", c.Size, MinSize, MaxSize+1)
	}
	if c.Count < 0 {
		return fmt.Errorf("invalid count %d", c.Count)
	}
	if !c.Server && (!c.Addr.IsValid() || c.Addr.IsUnspecified()) {
		return errors.New("client needs the server address (-a)")
	}
	return nil
}

// session is one rping process: its event channel and the dispatcher
// that routes CM events to connections.
type session struct {
	cfg  *Config
	m    *rdmacm.Manager
	ch   *rdmacm.EventChannel
	reqs chan *rdmacm.Event
	mu   sync.Mutex // serialises output lines of persistent-server connections
}

// Run runs rping with the devices of m until the client's count is done,
// the (non-persistent) server's client disconnects, or ctx ends.
func Run(ctx context.Context, m *rdmacm.Manager, cfg Config) (Result, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	s := &session{cfg: &cfg, m: m, ch: rdmacm.NewEventChannel(), reqs: make(chan *rdmacm.Event, 16)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.ch.Close()
	go s.dispatch(ctx)
	if cfg.Server {
		return s.server(ctx)
	}
	return s.client(ctx)
}

func (s *session) debugf(format string, args ...any) {
	if s.cfg.Debug {
		s.printf(s.cfg.Out, format, args...)
	}
}

func (s *session) printf(w io.Writer, format string, args ...any) {
	s.mu.Lock()
	fmt.Fprintf(w, format, args...)
	s.mu.Unlock()
}

// dispatch hands CONNECT_REQUESTs to the server loop and every other
// event to the connection owning the ID.
func (s *session) dispatch(ctx context.Context) {
	for {
		ev, err := s.ch.GetEvent(ctx)
		if err != nil {
			return
		}
		c, _ := ev.ID.Context().(*conn)
		rel := "parent"
		if c != nil && s.cfg.Server {
			rel = "child"
		}
		s.debugf("cma_event type %s cma_id %p (%s)\n", "RDMA_CM_EVENT_"+ev.Type.String(), ev.ID, rel)
		if ev.Type == rdmacm.EventConnectRequest {
			select {
			case s.reqs <- ev:
			case <-ctx.Done():
				return
			}
			continue
		}
		if c != nil {
			c.post(ctx, note{cm: ev})
		}
	}
}

// note is one thing a connection waits for: a CM event or a completion.
type note struct {
	cm   *rdmacm.Event
	wc   verbs.WC
	info Info // a receive's message, parsed before the buffer is reused
}

// conn is one rping connection with rping's buffers.
type conn struct {
	s       *session
	id      *rdmacm.ID
	cq      verbs.CQ
	qp      verbs.QP
	ownQP   bool // -q: created here, destroyed here
	noReply bool // the connect ended with UNREACHABLE -ETIMEDOUT: no CM answered
	recvMR  verbs.MR
	sendMR  verbs.MR
	rdmaMR  verbs.MR
	startMR verbs.MR // client only
	notes   chan note
	done    chan struct{} // closed by release: notes are no longer read
	stop    context.CancelFunc
	wg      sync.WaitGroup

	// Work requests and SGEs reused by every post.
	recvWR           [1]verbs.RecvWR
	recvSGE          [1]verbs.SGE
	sendWR, rdmaWR   [1]verbs.SendWR
	sendSGE, rdmaSGE [1]verbs.SGE
}

func newConn(s *session, id *rdmacm.ID) *conn {
	return &conn{s: s, id: id, notes: make(chan note, 64), done: make(chan struct{})}
}

func (c *conn) post(ctx context.Context, n note) {
	select {
	case c.notes <- n:
	case <-c.done:
	case <-ctx.Done():
	}
}

// setup creates the CQ, QP and buffers of a connection on id's device and
// posts the receive (rping_setup_qp, rping_setup_buffers).
func (s *session) setup(ctx context.Context, c *conn) (err error) {
	dev, pd := c.id.Device(), c.id.PD()
	if dev == nil || pd == nil {
		return fmt.Errorf("%w: no device for %v", ErrCM, c.id.LocalAddr())
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.cq, err = rdmautil.NewCQ(dev, 2*SQDepth); err != nil {
		return fmt.Errorf("ibv_create_cq failed: %w", err)
	}
	attr := verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: SQDepth, MaxRecvWR: RQDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if s.cfg.SelfQP {
		if c.qp, err = pd.CreateQP(&attr); err != nil {
			return fmt.Errorf("ibv_create_qp: %w", err)
		}
		c.ownQP = true
		if err = rdmautil.ToInit(c.qp, 1, 0); err != nil {
			return fmt.Errorf("ibv_modify_qp: %w", err)
		}
	} else if c.qp, err = c.id.CreateQP(pd, &attr); err != nil {
		return fmt.Errorf("rdma_create_qp: %w", err)
	}
	s.debugf("created qp %p\n", c.qp)
	const rdmaAccess = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if c.recvMR, err = pd.RegMR(make([]byte, InfoLen), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("recv_buf reg_mr failed: %w", err)
	}
	if c.sendMR, err = pd.RegMR(make([]byte, InfoLen), 0); err != nil {
		return fmt.Errorf("send_buf reg_mr failed: %w", err)
	}
	if c.rdmaMR, err = pd.RegMR(make([]byte, s.cfg.Size), rdmaAccess); err != nil {
		return fmt.Errorf("rdma_buf reg_mr failed: %w", err)
	}
	if !s.cfg.Server {
		if c.startMR, err = pd.RegMR(make([]byte, s.cfg.Size), rdmaAccess); err != nil {
			return fmt.Errorf("start_buf reg_mr failed: %w", err)
		}
	}
	s.debugf("allocated & registered buffers...\n")
	if err = c.postRecv(); err != nil {
		return fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	cctx, stop := context.WithCancel(ctx)
	c.stop = stop
	c.wg.Add(1)
	go c.pollCQ(cctx)
	return nil
}

// postRecv posts the info receive; the work request lives in the
// connection so that re-posting allocates nothing.
func (c *conn) postRecv() error {
	c.recvSGE[0] = c.recvMR.SGE(0, InfoLen)
	c.recvWR[0] = verbs.RecvWR{ID: 1, SGL: c.recvSGE[:]}
	_, err := c.qp.PostRecv(c.recvWR[:])
	return err
}

// pollCQ is rping's CQ thread: it parses and re-posts receives and hands
// every completion to the connection's loop.
func (c *conn) pollCQ(ctx context.Context) {
	defer c.wg.Done()
	w := rdmautil.Waiter{CQ: c.cq, Spin: 200}
	var wcs [4]verbs.WC
	for {
		n, err := w.Wait(ctx, wcs[:])
		if err != nil {
			return
		}
		for _, wc := range wcs[:n] {
			nt := note{wc: wc}
			if wc.Status == verbs.WCSuccess && wc.Opcode == verbs.WCRecv {
				c.s.debugf("recv completion\n")
				if wc.ByteLen == InfoLen {
					nt.info, _ = ParseInfo(c.recvMR.Buf()[:InfoLen])
				}
				if err := c.postRecv(); err != nil {
					c.s.printf(c.s.cfg.Err, "post recv error: %v\n", err)
				}
			}
			c.post(ctx, nt)
		}
	}
}

// release tears the connection's verbs objects down.
func (c *conn) release() {
	close(c.done)
	if c.stop != nil {
		c.stop()
		c.wg.Wait()
	}
	if c.ownQP && c.qp != nil {
		c.qp.Destroy()
	} else if c.qp != nil {
		c.id.DestroyQP()
	}
	for _, mr := range []verbs.MR{c.recvMR, c.sendMR, c.rdmaMR, c.startMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if c.cq != nil {
		c.cq.Destroy()
	}
}

// await returns the next completion of opcode want, skipping send
// completions and flushes; CM events end the wait as rping's state
// machine does.
func (c *conn) await(ctx context.Context, want verbs.WCOpcode) (note, error) {
	s := c.s
	for {
		var n note
		select {
		case n = <-c.notes:
		case <-ctx.Done():
			return note{}, ctx.Err()
		}
		if e := n.cm; e != nil {
			switch e.Type {
			case rdmacm.EventEstablished:
				s.debugf("ESTABLISHED\n")
				continue
			case rdmacm.EventDisconnected:
				side := "client"
				if s.cfg.Server {
					side = "server"
				}
				s.printf(s.cfg.Err, "%s DISCONNECT EVENT...\n", side)
				return note{}, errDisconnected
			case rdmacm.EventTimewaitExit:
				continue
			}
			return note{}, cmFailure(s, e)
		}
		wc := n.wc
		switch {
		case wc.Status == verbs.WCWRFlushErr:
			continue
		case wc.Status != verbs.WCSuccess:
			s.printf(s.cfg.Err, "cq completion failed status %d\n", int(wc.Status))
			return note{}, fmt.Errorf("%w: %v (%v)", ErrCompletion, wc.Status, wc.Opcode)
		case wc.Opcode == verbs.WCSend:
			s.debugf("send completion\n")
			continue
		case wc.Opcode == want:
			switch want {
			case verbs.WCRDMARead:
				s.debugf("rdma read completion\n")
			case verbs.WCRDMAWrite:
				s.debugf("rdma write completion\n")
			case verbs.WCRecv:
				if wc.ByteLen != InfoLen {
					s.printf(s.cfg.Err, "Received bogus data, size %d\n", wc.ByteLen)
					return note{}, fmt.Errorf("%w: %d bytes", ErrBadInfo, wc.ByteLen)
				}
			}
			return n, nil
		}
		s.debugf("unknown!!!!! completion\n")
		return note{}, fmt.Errorf("%w: unexpected %v completion", ErrCompletion, wc.Opcode)
	}
}

// cmFailure prints rping's line for a failed CM event and returns the
// error.
func cmFailure(s *session, e *rdmacm.Event) error {
	s.printf(s.cfg.Err, "cma event %s, error %d\n", "RDMA_CM_EVENT_"+e.Type.String(), e.Status)
	if e.Err != nil {
		return fmt.Errorf("%w: %v (status %d): %w", ErrCM, e.Type, e.Status, e.Err)
	}
	return fmt.Errorf("%w: %v (status %d)", ErrCM, e.Type, e.Status)
}

// send posts a signaled SEND of the info message in the send buffer.
func (c *conn) send(m Info) error {
	buf := c.sendMR.Buf()
	m.Append(buf[:0])
	c.sendSGE[0] = c.sendMR.SGE(0, InfoLen)
	c.sendWR[0] = verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: c.sendSGE[:]}
	_, err := c.qp.PostSend(c.sendWR[:])
	if err != nil {
		c.s.printf(c.s.cfg.Err, "post send error %v\n", err)
	}
	return err
}

// rdma posts a signaled RDMA READ or WRITE between the rdma buffer and
// the peer's buffer.
func (c *conn) rdma(op verbs.WROpcode, length int, remote Info) error {
	c.rdmaSGE[0] = c.rdmaMR.SGE(0, length)
	c.rdmaWR[0] = verbs.SendWR{ID: 3, Opcode: op, Flags: verbs.SendSignaled, SGL: c.rdmaSGE[:],
		RemoteAddr: remote.Buf, RKey: remote.RKey}
	_, err := c.qp.PostSend(c.rdmaWR[:])
	if err != nil {
		c.s.printf(c.s.cfg.Err, "post send error %v\n", err)
	}
	return err
}

// waitFor maps a disconnect during a wait to rping's message and a clean
// end, like rping's "wait for ... state 10" followed by success.
func (c *conn) waitFor(ctx context.Context, want verbs.WCOpcode, stateName string) (note, bool, error) {
	n, err := c.await(ctx, want)
	if errors.Is(err, errDisconnected) {
		c.s.printf(c.s.cfg.Err, "wait for %s state %d\n", stateName, stateDisconnected)
		return note{}, true, nil
	}
	return n, false, err
}

// selfModify moves a -q QP through INIT, RTR and RTS with the CM's
// attributes (rping_self_modify_qp).
func (c *conn) selfModify() error {
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		a, m, err := c.id.InitQPAttr(st)
		if err != nil {
			return err
		}
		if err := c.qp.Modify(&a, m); err != nil {
			return err
		}
	}
	return nil
}

// connParam is rping_init_conn_param.
func (c *conn) connParam() *rdmacm.ConnParam {
	p := &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if c.ownQP {
		p.QPNum = c.qp.QPN()
	}
	return p
}

// disconnect ends the connection (rping_disconnect).
func (c *conn) disconnect() {
	if c.ownQP {
		_ = c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState)
	}
	_ = c.id.Disconnect()
}

// ---- server ----

func (s *session) server(ctx context.Context) (Result, error) {
	var res Result
	lis, err := s.m.CreateID(s.ch, nil, rdmacm.PSTCP)
	if err != nil {
		return res, fmt.Errorf("rdma_create_id: %w", err)
	}
	defer lis.Destroy()
	if err := lis.BindAddr(netip.AddrPortFrom(s.cfg.Addr, s.cfg.Port)); err != nil {
		return res, fmt.Errorf("rdma_bind_addr: %w", err)
	}
	s.debugf("rdma_bind_addr successful\n")
	s.debugf("rdma_listen\n")
	if err := lis.Listen(3); err != nil {
		return res, fmt.Errorf("rdma_listen: %w", err)
	}
	if s.cfg.Ready != nil {
		s.cfg.Ready(lis.LocalAddr())
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for {
		var req *rdmacm.Event
		select {
		case req = <-s.reqs:
		case <-ctx.Done():
			wg.Wait()
			if firstErr != nil {
				return res, firstErr
			}
			return res, ctx.Err()
		}
		s.debugf("child cma %p\n", req.ID)
		if !s.cfg.Persistent {
			n, err := s.serve(ctx, req.ID)
			return Result{Pings: n, Conns: 1}, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := s.serve(ctx, req.ID)
			mu.Lock()
			res.Pings += n
			res.Conns++
			if err != nil && firstErr == nil && ctx.Err() == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
}

// serve runs one server connection: accept, then the read/write loop
// until the client disconnects.
func (s *session) serve(ctx context.Context, id *rdmacm.ID) (int, error) {
	c := newConn(s, id)
	id.SetContext(c)
	defer id.Destroy()
	if err := s.setup(ctx, c); err != nil {
		_ = id.Reject(nil)
		return 0, err
	}
	defer c.release()
	s.debugf("accepting client connection request\n")
	var p *rdmacm.ConnParam
	if s.cfg.SelfQP {
		if err := c.selfModify(); err != nil {
			_ = id.Reject(nil)
			return 0, fmt.Errorf("rping_self_modify_qp: %w", err)
		}
		p = c.connParam()
	}
	if err := id.Accept(p); err != nil {
		return 0, fmt.Errorf("rdma_accept: %w", err)
	}
	pings, err := s.serverLoop(ctx, c)
	c.disconnect()
	if err != nil {
		s.printf(s.cfg.Err, "rping server failed: %d\n", -1)
	}
	return pings, err
}

func (s *session) serverLoop(ctx context.Context, c *conn) (int, error) {
	size := s.cfg.Size
	buf := c.rdmaMR.Buf()
	for pings := 0; ; pings++ {
		n, done, err := c.waitFor(ctx, verbs.WCRecv, "RDMA_READ_ADV")
		if done || err != nil {
			return pings, err
		}
		src := n.info
		if s.cfg.Debug {
			s.debugf("Received rkey %x addr %x len %d from peer\n", src.RKey, src.Buf, src.Size)
		}
		s.debugf("server received sink adv\n")
		// rping reads remote_len bytes; a larger peer buffer than ours
		// is read only as far as ours goes.
		if err := c.rdma(verbs.WRRDMARead, min(int(src.Size), size), src); err != nil {
			return pings, err
		}
		s.debugf("server posted rdma read req \n")
		if _, done, err := c.waitFor(ctx, verbs.WCRDMARead, "RDMA_READ_COMPLETE"); done || err != nil {
			return pings, err
		}
		s.debugf("server received read complete\n")
		if s.cfg.Verbose {
			s.printf(s.cfg.Out, "server ping data: %s\n", cString(buf))
		}
		if err := c.send(Info{}); err != nil {
			return pings, err
		}
		s.debugf("server posted go ahead\n")
		n, done, err = c.waitFor(ctx, verbs.WCRecv, "RDMA_WRITE_ADV")
		if done || err != nil {
			return pings, err
		}
		sink := n.info
		if s.cfg.Debug {
			s.debugf("Received rkey %x addr %x len %d from peer\n", sink.RKey, sink.Buf, sink.Size)
		}
		s.debugf("server received sink adv\n")
		length := min(len(cString(buf))+1, size)
		if s.cfg.Debug {
			s.debugf("rdma write from lkey %x laddr %x len %d\n", c.rdmaMR.LKey(), c.rdmaMR.Addr(), length)
		}
		if err := c.rdma(verbs.WRRDMAWrite, length, sink); err != nil {
			return pings, err
		}
		if _, done, err := c.waitFor(ctx, verbs.WCRDMAWrite, "RDMA_WRITE_COMPLETE"); done || err != nil {
			return pings, err
		}
		s.debugf("server rdma write complete \n")
		if err := c.send(Info{}); err != nil {
			return pings, err
		}
		s.debugf("server posted go ahead\n")
	}
}

// ---- client ----

func (s *session) client(ctx context.Context) (Result, error) {
	c := newConn(s, nil)
	id, err := s.m.CreateID(s.ch, c, rdmacm.PSTCP)
	if err != nil {
		return Result{}, fmt.Errorf("rdma_create_id: %w", err)
	}
	if s.cfg.Debug {
		s.debugf("created cm_id %p\n", id)
	}
	c.id = id
	defer id.Destroy()
	var src netip.AddrPort
	if s.cfg.Source.IsValid() {
		src = netip.AddrPortFrom(s.cfg.Source, 0)
	}
	if err := id.ResolveAddr(src, netip.AddrPortFrom(s.cfg.Addr, s.cfg.Port), 2*time.Second); err != nil {
		return Result{}, fmt.Errorf("rdma_resolve_addr: %w", err)
	}
	if err := c.expectCM(ctx, rdmacm.EventAddrResolved); err != nil {
		return Result{}, err
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		return Result{}, fmt.Errorf("rdma_resolve_route: %w", err)
	}
	if err := c.expectCM(ctx, rdmacm.EventRouteResolved); err != nil {
		return Result{}, err
	}
	s.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	if err := s.setup(ctx, c); err != nil {
		return Result{}, err
	}
	defer c.release()
	if err := id.Connect(c.connParam()); err != nil {
		return Result{}, fmt.Errorf("rdma_connect: %w", err)
	}
	want := rdmacm.EventEstablished
	if c.ownQP {
		want = rdmacm.EventConnectResponse
	}
	timeout := s.cfg.CMTimeout
	if timeout == 0 {
		timeout = rdmautil.CMConnectTimeout(rdmacm.Config{})
	}
	stop := rdmautil.CMProgress(s.cfg.Progress, "rping", s.cfg.Addr, timeout)
	err = c.expectCM(ctx, want)
	stop()
	if err != nil {
		s.printf(s.cfg.Err, "connect error %d\n", -1)
		if c.noReply {
			return Result{}, fmt.Errorf("%s: %w", rdmautil.CMNoReplyHint(s.cfg.Addr, timeout), err)
		}
		return Result{}, err
	}
	if c.ownQP {
		if err := c.selfModify(); err != nil {
			return Result{}, fmt.Errorf("rping_modify_qp: %w", err)
		}
		if err := id.Establish(); err != nil {
			return Result{}, fmt.Errorf("rdma_establish: %w", err)
		}
	}
	s.debugf("rdma_connect successful\n")
	pings, err := s.clientLoop(ctx, c)
	if err != nil {
		s.printf(s.cfg.Err, "rping client failed: %d\n", -1)
	}
	c.disconnect()
	c.drainDisconnect(ctx)
	return Result{Pings: pings, Conns: 1}, err
}

// expectCM waits for a CM event of type want (skipping completions,
// which cannot occur yet); error events print rping's line.
func (c *conn) expectCM(ctx context.Context, want rdmacm.EventType) error {
	for {
		select {
		case n := <-c.notes:
			if n.cm == nil {
				continue
			}
			if n.cm.Type == want {
				if want == rdmacm.EventConnectResponse {
					c.s.debugf("CONNECT_RESPONSE\n")
				}
				if want == rdmacm.EventEstablished {
					c.s.debugf("ESTABLISHED\n")
				}
				return nil
			}
			c.noReply = n.cm.Type == rdmacm.EventUnreachable && n.cm.Status == -int(syscall.ETIMEDOUT)
			return cmFailure(c.s, n.cm)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drainDisconnect waits briefly for the DISCONNECTED event of our own
// disconnect, which rping's CM thread reports on stderr.
func (c *conn) drainDisconnect(ctx context.Context) {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		select {
		case n := <-c.notes:
			if n.cm != nil && n.cm.Type == rdmacm.EventDisconnected {
				c.s.printf(c.s.cfg.Err, "client DISCONNECT EVENT...\n")
				return
			}
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (s *session) clientLoop(ctx context.Context, c *conn) (int, error) {
	var pat Pattern
	start, sink := c.startMR.Buf(), c.rdmaMR.Buf()
	size := uint32(s.cfg.Size)
	for ping := 0; s.cfg.Count == 0 || ping < s.cfg.Count; ping++ {
		pat.Fill(start, ping)
		if s.cfg.Debug {
			s.debugf("RDMA addr %x rkey %x len %d\n", c.startMR.Addr(), c.startMR.RKey(), size)
		}
		if err := c.send(Info{Buf: c.startMR.Addr(), RKey: c.startMR.RKey(), Size: size}); err != nil {
			return ping, err
		}
		if _, done, err := c.waitFor(ctx, verbs.WCRecv, "RDMA_WRITE_ADV"); done || err != nil {
			return ping, err
		}
		if s.cfg.Debug {
			s.debugf("RDMA addr %x rkey %x len %d\n", c.rdmaMR.Addr(), c.rdmaMR.RKey(), size)
		}
		if err := c.send(Info{Buf: c.rdmaMR.Addr(), RKey: c.rdmaMR.RKey(), Size: size}); err != nil {
			return ping, err
		}
		if _, done, err := c.waitFor(ctx, verbs.WCRecv, "RDMA_WRITE_COMPLETE"); done || err != nil {
			return ping, err
		}
		if s.cfg.Validate && !bytes.Equal(start, sink) {
			s.printf(s.cfg.Err, "data mismatch!\n")
			return ping, fmt.Errorf("%w at ping %d", ErrMismatch, ping)
		}
		if s.cfg.Verbose {
			s.printf(s.cfg.Out, "ping data: %s\n", cString(sink))
		}
	}
	return s.cfg.Count, nil
}
