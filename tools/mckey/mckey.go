// Package mckey is librdmacm's mckey example on softib: RDMA CM UD
// multicast. Each of Connections IDs resolves the group address (bound
// to the -b address), creates a UD QP, joins the group, and on the
// MULTICAST_JOIN event makes an address handle from the event's UD
// parameters; after a pause (mckey gives the subnet manager 3 s) the
// sender posts Count SEND_WITH_IMM datagrams of Size bytes to the group
// on each, the receiver, which posted its receives before joining,
// waits for Count on each; then every ID leaves the group. The output
// lines are mckey's.
package mckey

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"softib/rdmacm"
	"softib/verbs"
)

// Defaults, as mckey's.
const (
	DefaultCount = 10
	DefaultSize  = 100
	DefaultPause = 3 * time.Second
	grhSize      = 40
)

// Config is one mckey run.
type Config struct {
	Group       netip.Addr       // -m: the multicast group
	Bind        netip.Addr       // -b: the local address (zero: the route's)
	Sender      bool             // -s
	Connections int              // -c: IDs joining the group (default 1)
	Count       int              // -C: messages per ID (default 10; negative: 0)
	Size        int              // -S: message size (default 100)
	PortSpace   rdmacm.PortSpace // -p: RDMA_PS_UDP (default) or RDMA_PS_IPOIB
	// Pause is the wait between the joins and the transfers (default
	// DefaultPause, mckey's sleep(3); negative: none).
	Pause time.Duration
	Out   io.Writer // mckey's lines (nil: discarded)
}

// Result counts what the run did.
type Result struct {
	Joined   int // MULTICAST_JOIN events
	Sent     int // datagrams sent
	Received int // datagrams received
}

func (c *Config) setDefaults() {
	if c.Connections <= 0 {
		c.Connections = 1
	}
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	c.Count = max(c.Count, 0)
	if c.Size <= 0 {
		c.Size = DefaultSize
	}
	if c.PortSpace == 0 {
		c.PortSpace = rdmacm.PSUDP
	}
	if c.Pause == 0 {
		c.Pause = DefaultPause
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// node is one ID and its resources (mckey's cmatest_node).
type node struct {
	id   *rdmacm.ID
	cq   verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	ah   verbs.AH
	rqpn uint32
	qkey uint32
}

// Run runs mckey on m's devices until the transfers are done or ctx ends.
func Run(ctx context.Context, m *rdmacm.Manager, cfg Config) (res Result, err error) {
	cfg.setDefaults()
	if !cfg.Group.IsValid() {
		return res, errors.New("mckey: no multicast address (-m)")
	}
	if cfg.PortSpace != rdmacm.PSUDP && cfg.PortSpace != rdmacm.PSIPoIB {
		return res, fmt.Errorf("mckey: port space %#x: UDP (%#x) or IPoIB (%#x)", cfg.PortSpace, rdmacm.PSUDP, rdmacm.PSIPoIB)
	}
	out := cfg.Out
	fmt.Fprintf(out, "mckey: starting %s\n", map[bool]string{true: "client", false: "server"}[cfg.Sender])
	ch := rdmacm.NewEventChannel()
	defer ch.Close()
	nodes := make([]*node, cfg.Connections)
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.destroy()
			}
		}
		fmt.Fprintf(out, "test complete\n")
		status := 0
		if err != nil {
			status = -1
		}
		fmt.Fprintf(out, "return status %d\n", status)
	}()
	fmt.Fprintf(out, "mckey: joining\n")
	for i := range nodes {
		id, err := m.CreateID(ch, i, cfg.PortSpace)
		if err != nil {
			return res, err
		}
		nodes[i] = &node{id: id}
		if cfg.Bind.IsValid() {
			if err := id.BindAddr(netip.AddrPortFrom(cfg.Bind, 0)); err != nil {
				return res, fmt.Errorf("mckey: addr bind failure: %w", err)
			}
		}
		if err := id.ResolveAddr(netip.AddrPortFrom(cfg.Bind, 0), netip.AddrPortFrom(cfg.Group, 0), 2*time.Second); err != nil {
			return res, fmt.Errorf("mckey: resolve addr failure: %w", err)
		}
	}
	for left := len(nodes); left > 0; {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return res, err
		}
		n := nodes[ev.ID.Context().(int)]
		switch ev.Type {
		case rdmacm.EventAddrResolved:
			if err := n.init(cfg); err != nil {
				return res, err
			}
			if err := n.id.JoinMulticast(cfg.Group, n); err != nil {
				return res, fmt.Errorf("mckey: failure joining: %w", err)
			}
		case rdmacm.EventMulticastJoin:
			g := ev.UD.AH.GRH.DGID
			fmt.Fprintf(out, "mckey: joined dgid: %s mlid 0x%x sl %d\n", netip.AddrFrom16(g), ev.UD.AH.DLID, ev.UD.AH.SL)
			n.rqpn, n.qkey = ev.UD.QPNum, ev.UD.QKey
			if n.ah, err = n.id.PD().CreateAH(&ev.UD.AH); err != nil {
				return res, fmt.Errorf("mckey: failure creating address handle: %w", err)
			}
			res.Joined++
			left--
		case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventMulticastError:
			fmt.Fprintf(out, "mckey: event: %s, error: %d\n", ev.Type, ev.Status)
			return res, fmt.Errorf("mckey: %v: %v", ev.Type, ev.Err)
		}
	}
	if cfg.Pause > 0 {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(cfg.Pause):
		}
	}
	if cfg.Count > 0 {
		if cfg.Sender {
			fmt.Fprintf(out, "initiating data transfers\n")
			for _, n := range nodes {
				k, err := n.send(ctx, cfg)
				res.Sent += k
				if err != nil {
					return res, err
				}
			}
		} else {
			fmt.Fprintf(out, "receiving data transfers\n")
			for _, n := range nodes {
				k, err := n.receive(ctx, cfg)
				res.Received += k
				if err != nil {
					return res, err
				}
			}
		}
		fmt.Fprintf(out, "data transfers complete\n")
	}
	for _, n := range nodes {
		if err := n.id.LeaveMulticast(cfg.Group); err != nil {
			fmt.Fprintf(out, "mckey: failure leaving: %v\n", err)
			return res, err
		}
	}
	return res, nil
}

