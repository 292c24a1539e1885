package rdmacm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"softib/verbs"
)

// This file is the connection API in the spirit of librdmacm's
// rdma_getaddrinfo / rdma_create_ep / rdma_post_send / rdma_get_send_comp:
// Dial and Listener.Accept return a connected RC endpoint with its PD,
// CQs, QP and a registered buffer ready, and the peer's buffer (address,
// R_Key, length) already exchanged in the CM private data, so an RDMA
// WRITE needs no handshake of the application's own.

// EndpointConfig sizes an endpoint; the zero value (or nil) gives 16
// send and receive work requests, one SGE each, 256 bytes of inline data
// and a 4 KiB buffer.
type EndpointConfig struct {
	// MaxSendWR and MaxRecvWR size the queues (default 16 each).
	MaxSendWR, MaxRecvWR int
	// MaxInlineData is the most bytes a send may carry inline (default
	// 256).
	MaxInlineData int
	// BufSize is the size of the endpoint's registered buffer (default
	// 4096), or of Buf when set.
	BufSize int
	// Buf is the memory to register (default: a new BufSize slice).
	Buf []byte
	// Access are the buffer's access rights. The default is local write
	// and remote read and write, so the peer can RDMA READ and WRITE it
	// at once; pass verbs.AccessLocalWrite alone to keep the buffer
	// private. (A receive or READ target needs local write, an RDMA
	// WRITE target remote write: forgetting the latter is what fails a
	// WRITE with a remote access error.)
	Access verbs.AccessFlags
	// PrivateData is the application's part of the connect or accept
	// private data (at most 35 bytes for Dial, 175 for Accept: the rest
	// carries the buffer description).
	PrivateData []byte
	// Timeout bounds address and route resolution (default 2 s); the
	// connection itself is bounded by the CM's retries and the context.
	Timeout time.Duration
}

func (c *EndpointConfig) withDefaults() EndpointConfig {
	var o EndpointConfig
	if c != nil {
		o = *c
	}
	if o.MaxSendWR <= 0 {
		o.MaxSendWR = 16
	}
	if o.MaxRecvWR <= 0 {
		o.MaxRecvWR = 16
	}
	if o.MaxInlineData <= 0 {
		o.MaxInlineData = 256
	}
	if o.Buf == nil {
		if o.BufSize <= 0 {
			o.BufSize = 4096
		}
		o.Buf = make([]byte, o.BufSize)
	}
	if o.Access == 0 {
		o.Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	return o
}

// RemoteBuf describes the peer's registered buffer.
type RemoteBuf struct {
	Addr uint64
	RKey uint32
	Len  uint32
}

// The endpoint header at the start of the private data: magic, the
// buffer's address, R_Key and length, and the length of the
// application's private data that follows.
const (
	epMagic  = 0x73694570 // "siEp"
	epHdrLen = 4 + 8 + 4 + 4 + 1
)

func appendEPHdr(mr verbs.MR, user []byte) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, epHdrLen+len(user)), epMagic)
	b = binary.BigEndian.AppendUint64(b, mr.Addr())
	b = binary.BigEndian.AppendUint32(b, mr.RKey())
	b = binary.BigEndian.AppendUint32(b, uint32(mr.Len()))
	b = append(b, byte(len(user)))
	return append(b, user...)
}

// parseEPHdr reads the peer's buffer and private data; private data
// without the header (a peer that is not an Endpoint) has no buffer.
func parseEPHdr(pd []byte) (RemoteBuf, []byte) {
	if len(pd) < epHdrLen || binary.BigEndian.Uint32(pd) != epMagic {
		return RemoteBuf{}, pd
	}
	r := RemoteBuf{Addr: binary.BigEndian.Uint64(pd[4:]), RKey: binary.BigEndian.Uint32(pd[12:]), Len: binary.BigEndian.Uint32(pd[16:])}
	n := int(pd[20])
	if n > len(pd)-epHdrLen {
		n = len(pd) - epHdrLen
	}
	return r, pd[epHdrLen : epHdrLen+n]
}

