// Package lndtest is an in-memory LND for tests and benchmarks: a Network
// joins the NIs of several lnet.Instances in one process and moves
// messages between them by copying from the sender's MD straight into the
// receiver's, with optional holding (to exercise credits), asynchronous
// delivery, and drop/failure injection. Headers go through the lnet_hdr
// codec on every message.
package lndtest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// Action is what the Network does with a message (see Network.SetFilter).
type Action uint8

// Actions.
const (
	// Deliver hands the message to its destination.
	Deliver Action = iota
	// Drop loses it silently: the sender sees a successful send.
	Drop
	// Fail makes the LND report a send failure (ErrInjected).
	Fail
)

// ErrInjected is the status of sends failed by a filter. It matches
// lnd.ErrPeerDown.
var ErrInjected = fmt.Errorf("lndtest: injected failure: %w", lnd.ErrPeerDown)

// Network is a set of connected in-memory NIs. The zero value is not
// usable; call New.
type Network struct {
	typ lnetwire.LNDType

	mu     sync.Mutex
	nodes  map[lnetwire.NID]*driver
	down   map[lnetwire.NID]bool
	filter func(*lnetwire.Header) Action
	hold   bool
	held   []heldMsg
	async  bool
}

type heldMsg struct {
	from *driver
	msg  *lnd.Msg
}

// New returns a network whose NIs are of LND type typ (use a type the
// tests do not otherwise register, e.g. lnetwire.SOCKLND for "a.b.c.d@tcp"
// NIDs).
func New(typ lnetwire.LNDType) *Network {
	return &Network{typ: typ, nodes: make(map[lnetwire.NID]*driver), down: make(map[lnetwire.NID]bool)}
}

// LND returns the driver type to list in lnet.Config.LNDs. NIs must be
// configured with an explicit address (NetConfig.Addr).
func (n *Network) LND() lnd.LND { return lndType{n} }

// SetFilter installs f (nil removes it); it is called for every message
// sent on the network and decides its fate.
func (n *Network) SetFilter(f func(*lnetwire.Header) Action) {
	n.mu.Lock()
	n.filter = f
	n.mu.Unlock()
}

// SetDown marks an NI unreachable: sends to it fail with lnd.ErrPeerDown
// and the sender's core is told the peer is dead; false makes it reachable
// again.
func (n *Network) SetDown(nid lnetwire.NID, down bool) {
	n.mu.Lock()
	n.down[nid] = down
	n.mu.Unlock()
}

// Hold makes sends wait in the network (accepted but not delivered) until
// Release; turning it off does not release what is held.
func (n *Network) Hold(on bool) {
	n.mu.Lock()
	n.hold = on
	n.mu.Unlock()
}

// Held returns the number of messages waiting.
func (n *Network) Held() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.held)
}

// Release delivers up to k held messages (k < 0: all) in send order and
// returns how many it delivered.
func (n *Network) Release(k int) int {
	n.mu.Lock()
	if k < 0 || k > len(n.held) {
		k = len(n.held)
	}
	batch := append([]heldMsg(nil), n.held[:k]...)
	n.held = append(n.held[:0], n.held[k:]...)
	n.mu.Unlock()
	for _, h := range batch {
		h.from.deliver(h.msg)
	}
	return len(batch)
}

// SetAsync makes every send be delivered by the sending NI's worker
// goroutine instead of inside Send (closer to a real LND's concurrency).
func (n *Network) SetAsync(on bool) {
	n.mu.Lock()
	n.async = on
	n.mu.Unlock()
}

type lndType struct{ n *Network }

func (l lndType) Type() lnetwire.LNDType { return l.n.typ }

// Startup registers the NI on the network under its configured NID.
func (l lndType) Startup(ni *lnd.NI) (lnd.Driver, error) {
	n := l.n
	if ni.NID.Addr() == 0 {
		return nil, errors.New("lndtest: NI needs an explicit address")
	}
	d := &driver{n: n, ni: ni, queue: make(chan *lnd.Msg, 1024), done: make(chan struct{})}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes[ni.NID] != nil {
		return nil, fmt.Errorf("lndtest: %v already on the network", ni.NID)
	}
	n.nodes[ni.NID] = d
	go d.worker()
	return d, nil
}

var hdrPool = sync.Pool{New: func() any { return new(lnetwire.Header) }}

