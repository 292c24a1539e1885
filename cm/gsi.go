package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"softib/internal/stats"
	"softib/verbs"
	"softib/wire/mad"
)

// GSI is a General Services Interface agent on a device's QP1: it sends
// and receives MADs over a UD (GSI) QP with Q_Key 0x80010000 and P_Key
// index 0, learns each sender's address from the 40-byte GRH area of the
// receive buffer, dispatches received MADs to the agents registered for
// their class, version and method, matches responses to outstanding
// requests by TID, and answers unclaimed Get/Set requests the way the
// Linux MAD layer does (GetResp with status "unsupported method /
// attribute"). Malformed MADs are counted and dropped.
//
// It implements [Port] for a [CM].
type GSI struct {
	dev      verbs.Device
	cfg      GSIConfig
	gid      verbs.GID
	gidIndex uint8
	st       GSIStats

	pd             verbs.PD
	sendCQ, recvCQ verbs.CQ
	qp             verbs.QP
	sendMR, recvMR verbs.MR
	sendW, recvW   *verbs.CQWorker

	mu      sync.Mutex // guards the fields below
	closed  bool
	free    []int // free send slots
	ahs     map[verbs.AHAttr]verbs.AH
	agents  []gsiAgent
	waiters map[uint64]chan []byte // outstanding Requests by TID
	nextTID uint32
}

// GSIConfig configures a GSI agent; the zero value gives the defaults.
type GSIConfig struct {
	// Port is the device port (default 1).
	Port uint8
	// RecvDepth and SendDepth are the numbers of receive buffers and
	// send slots (default 128 each).
	RecvDepth, SendDepth int
	// ReplyPort is the UDP port peers' GSI agents listen on (AH.DPort of
	// replies); 0 means 4791, which every RoCEv2 device uses.
	ReplyPort uint16
	// HiTID is the upper half of the TIDs Request forms (default 1).
	HiTID uint32
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// GSIStats are the GSI agent counters.
type GSIStats struct {
	Received      stats.Counter // MADs handed to an agent
	Sent          stats.Counter // MADs posted
	Malformed     stats.Counter // bad length, GRH area or base version; SMP classes on QP1
	Unclaimed     stats.Counter // no agent for class/version/method
	UnsupportedTx stats.Counter // GetResp(unsupported) sent for unclaimed Get/Set
	UnmatchedResp stats.Counter // responses matching no outstanding request
	SendErrors    stats.Counter // send failures (no slot, post or completion error)
	RecvErrors    stats.Counter // receive completions in error
	Retries       stats.Counter // Request retransmissions
	Timeouts      stats.Counter // Requests that got no response
}

// MADHandler receives a MAD (256 bytes, valid only during the call) and
// the address it came from.
type MADHandler func(m []byte, from Addr)

type gsiAgent struct {
	class   mad.MgmtClass
	version uint8
	methods []mad.Method
	h       MADHandler
}

// ErrGSI is wrapped by GSI send failures.
var ErrGSI = errors.New("cm: GSI send failed")

const gsiRecvSize = mad.GRHSize + mad.MADSize

// NewGSI creates QP1 on dev and starts receiving.
func NewGSI(dev verbs.Device, cfg GSIConfig) (g *GSI, err error) {
	if cfg.Port == 0 {
		cfg.Port = 1
	}
	if cfg.RecvDepth <= 0 {
		cfg.RecvDepth = 128
	}
	if cfg.SendDepth <= 0 {
		cfg.SendDepth = 128
	}
	if cfg.HiTID == 0 {
		cfg.HiTID = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g = &GSI{dev: dev, cfg: cfg, ahs: map[verbs.AHAttr]verbs.AH{}, waiters: map[uint64]chan []byte{}}
	defer func() {
		if err != nil {
			g.teardown()
		}
	}()
	gids, err := dev.GIDTable(cfg.Port)
	if err != nil {
		return nil, err
	}
	for _, e := range gids {
		// The IP GID (IPv4-mapped or global IPv6), not the link-local one.
		if a := e.GID.Addr(); a.IsValid() && !a.IsLinkLocalUnicast() && !e.GID.IsZero() {
			g.gid, g.gidIndex = e.GID, uint8(e.Index)
		}
	}
	if g.gid.IsZero() {
		return nil, fmt.Errorf("cm: GSI: no IP GID on port %d: %w", cfg.Port, ErrInvalidParam)
	}
	if g.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if g.sendCQ, err = dev.CreateCQ(verbs.CQAttr{CQE: cfg.SendDepth, Channel: verbs.NewCompChannel(0)}); err != nil {
		return nil, err
	}
	if g.recvCQ, err = dev.CreateCQ(verbs.CQAttr{CQE: cfg.RecvDepth, Channel: verbs.NewCompChannel(0)}); err != nil {
		return nil, err
	}
	if g.sendMR, err = g.pd.RegMR(make([]byte, cfg.SendDepth*mad.MADSize), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if g.recvMR, err = g.pd.RegMR(make([]byte, cfg.RecvDepth*gsiRecvSize), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if g.qp, err = g.pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeGSI, SendCQ: g.sendCQ, RecvCQ: g.recvCQ,
		Cap: verbs.QPCap{MaxSendWR: cfg.SendDepth, MaxRecvWR: cfg.RecvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if err = g.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, QKey: mad.GSIQKey},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrQKey); err != nil {
		return nil, err
	}
	if err = g.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
		return nil, err
	}
	if err = g.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return nil, err
	}
	for i := range cfg.RecvDepth {
		if err = g.postRecv(i); err != nil {
			return nil, err
		}
	}
	g.free = make([]int, cfg.SendDepth)
	for i := range g.free {
		g.free[i] = i
	}
	if g.sendW, err = verbs.StartCQWorker(g.sendCQ, 0, g.sendDone); err != nil {
		return nil, err
	}
	if g.recvW, err = verbs.StartCQWorker(g.recvCQ, 0, g.recvDone); err != nil {
		return nil, err
	}
	return g, nil
}

// Stats returns the agent counters.
func (g *GSI) Stats() *GSIStats { return &g.st }

// LocalGID returns the GID the agent sends from.
func (g *GSI) LocalGID() verbs.GID { return g.gid }

// GIDIndex returns the index of LocalGID in the port's GID table.
func (g *GSI) GIDIndex() uint8 { return g.gidIndex }

// Device returns the device.
func (g *GSI) Device() verbs.Device { return g.dev }

// Register routes received MADs of a class and class version whose
// method is in methods to h. Responses (method with bit 0x80) to this
// agent's Requests never reach h. It replaces an earlier registration of
// the same class and version.
func (g *GSI) Register(class mad.MgmtClass, version uint8, methods []mad.Method, h MADHandler) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, a := range g.agents {
		if a.class == class && a.version == version {
			g.agents = append(g.agents[:i], g.agents[i+1:]...)
			break
		}
	}
	g.agents = append(g.agents, gsiAgent{class, version, append([]mad.Method(nil), methods...), h})
}

