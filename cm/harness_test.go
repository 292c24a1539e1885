package cm_test

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// memNet is an in-memory GSI network: ports send MADs through a channel
// drained by one delivery goroutine, so Port.Send never re-enters a CM.
type memNet struct {
	mu    sync.Mutex
	ports map[verbs.GID]*node
	drop  func(attr mad.AttrID, from, to verbs.GID) bool
	sent  []sentMAD
	q     chan delivery
	done  chan struct{}
	wg    sync.WaitGroup
}

type sentMAD struct {
	attr     mad.AttrID
	from, to verbs.GID
	b        []byte
}

type delivery struct {
	to   *node
	b    []byte
	from cm.Addr
}

func newNet(t *testing.T) *memNet {
	n := &memNet{ports: map[verbs.GID]*node{}, q: make(chan delivery, 4096), done: make(chan struct{})}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case <-n.done:
				return
			case d := <-n.q:
				d.to.cm.HandleMAD(d.b, d.from)
			}
		}
	}()
	t.Cleanup(func() {
		for _, p := range n.ports {
			p.cm.Close()
		}
		close(n.done)
		n.wg.Wait()
	})
	return n
}

// setDrop installs a loss rule.
func (n *memNet) setDrop(f func(attr mad.AttrID, from, to verbs.GID) bool) {
	n.mu.Lock()
	n.drop = f
	n.mu.Unlock()
}

// count returns how many MADs of attr were sent by from (any sender if
// from is zero), dropped or not.
func (n *memNet) count(attr mad.AttrID, from verbs.GID) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, s := range n.sent {
		if s.attr == attr && (from == verbs.GID{} || s.from == from) {
			k++
		}
	}
	return k
}

// last returns the last MAD of attr sent.
func (n *memNet) last(attr mad.AttrID) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.sent) - 1; i >= 0; i-- {
		if n.sent[i].attr == attr {
			return n.sent[i].b
		}
	}
	return nil
}

type port struct {
	net *memNet
	gid verbs.GID
}

func (p *port) LocalGID() verbs.GID { return p.gid }

func (p *port) Send(b []byte, to cm.Addr) error {
	n := p.net
	attr := mad.Header(b).AttrID()
	n.mu.Lock()
	cp := bytes.Clone(b)
	n.sent = append(n.sent, sentMAD{attr, p.gid, to.GID(), cp})
	drop := n.drop != nil && n.drop(attr, p.gid, to.GID())
	dst := n.ports[to.GID()]
	n.mu.Unlock()
	if drop || dst == nil {
		return nil
	}
	from := cm.Addr{QPN: 1, QKey: mad.GSIQKey}
	from.AH.GRH.DGID = p.gid
	from.AH.GRH.HopLimit = 64
	from.AH.IsGlobal = true
	n.q <- delivery{dst, cp, from}
	return nil
}

// node is one CM with an event log.
type node struct {
	t    *testing.T
	gid  verbs.GID
	ip   netip.Addr
	cm   *cm.CM
	port *port

	mu     sync.Mutex
	events []rec
	// react, if set, runs inside the handler for every event.
	react func(id *cm.ID, ev *cm.Event) error
}

type rec struct {
	id *cm.ID
	ev *cm.Event
	at time.Time // fake time under synctest
}

func (n *memNet) node(t *testing.T, ip string, cfg cm.Config) *node {
	a := netip.MustParseAddr(ip)
	g := verbs.GIDFromAddr(a)
	p := &port{net: n, gid: g}
	nd := &node{t: t, gid: g, ip: a, port: p}
	if cfg.Tracer == nil {
		cfg.Tracer = transitions
	}
	nd.cm = cm.New(p, cfg)
	n.mu.Lock()
	n.ports[g] = nd
	n.mu.Unlock()
	return nd
}

func (nd *node) handler(id *cm.ID, ev *cm.Event) error {
	nd.mu.Lock()
	nd.events = append(nd.events, rec{id, ev, time.Now()})
	react := nd.react
	nd.mu.Unlock()
	if react != nil {
		return react(id, ev)
	}
	return nil
}

