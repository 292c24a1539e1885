//go:build linux

package lnetd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/tools/lst"
)

// Issue #6's multi-process o2ib list: lnetd processes in network
// namespaces (veths, or netemu's router for loss), each with an o2ib NI
// on its own rxe device, driven through lnetctl's echo test service and
// lst. Every wait is bounded by hangGuard (a hang guard, never a timing
// assertion).

// o2ibNSYAML is the configuration of a namespaced node: tcp and o2ib NIs
// on iface, LNet credits and the o2ib lnd tunables lines given, discovery
// off (as o2ibNodeYAML: traffic to the o2ib NID stays on o2ib).
func o2ibNSYAML(iface string, peerCredits, credits int, lndTunables string) string {
	return fmt.Sprintf(`net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: %[1]s
    - net type: o2ib
      local NI(s):
        - interfaces:
              0: %[1]s
          tunables:
              peer_credits: %[2]d
              credits: %[3]d
          lnd tunables:
%[4]sglobal:
    accept_port: 988
    accept: all
    transaction_timeout: 20
    discovery: 0
`, iface, peerCredits, credits, lndTunables)
}

// parallelNSNodes starts n lnetd nodes in network namespaces of their own
// (nsNodes) for a test that runs in parallel with the other multi-process
// o2ib tests: each has its own namespaces and processes, and most of the
// time is spent waiting.
func parallelNSNodes(t *testing.T, n, peerCredits, credits int, lndTunables string) []*procNode {
	testenv.RequireRoot(t)
	t.Parallel()
	testenv.RequireTool(t, "ip")
	return nsNodes(t, netns.New(t, netns.Config{N: n, NoIPv6: true}), peerCredits, credits, lndTunables)
}

// nsNodes starts one lnetd per namespace of nw.
func nsNodes(t *testing.T, nw *netns.Network, peerCredits, credits int, lndTunables string) []*procNode {
	t.Helper()
	var nodes []*procNode
	for i, nn := range nw.Nodes {
		yaml := o2ibNSYAML(nn.Dev, peerCredits, credits, lndTunables)
		nodes = append(nodes, startProc(t, fmt.Sprintf("ns%d", i), nn.Addr.String(), yaml, "ip", "netns", "exec", nn.Name))
	}
	return nodes
}

// ib is n's o2ib NID.
func ib(n *procNode) string { return n.ip + "@o2ib" }

// xfer runs one `lnetctl test put|get` from n to nid and returns the exit
// code and the decoded "test put|get" result.
func xfer(t *testing.T, n *procNode, op, nid string, size, slot, seed int, timeout time.Duration) (int, Map, string) {
	t.Helper()
	code, out, errs := run(t, "lnetctl", "--socket", n.sock, "--json", "test", op, "--nid", nid,
		"--size", fmt.Sprint(size), "--bits", fmt.Sprint(slot), "--seed", fmt.Sprint(seed), "--timeout", timeout.String())
	var m Map
	if err := m.UnmarshalJSON([]byte(out)); err != nil {
		t.Fatalf("%s: test %s %d B: exit %d, bad JSON %v\n%s%s", n.name, op, size, code, err, out, errs)
	}
	return code, m.Get("test " + op).(Map), errs
}

// slotCRC returns the length and CRC n's echo service holds in slot.
func slotCRC(t *testing.T, n *procNode, slot int) (int64, any) {
	t.Helper()
	sl, _ := n.doc("test", "show").Path("test service", "slots", slot).(Map)
	if sl == nil {
		return -1, nil
	}
	return sl.Get("length").(int64), sl.Get("crc32")
}