// Unregister removes the agent registered for a class and class
// version, if any: its MADs are unclaimed again (Get/Set answered with
// status "unsupported method/attribute", as the Linux MAD layer does).
func (g *GSI) Unregister(class mad.MgmtClass, version uint8) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, a := range g.agents {
		if a.class == class && a.version == version {
			g.agents = append(g.agents[:i], g.agents[i+1:]...)
			return
		}
	}
}

// Close destroys QP1 and its resources.
func (g *GSI) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.closed = true
	for tid, ch := range g.waiters {
		close(ch)
		delete(g.waiters, tid)
	}
	g.mu.Unlock()
	g.teardown()
	return nil
}

func (g *GSI) teardown() {
	if g.qp != nil {
		g.qp.Destroy()
	}
	if g.sendW != nil {
		g.sendW.Stop()
	}
	if g.recvW != nil {
		g.recvW.Stop()
	}
	g.mu.Lock()
	for k, ah := range g.ahs {
		ah.Destroy()
		delete(g.ahs, k)
	}
	g.mu.Unlock()
	for _, mr := range []verbs.MR{g.sendMR, g.recvMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	for _, cq := range []verbs.CQ{g.sendCQ, g.recvCQ} {
		if cq != nil {
			cq.Destroy()
		}
	}
	if g.pd != nil {
		g.pd.Dealloc()
	}
}

func (g *GSI) postRecv(slot int) error {
	_, err := g.qp.PostRecv([]verbs.RecvWR{{ID: uint64(slot), SGL: []verbs.SGE{g.recvMR.SGE(slot*gsiRecvSize, gsiRecvSize)}}})
	return err
}

// Send transmits one MAD to a remote GSI (or UD) endpoint.
func (g *GSI) Send(m []byte, to Addr) error {
	if len(m) != mad.MADSize {
		g.st.SendErrors.Inc()
		return fmt.Errorf("cm: GSI send of %d bytes: %w", len(m), ErrInvalidParam)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	if len(g.free) == 0 {
		g.st.SendErrors.Inc()
		return fmt.Errorf("cm: GSI send queue full: %w", ErrGSI)
	}
	ah, err := g.ahLocked(to)
	if err != nil {
		g.st.SendErrors.Inc()
		return fmt.Errorf("%w: %w", ErrGSI, err)
	}
	slot := g.free[len(g.free)-1]
	copy(g.sendMR.Buf()[slot*mad.MADSize:], m)
	qkey := to.QKey
	if qkey == 0 {
		qkey = mad.GSIQKey
	}
	qpn := to.QPN
	if qpn == 0 {
		qpn = mad.GSIQPN
	}
	if _, err := g.qp.PostSend([]verbs.SendWR{{ID: uint64(slot), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{g.sendMR.SGE(slot*mad.MADSize, mad.MADSize)}, AH: ah, RemoteQPN: qpn, RemoteQKey: qkey}}); err != nil {
		g.st.SendErrors.Inc()
		return fmt.Errorf("%w: %w", ErrGSI, err)
	}
	g.free = g.free[:len(g.free)-1]
	g.st.Sent.Inc()
	return nil
}

// ahLocked returns a cached address handle for to.
func (g *GSI) ahLocked(to Addr) (verbs.AH, error) {
	a := to.AH
	a.IsGlobal = true
	if a.PortNum == 0 {
		a.PortNum = g.cfg.Port
	}
	if a.GRH.HopLimit == 0 {
		a.GRH.HopLimit = mad.DefaultHopLimit
	}
	if a.DPort == 0 {
		a.DPort = g.cfg.ReplyPort
	}
	if a.GRH.SGIDIndex == 0 {
		a.GRH.SGIDIndex = g.gidIndex
	}
	if ah, ok := g.ahs[a]; ok {
		return ah, nil
	}
	if len(g.ahs) >= 1024 {
		for k, ah := range g.ahs {
			ah.Destroy()
			delete(g.ahs, k)
		}
	}
	ah, err := g.pd.CreateAH(&a)
	if err != nil {
		return nil, err
	}
	g.ahs[a] = ah
	return ah, nil
}

func (g *GSI) sendDone(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess && wc.Status != verbs.WCWRFlushErr {
		g.st.SendErrors.Inc()
	}
	g.mu.Lock()
	g.free = append(g.free, int(wc.WRID))
	g.mu.Unlock()
}

func (g *GSI) recvDone(wc *verbs.WC) {
	slot := int(wc.WRID)
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			g.st.RecvErrors.Inc()
		}
		return // flushed on close, or the QP is in error
	}
	buf := g.recvMR.Buf()[slot*gsiRecvSize : (slot+1)*gsiRecvSize]
	g.handle(buf[:min(int(wc.ByteLen), gsiRecvSize)], wc)
	if err := g.postRecv(slot); err != nil {
		g.st.RecvErrors.Inc()
	}
}

