// Package perftestcm is perftest's RDMA CM mode (-R) on softib: the
// perftest.CMHook that package perftest calls when -R is given.
//
// As perftest 6.06 does (tool-protocols.md §3.3):
//
//   - The control channel is itself an RDMA CM RC connection in the TCP
//     port space on the perftest port (18515, service ID 0x1064853). Every
//     control message (versions, sys data, MTU, reports) is one SEND of
//     the message's own size into a 56-byte receive; the client sends
//     first and then receives, the server the reverse. The key messages
//     are struct pingpong_dest in binary, big-endian ([AppendDest]), and
//     the closing handshake has no "done" message.
//   - The test QPs connect in a second RDMA CM pass on the same port,
//     right after the MTU exchange, between two sync handshakes: the
//     server destroyed its control listener after accepting, listens
//     again with backlog = QPs and accepts each request in order; the
//     client connects each QP (retrying while the server is not yet
//     listening, 100 ms apart, as perftest does). Read and atomic tests
//     ask for out_reads responder resources and initiator depth; retry
//     and RNR retry counts are 7. The QPs carry no private data.
package perftestcm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"softib/rdmacm"
	"softib/tools/internal/rdmautil"
	"softib/tools/perftest"
	"softib/verbs"
)

// Hook implements perftest.CMHook over softib's RDMA CM. The zero value
// is ready to use.
type Hook struct {
	// CM configures the RDMA CM manager of each run.
	CM rdmacm.Config
	// ConnectRetries bounds the client's connection attempts while the
	// server is not listening yet (0 = 10, as perftest).
	ConnectRetries int
	// OnListen, if set, is called when a server's control listener is up.
	OnListen func(netip.AddrPort)
	// Progress, if set, receives a line every few seconds while a
	// client's connect waits for the server's CM (prefix "perf").
	Progress io.Writer
}

// Errors; test with errors.Is.
var (
	// ErrConnect reports a failed RDMA CM connection.
	ErrConnect = errors.New("perftestcm: RDMA CM connection failed")
	// ErrClosed reports use of a closed control channel.
	ErrClosed = errors.New("perftestcm: control channel closed")
)

// msgBuf is the receive size of the control channel (sizeof struct
// pingpong_dest): every control message fits.
const msgBuf = DestLen

// retryDelay is perftest's pause between connection attempts.
const retryDelay = 100 * time.Millisecond

// Ctrl is the RDMA CM control channel of one run. It also owns the
// run's test-QP connections.
type Ctrl struct {
	// src is the source address of the client's connections
	// (Config.BindAddr: --addr or --source_ip); zero: the route's.
	src    netip.Addr
	m      *rdmacm.Manager
	ch     *rdmacm.EventChannel
	client bool
	id     *rdmacm.ID
	cq     verbs.CQ
	mr     verbs.MR // [0, msgBuf) send, [msgBuf, 2*msgBuf) receive
	wait   rdmautil.Waiter
	ctx    context.Context
	cancel context.CancelFunc
	gidIdx int
	// tos is -T: the type of service set on every ID this side
	// resolves (rdma_set_option RDMA_OPTION_ID_TOS, as perftest's
	// address handler), 0: none.
	tos uint8

	mu    sync.Mutex
	tests []*rdmacm.ID
	tch   *rdmacm.EventChannel
	once  sync.Once
	wcs   [2]verbs.WC
	early [2]int // completions polled ahead, by kind()
	rwr   [1]verbs.RecvWR
	swr   [1]verbs.SendWR
	sge   [2]verbs.SGE
	key   [msgBuf]byte
}

var _ perftest.CMHook = (*Hook)(nil)
var _ perftest.KeyXchger = (*Ctrl)(nil)

func (h *Hook) retries() int {
	if h.ConnectRetries > 0 {
		return h.ConnectRetries
	}
	return 10
}

