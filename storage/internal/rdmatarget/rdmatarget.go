// Package rdmatarget is what the SRP and iSER targets share below their
// protocols: the RDMA CM listener and its event loop, IB CM listeners
// by service ID (ibcm.go), a connection's queues, buffers and CQ worker
// on either connection manager ([Endpoint]), its teardown, and RDMA
// READs of data-out through rdma_rw contexts. The protocols keep their
// wire formats, login and command handling; nothing here puts a byte
// on the wire of its own.
package rdmatarget

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"softib/rdmacm"
	"softib/rdmarw"
	"softib/storage/scsi"
	"softib/verbs"
)

// Work request IDs carry their kind in the top byte and a slot below.
// Kinds from WRUser up are the protocol's (Hooks.Other gets them).
const (
	WRRecv = 1 << 56
	WRSend = 2 << 56
	WRRead = 3 << 56
	WRUser = 4 << 56
	WRKind = 0xff << 56
)

// ErrClosing is returned for work started on a connection that is
// going down.
var ErrClosing = errors.New("rdmatarget: connection closing")

// Listener is a target's RDMA CM listener: it accepts connection
// requests through the protocol and tracks the connections until they
// are torn down.
type Listener struct {
	// Prefix starts log and error messages ("iser", "srp"); Kind names
	// a connection in them ("connection", "channel").
	Prefix, Kind string
	// Logf receives connection events; it must not be nil.
	Logf func(format string, args ...any)
	// SCSI is the target core whose tasks a connection aborts when it
	// goes down.
	SCSI *scsi.Target

	ch    *rdmacm.EventChannel
	lis   *rdmacm.ID
	mu    sync.Mutex
	conns map[*Conn]struct{}
	wg    sync.WaitGroup
	// served is closed when Serve returns (nil before Serve runs).
	served chan struct{}
	// IB CM listeners (ibcm.go), guarded by mu; ibBusy counts their
	// handlers at work, which Close waits for before the teardown.
	ib     []*ibListen
	closed bool
	ibBusy sync.WaitGroup
}

// Endpoint is the connection manager's side of a connection: an RDMA
// CM ID ([RDMACM]) or an IB CM connection ([IBCMConn]).
type Endpoint interface {
	// Device and PD are where the connection's resources go.
	Device() verbs.Device
	PD() verbs.PD
	// CreateQP creates the connection's RC QP; DestroyQP destroys it.
	CreateQP(pd verbs.PD, attr *verbs.QPInitAttr) (verbs.QP, error)
	DestroyQP() error
	// Disconnect moves the QP to ERR and sends a DREQ (or the DREP to
	// the peer's).
	Disconnect() error
	// Destroy releases the connection manager's ID.
	Destroy() error
	// SetContext makes the Conn the ID's context.
	SetContext(ctx any)
	// Peer names the remote end in logs.
	Peer() string
}

// rdmacmEndpoint is an RDMA CM ID as an Endpoint.
type rdmacmEndpoint struct{ *rdmacm.ID }

func (e rdmacmEndpoint) Peer() string { return e.RemoteAddr().String() }

// RDMACM returns the Endpoint of an RDMA CM connection request.
func RDMACM(id *rdmacm.ID) Endpoint { return rdmacmEndpoint{id} }

// Listen binds addr on m's devices and listens.
func (l *Listener) Listen(m *rdmacm.Manager, addr netip.AddrPort) error {
	l.ch = rdmacm.NewEventChannel()
	lis, err := m.CreateID(l.ch, nil, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	if err := lis.BindAddr(addr); err != nil {
		lis.Destroy()
		return fmt.Errorf("%s: bind %v: %w", l.Prefix, addr, err)
	}
	if err := lis.Listen(64); err != nil {
		lis.Destroy()
		return err
	}
	l.lis = lis
	return nil
}

// Serve handles RDMA CM events until ctx ends or Close; it returns nil
// then. accept gets every CONNECT_REQUEST (it accepts or rejects it);
// background functions run on goroutines that Close waits for.
func (l *Listener) Serve(ctx context.Context, accept func(*rdmacm.Event), background ...func()) error {
	served := make(chan struct{})
	l.mu.Lock()
	l.served = served
	l.mu.Unlock()
	defer close(served)
	for _, f := range background {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			f()
		}()
	}
	for {
		ev, err := l.ch.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, rdmacm.ErrClosed) {
				return nil
			}
			return err
		}
		switch ev.Type {
		case rdmacm.EventConnectRequest:
			accept(ev)
		case rdmacm.EventEstablished:
			if c, ok := ev.ID.Context().(*Conn); ok {
				l.Logf("%s: %s from %v established", l.Prefix, l.Kind, c.EP.Peer())
			}
		case rdmacm.EventDisconnected, rdmacm.EventTimewaitExit, rdmacm.EventDeviceRemoval,
			rdmacm.EventConnectError, rdmacm.EventUnreachable, rdmacm.EventRejected:
			if c, ok := ev.ID.Context().(*Conn); ok {
				c.Shutdown(fmt.Sprintf("RDMA CM %v", ev.Type))
			}
		}
	}
}