// o2ibPutGet PUTs size bytes from n to peer's slot over o2ib and GETs
// them back: the CRC must match at the sender, the receiver and after
// the GET.
func o2ibPutGet(t *testing.T, from, to *procNode, size, slot, seed int) {
	t.Helper()
	code, p, errs := xfer(t, from, "put", ib(to), size, slot, seed, 30*time.Second)
	if code != 0 || p.Get("ok") != int64(1) || p.Get("bytes") != int64(size) || !strings.Contains(eventTypes(p), "ACK") {
		t.Fatalf("%s→%s put %d over o2ib: exit %d\n%s%s", from.name, to.name, size, code, YAML(p), errs)
	}
	if n, crc := slotCRC(t, to, slot); n != int64(size) || crc != p.Get("crc32") {
		t.Fatalf("%s→%s put %d over o2ib: receiver holds %d B crc %v, sender crc %v", from.name, to.name, size, n, crc, p.Get("crc32"))
	}
	code, g, errs := xfer(t, from, "get", ib(to), size, slot, 0, 30*time.Second)
	if code != 0 || g.Get("ok") != int64(1) || g.Get("crc32") != p.Get("crc32") || !strings.Contains(eventTypes(g), "REPLY") {
		t.Fatalf("%s→%s get %d over o2ib: exit %d\n%s%s", from.name, to.name, size, code, YAML(g), errs)
	}
}

// failedWithEvent checks a failed transfer reports an error event (an
// event carrying a status), never a success.
func failedWithEvent(t *testing.T, what string, code int, r Map) {
	t.Helper()
	if code == 0 || r.Get("error") == nil {
		t.Fatalf("%s: exit %d, want a failure:\n%s", what, code, YAML(r))
	}
	evs, _ := r.Get("events").(List)
	for _, e := range evs {
		if e.(Map).Get("status") != nil {
			return
		}
	}
	t.Errorf("%s failed without an error event (%v):\n%s", what, r.Get("error"), YAML(r))
}

// peerState returns n's LNet state of peer nid ("up", "down", ...).
func peerState(t *testing.T, n *procNode, nid string) any {
	t.Helper()
	return n.doc("peer", "show", "--nid", nid).Path("peer", 0, keyPeerNI, 0, "state")
}

// waitUntil polls cond (hang guard only).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestE2EO2IBSizes: PUT and GET of 0 B .. 1 MiB both ways between two
// lnetd processes in network namespaces over o2ib, around every
// boundary (IMMEDIATE up to 3976 B payload, RDMA beyond, multi-packet
// RDMA), each verified by CRC at sender, receiver and after the GET.
func TestE2EO2IBSizes(t *testing.T) {
	nodes := parallelNSNodes(t, 2, 16, 128, "")
	for i, size := range []int{0, 1, 100, 3976, 3977, 4096, 8192, 65536, 300000, 1<<20 - 1, 1 << 20} {
		// The echo service has 4 slots per node.
		o2ibPutGet(t, nodes[i%2], nodes[(i+1)%2], size, i%4, 100+i)
		o2ibPutGet(t, nodes[(i+1)%2], nodes[i%2], size, (i+2)%4, 200+i)
	}
}