type driver struct {
	n     *Network
	ni    *lnd.NI
	queue chan *lnd.Msg
	done  chan struct{}
	wg    sync.WaitGroup // messages accepted and not finalized
}

// Send routes msg to its target NI according to the network's state.
func (d *driver) Send(msg *lnd.Msg) error {
	n := d.n
	n.mu.Lock()
	peer := n.nodes[msg.Target.NID]
	isDown := n.down[msg.Target.NID]
	filter, hold, async := n.filter, n.hold, n.async
	n.mu.Unlock()
	if peer == nil || isDown {
		d.ni.NotifyPeer(msg.Target.NID, false, time.Now())
		return lnd.ErrPeerDown
	}
	act := Deliver
	if filter != nil {
		act = filter(&msg.Hdr)
	}
	switch act {
	case Drop:
		d.ni.Finalize(msg, nil)
		return nil
	case Fail:
		d.ni.Finalize(msg, ErrInjected)
		return nil
	}
	d.wg.Add(1)
	switch {
	case hold:
		n.mu.Lock()
		n.held = append(n.held, heldMsg{d, msg})
		n.mu.Unlock()
	case async:
		d.queue <- msg
	default:
		d.deliver(msg)
	}
	return nil
}

// deliver encodes the header, hands the message to the target's core and
// completes the send. A target that left meanwhile fails it.
func (d *driver) deliver(msg *lnd.Msg) {
	defer d.wg.Done()
	n := d.n
	n.mu.Lock()
	peer := n.nodes[msg.Target.NID]
	isDown := n.down[msg.Target.NID]
	n.mu.Unlock()
	if peer == nil || isDown {
		d.ni.NotifyPeer(msg.Target.NID, false, time.Now())
		d.ni.Finalize(msg, lnd.ErrPeerDown)
		return
	}
	var wire [lnetwire.HdrSize]byte
	msg.Hdr.Encode(wire[:])
	hdr := hdrPool.Get().(*lnetwire.Header)
	defer hdrPool.Put(hdr)
	if err := hdr.Decode(wire[:]); err != nil {
		d.ni.Finalize(msg, err)
		return
	}
	// Parse copies the header, so the pooled one is free again after it.
	if err := peer.ni.Parse(hdr, d.ni.NID, msg, false); err != nil {
		d.ni.Finalize(msg, fmt.Errorf("lndtest: peer refused message: %w", err))
		return
	}
	d.ni.Finalize(msg, nil)
}

// Recv copies the payload from the sending message (or the copy made by
// EagerRecv).
func (d *driver) Recv(private any, msg *lnd.Msg, delayed bool, dst lnd.IOV, rlen int) error {
	if msg == nil {
		return nil
	}
	switch src := private.(type) {
	case *lnd.Msg:
		lnd.CopyIOV(dst, src.Payload)
	case []byte:
		dst.CopyFrom(src)
	}
	d.ni.Finalize(msg, nil)
	return nil
}

// EagerRecv copies the payload aside: the sender completes as soon as
// Parse returns, so a delayed receive cannot read the sender's buffer.
func (d *driver) EagerRecv(private any, msg *lnd.Msg) (any, error) {
	src, ok := private.(*lnd.Msg)
	if !ok {
		return private, nil
	}
	b := make([]byte, src.Payload.Len)
	src.Payload.CopyTo(b)
	return b, nil
}

func (d *driver) worker() {
	for {
		select {
		case m := <-d.queue:
			d.deliver(m)
		case <-d.done:
			return
		}
	}
}

// Shutdown leaves the network and fails the messages it still holds.
func (d *driver) Shutdown() {
	n := d.n
	n.mu.Lock()
	delete(n.nodes, d.ni.NID)
	var mine []*lnd.Msg
	kept := n.held[:0]
	for _, h := range n.held {
		if h.from == d {
			mine = append(mine, h.msg)
		} else {
			kept = append(kept, h)
		}
	}
	n.held = kept
	n.mu.Unlock()
	for _, m := range mine {
		d.ni.Finalize(m, lnd.ErrShutdown)
		d.wg.Done()
	}
	// Drain the async queue before stopping the worker.
	for {
		select {
		case m := <-d.queue:
			d.ni.Finalize(m, lnd.ErrShutdown)
			d.wg.Done()
			continue
		default:
		}
		break
	}
	d.wg.Wait()
	close(d.done)
}