// Control opens the control channel: a listener on cfg.TCPPort that
// accepts one connection (server), or a connection to cfg.Host.
func (h *Hook) Control(ctx context.Context, dev verbs.Device, cfg *perftest.Config) (perftest.Ctrl, error) {
	c := &Ctrl{m: rdmacm.NewManager(h.CM), ch: rdmacm.NewEventChannel(), client: cfg.Host != "", gidIdx: cfg.GIDIndex, src: cfg.BindAddr, tos: cfg.TOS}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if err := c.m.AddDevice(dev); err != nil {
		c.Close()
		return nil, fmt.Errorf("perftestcm: attach RDMA CM to %s: %w", dev.Name(), err)
	}
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
	var err error
	if c.client {
		err = c.dial(ctx, h, cfg)
	} else {
		err = c.accept(h, cfg)
	}
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return c, nil
}

// serverAddr resolves the client's cfg.Host and port.
func serverAddr(ctx context.Context, cfg *perftest.Config) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(cfg.Host); err == nil {
		return netip.AddrPortFrom(a.Unmap(), uint16(cfg.TCPPort)), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", cfg.Host)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("perftestcm: resolve %q: %w", cfg.Host, err)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(cfg.TCPPort)), nil
}

// next returns the next event of ch (hang-free: the run's context and
// Close end the wait).
func (c *Ctrl) next(ch *rdmacm.EventChannel) (*rdmacm.Event, error) {
	ev, err := ch.GetEvent(c.ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return ev, nil
}

// expect waits for an event of type want on id, skipping TIMEWAIT_EXIT
// of earlier IDs.
func (c *Ctrl) expect(ch *rdmacm.EventChannel, want rdmacm.EventType) (*rdmacm.Event, error) {
	for {
		ev, err := c.next(ch)
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case want:
			return ev, nil
		case rdmacm.EventTimewaitExit, rdmacm.EventDisconnected:
			continue
		case rdmacm.EventEstablished:
			if want == rdmacm.EventConnectRequest {
				continue // an earlier test QP's RTU
			}
		}
		return ev, fmt.Errorf("%w: %v (status %d) waiting for %v", ErrConnect, ev.Type, ev.Status, want)
	}
}

// resolve creates an ID on ch and resolves the address and route to dst.
func (c *Ctrl) resolve(ch *rdmacm.EventChannel, ctx any, dst netip.AddrPort) (*rdmacm.ID, error) {
	id, err := c.m.CreateID(ch, ctx, rdmacm.PSTCP)
	if err != nil {
		return nil, err
	}
	var src netip.AddrPort
	if c.src.IsValid() {
		src = netip.AddrPortFrom(c.src, 0)
	}
	if err := id.ResolveAddr(src, dst, 2*time.Second); err != nil {
		id.Destroy()
		return nil, fmt.Errorf("%w: rdma_resolve_addr %v: %w", ErrConnect, dst, err)
	}
	if _, err := c.expect(ch, rdmacm.EventAddrResolved); err != nil {
		id.Destroy()
		return nil, err
	}
	if c.tos != 0 {
		// The route, the REQ's path and so both sides' QPs carry it.
		id.SetTOS(c.tos)
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		id.Destroy()
		return nil, fmt.Errorf("%w: rdma_resolve_route: %w", ErrConnect, err)
	}
	if _, err := c.expect(ch, rdmacm.EventRouteResolved); err != nil {
		id.Destroy()
		return nil, err
	}
	return id, nil
}