func (nd *node) setReact(f func(id *cm.ID, ev *cm.Event) error) {
	nd.mu.Lock()
	nd.react = f
	nd.mu.Unlock()
}

// evs returns the event types seen so far.
func (nd *node) evs() []cm.EventType {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	out := make([]cm.EventType, len(nd.events))
	for i, r := range nd.events {
		out[i] = r.ev.Type
	}
	return out
}

// find returns the last event of a type.
func (nd *node) find(tp cm.EventType) (rec, bool) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for i := len(nd.events) - 1; i >= 0; i-- {
		if nd.events[i].ev.Type == tp {
			return nd.events[i], true
		}
	}
	return rec{}, false
}

func (nd *node) mustFind(tp cm.EventType) rec {
	nd.t.Helper()
	r, ok := nd.find(tp)
	if !ok {
		nd.t.Fatalf("%v: no %v event; have %v", nd.ip, tp, nd.evs())
	}
	return r
}

func (nd *node) newID() *cm.ID {
	nd.t.Helper()
	id, err := nd.cm.CreateID(nd.handler, nd)
	if err != nil {
		nd.t.Fatal(err)
	}
	return id
}

func (nd *node) listen(sid uint64) *cm.ID {
	nd.t.Helper()
	id := nd.newID()
	if err := id.Listen(sid, 0); err != nil {
		nd.t.Fatal(err)
	}
	return id
}

const testSID = 0x0000000001061C06 // RDMA_PS_TCP port 7174

// reqParam returns a RoCEv2 REQ from a to b.
func reqParam(a, b *node, qpn uint32) *cm.REQParam {
	return &cm.REQParam{
		Primary:            mad.RoCEv2Path(mad.RoCEv2PathParams{Src: a.ip, Dst: b.ip}),
		ServiceID:          testSID,
		QPN:                qpn,
		StartingPSN:        0x123456,
		PathMTU:            mad.MTU1024,
		ResponderResources: 4,
		InitiatorDepth:     2,
		RetryCount:         7,
		RNRRetryCount:      6,
		PrivateData:        []byte("hello"),
	}
}

// acceptAll makes a passive node answer REQs with REP (QPNs 0x200, 0x201, ...) and
// DREQs with DREP.
func acceptAll(nd *node) {
	qpn := uint32(0x200)
	nd.setReact(func(id *cm.ID, ev *cm.Event) error {
		switch ev.Type {
		case cm.EventREQReceived:
			qpn++
			return id.SendREP(&cm.REPParam{QPN: qpn - 1, StartingPSN: 0xABCDEF, ResponderResources: 2,
				InitiatorDepth: 4, RNRRetryCount: 7, PrivateData: []byte("welcome")})
		case cm.EventDREQReceived:
			return id.SendDREP(nil)
		}
		return nil
	})
}

// rtuOnREP makes an active node answer REP with RTU and DREQ with DREP.
func rtuOnREP(nd *node) {
	nd.setReact(func(id *cm.ID, ev *cm.Event) error {
		switch ev.Type {
		case cm.EventREPReceived:
			return id.SendRTU(nil)
		case cm.EventDREQReceived:
			return id.SendDREP(nil)
		}
		return nil
	})
}

func run(t *testing.T, f func(t *testing.T)) {
	synctest.Test(t, f)
}

func wantState(t *testing.T, id *cm.ID, s cm.State) {
	t.Helper()
	if got := id.State(); got != s {
		t.Fatalf("state %v, want %v", got, s)
	}
}

func dropAttr(attr mad.AttrID, n int) func(mad.AttrID, verbs.GID, verbs.GID) bool {
	k := 0
	return func(a mad.AttrID, _, _ verbs.GID) bool {
		if a == attr && (n < 0 || k < n) {
			k++
			return true
		}
		return false
	}
}