// init creates the node's CQ, QP and buffer and, on the receiver, posts
// the receives (mckey's init_node and post_recvs).
func (n *node) init(cfg Config) error {
	var err error
	if n.cq, err = n.id.Device().CreateCQ(verbs.CQAttr{CQE: 2 * max(cfg.Count, 1)}); err != nil {
		return fmt.Errorf("mckey: unable to create CQ: %w", err)
	}
	wr := max(cfg.Count, 1)
	if n.qp, err = n.id.CreateQP(nil, &verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: wr, MaxRecvWR: wr, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("mckey: unable to create QP: %w", err)
	}
	if n.mr, err = n.id.PD().RegMR(make([]byte, cfg.Size+grhSize), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("mckey: failed to reg MR: %w", err)
	}
	if cfg.Sender {
		return nil
	}
	for i := 0; i < cfg.Count; i++ {
		if _, err := n.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{n.mr.SGE(0, cfg.Size+grhSize)}}}); err != nil {
			return fmt.Errorf("mckey: failed to post receives: %w", err)
		}
	}
	return nil
}

// send posts Count SEND_WITH_IMM datagrams (immediate: the QPN) to the
// group. mckey posts them unsignaled and leaves; the last one here is
// signaled and waited for, so that leaving does not cut it off.
func (n *node) send(ctx context.Context, cfg Config) (int, error) {
	for i := 0; i < cfg.Count; i++ {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSendWithImm, ImmData: n.qp.QPN(),
			SGL: []verbs.SGE{n.mr.SGE(0, cfg.Size)}, AH: n.ah, RemoteQPN: n.rqpn, RemoteQKey: n.qkey}
		if i == cfg.Count-1 {
			wr.Flags = verbs.SendSignaled
		}
		if _, err := n.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			return i, fmt.Errorf("mckey: failed to post sends: %w", err)
		}
	}
	if _, err := n.wait(ctx, 1); err != nil {
		return cfg.Count - 1, err
	}
	return cfg.Count, nil
}

// receive waits for Count receive completions (mckey's poll_cqs).
func (n *node) receive(ctx context.Context, cfg Config) (int, error) {
	return n.wait(ctx, cfg.Count)
}

// wait polls the CQ for k successful completions.
func (n *node) wait(ctx context.Context, k int) (int, error) {
	wcs := make([]verbs.WC, 8)
	done := 0
	for done < k {
		got, err := n.cq.Poll(wcs[:min(len(wcs), k-done)])
		if err != nil {
			return done, fmt.Errorf("mckey: failed polling CQ: %w", err)
		}
		for _, wc := range wcs[:got] {
			if wc.Status != verbs.WCSuccess {
				return done, fmt.Errorf("mckey: completion %v", wc.Status)
			}
		}
		done += got
		if got == 0 {
			select {
			case <-ctx.Done():
				return done, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	return done, nil
}

// destroy releases the node (mckey's destroy_node).
func (n *node) destroy() {
	if n.ah != nil {
		n.ah.Destroy()
	}
	if n.qp != nil {
		n.id.DestroyQP()
	}
	if n.cq != nil {
		n.cq.Destroy()
	}
	if n.mr != nil {
		n.mr.Dereg()
	}
	n.id.Destroy()
}