// setupQP creates the control QP on id with its buffer and posts the
// receive.
func (c *Ctrl) setupQP(id *rdmacm.ID) error {
	var err error
	if c.cq, err = rdmautil.NewCQ(id.Device(), 4); err != nil {
		return err
	}
	c.wait = rdmautil.Waiter{CQ: c.cq, Spin: 200}
	if _, err = id.CreateQP(id.PD(), &verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if c.mr, err = id.PD().RegMR(make([]byte, 2*msgBuf), verbs.AccessLocalWrite); err != nil {
		return err
	}
	c.id = id
	return c.postRecv()
}

func (c *Ctrl) postRecv() error {
	c.sge[1] = c.mr.SGE(msgBuf, msgBuf)
	c.rwr[0] = verbs.RecvWR{ID: 1, SGL: c.sge[1:2]}
	_, err := c.id.QP().PostRecv(c.rwr[:])
	return err
}

// ctrlParam is the control connection's conn_param (a SEND-only channel).
func ctrlParam() *rdmacm.ConnParam {
	return &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
}

func (c *Ctrl) dial(ctx context.Context, h *Hook, cfg *perftest.Config) error {
	dst, err := serverAddr(ctx, cfg)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		id, err := c.resolve(c.ch, nil, dst)
		if err != nil {
			return err
		}
		if err := c.setupQP(id); err != nil {
			id.Destroy()
			return err
		}
		if err := id.Connect(ctrlParam()); err != nil {
			return fmt.Errorf("%w: rdma_connect: %w", ErrConnect, err)
		}
		timeout := rdmautil.CMConnectTimeout(h.CM)
		stop := rdmautil.CMProgress(h.Progress, "perf", dst.Addr(), timeout)
		ev, err := c.expect(c.ch, rdmacm.EventEstablished)
		stop()
		if err == nil {
			return nil
		}
		if ev != nil && ev.Type == rdmacm.EventUnreachable && ev.Status == -int(syscall.ETIMEDOUT) {
			return fmt.Errorf("couldn't connect to %v: %s: %w", dst, rdmautil.CMNoReplyHint(dst.Addr(), timeout), err)
		}
		if ev == nil || ev.Type != rdmacm.EventRejected || try >= h.retries() {
			return fmt.Errorf("couldn't connect to %v (is the server running?): %w", dst, err)
		}
		c.releaseQP()
		id.Destroy()
		c.id = nil
		select {
		case <-time.After(retryDelay):
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
}

func (c *Ctrl) accept(h *Hook, cfg *perftest.Config) error {
	lis, err := c.m.CreateID(c.ch, nil, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	// perftest destroys the control listener once connected, freeing the
	// port for the test QPs' listener.
	defer lis.Destroy()
	if err := lis.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(cfg.TCPPort))); err != nil {
		return fmt.Errorf("couldn't listen on port %d: %w", cfg.TCPPort, err)
	}
	if err := lis.Listen(1); err != nil {
		return fmt.Errorf("couldn't listen on port %d: %w", cfg.TCPPort, err)
	}
	if h.OnListen != nil {
		h.OnListen(lis.LocalAddr())
	}
	ev, err := c.expect(c.ch, rdmacm.EventConnectRequest)
	if err != nil {
		return err
	}
	if err := c.setupQP(ev.ID); err != nil {
		ev.ID.Reject(nil)
		ev.ID.Destroy()
		return err
	}
	if err := ev.ID.Accept(ctrlParam()); err != nil {
		return fmt.Errorf("%w: rdma_accept: %w", ErrConnect, err)
	}
	return nil
}

// Xchg implements perftest.Ctrl: one SEND each way, the client first.
func (c *Ctrl) Xchg(my, rem []byte) error {
	if len(my) > msgBuf || len(rem) > msgBuf {
		return fmt.Errorf("perftestcm: control message of %d/%d bytes exceeds %d", len(my), len(rem), msgBuf)
	}
	if c.client {
		if err := c.send(my); err != nil {
			return err
		}
		return c.recv(rem)
	}
	if err := c.recv(rem); err != nil {
		return err
	}
	return c.send(my)
}

// XchgKey implements perftest.KeyXchger: key messages travel as binary
// struct pingpong_dest.
func (c *Ctrl) XchgKey(my perftest.Key) (perftest.Key, error) {
	b := AppendDest(c.key[:0], my, c.gidIdx)
	var rem [DestLen]byte
	if err := c.Xchg(b, rem[:]); err != nil {
		return perftest.Key{}, err
	}
	k, _, err := ParseDest(rem[:])
	return k, err
}

// send posts one signaled SEND of b and waits for its completion.
func (c *Ctrl) send(b []byte) error {
	copy(c.mr.Buf(), b)
	c.sge[0] = c.mr.SGE(0, len(b))
	c.swr[0] = verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: c.sge[:1]}
	if _, err := c.id.QP().PostSend(c.swr[:]); err != nil {
		return fmt.Errorf("perftestcm: post send: %w", err)
	}
	_, err := c.complete(verbs.WCSend)
	return err
}

