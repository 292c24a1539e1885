package lnetd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/selftest"
	"softib/lnet/socklnd"
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

// mrSockNode is an instance in namespace n with a tcp NI on the pair's
// link and a tcp1 NI on the second link, and a selftest service.
func mrSockNode(t *testing.T, n *netns.Node, tcp1Addr string) (*lnet.Instance, lnetwire.NID, lnetwire.NID) {
	t.Helper()
	cfg := socklnd.Config{
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
	nid0 := lnetwire.MustParseNID(n.Addr.String() + "@tcp")
	nid1 := lnetwire.MustParseNID(tcp1Addr + "@tcp1")
	in, err := lnet.New(lnet.Config{
		LNDs: []lnd.LND{socklnd.New(cfg)},
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
func TestMRNetnsLinkDown(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{NoIPv6: true})
	devA, devB := mrAddLink(t, p.A, p.B, "10.213.0.1", "10.213.0.2")
	a, a0, a1 := mrSockNode(t, p.A, "10.213.0.1")
	b, b0, b1 := mrSockNode(t, p.B, "10.213.0.2")
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
	// 4 KiB RPCs: a message caught half received when its connection
	// is reset fails at the receiver, as in Lustre (its MD took the
	// failure); small messages arrive whole or not at all.
	spec := selftest.TestSpec{Kind: "brw", Op: "read", Size: 4096, Check: "full", From: "c", To: "s", Concurrency: 8, Loop: -1}
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
	t.Logf("both links: a sent %d on tcp, %d on tcp1; b sent %d, %d", mrSentOn(a, a0), mrSentOn(a, a1), mrSentOn(b, b0), mrSentOn(b, b1))

	// Rail 2 fails: both ends go down and the connections over it are
	// reset (ss -K, as a failed NIC's would be: softib's socklnd, unlike
	// ksocklnd, does not time out a silent connection with sends in
	// flight).
	mrIP(t, "-n", p.A.Name, "link", "set", devA, "down")
	mrIP(t, "-n", p.B.Name, "link", "set", devB, "down")
	// Let the receivers read what had arrived whole before the reset
	// (a settling pause, not a timing check).
	time.Sleep(200 * time.Millisecond)
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
	t.Logf("lst: %d RPCs, brw errors %d, rpc errors %d, dropped %d; a health %+v; b health %+v", sent, brwErr, rpcErr, dropped, a.HealthStats(), b.HealthStats())
	if brwErr != 0 || rpcErr != 0 || dropped != 0 {
		t.Fatalf("application-visible errors: brw %d rpc %d dropped %d", brwErr, rpcErr, dropped)
	}
	con.End(ctx)
}