// Close stops the listeners and tears every connection down.
func (l *Listener) Close() {
	if l.lis != nil {
		l.lis.Destroy()
	}
	l.closeIB()
	// Serve must be gone before the teardown: it starts connection
	// teardowns (WaitGroup.Add) that the Wait below must not race.
	if l.ch != nil {
		l.ch.Close()
	}
	l.mu.Lock()
	served := l.served
	l.mu.Unlock()
	if served != nil {
		<-served
	}
	l.mu.Lock()
	conns := make([]*Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Shutdown("target closed")
	}
	l.wg.Wait()
	l.releaseIB()
}

// Shape sizes a connection's queues and buffers: Recv receive slots of
// RecvLen bytes, Send send slots of SendLen bytes and Data data buffers
// of DataLen bytes (one per command in flight).
type Shape struct {
	Recv, RecvLen int
	Send, SendLen int
	Data, DataLen int
	// SendWR is the send queue's depth on dev.
	SendWR func(dev verbs.Device) int
}

// Hooks are the protocol's part of a connection's completions.
type Hooks struct {
	// Receive handles a received message on the CQ worker; the receive
	// buffer is reposted when it returns, so anything kept is copied.
	Receive func(b []byte)
	// Sent, if set, runs after a send slot's completion returned it.
	Sent func(slot int)
	// Other, if set, gets completions of the protocol's own kinds
	// (WRUser and up).
	Other func(wc *verbs.WC)
}

// Conn is one RDMA connection of a target. A protocol's connection
// embeds it; Mu guards Closing and whatever protocol state the
// protocol puts under it.
type Conn struct {
	EP       Endpoint
	PD       verbs.PD
	CQ       verbs.CQ
	QP       verbs.QP
	RecvMR   verbs.MR
	SendMR   verbs.MR
	DataMR   verbs.MR
	SendFree chan int
	DataFree chan int
	// Tasks counts the goroutines working for the connection; teardown
	// waits for them before it releases the buffers.
	Tasks sync.WaitGroup

	Mu      sync.Mutex
	Closing bool

	l      *Listener
	nexus  any
	shape  Shape
	hooks  Hooks
	worker *verbs.CQWorker
	reads  map[int]chan verbs.WCStatus
}