// recv waits for the next message, copies len(b) bytes of it and posts
// the receive again.
func (c *Ctrl) recv(b []byte) error {
	if _, err := c.complete(verbs.WCRecv); err != nil {
		return err
	}
	copy(b, c.mr.Buf()[msgBuf:])
	return c.postRecv()
}

// complete waits for the completion of opcode op. A receive may complete
// before our own send's completion is polled, so completions of the other
// kind are remembered.
func (c *Ctrl) complete(op verbs.WCOpcode) (verbs.WC, error) {
	for {
		if k := kind(op); c.early[k] > 0 {
			c.early[k]--
			return verbs.WC{Opcode: op}, nil
		}
		n, err := c.wait.Wait(c.ctx, c.wcs[:1])
		if err != nil {
			return verbs.WC{}, fmt.Errorf("%w: %w", ErrClosed, err)
		}
		if n == 0 {
			continue
		}
		wc := c.wcs[0]
		if wc.Status != verbs.WCSuccess {
			return wc, fmt.Errorf("perftestcm: control %v completion: %v", wc.Opcode, wc.Status)
		}
		if wc.Opcode == op {
			return wc, nil
		}
		c.early[kind(wc.Opcode)]++
	}
}

// kind indexes Ctrl.early: 0 for sends, 1 for receives.
func kind(op verbs.WCOpcode) int {
	if op == verbs.WCRecv {
		return 1
	}
	return 0
}

// Finish implements perftest.Ctrl: with RDMA CM the closing handshake
// ends without a "done" message.
func (c *Ctrl) Finish() error { return nil }

// Close disconnects the test and control connections, waits briefly for
// the peer's side of each, and releases everything.
func (c *Ctrl) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		tests, tch := c.tests, c.tch
		c.tests = nil
		c.mu.Unlock()
		var nTests, nCtrl int
		for _, id := range tests {
			if id.Disconnect() == nil {
				nTests++
			}
		}
		if c.id != nil && c.id.Disconnect() == nil {
			nCtrl++
		}
		c.linger(tch, nTests, c.ch, nCtrl)
		c.cancel()
		for _, id := range tests {
			id.Destroy()
		}
		if tch != nil {
			tch.Close()
		}
		c.releaseQP()
		if c.id != nil {
			c.id.Destroy()
		}
		c.ch.Close()
		c.m.Close()
	})
	return nil
}

// linger gives DREQ/DREP exchanges up to a second so the peer sees its
// DISCONNECTED events (perftest's client waits for them): n1 of them on
// ch1 and n2 on ch2.
func (c *Ctrl) linger(ch1 *rdmacm.EventChannel, n1 int, ch2 *rdmacm.EventChannel, n2 int) {
	if c.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, time.Second)
	defer cancel()
	for _, w := range []struct {
		ch *rdmacm.EventChannel
		n  int
	}{{ch1, n1}, {ch2, n2}} {
		for w.ch != nil && w.n > 0 {
			ev, err := w.ch.GetEvent(ctx)
			if err != nil {
				return
			}
			if ev.Type == rdmacm.EventDisconnected {
				w.n--
			}
		}
	}
}

func (c *Ctrl) releaseQP() {
	if c.id != nil {
		c.id.DestroyQP()
	}
	if c.mr != nil {
		c.mr.Dereg()
		c.mr = nil
	}
	if c.cq != nil {
		c.cq.Destroy()
		c.cq = nil
	}
}