// Endpoint is a connected RC queue pair with everything it needs
// (rdma_create_ep + rdma_connect/rdma_accept): its PD is the device's
// default PD, each direction has a CQ with a completion channel, and Buf
// is registered as MR.
type Endpoint struct {
	ID     *ID
	QP     verbs.QP
	SendCQ verbs.CQ
	RecvCQ verbs.CQ
	MR     verbs.MR
	// Buf is the registered buffer (MR's memory).
	Buf []byte
	// Remote is the peer's buffer, from the connection's private data
	// (zero when the peer did not send one).
	Remote RemoteBuf
	// PrivateData is the application's private data the peer sent.
	PrivateData []byte

	ch        *EventChannel
	closeOnce sync.Once
}

// newEndpoint creates the CQs, QP and MR for id (after route resolution
// or on a connect request).
func newEndpoint(id *ID, c *EndpointConfig) (*Endpoint, error) {
	dev := id.Device()
	e := &Endpoint{ID: id, Buf: c.Buf}
	var err error
	if e.SendCQ, err = dev.CreateCQ(verbs.CQAttr{CQE: c.MaxSendWR, Channel: verbs.NewCompChannel(1)}); err != nil {
		return nil, err
	}
	if e.RecvCQ, err = dev.CreateCQ(verbs.CQAttr{CQE: c.MaxRecvWR, Channel: verbs.NewCompChannel(1)}); err != nil {
		e.release()
		return nil, err
	}
	if e.QP, err = id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: e.SendCQ, RecvCQ: e.RecvCQ,
		Cap: verbs.QPCap{MaxSendWR: c.MaxSendWR, MaxRecvWR: c.MaxRecvWR, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: c.MaxInlineData}}); err != nil {
		e.release()
		return nil, err
	}
	if e.MR, err = id.PD().RegMR(c.Buf, c.Access); err != nil {
		e.release()
		return nil, err
	}
	return e, nil
}

// release frees what newEndpoint made (the ID is the caller's).
func (e *Endpoint) release() {
	if e.QP != nil {
		e.ID.DestroyQP()
	}
	if e.MR != nil {
		e.MR.Dereg()
	}
	if e.SendCQ != nil {
		e.SendCQ.Destroy()
	}
	if e.RecvCQ != nil {
		e.RecvCQ.Destroy()
	}
}

// waitEvent returns the next event on ch for id, failing on errors.
func waitEvent(ctx context.Context, ch *EventChannel, want EventType) (*Event, error) {
	ev, err := ch.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	if ev.Type != want {
		if ev.Err != nil {
			return ev, fmt.Errorf("rdmacm: %v (want %v): %w", ev.Type, want, ev.Err)
		}
		return ev, fmt.Errorf("rdmacm: %v (status %d), want %v", ev.Type, ev.Status, want)
	}
	return ev, nil
}