// Setup creates the queues and buffers of a connection on ep, posts its
// receives, starts its CQ worker and makes it ep's context and one of
// l's connections. nexus is what the connection is to the SCSI core
// (the protocol's connection). On an error it releases what it made
// (ep included).
func (c *Conn) Setup(l *Listener, ep Endpoint, nexus any, s Shape, h Hooks) (err error) {
	id := ep
	c.l, c.EP, c.nexus, c.shape, c.hooks = l, ep, nexus, s, h
	c.reads = map[int]chan verbs.WCStatus{}
	c.SendFree, c.DataFree = make(chan int, s.Send), make(chan int, s.Data)
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	dev := id.Device()
	c.PD = id.PD()
	sq := s.SendWR(dev)
	if c.CQ, err = dev.CreateCQ(verbs.CQAttr{CQE: sq + s.Recv, Channel: verbs.NewCompChannel(4)}); err != nil {
		return err
	}
	if c.QP, err = id.CreateQP(c.PD, &verbs.QPInitAttr{SendCQ: c.CQ, RecvCQ: c.CQ,
		Cap: verbs.QPCap{MaxSendWR: sq, MaxRecvWR: s.Recv, MaxSendSGE: 2, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	if c.RecvMR, err = c.PD.RegMR(make([]byte, s.Recv*s.RecvLen), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.SendMR, err = c.PD.RegMR(make([]byte, s.Send*s.SendLen), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.DataMR, err = c.PD.RegMR(scsi.AlignedBuf(s.Data*s.DataLen), verbs.AccessLocalWrite); err != nil {
		return err
	}
	for i := range s.Send {
		c.SendFree <- i
	}
	for i := range s.Data {
		c.DataFree <- i
	}
	for i := range s.Recv {
		if err := c.postRecv(i); err != nil {
			return err
		}
	}
	if c.worker, err = verbs.StartCQWorker(c.CQ, 0, c.completion); err != nil {
		return err
	}
	id.SetContext(c)
	l.mu.Lock()
	if l.conns == nil {
		l.conns = map[*Conn]struct{}{}
	}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return nil
}

func (c *Conn) postRecv(slot int) error {
	n := c.shape.RecvLen
	_, err := c.QP.PostRecv([]verbs.RecvWR{{ID: WRRecv | uint64(slot), SGL: []verbs.SGE{c.RecvMR.SGE(slot*n, n)}}})
	return err
}

// SendBuf returns send slot slot's buffer.
func (c *Conn) SendBuf(slot int) []byte {
	n := c.shape.SendLen
	return c.SendMR.Buf()[slot*n : (slot+1)*n]
}

// SendWR returns a signaled SEND of the first n bytes of send slot slot.
func (c *Conn) SendWR(slot, n int) verbs.SendWR {
	return verbs.SendWR{ID: WRSend | uint64(slot), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.SendMR.SGE(slot*c.shape.SendLen, n)}}
}

// Shutdown disconnects and releases the connection once its tasks
// ended; it is idempotent.
func (c *Conn) Shutdown(why string) {
	c.Mu.Lock()
	if c.Closing {
		c.Mu.Unlock()
		return
	}
	c.Closing = true
	// Added under c.Mu: Listener.Close's own Shutdown call takes c.Mu
	// after this, so the Add happens before its Wait.
	c.l.wg.Add(1)
	c.Mu.Unlock()
	c.l.Logf("%s: %s from %v down: %s", c.l.Prefix, c.l.Kind, c.EP.Peer(), why)
	go func() {
		defer c.l.wg.Done()
		c.EP.Disconnect()
		<-c.l.SCSI.AbortNexus(c.nexus)
		if c.QP != nil {
			c.QP.Drain() // flushes pending RDMA READs: their tasks end
		}
		c.Tasks.Wait()
		c.release()
	}()
}

func (c *Conn) release() {
	if c.worker != nil {
		c.worker.Stop()
	}
	c.EP.DestroyQP()
	for _, mr := range []verbs.MR{c.RecvMR, c.SendMR, c.DataMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if c.CQ != nil {
		c.CQ.Destroy()
	}
	c.EP.Destroy()
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
}

// completion runs on the CQ worker for every completion.
func (c *Conn) completion(wc *verbs.WC) {
	slot := int(wc.WRID &^ WRKind)
	switch kind := wc.WRID & WRKind; kind {
	case WRRecv:
		if wc.Status != verbs.WCSuccess {
			if wc.Status != verbs.WCWRFlushErr {
				c.Shutdown(fmt.Sprintf("receive completion %v", wc.Status))
			}
			return
		}
		n := c.shape.RecvLen
		c.hooks.Receive(c.RecvMR.Buf()[slot*n : slot*n+int(wc.ByteLen)])
		c.Mu.Lock()
		closing := c.Closing
		c.Mu.Unlock()
		if !closing {
			if err := c.postRecv(slot); err != nil {
				c.Shutdown(fmt.Sprintf("repost receive: %v", err))
			}
		}
	case WRSend:
		c.SendFree <- slot
		if wc.Status != verbs.WCSuccess && wc.Status != verbs.WCWRFlushErr {
			c.Shutdown(fmt.Sprintf("send completion %v", wc.Status))
		}
		if c.hooks.Sent != nil {
			c.hooks.Sent(slot)
		}
	case WRRead:
		c.Mu.Lock()
		ch := c.reads[slot]
		delete(c.reads, slot)
		c.Mu.Unlock()
		if ch != nil {
			ch <- wc.Status
		}
	default:
		if kind >= WRUser && c.hooks.Other != nil {
			c.hooks.Other(wc)
		}
	}
}

// Read fetches the initiator's memory at va (key) into local, which
// lies in data buffer slot's MR, through rw, and waits for it. It
// returns ErrClosing once the connection is going down.
func (c *Conn) Read(rw *rdmarw.Ctx, slot int, local verbs.SGE, va uint64, key uint32) error {
	if _, err := rw.Init(c.QP, c.PD, []verbs.SGE{local}, 0, va, key, rdmarw.Read); err != nil {
		return err
	}
	defer rw.Destroy()
	done := make(chan verbs.WCStatus, 1)
	c.Mu.Lock()
	if c.Closing {
		c.Mu.Unlock()
		return ErrClosing
	}
	c.reads[slot] = done
	err := rw.Post(nil, WRRead|uint64(slot))
	if err != nil {
		delete(c.reads, slot)
	}
	c.Mu.Unlock()
	if err != nil {
		return err
	}
	if st := <-done; st != verbs.WCSuccess {
		return fmt.Errorf("completion %v", st)
	}
	return nil
}

// SlotFrom takes a data buffer. A command within the window (request
// limit) can arrive just before the task whose response opened it
// returns its buffer (it posts the response first, then lets go), so it
// waits a little; that task needs nothing from the CQ worker any more,
// so the wait cannot deadlock. Only an initiator overrunning its window
// waits the whole bound (and gets TASK SET FULL).
func SlotFrom(free chan int) (int, bool) {
	select {
	case s := <-free:
		return s, true
	default:
	}
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case s := <-free:
		return s, true
	case <-t.C:
		return 0, false
	}
}

// Closed is a closed channel: a task management function with nothing
// to wait for.
var Closed = func() <-chan struct{} { c := make(chan struct{}); close(c); return c }()