// ParseGRHArea returns the source and destination IP addresses and the
// traffic class recorded in the 40-byte area in front of a UD/GSI
// receive (roce-wire.md §12): 20 zero bytes and an IPv4 header, or an
// IPv6 header.
func ParseGRHArea(b []byte) (src, dst netip.Addr, tclass uint8, ok bool) {
	if len(b) < mad.GRHSize {
		return
	}
	if b[20]>>4 == 4 && bytes.Equal(b[:20], make([]byte, 20)) {
		h := b[20:40]
		return netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20])), h[1], true
	}
	if b[0]>>4 == 6 {
		tc := uint8(binary.BigEndian.Uint32(b[0:4]) >> 20)
		return netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40])), tc, true
	}
	return
}

// handle processes one received MAD with its GRH area.
func (g *GSI) handle(b []byte, wc *verbs.WC) {
	if len(b) != gsiRecvSize || wc.Flags&verbs.WCFlagGRH == 0 {
		g.st.Malformed.Inc()
		return
	}
	src, _, tc, ok := ParseGRHArea(b)
	if !ok {
		g.st.Malformed.Inc()
		return
	}
	m := b[mad.GRHSize:]
	h, err := mad.ParseHeader(m)
	if err != nil {
		g.st.Malformed.Inc()
		return
	}
	// QP1 never carries subnet management (QP0) classes (ib_mad
	// validate_mad).
	if c := h.MgmtClass(); c == mad.ClassSubnLID || c == mad.ClassSubnDirected {
		g.st.Malformed.Inc()
		return
	}
	from := Addr{
		AH: verbs.AHAttr{
			GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(src), SGIDIndex: g.gidIndex,
				HopLimit: mad.DefaultHopLimit, TrafficClass: tc},
			IsGlobal: true,
			PortNum:  g.cfg.Port,
			DPort:    g.cfg.ReplyPort,
		},
		QPN:       wc.SrcQP,
		QKey:      mad.GSIQKey,
		PKeyIndex: wc.PKeyIndex,
	}
	if h.Method().IsResponse() {
		g.mu.Lock()
		ch := g.waiters[h.TID()]
		delete(g.waiters, h.TID())
		g.mu.Unlock()
		if ch == nil {
			g.st.UnmatchedResp.Inc()
			return
		}
		ch <- bytes.Clone(m)
		return
	}
	g.mu.Lock()
	var handler MADHandler
	for _, a := range g.agents {
		if a.class == h.MgmtClass() && a.version == h.ClassVersion() {
			for _, meth := range a.methods {
				if meth == h.Method() {
					handler = a.h
				}
			}
		}
	}
	g.mu.Unlock()
	if handler != nil {
		g.st.Received.Inc()
		handler(m, from)
		return
	}
	g.st.Unclaimed.Inc()
	if meth := h.Method(); meth == mad.MethodGet || meth == mad.MethodSet {
		// ib_mad generate_unmatched_resp: echo the MAD as a GetResp
		// with status "unsupported method/attribute combination".
		resp := bytes.Clone(m)
		rh := mad.Header(resp)
		rh.SetMethod(mad.MethodGetResp)
		rh.SetStatus(mad.StatusUnsupportedMethodAttr)
		if err := g.Send(resp, from); err == nil {
			g.st.UnsupportedTx.Inc()
		}
	}
}

