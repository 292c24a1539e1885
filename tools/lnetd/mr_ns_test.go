//go:build linux

package lnetd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/e2etest"
	"softib/internal/netns"
	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/o2iblnd"
	"softib/lnet/selftest"
	"softib/lnet/socklnd"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
	"softib/wire/lnetwire"
)

var mrLinkSeq atomic.Uint32

// mrQuietLog drops the instances' diagnostics (a dead link is expected).
var mrQuietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// addLink joins the namespaces of a and b by a second veth with the
// given /24 addresses (the pair's own link is the first).
func mrAddLink(t *testing.T, a, b *netns.Node, addrA, addrB string) (devA, devB string) {
	t.Helper()
	k := mrLinkSeq.Add(1)
	devA = fmt.Sprintf("mr%da%d", os.Getpid()%100000, k)
	devB = fmt.Sprintf("mr%db%d", os.Getpid()%100000, k)
	for _, args := range [][]string{
		{"link", "add", devA, "netns", a.Name, "type", "veth", "peer", "name", devB, "netns", b.Name},
		{"-n", a.Name, "addr", "add", addrA + "/24", "dev", devA},
		{"-n", b.Name, "addr", "add", addrB + "/24", "dev", devB},
		{"-n", a.Name, "link", "set", devA, "up"},
		{"-n", b.Name, "link", "set", devB, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	return devA, devB
}

func mrIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

// mrSockConfig is the socklnd configuration of a node in namespace n.
func mrSockConfig(n *netns.Node) socklnd.Config {
	return socklnd.Config{
		SocketContext: n.Do,
		AcceptPort:    socklnd.DefaultAcceptPort,
		// A dead link is noticed within seconds (stalled writes), and
		// every message with a payload waits for the peer's zero-copy
		// ACK, so one lost with a connection fails and is resent.
		SockTimeout:  2 * time.Second,
		ZCMinPayload: 1,
		MinReconnect: 200 * time.Millisecond,
		MaxReconnect: time.Second,
	}
}

// mrNodeFunc starts an instance in namespace n with an NI on the pair's
// link (tcp, nid0) and one on the second link at addr2 (nid1), and a
// selftest service.
type mrNodeFunc func(t *testing.T, n *netns.Node, addr2 string) (in *lnet.Instance, nid0, nid1 lnetwire.NID)

// mrSockNode: the second rail is a tcp1 NI.
func mrSockNode(t *testing.T, n *netns.Node, tcp1Addr string) (*lnet.Instance, lnetwire.NID, lnetwire.NID) {
	t.Helper()
	nid1 := lnetwire.MustParseNID(tcp1Addr + "@tcp1")
	return mrStartNode(t, n, nid1, socklnd.New(mrSockConfig(n)))
}

// mrO2IBNode: the second rail is an o2ib NI on softib's RoCE provider:
// an rxe device whose UDP socket lives in n, on addr2, with an RDMA CM
// over it. A dead link fails the messages in flight on it when RC
// retransmission gives up or, at the latest, after the o2ib timeout.
func mrO2IBNode(t *testing.T, n *netns.Node, o2ibAddr string) (*lnet.Instance, lnetwire.NID, lnetwire.NID) {
	t.Helper()
	addr := netip.MustParseAddr(o2ibAddr)
	conn := e2etest.ListenUDP(t, n.Do, netip.AddrPortFrom(addr, rxe.RoCEv2Port))
	dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}, Conn: conn})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	cm := rdmacm.NewManager(rdmacm.Config{})
	// Cleanups run last-in first-out: the instance (registered by
	// mrStartNode) closes before the CM and the device.
	t.Cleanup(func() { cm.Close(); dev.Close() })
	if err := cm.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	ib := o2iblnd.New(o2iblnd.Config{CM: cm, Timeout: 4 * time.Second, Keepalive: 2 * time.Second})
	nid1 := lnetwire.MustParseNID(o2ibAddr + "@o2ib")
	return mrStartNode(t, n, nid1, socklnd.New(mrSockConfig(n)), ib)
}

