package cm_test

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// peer is a scripted remote end: the test writes its MADs by hand and
// injects them into the CM under test; what the CM sends to it is only
// recorded by the network.
type peer struct {
	t    *testing.T
	nd   *node // the CM under test
	addr cm.Addr
	ip   netip.Addr
}

const peerComm = 7 // the scripted peer's comm ID
const peerGUID = 0x0200000000000001

func newPeer(t *testing.T, nd *node) *peer {
	ip := netip.MustParseAddr("10.0.0.9")
	a := cm.Addr{QPN: 1, QKey: mad.GSIQKey}
	a.AH.GRH.DGID = verbs.GIDFromAddr(ip)
	return &peer{t: t, nd: nd, addr: a, ip: ip}
}

func (p *peer) inject(m mad.Message) {
	p.nd.cm.HandleMAD(mad.AppendCM(nil, 99, m), p.addr)
	synctest.Wait()
}

// passive drives a new passive ID to REQ_RCVD with an injected REQ.
func (p *peer) passive() *cm.ID {
	p.t.Helper()
	path := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: p.ip, Dst: p.nd.ip})
	p.inject(&mad.REQ{LocalCommID: peerComm, ServiceID: testSID, LocalCAGUID: peerGUID, LocalQPN: 0x300,
		StartingPSN: 5, PathMTU: mad.MTU1024, MaxCMRetries: 3, RemoteCMResponseTimeout: 20,
		LocalCMResponseTimeout: 20, Primary: path})
	return p.nd.mustFind(cm.EventREQReceived).id
}

// active drives a new active ID to REQ_SENT towards the peer.
func (p *peer) active() *cm.ID {
	p.t.Helper()
	id := p.nd.newID()
	rp := &cm.REQParam{Primary: mad.RoCEv2Path(mad.RoCEv2PathParams{Src: p.nd.ip, Dst: p.ip}),
		ServiceID: testSID, QPN: 0x100, StartingPSN: 9, MaxCMRetries: 3}
	if err := id.SendREQ(rp); err != nil {
		p.t.Fatal(err)
	}
	synctest.Wait()
	return id
}

func (p *peer) rep(id *cm.ID) {
	p.inject(&mad.REP{LocalCommID: peerComm, RemoteCommID: id.LocalCommID(), LocalQPN: 0x300, LocalCAGUID: peerGUID})
}

func (p *peer) rej(id *cm.ID, r mad.RejectReason) {
	p.inject(&mad.REJ{LocalCommID: peerComm, RemoteCommID: id.LocalCommID(), MessageRejected: mad.MsgOther, Reason: r})
}

func (p *peer) mra(id *cm.ID, what mad.MsgType) {
	p.inject(&mad.MRA{LocalCommID: peerComm, RemoteCommID: id.LocalCommID(), MessageMRAed: what, ServiceTimeout: 16})
}

func (p *peer) dreq(id *cm.ID, qpn uint32) {
	p.inject(&mad.DREQ{LocalCommID: peerComm, RemoteCommID: id.LocalCommID(), RemoteQPN: qpn})
}

func (p *peer) lap(id *cm.ID) {
	p.inject(&mad.LAP{LocalCommID: peerComm, RemoteCommID: id.LocalCommID(), RemoteQPN: 0x100,
		Alternate: mad.RoCEv2Path(mad.RoCEv2PathParams{Src: p.ip, Dst: p.nd.ip})})
}