// NewTID returns a fresh transaction ID: HiTID<<32 | counter.
func (g *GSI) NewTID() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextTID++
	return uint64(g.cfg.HiTID)<<32 | uint64(g.nextTID)
}

// Request sends a request MAD (Get, Set, ...) with a fresh TID and waits
// for the response with the same TID, retransmitting every timeout up to
// retries times. It returns the response MAD.
func (g *GSI) Request(ctx context.Context, m []byte, to Addr, timeout time.Duration, retries int) ([]byte, error) {
	if len(m) != mad.MADSize {
		return nil, fmt.Errorf("cm: GSI request of %d bytes: %w", len(m), ErrInvalidParam)
	}
	req := bytes.Clone(m)
	tid := g.NewTID()
	mad.Header(req).SetTID(tid)
	ch := make(chan []byte, 1)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	g.waiters[tid] = ch
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.waiters, tid)
		g.mu.Unlock()
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for try := 0; ; try++ {
		if err := g.Send(req, to); err != nil {
			return nil, err
		}
		select {
		case resp, ok := <-ch:
			if !ok {
				return nil, ErrClosed
			}
			return resp, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		if try >= retries {
			g.st.Timeouts.Inc()
			return nil, fmt.Errorf("cm: GSI request TID %#x: %w", tid, ErrTimeout)
		}
		g.st.Retries.Inc()
		t.Reset(timeout)
	}
}

// Attach creates a GSI agent on dev's QP1 and a CM on top of it; closing
// the CM closes the agent.
func Attach(dev verbs.Device, cfg Config, gcfg GSIConfig) (*CM, error) {
	g, err := NewGSI(dev, gcfg)
	if err != nil {
		return nil, err
	}
	c := New(g, cfg)
	c.owned = g
	g.Register(mad.ClassCM, mad.CMClassVersion, []mad.Method{mad.MethodSend}, c.HandleMAD)
	if cfg.Attached != nil {
		cfg.Attached(c, g)
	}
	return c, nil
}

// Port returns the port the CM sends through.
func (c *CM) Port() Port { return c.port }
