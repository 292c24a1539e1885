// Package pingpong implements ibv_rc_pingpong and ibv_ud_pingpong: the same
// flags, QP attributes, TCP connection exchange (tool-protocols.md §1–2)
// and output lines, so that either end may be the rdma-core tool.
//
// Flow (both tools):
//
//	create QP, INIT, post rx_depth receives
//	client: TCP connect, send Dest, read server Dest, send "done", QP→RTS, first SEND
//	server: accept, read client Dest, QP→RTR→RTS, send Dest, read "done"
//	ping-pong: post the next SEND once the previous SEND and RECV completed
package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"softib/tools/internal/rdmautil"
	"softib/verbs"
)

// Kind selects the transport.
type Kind uint8

// Pingpong kinds.
const (
	RC Kind = iota
	UD
)

// String returns the tool name.
func (k Kind) String() string {
	if k == UD {
		return "ud_pingpong"
	}
	return "rc_pingpong"
}

// QKey is the Q_Key ibv_ud_pingpong uses for its QP and every send.
const QKey = 0x11111111

// GRHLen is the size of the GRH area at the start of UD receive buffers.
const GRHLen = 40

// DefaultTCPPort is the exchange port of both tools.
const DefaultTCPPort = 18515

// Config is one pingpong run. Zero values mean the rdma-core defaults.
type Config struct {
	Kind Kind
	// Host is the server to connect to; "" makes this end the server.
	Host string
	// TCPPort is the exchange port (18515).
	TCPPort int
	// Listener, if set, is used by a server instead of listening on
	// TCPPort (tests use it to avoid port clashes).
	// BindAddr, if valid, is the address the exchange socket binds:
	// the server listens on it alone and the client connects from it.
	BindAddr netip.Addr
	Listener net.Listener
	// Size is the message size (RC 4096, UD 2048).
	Size int
	// MTU is the RC path MTU in bytes (1024).
	MTU int
	// RxDepth is the number of receives kept posted (500).
	RxDepth int
	// Iters is the number of exchanges (1000).
	Iters int
	// SL is the service level.
	SL uint8
	// HopLimit is the GRH hop limit of the path, sent as the IP TTL /
	// hop limit of every packet as Linux rxe does; 0 means 1, what
	// rdma-core's pingpongs set, so that across a router (which drops
	// TTL 1) a larger value must be asked for (--hop-limit).
	HopLimit uint8
	// Events sleeps on CQ events instead of polling (-e).
	Events bool
	// Check validates received data (-c, rdma-core's --chk): the first
	// byte of every 4 KiB page is 0 and the others 0x7b.
	Check bool
	// FitMTU (UD) shrinks a Size larger than the port's MTU to the MTU
	// instead of failing; the CLI sets it when -s is not given, so that
	// ud_pingpong with no flags works on a 1500-byte link (1024-byte MTU).
	FitMTU bool
	// Port is the IB port (1).
	Port uint8
	// GIDIndex is the local GID index (-g); -1 sends a zero GID.
	GIDIndex int
	// PeerUDPPort is the peer device's UDP port (0 = 4791).
	PeerUDPPort uint16
	// Out receives the tool's output lines (nil = discard).
	Out io.Writer
}