func (p *peer) rtu(id *cm.ID) {
	p.inject(&mad.RTU{LocalCommID: peerComm, RemoteCommID: id.LocalCommID()})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestScriptedTransitions drives one CM through the less common edges of
// the state table with hand-written peer messages: disconnects racing
// LAP, MRA or a lost RTU, rejects after MRA, stale-connection rejects.
func TestScriptedTransitions(t *testing.T) {
	alt := mad.RoCEv2Path(mad.RoCEv2PathParams{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.9")})
	// established returns an active ID connected to the peer.
	established := func(p *peer) *cm.ID {
		id := p.active()
		p.rep(id)
		must(p.t, id.SendRTU(nil))
		return id
	}
	// passiveREPSent returns a passive ID that sent its REP.
	passiveREPSent := func(p *peer) *cm.ID {
		id := p.passive()
		must(p.t, id.SendREP(&cm.REPParam{QPN: 0x100}))
		return id
	}
	cases := []struct {
		name string
		run  func(p *peer) *cm.ID
		want cm.State
	}{
		{"DREQ_SENT→DREQ_RCVD (simultaneous disconnect)", func(p *peer) *cm.ID {
			id := established(p)
			must(p.t, id.SendDREQ(nil))
			p.dreq(id, 0x100)
			return id
		}, cm.StateDREQRcvd},
		{"ESTABLISHED→TIMEWAIT (REJ)", func(p *peer) *cm.ID {
			id := established(p)
			p.rej(id, mad.RejConsumerDefined)
			return id
		}, cm.StateTimewait},
		{"LAP_SENT→DREQ_SENT", func(p *peer) *cm.ID {
			id := established(p)
			must(p.t, id.SendLAP(&alt, nil))
			must(p.t, id.SendDREQ(nil))
			return id
		}, cm.StateDREQSent},
		{"LAP_SENT→DREQ_RCVD", func(p *peer) *cm.ID {
			id := established(p)
			must(p.t, id.SendLAP(&alt, nil))
			p.dreq(id, 0x100)
			return id
		}, cm.StateDREQRcvd},
		{"LAP_SENT→TIMEWAIT", func(p *peer) *cm.ID {
			id := established(p)
			must(p.t, id.SendLAP(&alt, nil))
			p.rej(id, mad.RejConsumerDefined)
			return id
		}, cm.StateTimewait},
		{"MRA_LAP_RCVD→DREQ_SENT", func(p *peer) *cm.ID {
			id := established(p)
			must(p.t, id.SendLAP(&alt, nil))
			p.mra(id, mad.MsgOther)
			must(p.t, id.SendDREQ(nil))
			return id
		}, cm.StateDREQSent},
		{"MRA_LAP_RCVD→DREQ_RCVD", func(p *peer) *cm.ID {
			id := established(p)
			must(p.t, id.SendLAP(&alt, nil))
			p.mra(id, mad.MsgOther)
			p.dreq(id, 0x100)
			return id
		}, cm.StateDREQRcvd},
		{"MRA_LAP_RCVD→TIMEWAIT", func(p *peer) *cm.ID {
			id := established(p)
			must(p.t, id.SendLAP(&alt, nil))
			p.mra(id, mad.MsgOther)
			p.rej(id, mad.RejConsumerDefined)
			return id
		}, cm.StateTimewait},
		{"LAP_RCVD→DREQ_SENT", func(p *peer) *cm.ID {
			id := established(p)
			p.lap(id)
			must(p.t, id.SendDREQ(nil))
			return id
		}, cm.StateDREQSent},
		{"LAP_RCVD→DREQ_RCVD", func(p *peer) *cm.ID {
			id := established(p)
			p.lap(id)
			p.dreq(id, 0x100)
			return id
		}, cm.StateDREQRcvd},
		{"LAP_RCVD→TIMEWAIT", func(p *peer) *cm.ID {
			id := established(p)
			p.lap(id)
			p.rej(id, mad.RejConsumerDefined)
			return id
		}, cm.StateTimewait},
		{"MRA_LAP_SENT→DREQ_SENT", func(p *peer) *cm.ID {
			id := established(p)
			p.lap(id)
			must(p.t, id.SendMRA(20, nil))
			must(p.t, id.SendDREQ(nil))
			return id
		}, cm.StateDREQSent},
		{"MRA_LAP_SENT→DREQ_RCVD", func(p *peer) *cm.ID {
			id := established(p)
			p.lap(id)
			must(p.t, id.SendMRA(20, nil))
			p.dreq(id, 0x100)
			return id
		}, cm.StateDREQRcvd},
		{"MRA_LAP_SENT→TIMEWAIT", func(p *peer) *cm.ID {
			id := established(p)
			p.lap(id)
			must(p.t, id.SendMRA(20, nil))
			p.rej(id, mad.RejConsumerDefined)
			return id
		}, cm.StateTimewait},
		{"REP_SENT→DREQ_RCVD (RTU lost)", func(p *peer) *cm.ID {
			id := passiveREPSent(p)
			p.dreq(id, 0x100)
			return id
		}, cm.StateDREQRcvd},
		{"REP_SENT→TIMEWAIT (stale REJ)", func(p *peer) *cm.ID {
			id := passiveREPSent(p)
			p.rej(id, mad.RejStaleConn)
			return id
		}, cm.StateTimewait},
		{"MRA_REP_RCVD→DREQ_RCVD", func(p *peer) *cm.ID {
			id := passiveREPSent(p)
			p.mra(id, mad.MsgREP)
			p.dreq(id, 0x100)
			return id
		}, cm.StateDREQRcvd},
		{"MRA_REP_RCVD→IDLE (REJ)", func(p *peer) *cm.ID {
			id := passiveREPSent(p)
			p.mra(id, mad.MsgREP)
			p.rej(id, mad.RejConsumerDefined)
			return id
		}, cm.StateIdle},
		{"MRA_REP_RCVD→TIMEWAIT (stale REJ)", func(p *peer) *cm.ID {
			id := passiveREPSent(p)
			p.mra(id, mad.MsgREP)
			p.rej(id, mad.RejStaleConn)
			return id
		}, cm.StateTimewait},
		{"MRA_REP_SENT→TIMEWAIT (REJ sent)", func(p *peer) *cm.ID {
			id := p.active()
			p.rep(id)
			must(p.t, id.SendMRA(20, nil))
			must(p.t, id.SendREJ(mad.RejConsumerDefined, nil, nil))
			return id
		}, cm.StateTimewait},
		{"REP_RCVD→TIMEWAIT (REJ sent)", func(p *peer) *cm.ID {
			id := p.active()
			p.rep(id)
			must(p.t, id.SendREJ(mad.RejInvalidMTU, nil, nil))
			return id
		}, cm.StateTimewait},
		{"MRA_REQ_RCVD→IDLE (REJ)", func(p *peer) *cm.ID {
			id := p.active()
			p.mra(id, mad.MsgREQ)
			p.rej(id, mad.RejNoQP)
			return id
		}, cm.StateIdle},
		{"MRA_REQ_RCVD→TIMEWAIT (stale REJ)", func(p *peer) *cm.ID {
			id := p.active()
			p.mra(id, mad.MsgREQ)
			p.rej(id, mad.RejStaleConn)
			return id
		}, cm.StateTimewait},
		{"MRA_REQ_SENT→IDLE (REJ sent)", func(p *peer) *cm.ID {
			id := p.passive()
			must(p.t, id.SendMRA(20, nil))
			must(p.t, id.SendREJ(mad.RejNoResources, nil, nil))
			return id
		}, cm.StateIdle},
		{"MRA_REQ_SENT→TIMEWAIT (stale REJ)", func(p *peer) *cm.ID {
			id := p.passive()
			must(p.t, id.SendMRA(20, nil))
			p.rej(id, mad.RejStaleConn)
			return id
		}, cm.StateTimewait},
		{"REQ_RCVD→TIMEWAIT (stale REJ)", func(p *peer) *cm.ID {
			id := p.passive()
			p.rej(id, mad.RejStaleConn)
			return id
		}, cm.StateTimewait},
		{"MRA_REQ_RCVD→REP_RCVD→... timeout after MRA", func(p *peer) *cm.ID {
			id := p.active()
			p.mra(id, mad.MsgREQ)
			time.Sleep(10 * time.Minute) // the MRA's extra time runs out, then the retries
			synctest.Wait()
			return id
		}, cm.StateIdle},
		{"MRA_REP_RCVD→IDLE (REP timeout)", func(p *peer) *cm.ID {
			id := passiveREPSent(p)
			p.mra(id, mad.MsgREP)
			time.Sleep(10 * time.Minute)
			synctest.Wait()
			return id
		}, cm.StateIdle},
		{"DREQ with a wrong QPN is ignored", func(p *peer) *cm.ID {
			id := established(p)
			p.dreq(id, 0x555)
			return id
		}, cm.StateEstablished},
		{"RTU after Establish is ignored", func(p *peer) *cm.ID {
			id := passiveREPSent(p)
			must(p.t, id.Establish())
			p.rtu(id)
			return id
		}, cm.StateEstablished},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newNet(t)
				b := n.node(t, "10.0.0.2", cm.Config{})
				b.listen(testSID)
				p := newPeer(t, b)
				id := tc.run(p)
				synctest.Wait()
				if got := id.State(); got != tc.want {
					t.Fatalf("state %v, want %v (events %v)", got, tc.want, b.evs())
				}
				if b.cm.Stats().BadTransitns.Load() != 0 {
					t.Fatal("state table refused a transition")
				}
			})
		})
	}
}