// mrStartNode starts the instance of a node in n: a tcp NI on the pair's
// link, an NI for nid1 (its LND among lnds) and a selftest service.
func mrStartNode(t *testing.T, n *netns.Node, nid1 lnetwire.NID, lnds ...lnd.LND) (*lnet.Instance, lnetwire.NID, lnetwire.NID) {
	t.Helper()
	nid0 := lnetwire.MustParseNID(n.Addr.String() + "@tcp")
	in, err := lnet.New(lnet.Config{
		LNDs: lnds,
		Nets: []lnet.NetConfig{{Net: nid0.Net(), Addr: nid0.Addr()}, {Net: nid1.Net(), Addr: nid1.Addr()}},
		Log:  mrQuietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	s, err := selftest.NewService(in, selftest.Config{Log: mrQuietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return in, nid0, nid1
}

func mrSentOn(in *lnet.Instance, nid lnetwire.NID) uint64 {
	for _, n := range in.Nets() {
		if n.NID == nid {
			return n.SendCount
		}
	}
	return 0
}

func mrPeerNIHealth(in *lnet.Instance, nid lnetwire.NID) int {
	d, _ := in.PeerOf(nid)
	for _, ni := range d.NIs {
		if ni.NID == nid {
			return ni.Health
		}
	}
	return -1
}

// waitFor polls cond until it holds (the guard only stops a hang).
func mrWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMRNetnsLinkDown: two nodes in network namespaces joined by two
// veth links, a tcp NI on one and a tcp1 NI on the other, each the other's
// Multi-Rail peer. lst brw read check=full from a to b uses both links;
// the second link goes down mid-run: messages caught on it fail, are
// resent on the first link, and the health of the dead rail drops; the
// run sees no error. When the link comes back, recovery pings bring the
// health back and traffic uses both links again.
func TestMRNetnsLinkDown(t *testing.T) { mrLinkDown(t, mrSockNode, 4096) }

// TestMRNetnsLinkDownO2IB is TestMRNetnsLinkDown with a tcp rail and an
// o2ib rail (softib's RoCE provider on the second veth): the same
// selection, resends and health across two LNDs. Its RPCs carry 2 KiB:
// o2iblnd moves 4 KiB by RDMA, which the receiver has matched before the
// transfer, so a dying connection fails it at the receiver (as in
// Lustre); 2 KiB goes as one IMMEDIATE message, whole or not at all.
func TestMRNetnsLinkDownO2IB(t *testing.T) { mrLinkDown(t, mrO2IBNode, 2048) }

// mrLinkDown runs the link-down scenario on nodes built by node, with lst
// brw RPCs of size bytes.
func mrLinkDown(t *testing.T, node mrNodeFunc, size int) {
	p := netns.NewPair(t, netns.PairConfig{NoIPv6: true})
	devA, devB := mrAddLink(t, p.A, p.B, "10.213.0.1", "10.213.0.2")
	a, a0, a1 := node(t, p.A, "10.213.0.1")
	b, b0, b1 := node(t, p.B, "10.213.0.2")
	if err := a.AddPeer(lnet.PeerConfig{Primary: b0, NIDs: []lnetwire.NID{b1}}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(lnet.PeerConfig{Primary: a0, NIDs: []lnetwire.NID{a1}}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := &selftest.State{Name: "mr", Stamp: 7, Console: a0.String(), Timeout: 300, RPCTimeout: 64}
	con := selftest.NewConsole(a, st, mrQuietLog)
	if _, err := con.AddGroup(ctx, "c", []lnetwire.NID{a0}); err != nil {
		t.Fatal(err)
	}
	if _, err := con.AddGroup(ctx, "s", []lnetwire.NID{b0}); err != nil {
		t.Fatal(err)
	}
	if err := con.AddBatch("b"); err != nil {
		t.Fatal(err)
	}
	// Small RPCs: a message caught half received when its connection
	// is reset fails at the receiver, as in Lustre (its MD took the
	// failure); small messages arrive whole or not at all.
	spec := selftest.TestSpec{Kind: "brw", Op: "read", Size: size, Check: "full", From: "c", To: "s", Concurrency: 8, Loop: -1}
	if err := con.AddTest(ctx, "b", spec); err != nil {
		t.Fatalf("%v\na: %+v\n%+v\nb: %+v\n%+v", err, a.Stats(), a.PeerList(), b.Stats(), b.PeerList())
	}
	if _, err := con.BatchOp(ctx, "b", selftest.BatchRun); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = con.BatchOp(context.Background(), "b", selftest.BatchStop)
		}
	}()

	// Both rails carry traffic.
	mrWaitFor(t, "traffic on both links", func() bool {
		return mrSentOn(a, a0) > 20 && mrSentOn(a, a1) > 20 && mrSentOn(b, b0) > 20 && mrSentOn(b, b1) > 20
	})
	t.Logf("both links: a sent %d on %v, %d on %v; b sent %d, %d", mrSentOn(a, a0), a0.Net(), mrSentOn(a, a1), a1.Net(), mrSentOn(b, b0), mrSentOn(b, b1))

	// Rail 2 fails: both ends go down and TCP connections over it are
	// reset (ss -K, as a failed NIC's would be: softib's socklnd, unlike
	// ksocklnd, does not time out a silent connection with sends in
	// flight). An o2ib rail has none: its RC connections fail by
	// themselves.
	mrIP(t, "-n", p.A.Name, "link", "set", devA, "down")
	mrIP(t, "-n", p.B.Name, "link", "set", devB, "down")
	// Let the receivers read what had arrived before the reset: wait
	// until no connection over the dead rail holds unread data (ss's
	// Recv-Q; nothing arrives any more), rather than for a pause a busy
	// machine could outlast.
	for _, n := range []*netns.Node{p.A, p.B} {
		mrWaitFor(t, n.Name+": dead rail's receive queues read", func() bool {
			out, err := n.Command("ss", "-Htn", "dst", "10.213.0.0/24").CombinedOutput()
			if err != nil {
				t.Fatalf("ss: %v\n%s", err, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				// State Recv-Q Send-Q Local Peer
				if f := strings.Fields(line); len(f) > 1 && f[1] != "0" {
					return false
				}
			}
			return true
		})
	}
	for _, n := range []*netns.Node{p.A, p.B} {
		if out, err := n.Command("ss", "-K", "dst", "10.213.0.0/24").CombinedOutput(); err != nil {
			t.Fatalf("ss -K: %v\n%s", err, out)
		}
	}
	resends := func() uint64 { return a.HealthStats().ResendCount + b.HealthStats().ResendCount }
	mrWaitFor(t, "resends after the link went down", func() bool { return resends() > 0 })
	mrWaitFor(t, "lower health of the dead rail", func() bool {
		return mrPeerNIHealth(a, b1) < lnet.MaxHealthValue || mrPeerNIHealth(b, a1) < lnet.MaxHealthValue
	})
	// The run goes on over rail 1.
	before := mrSentOn(a, a0) + mrSentOn(b, b0)
	mrWaitFor(t, "progress on the remaining link", func() bool { return mrSentOn(a, a0)+mrSentOn(b, b0) > before+100 })
	t.Logf("link down: resends %d; health a→b1 %d, b→a1 %d; a stats %+v", resends(), mrPeerNIHealth(a, b1), mrPeerNIHealth(b, a1), a.HealthStats())

	// Rail 2 comes back: recovery pings restore its health and it
	// carries traffic again.
	mrIP(t, "-n", p.A.Name, "link", "set", devA, "up")
	mrIP(t, "-n", p.B.Name, "link", "set", devB, "up")
	mrWaitFor(t, "health restored", func() bool {
		return mrPeerNIHealth(a, b1) == lnet.MaxHealthValue && mrPeerNIHealth(b, a1) == lnet.MaxHealthValue
	})
	up := mrSentOn(a, a1) + mrSentOn(b, b1)
	mrWaitFor(t, "traffic on the restored link", func() bool { return mrSentOn(a, a1)+mrSentOn(b, b1) > up+20 })

	if _, err := con.BatchOp(ctx, "b", selftest.BatchStop); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := con.WaitIdle(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	var brwErr, rpcErr, dropped, sent uint64
	for _, r := range con.Stat(ctx, con.AllNodes()) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		k := r.Counters()
		brwErr += uint64(k.FW.BRWErrors)
		rpcErr += uint64(k.RPC.Errors)
		dropped += uint64(k.RPC.RPCsDropped)
		if r.NID == a0 {
			sent = uint64(k.RPC.RPCsSent)
		}
	}
	ha, hb := a.HealthStats(), b.HealthStats()
	t.Logf("lst: %d RPCs, brw errors %d, rpc errors %d, dropped %d; a health %+v; b health %+v", sent, brwErr, rpcErr, dropped, ha, hb)
	// LNet resends what the dead rail failed, except a network timeout
	// (Lustre's lnet_health_check: NETWORK_TIMEOUT is never resent; an
	// LND reports it for a message caught sending on a connection that
	// timed out, or queued for a connection that could not be made, as
	// o2iblnd's kiblnd_peer_connect_failed does): each such message may
	// fail one RPC, which the kernel's LNet would fail too. Any other
	// application-visible error is a fault.
	if allowed := ha.NetworkTimeoutCount + hb.NetworkTimeoutCount; brwErr > allowed || rpcErr > allowed || dropped != 0 {
		t.Fatalf("application-visible errors: brw %d rpc %d dropped %d; network timeouts (not resent, by design) %d", brwErr, rpcErr, dropped, allowed)
	} else if rpcErr > 0 {
		t.Logf("RPC errors %d, each a network timeout LNet does not resend (%d)", rpcErr, allowed)
	}
	con.End(ctx)
}