// Dial connects to a listening endpoint at addr (rdma_getaddrinfo +
// rdma_create_ep + rdma_connect): it resolves the address and route on
// one of m's devices, creates the endpoint and connects, returning once
// the connection is established. ctx bounds the whole call.
func (m *Manager) Dial(ctx context.Context, addr netip.AddrPort, cfg *EndpointConfig) (*Endpoint, error) {
	c := cfg.withDefaults()
	if len(c.PrivateData) > 56-epHdrLen {
		return nil, fmt.Errorf("rdmacm: dial: %d bytes of private data, at most %d: %w", len(c.PrivateData), 56-epHdrLen, ErrPrivateDataTooLong)
	}
	ch := NewEventChannel()
	id, err := m.CreateID(ch, nil, PSTCP)
	if err != nil {
		ch.Close()
		return nil, err
	}
	fail := func(e *Endpoint, err error) (*Endpoint, error) {
		if e != nil {
			e.release()
		}
		id.Destroy()
		ch.Close()
		return nil, fmt.Errorf("rdmacm: dial %v: %w", addr, err)
	}
	if err := id.ResolveAddr(netip.AddrPort{}, addr, c.Timeout); err != nil {
		return fail(nil, err)
	}
	if _, err := waitEvent(ctx, ch, EventAddrResolved); err != nil {
		return fail(nil, err)
	}
	if err := id.ResolveRoute(c.Timeout); err != nil {
		return fail(nil, err)
	}
	if _, err := waitEvent(ctx, ch, EventRouteResolved); err != nil {
		return fail(nil, err)
	}
	e, err := newEndpoint(id, &c)
	if err != nil {
		return fail(nil, err)
	}
	if err := id.Connect(&ConnParam{PrivateData: appendEPHdr(e.MR, c.PrivateData), ResponderResources: 0xFF,
		InitiatorDepth: 0xFF, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return fail(e, err)
	}
	ev, err := waitEvent(ctx, ch, EventEstablished)
	if err != nil {
		if ev != nil && ev.Type == EventRejected {
			err = fmt.Errorf("%w (is an Endpoint listening on %v?)", err, addr)
		}
		return fail(e, err)
	}
	e.Remote, e.PrivateData = parseEPHdr(ev.Conn.PrivateData)
	e.ch = ch
	return e, nil
}

// Listener accepts endpoints (rdma_create_ep with RAI_PASSIVE +
// rdma_listen).
type Listener struct {
	id  *ID
	ch  *EventChannel
	cfg EndpointConfig
}

// Listen listens on addr (an address of one of m's devices; port 0
// picks a free one); cfg sizes the endpoints Accept returns.
func (m *Manager) Listen(addr netip.AddrPort, cfg *EndpointConfig) (*Listener, error) {
	var c EndpointConfig
	if cfg != nil {
		c = *cfg
	}
	if len(c.PrivateData) > 196-epHdrLen {
		return nil, fmt.Errorf("rdmacm: listen: %d bytes of private data, at most %d: %w", len(c.PrivateData), 196-epHdrLen, ErrPrivateDataTooLong)
	}
	ch := NewEventChannel()
	id, err := m.CreateID(ch, nil, PSTCP)
	if err == nil {
		err = id.BindAddr(addr)
	}
	if err == nil {
		err = id.Listen(16)
	}
	if err != nil {
		if id != nil {
			id.Destroy()
		}
		ch.Close()
		return nil, fmt.Errorf("rdmacm: listen on %v: %w", addr, err)
	}
	return &Listener{id: id, ch: ch, cfg: c}, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// Accept waits for a connection request, accepts it with a new endpoint
// and returns the endpoint once the connection is established
// (rdma_get_request + rdma_accept). Each endpoint gets its own buffer
// (the config's Buf is used for the first one only).
func (l *Listener) Accept(ctx context.Context) (*Endpoint, error) {
	for {
		ev, err := l.ch.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		if ev.Type != EventConnectRequest {
			continue // events of requests that failed before ESTABLISHED
		}
		c := l.cfg.withDefaults()
		l.cfg.Buf = nil
		id := ev.ID
		e, err := newEndpoint(id, &c)
		if err != nil {
			id.Reject(nil)
			id.Destroy()
			return nil, fmt.Errorf("rdmacm: accept: %w", err)
		}
		e.Remote, e.PrivateData = parseEPHdr(ev.Conn.PrivateData)
		// The new ID's events (ESTABLISHED, later DISCONNECTED) go to
		// a channel of its own, so Accept reads only requests.
		e.ch = NewEventChannel()
		id.Migrate(e.ch)
		if err := id.Accept(&ConnParam{PrivateData: appendEPHdr(e.MR, c.PrivateData), ResponderResources: 0xFF,
			InitiatorDepth: 0xFF, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			e.release()
			id.Destroy()
			e.ch.Close()
			return nil, fmt.Errorf("rdmacm: accept: %w", err)
		}
		// The REP went out; wait for the RTU (or the first packet).
		if _, err := waitEvent(ctx, e.ch, EventEstablished); err != nil {
			e.release()
			id.Destroy()
			e.ch.Close()
			if ctx.Err() != nil {
				return nil, err
			}
			continue // the requester went away: wait for the next one
		}
		return e, nil
	}
}

// Close stops listening; established endpoints stay up.
func (l *Listener) Close() error {
	err := l.id.Destroy()
	l.ch.Close()
	return err
}

// check returns an error when [off, off+n) is outside the buffer.
func (e *Endpoint) check(off, n int) error {
	if off < 0 || n < 0 || off+n > len(e.Buf) {
		return fmt.Errorf("rdmacm: [%d, %d) outside the %d-byte buffer: %w", off, off+n, len(e.Buf), ErrInvalid)
	}
	return nil
}

// PostSend sends Buf[off:off+n] (rdma_post_send); the completion comes
// to WaitSend.
func (e *Endpoint) PostSend(off, n int) error {
	if err := e.check(off, n); err != nil {
		return err
	}
	_, err := e.QP.PostSend([]verbs.SendWR{{ID: uint64(off), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{e.MR.SGE(off, n)}}})
	return err
}

// PostRecv posts Buf[off:off+n] for one incoming message
// (rdma_post_recv); the completion comes to WaitRecv.
func (e *Endpoint) PostRecv(off, n int) error {
	if err := e.check(off, n); err != nil {
		return err
	}
	_, err := e.QP.PostRecv([]verbs.RecvWR{{ID: uint64(off), SGL: []verbs.SGE{e.MR.SGE(off, n)}}})
	return err
}

// PostWrite writes Buf[off:off+n] to the peer's buffer at remoteOff
// (rdma_post_write).
func (e *Endpoint) PostWrite(off, n int, remoteOff uint64) error {
	return e.postRDMA(verbs.WRRDMAWrite, off, n, remoteOff)
}

// PostRead reads n bytes of the peer's buffer at remoteOff into
// Buf[off:] (rdma_post_read).
func (e *Endpoint) PostRead(off, n int, remoteOff uint64) error {
	return e.postRDMA(verbs.WRRDMARead, off, n, remoteOff)
}

func (e *Endpoint) postRDMA(op verbs.WROpcode, off, n int, remoteOff uint64) error {
	if err := e.check(off, n); err != nil {
		return err
	}
	if e.Remote.RKey == 0 && e.Remote.Addr == 0 {
		return fmt.Errorf("rdmacm: the peer sent no buffer description: %w", ErrInvalid)
	}
	if remoteOff+uint64(n) > uint64(e.Remote.Len) {
		return fmt.Errorf("rdmacm: [%d, %d) outside the peer's %d-byte buffer: %w", remoteOff, remoteOff+uint64(n), e.Remote.Len, ErrInvalid)
	}
	_, err := e.QP.PostSend([]verbs.SendWR{{ID: uint64(off), Opcode: op, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{e.MR.SGE(off, n)}, RemoteAddr: e.Remote.Addr + remoteOff, RKey: e.Remote.RKey}})
	return err
}

// WaitSend waits for the next send-side completion (rdma_get_send_comp)
// or for ctx to end. A completion with an error status is returned with
// an error that names it.
func (e *Endpoint) WaitSend(ctx context.Context) (verbs.WC, error) { return waitCQ(ctx, e.SendCQ) }

// WaitRecv waits for the next receive completion (rdma_get_recv_comp)
// or for ctx to end.
func (e *Endpoint) WaitRecv(ctx context.Context) (verbs.WC, error) { return waitCQ(ctx, e.RecvCQ) }

// ErrCompletion is matched by the errors of failed completions.
var ErrCompletion = errors.New("rdmacm: work request failed")

func waitCQ(ctx context.Context, cq verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 0 {
			// Arm, then poll again: a completion that came before the
			// arm raises no event.
			if err := cq.ReqNotify(false); err != nil {
				return verbs.WC{}, err
			}
			if n, err = cq.Poll(wc[:]); err != nil {
				return verbs.WC{}, err
			}
		}
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				return wc[0], fmt.Errorf("%w: %v %v", ErrCompletion, wc[0].Opcode, wc[0].Status)
			}
			return wc[0], nil
		}
		if _, err := cq.Channel().Get(ctx); err != nil {
			return verbs.WC{}, err
		}
	}
}

// Close disconnects and frees the endpoint (rdma_disconnect +
// rdma_destroy_ep).
func (e *Endpoint) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.ID.Disconnect()
		err = e.ID.Destroy()
		e.release()
		e.ch.Close()
	})
	return err
}