func (c *Config) setDefaults() {
	if c.TCPPort == 0 {
		c.TCPPort = DefaultTCPPort
	}
	if c.Size == 0 {
		c.Size = 4096
		if c.Kind == UD {
			c.Size = 2048
		}
	}
	if c.MTU == 0 {
		c.MTU = 1024
	}
	if c.RxDepth == 0 {
		c.RxDepth = 500
	}
	if c.Iters == 0 {
		c.Iters = 1000
	}
	if c.Port == 0 {
		c.Port = 1
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Result is the outcome of a run.
type Result struct {
	Local, Remote Dest
	// Bytes is size × iters × 2, as the tools count.
	Bytes   int64
	Iters   int
	Elapsed time.Duration
}

// MbitPerSec is the throughput the tools print.
func (r *Result) MbitPerSec() float64 {
	us := float64(r.Elapsed.Microseconds())
	if us <= 0 {
		us = 1
	}
	return float64(r.Bytes) * 8 / us
}

// UsecPerIter is the round-trip time per exchange.
func (r *Result) UsecPerIter() float64 {
	return float64(r.Elapsed.Microseconds()) / float64(max(r.Iters, 1))
}

// AppendSummary appends the two result lines of the rdma-core tools.
func (r *Result) AppendSummary(b []byte) []byte {
	us := float64(r.Elapsed.Microseconds())
	b = fmt.Appendf(b, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", r.Bytes, us/1e6, r.MbitPerSec())
	return fmt.Appendf(b, "%d iters in %.2f seconds = %.2f usec/iter\n", r.Iters, us/1e6, r.UsecPerIter())
}

// AddressLine formats a "local address:"/"remote address:" line; the GID
// is printed like inet_ntop(AF_INET6) ("::ffff:127.0.0.2", "::").
func AddressLine(side string, d Dest) string {
	pad := " "
	if side == "local" {
		pad = "  "
	}
	return fmt.Sprintf("  %s address:%sLID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		side, pad, d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID).String())
}

// MTUFromFlag maps -m's byte value to an IB MTU (0 if invalid).
func MTUFromFlag(n int) verbs.MTU {
	m := verbs.MTUFromBytes(n)
	if m.Bytes() != n {
		return 0
	}
	return m
}

const (
	wrRecv = 1
	wrSend = 2
)

type runner struct {
	cfg    *Config
	dev    verbs.Device
	pd     verbs.PD
	cq     verbs.CQ
	qp     verbs.QP
	sendMR verbs.MR
	recvMR verbs.MR
	ah     verbs.AH
	inline bool
	// slots > 1 when Check: one receive buffer per posted receive.
	slots    int
	slotLen  int
	freeSlot []int
	remote   Dest
	psn      uint32
	// Scratch work requests, reused so the ping-pong loop does not
	// allocate.
	swr  [1]verbs.SendWR
	ssge [1]verbs.SGE
	rwr  [1]verbs.RecvWR
	rsge [1]verbs.SGE
}

// Run runs one pingpong on dev (server when cfg.Host is empty), printing
// the rdma-core output lines to cfg.Out.
func Run(ctx context.Context, dev verbs.Device, cfg Config) (*Result, error) {
	cfg.setDefaults()
	r := &runner{cfg: &cfg, dev: dev}
	defer r.close()
	if err := r.setup(); err != nil {
		return nil, err
	}
	local, err := r.localDest()
	if err != nil {
		return nil, err
	}
	fmt.Fprint(cfg.Out, AddressLine("local", local))
	if err := r.exchange(ctx, local); err != nil {
		return nil, err
	}
	fmt.Fprint(cfg.Out, AddressLine("remote", r.remote))
	res, err := r.pingpong(ctx)
	if err != nil {
		return nil, err
	}
	res.Local, res.Remote = local, r.remote
	cfg.Out.Write(res.AppendSummary(nil))
	return res, nil
}

func (r *runner) setup() error {
	c := r.cfg
	if c.Size <= 0 || c.RxDepth <= 0 || c.Iters <= 0 {
		return fmt.Errorf("size, rx-depth and iters must be positive")
	}
	if c.Kind == RC && MTUFromFlag(c.MTU) == 0 {
		return fmt.Errorf("bad MTU %d: use 256, 512, 1024, 2048 or 4096", c.MTU)
	}
	pa, err := r.dev.QueryPort(c.Port)
	if err != nil {
		return fmt.Errorf("couldn't get port info: %w", err)
	}
	if c.Kind == UD && c.FitMTU && c.Size > pa.ActiveMTU.Bytes() {
		c.Size = pa.ActiveMTU.Bytes()
	}
	if c.Kind == UD && c.Size > pa.ActiveMTU.Bytes() {
		return fmt.Errorf("requested size larger than port MTU (%d)", pa.ActiveMTU.Bytes())
	}
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %w", err)
	}
	bufLen := c.Size
	if c.Kind == UD {
		bufLen += GRHLen
	}
	send := bytes.Repeat([]byte{0x7b}, bufLen)
	if c.Check {
		markPages(send[bufLen-c.Size:])
	}
	if r.sendMR, err = r.pd.RegMR(send, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	r.slots, r.slotLen = 1, bufLen
	if c.Check {
		r.slots = c.RxDepth
	}
	if r.recvMR, err = r.pd.RegMR(make([]byte, r.slots*bufLen), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %w", err)
	}
	if r.cq, err = rdmautil.NewCQ(r.dev, c.RxDepth+1); err != nil {
		return fmt.Errorf("couldn't create CQ: %w", err)
	}
	t := verbs.QPTypeRC
	if c.Kind == UD {
		t = verbs.QPTypeUD
	}
	r.qp, err = r.pd.CreateQP(&verbs.QPInitAttr{Type: t, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: c.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	_, ia, err := r.qp.Query()
	if err == nil && ia.Cap.MaxInlineData >= c.Size {
		r.inline = true
	}
	r.psn = rdmautil.RandPSN()
	if c.Kind == UD {
		err = rdmautil.UDToRTS(r.qp, c.Port, QKey, r.psn)
	} else {
		err = rdmautil.ToInit(r.qp, c.Port, 0)
	}
	if err != nil {
		return err
	}
	for i := range r.slots {
		r.freeSlot = append(r.freeSlot, i)
	}
	if n := r.postRecv(c.RxDepth); n < c.RxDepth {
		return fmt.Errorf("couldn't post receive (%d)", n)
	}
	return nil
}

// markPages writes the --chk pattern: byte 0 of every 4 KiB page is 0.
func markPages(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
}

func (r *runner) localDest() (Dest, error) {
	pa, err := r.dev.QueryPort(r.cfg.Port)
	if err != nil {
		return Dest{}, err
	}
	d := Dest{LID: pa.LID, QPN: r.qp.QPN(), PSN: r.psn}
	if r.cfg.GIDIndex >= 0 {
		g, err := r.dev.QueryGID(r.cfg.Port, r.cfg.GIDIndex)
		if err != nil {
			return Dest{}, fmt.Errorf("can't read sgid of index %d: %w", r.cfg.GIDIndex, err)
		}
		d.GID = g
	}
	return d, nil
}

func (r *runner) exchange(ctx context.Context, local Dest) error {
	c := r.cfg
	if c.Host != "" {
		var d net.Dialer
		if c.BindAddr.IsValid() {
			// Leave from the device's address, not the kernel's choice
			// (127.0.0.1 towards any 127.0.0.x server).
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(c.BindAddr, 0))
		}
		addr := net.JoinHostPort(c.Host, strconv.Itoa(c.TCPPort))
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("couldn't connect to %s: %w", addr, err)
		}
		defer conn.Close()
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer stop()
		if r.remote, err = ClientExchange(conn, local); err != nil {
			return err
		}
		return r.connect(r.remote)
	}
	ln := c.Listener
	if ln == nil {
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", listenAddr(c.BindAddr, c.TCPPort))
		if err != nil {
			return fmt.Errorf("couldn't listen to port %d: %w", c.TCPPort, err)
		}
		defer l.Close()
		ln = l
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	stop2 := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop2()
	r.remote, err = ServerExchange(conn, local, r.connect)
	return err
}

// connect brings the QP to RTS toward rem with the rdma-core attributes.
func (r *runner) connect(rem Dest) error {
	c := r.cfg
	if rem.GID.InterfaceID() == 0 {
		return fmt.Errorf("the peer sent no GID (QPN %#06x): RoCE needs one — run both ends with -g 1", rem.QPN)
	}
	av := rdmautil.AV(c.Port, rdmautil.Peer{LID: rem.LID, GID: rem.GID, DPort: c.PeerUDPPort}, c.GIDIndex, max(c.HopLimit, 1), c.SL)
	if c.Kind == UD {
		ah, err := r.pd.CreateAH(&av)
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		r.ah = ah
		return nil
	}
	rc := rdmautil.RCConnect{Port: c.Port, MTU: MTUFromFlag(c.MTU), DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: r.psn,
		AV: av, MaxDestRdAtomic: 1, MaxRdAtomic: 1, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7}
	if err := rdmautil.ToRTR(r.qp, &rc); err != nil {
		return err
	}
	return rdmautil.ToRTS(r.qp, &rc)
}

func (r *runner) postRecv(n int) int {
	posted := 0
	for ; posted < n && len(r.freeSlot) > 0; posted++ {
		s := r.freeSlot[len(r.freeSlot)-1]
		r.rsge[0] = r.recvMR.SGE(s*r.slotLen, r.slotLen)
		r.rwr[0] = verbs.RecvWR{ID: uint64(s)<<8 | wrRecv, SGL: r.rsge[:]}
		if _, err := r.qp.PostRecv(r.rwr[:]); err != nil {
			break
		}
		if r.slots > 1 {
			r.freeSlot = r.freeSlot[:len(r.freeSlot)-1]
		}
	}
	return posted
}

func (r *runner) postSend() error {
	c := r.cfg
	off := 0
	if c.Kind == UD {
		off = GRHLen
	}
	r.ssge[0] = r.sendMR.SGE(off, c.Size)
	wr := &r.swr[0]
	*wr = verbs.SendWR{ID: wrSend, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: r.ssge[:]}
	if r.inline {
		wr.Flags |= verbs.SendInline
	}
	if c.Kind == UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ah, r.remote.QPN, QKey
	}
	_, err := r.qp.PostSend(r.swr[:])
	if err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// ErrData reports a received message that failed --chk validation.
var ErrData = errors.New("pingpong: received data does not match")

func (r *runner) check(slot int, wc *verbs.WC) error {
	c := r.cfg
	want := c.Size
	if c.Kind == UD {
		want += GRHLen
	}
	if int(wc.ByteLen) != want {
		return fmt.Errorf("%w: %d bytes, want %d", ErrData, wc.ByteLen, want)
	}
	buf := r.recvMR.Buf()[slot*r.slotLen : (slot+1)*r.slotLen]
	if c.Kind == UD {
		buf = buf[GRHLen:]
	}
	for i, b := range buf {
		w := byte(0x7b)
		if i%4096 == 0 {
			w = 0
		}
		if b != w {
			return fmt.Errorf("%w: byte %d is %#x, want %#x", ErrData, i, b, w)
		}
	}
	clear(buf)
	return nil
}

func (r *runner) pingpong(ctx context.Context) (*Result, error) {
	c := r.cfg
	pending := wrRecv
	if c.Host != "" {
		if err := r.postSend(); err != nil {
			return nil, err
		}
		pending |= wrSend
	}
	w := rdmautil.Waiter{CQ: r.cq, Events: c.Events}
	wcs := make([]verbs.WC, 2)
	routs := c.RxDepth
	start := time.Now()
	rcnt, scnt := 0, 0
	for rcnt < c.Iters || scnt < c.Iters {
		n, err := w.Wait(ctx, wcs)
		if err != nil {
			return nil, fmt.Errorf("poll CQ failed after %d/%d iters: %w", min(rcnt, scnt), c.Iters, err)
		}
		for i := range n {
			wc := &wcs[i]
			if wc.Status != verbs.WCSuccess {
				return nil, fmt.Errorf("failed status %s (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID&0xff)
			}
			switch wc.WRID & 0xff {
			case wrSend:
				scnt++
			case wrRecv:
				if c.Check {
					slot := int(wc.WRID >> 8)
					if err := r.check(slot, wc); err != nil {
						return nil, err
					}
					r.freeSlot = append(r.freeSlot, slot)
				}
				routs--
				if routs <= 1 {
					routs += r.postRecv(c.RxDepth - routs)
					if routs < c.RxDepth {
						return nil, fmt.Errorf("couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return nil, fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			pending &^= int(wc.WRID & 0xff)
			if scnt < c.Iters && pending == 0 {
				if err := r.postSend(); err != nil {
					return nil, err
				}
				pending = wrRecv | wrSend
			}
		}
	}
	return &Result{Bytes: int64(c.Size) * int64(c.Iters) * 2, Iters: c.Iters, Elapsed: time.Since(start)}, nil
}

func (r *runner) close() {
	if r.qp != nil {
		r.qp.Destroy()
	}
	if r.ah != nil {
		r.ah.Destroy()
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
	if r.sendMR != nil {
		r.sendMR.Dereg()
	}
	if r.recvMR != nil {
		r.recvMR.Dereg()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
}

// listenAddr is the exchange listener's address: the device's address when
// one was chosen (servers on 127.0.0.2 and 127.0.0.3 share a port), else
// every address, as perftest listens.
func listenAddr(a netip.Addr, port int) string {
	if !a.IsValid() {
		return ":" + strconv.Itoa(port)
	}
	return netip.AddrPortFrom(a, uint16(port)).String()
}