// TestE2EO2IBPeerKilledAndRestarted: lnetd B is SIGKILLed in the middle
// of a stream of 1 MiB PUTs from A over o2ib. A's stream ends with an
// error event (never a success), A reports B down, and PUTs to B fail
// while it is away. B restarted (a new process on the same address and
// NID: same GID and CA GUID, QPNs from the same start, new incarnation),
// A's next PUTs reach it, with verified data, and A logs B's new
// incarnation.
func TestE2EO2IBPeerKilledAndRestarted(t *testing.T) {
	// keepalive 3: an idle connection to a dead B is found out by its
	// NOOP within seconds (see transaction_timeout below).
	nodes := parallelNSNodes(t, 2, 16, 128, "              timeout: 10\n              keepalive: 3\n")
	a, b := nodes[0], nodes[1]
	o2ibPutGet(t, a, b, 1<<20, 0, 1)
	// B may die after A's last PUT completed at the LND (its SEND event)
	// and before B's LNet sent the ACK: then nothing is in flight, no LND
	// error can come, and only response tracking reports the missing ACK
	// (an UNLINK event with a timeout), after transaction_timeout (150 s
	// by default, longer than the stream waits). A short one makes that
	// window end in an error event too; the keepalive NOOP then finds B
	// down.
	ctlOK(t, a.sock, "set", "transaction_timeout", "8")

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	stream := exec.CommandContext(ctx, softibBin(t), "lnetctl", "--socket", a.sock, "--json", "test", "put",
		"--nid", ib(b), "--size", "1048576", "--count", "1000000", "--timeout", "15s", "--bits", "1")
	var sout, serr bytes.Buffer
	stream.Stdout, stream.Stderr = &sout, &serr
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the stream to get going", func() bool {
		sl, _ := b.doc("test", "show").Path("test service", "slots", 1).(Map)
		return sl != nil && sl.Get("puts").(int64) >= 5
	})
	b.kill()
	err := stream.Wait()
	if ctx.Err() != nil {
		t.Fatal("the sender hung after its peer died")
	}
	var res Map
	if jerr := res.UnmarshalJSON(sout.Bytes()); jerr != nil {
		t.Fatalf("stream output: %v\n%s\n%s", jerr, sout.String(), serr.String())
	}
	r := res.Get("test put").(Map)
	code := 0
	if err != nil {
		code = 1
	}
	failedWithEvent(t, "stream to a killed peer", code, r)
	if r.Get("ok").(int64) < 4 {
		t.Errorf("stream completed only %v PUTs before the kill", r.Get("ok"))
	}
	t.Logf("stream stopped after %v ACKed PUTs: %v", r.Get("ok"), r.Get("error"))
	waitUntil(t, "A to report B down", func() bool { return peerState(t, a, ib(b)) == "down" })
	// While B is away every PUT fails.
	if code, r, _ := xfer(t, a, "put", ib(b), 4096, 2, 5, 3*time.Second); code == 0 || r.Get("ok") != int64(0) {
		t.Errorf("PUT to a dead peer: exit %d\n%s", code, YAML(r))
	}

	b.start()
	var lastErr any
	waitUntil(t, "a PUT to the restarted peer", func() bool {
		code, r, _ := xfer(t, a, "put", ib(b), 1<<20, 3, 77, 10*time.Second)
		if code != 0 {
			lastErr = r.Get("error")
			t.Logf("PUT to the restarted peer: %v", lastErr)
		}
		return code == 0
	})
	if n, crc := slotCRC(t, b, 3); n != 1<<20 || crc == nil {
		t.Fatalf("restarted B holds %d B crc %v in slot 3", n, crc)
	}
	o2ibPutGet(t, a, b, 1<<20, 0, 78)
	o2ibPutGet(t, b, a, 300000, 2, 79)
	o2ibPutGet(t, a, b, 0, 1, 80)
	if peerState(t, a, ib(b)) != "up" {
		t.Errorf("A still reports B %v", peerState(t, a, ib(b)))
	}
	if !strings.Contains(a.log.String(), "o2iblnd: peer restarted") || !strings.Contains(a.log.String(), "peer="+ib(b)) {
		t.Errorf("A did not log B's new incarnation:\n%s", a.log)
	}
	// ... and counts it where lnetctl net show -v shows the LND.
	ls, _ := a.doc("net", "show", "-v", "--net", "o2ib").Path("net", 0, "local NI(s)", 0, "lnd statistics").(Map)
	if n, ok := ls.Get("peer_reboots").(int64); !ok || n < 1 {
		t.Errorf("A's net show -v: peer_reboots %v after B restarted:\n%s", ls.Get("peer_reboots"), YAML(ls))
	}
}