// Connect connects the run's QPs through RDMA CM between two sync
// handshakes (create_rdma_cm_connection) and moves them to RTS.
func (h *Hook) Connect(ctx context.Context, cfg *perftest.Config, ctrl perftest.Ctrl, res *perftest.Resources) error {
	c, ok := ctrl.(*Ctrl)
	if !ok {
		return fmt.Errorf("perftestcm: control channel %T is not RDMA CM", ctrl)
	}
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
	if _, err := c.XchgKey(perftest.Key{}); err != nil {
		return err
	}
	c.mu.Lock()
	c.tch = rdmacm.NewEventChannel()
	c.mu.Unlock()
	p := rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if v := cfg.Test.Verb(); v == perftest.VerbRead || v == perftest.VerbAtomic {
		p.ResponderResources = uint8(min(res.OutReads, 255))
		p.InitiatorDepth = p.ResponderResources
	}
	var err error
	if c.client {
		err = c.connectQPs(ctx, h, cfg, res, p)
	} else {
		err = c.acceptQPs(cfg, res, p)
	}
	if err != nil {
		return err
	}
	if _, err := c.XchgKey(perftest.Key{}); err != nil {
		return err
	}
	res.Engine.Remote = res.Remote
	return nil
}

func (c *Ctrl) track(id *rdmacm.ID) {
	c.mu.Lock()
	c.tests = append(c.tests, id)
	c.mu.Unlock()
}

// moveQP applies the CM's RTR and RTS attributes to qp, with perftest's
// minimum RNR timer.
func moveQP(id *rdmacm.ID, qp verbs.QP) error {
	for _, st := range []verbs.QPState{verbs.QPStateRTR, verbs.QPStateRTS} {
		a, m, err := id.InitQPAttr(st)
		if err != nil {
			return err
		}
		if st == verbs.QPStateRTR && m&verbs.QPAttrMinRNRTimer != 0 {
			a.MinRNRTimer = perftest.MinRNRTimer
		}
		if err := qp.Modify(&a, m); err != nil {
			return fmt.Errorf("modify QP %#x to %v: %w", qp.QPN(), st, err)
		}
	}
	return nil
}

func (c *Ctrl) connectQPs(ctx context.Context, h *Hook, cfg *perftest.Config, res *perftest.Resources, p rdmacm.ConnParam) error {
	dst, err := serverAddr(ctx, cfg)
	if err != nil {
		return err
	}
	for i, qp := range res.Engine.QPs {
		for try := 1; ; try++ {
			id, err := c.resolve(c.tch, i, dst)
			if err != nil {
				return err
			}
			p.QPNum = qp.QPN()
			if err := id.Connect(&p); err != nil {
				id.Destroy()
				return fmt.Errorf("%w: rdma_connect: %w", ErrConnect, err)
			}
			ev, err := c.expect(c.tch, rdmacm.EventConnectResponse)
			if err == nil {
				if err := moveQP(id, qp); err != nil {
					id.Destroy()
					return err
				}
				if err := id.Establish(); err != nil {
					id.Destroy()
					return fmt.Errorf("%w: rdma_establish: %w", ErrConnect, err)
				}
				c.track(id)
				break
			}
			id.Destroy()
			if ev == nil || ev.Type != rdmacm.EventRejected || try >= h.retries() {
				return fmt.Errorf("QP %d: %w", i, err)
			}
			select {
			case <-time.After(retryDelay):
			case <-c.ctx.Done():
				return c.ctx.Err()
			}
		}
	}
	return nil
}

func (c *Ctrl) acceptQPs(cfg *perftest.Config, res *perftest.Resources, p rdmacm.ConnParam) error {
	lis, err := c.m.CreateID(c.tch, nil, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	defer lis.Destroy()
	if err := lis.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(cfg.TCPPort))); err != nil {
		return fmt.Errorf("rdma_bind_addr port %d: %w", cfg.TCPPort, err)
	}
	if err := lis.Listen(len(res.Engine.QPs)); err != nil {
		return fmt.Errorf("rdma_listen port %d: %w", cfg.TCPPort, err)
	}
	for i, qp := range res.Engine.QPs {
		ev, err := c.expect(c.tch, rdmacm.EventConnectRequest)
		if err != nil {
			return err
		}
		id := ev.ID
		id.SetContext(i)
		if err := moveQP(id, qp); err != nil {
			id.Reject(nil)
			id.Destroy()
			return err
		}
		p.QPNum = qp.QPN()
		if err := id.Accept(&p); err != nil {
			id.Destroy()
			return fmt.Errorf("%w: rdma_accept: %w", ErrConnect, err)
		}
		c.track(id)
	}
	return nil
}