// TestE2EO2IBPeerRestartedWhileConnected: B is SIGKILLed while idle and
// restarted at once, so A still holds its connection ESTABLISHED when B's
// new process (same GID, CA GUID and QPNs) shows up. Round 1: the new B
// PUTs to A first; A's CM answers the reused QPN with REJ STALE_CONN and
// disconnects the old connection, B retries (o2iblnd's reconnect after
// a CM STALE and a kib_rej STALE) and the first PUT succeeds. Round 2:
// after another silent restart A sends first: what goes down the dead
// connection fails with an error event, never a success, and A's next
// PUT reconnects (a stale REP at A's CM) with verified data.
func TestE2EO2IBPeerRestartedWhileConnected(t *testing.T) {
	nodes := parallelNSNodes(t, 2, 16, 128, "              timeout: 10\n")
	a, b := nodes[0], nodes[1]
	o2ibPutGet(t, a, b, 65536, 0, 1)
	o2ibPutGet(t, b, a, 4096, 0, 2)

	// Round 1: the restarted side speaks first.
	b.kill()
	b.start()
	o2ibPutGet(t, b, a, 1<<20, 1, 3)
	if !strings.Contains(b.log.String(), "o2iblnd: stale connection") {
		t.Errorf("the restarted B never met the CM's STALE_CONN:\n%s", b.log)
	}
	o2ibPutGet(t, a, b, 1<<20, 1, 4)
	waitUntil(t, "A to log B's new incarnation", func() bool {
		return strings.Count(a.log.String(), "o2iblnd: peer restarted") == 1
	})

	// Round 2: the surviving side speaks first.
	b.kill()
	b.start()
	failures := 0
	waitUntil(t, "a PUT to the restarted peer", func() bool {
		code, r, _ := xfer(t, a, "put", ib(b), 4096, 2, 5, 20*time.Second)
		if code == 0 {
			return true
		}
		failures++
		failedWithEvent(t, "PUT down a dead connection", code, r)
		t.Logf("PUT after the silent restart: %v", r.Get("error"))
		return false
	})
	if n, crc := slotCRC(t, b, 2); n != 4096 || crc == nil {
		t.Fatalf("restarted B holds %d B crc %v in slot 2", n, crc)
	}
	o2ibPutGet(t, a, b, 1<<20, 3, 6)
	o2ibPutGet(t, b, a, 1<<20, 3, 7)
	waitUntil(t, "A to log B's second new incarnation", func() bool {
		return strings.Count(a.log.String(), "o2iblnd: peer restarted") == 2
	})
	t.Logf("round 2: %d PUTs failed (error events) before the reconnect", failures)
}

// TestE2EO2IBCreditExhaustion: 64 concurrent brw RPCs from each of two
// lnetd processes into a third over o2ib with peer_credits 8 and 64 NI
// credits: the senders run out of credits and queue (min_tx_credits goes
// negative), and every RPC still completes (verified data, no errors, no
// deadlock).
func TestE2EO2IBCreditExhaustion(t *testing.T) {
	nodes := parallelNSNodes(t, 3, 8, 64, "              concurrent_sends: 8\n")
	a, b, c := nodes[0], nodes[1], nodes[2]
	for _, test := range [][]string{
		{"brw", "write", "size=1M", "check=full"},
		{"brw", "read", "size=4K", "check=full"},
	} {
		args := append([]string{"lst", "quick", "--socket", a.sock, "--from", ib(a) + "," + ib(c), "--to", ib(b),
			"--concurrency", "64", "--seconds", "2", "--delay", "1", "--json"}, test...)
		code, out, errs := run(t, args...)
		var res lst.QuickResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: exit %d, bad JSON %v:\n%s\n%s", test, code, err, out, errs)
		}
		if code != 0 || !res.OK || res.Errors != 0 || res.BRWErr != 0 || res.RPCs == 0 {
			t.Fatalf("%v: exit %d: %+v\n%s", test, code, res, errs)
		}
		t.Logf("lst quick --concurrency 64 ×2 over o2ib %v: %d RPCs, %.0f RPC/s, %.2f MiB/s", test, res.RPCs, res.RPCRate, res.MiBRate)
	}
	for _, n := range []*procNode{a, c} {
		p := n.doc("peer", "show", "-v", "--nid", ib(b)).Path("peer", 0, keyPeerNI, 0).(Map)
		if lo, _ := p.Get("min_tx_credits").(int64); lo >= 0 {
			t.Errorf("%s never ran out of credits to B:\n%s", n.name, YAML(p))
		}
		if p.Get("tx_q_num_of_buf") != int64(0) {
			t.Errorf("%s still has messages queued to B:\n%s", n.name, YAML(p))
		}
	}
	o2ibPutGet(t, a, b, 1<<20, 0, 1) // still healthy
}
