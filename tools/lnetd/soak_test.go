//go:build linux

package lnetd

// Soak test (issue #11): PUT/GET storms between lnetd processes over
// socklnd and o2iblnd while one peer is SIGKILLed and restarted again
// and again. It runs only with SOFTIB_SOAK=1 (scripts/soak.sh);
// SOFTIB_SOAK_SECONDS bounds it.

import (
	"context"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
)

// soakNodeYAML: tcp and o2ib NIs on iface, 5 s LND and LNet timeouts
// (a PUT whose ACK died with the killed peer fails after 5 s, so the
// workers are free again well inside one incarnation of the peer),
// aliveness off (each operation tries the peer), fast socklnd
// reconnects, and enough echo slots for one per storm worker.
func soakNodeYAML(iface string, slots int) string {
	return fmt.Sprintf(`net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: %[1]s
          tunables:
              peer_timeout: 0
          lnd tunables:
              min_reconnectms: 100
              max_reconnectms: 1000
              sock_timeout: 5
    - net type: o2ib
      local NI(s):
        - interfaces:
              0: %[1]s
          tunables:
              peer_timeout: 0
              peer_credits: 16
              credits: 256
          lnd tunables:
              timeout: 5
global:
    accept_port: 988
    accept: all
    transaction_timeout: 5
    test_slots: %[2]d
`, iface, slots)
}

// soakStream is the traffic of one (initiator, target, network): its
// workers each own one echo slot at the target.
type soakStream struct {
	from, to *procNode
	net      string // "tcp" or "o2ib"
	nid      string
	ok       atomic.Int64 // verified PUTs and GETs
	failed   atomic.Int64 // failed with an error event
	bytes    atomic.Int64
	// okEpoch counts verified operations per incarnation of the target
	// (index: restarts so far), guarded by mu.
	mu      sync.Mutex
	okEpoch map[int64]int
	firstOK map[int64]time.Time // the first verified operation per incarnation
	errs    []string            // the last failures, for the log
}

// noteErr remembers a failure (the last few, with their time).
func (st *soakStream) noteErr(format string, args ...any) {
	st.failed.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.errs) >= 8 {
		st.errs = st.errs[1:]
	}
	st.errs = append(st.errs, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...)))
}

// soakTarget tracks the incarnations of a node: gen is odd while it is
// being killed or restarted, even while it runs.
type soakTarget struct {
	gen atomic.Int64
}

// stable reports whether no kill or restart touched the target since
// gen0 was read: the target ran, as one process, all along.
func (s *soakTarget) stable(gen0 int64) bool { return gen0%2 == 0 && s.gen.Load() == gen0 }

// soakSizes are the transfer sizes: around o2iblnd's IMMEDIATE limit
// (3976 B payload) and socklnd's zero-copy threshold, up to 1 MiB.
var soakSizes = []int{0, 1, 100, 3976, 3977, 4096, 16384, 65536, 300000, 1<<20 - 1, 1 << 20}

// TestSoakLNetStorm: three lnetd processes (A, B, C) in network
// namespaces with tcp and o2ib NIs. Workers on every node (four per
// initiator, target and network, each with its own echo slot at the
// target) PUT and GET 0 B .. 1 MiB to the other two nodes without
// pause, each PUT checked by CRC at the sender, in the receiver's slot
// and after a GET back, while C is SIGKILLed and restarted every
// SOFTIB_SOAK_SECONDS/6 (at least 10 s). Between A and B every
// operation must succeed. To or from C an operation may fail, but only
// with an error event (or, from C, by C's death), never as a success
// for data that was not delivered; no GET may return bytes that were
// never sent (only a restarted C's zeroed slot). In every incarnation
// of C every stream to and from C moves verified data again, and once
// the storm ends PUTs and GETs to and from C succeed on both networks.
func TestSoakLNetStorm(t *testing.T) {
	total := testenv.SoakDuration(t)
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	const workers = 4
	nw := netns.New(t, netns.Config{N: 3, NoIPv6: true})
	var nodes []*procNode
	for i, nn := range nw.Nodes {
		nodes = append(nodes, startProc(t, string(rune('A'+i)), nn.Addr.String(), soakNodeYAML(nn.Dev, 4*workers),
			"ip", "netns", "exec", nn.Name))
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	tc := &soakTarget{} // C's incarnations
	var streams []*soakStream
	for _, from := range nodes {
		for _, to := range nodes {
			if to == from {
				continue
			}
			for _, net := range []string{"tcp", "o2ib"} {
				streams = append(streams, &soakStream{from: from, to: to, net: net, nid: to.ip + "@" + net, okEpoch: map[int64]int{}, firstOK: map[int64]time.Time{}})
			}
		}
	}
	// Slots at each target: numbered in stream order.
	nextSlot := map[*procNode]int{}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var failure atomic.Pointer[string]
	failf := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if failure.CompareAndSwap(nil, &s) {
			cancel()
		}
	}
	start := time.Now()
	stopAt := start.Add(total)
	var wg sync.WaitGroup
	var seedSeq atomic.Uint64
	for _, st := range streams {
		for range workers {
			slot := nextSlot[st.to]
			nextSlot[st.to]++
			wg.Add(1)
			go func() {
				defer wg.Done()
				soakWorker(ctx, st, tc, slot, stopAt, &seedSeq, failf)
			}()
		}
	}

	// Kill and restart C every period until the storm ends.
	// SOFTIB_SOAK_KILL_EVERY (a duration) overrides the period; below
	// 10 s incarnations are too short to require traffic in each (a
	// PUT whose ACK died with C holds its worker for the 5 s timeout).
	period := max(10*time.Second, total/6)
	if v := os.Getenv("SOFTIB_SOAK_KILL_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SOFTIB_SOAK_KILL_EVERY=%q: want a positive duration", v)
		}
		period = d
	}
	kills := 0
	var downtime time.Duration
	var readyAt []time.Time // when each new incarnation of C was ready
	for failure.Load() == nil {
		wait := time.Until(start.Add(time.Duration(kills+1) * period))
		if time.Now().Add(wait).After(stopAt.Add(-period / 2)) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if failure.Load() != nil {
			break
		}
		tc.gen.Add(1) // odd: going down
		t0 := time.Now()
		t.Logf("%s: killing C (incarnation %d)", t0.Format("15:04:05.000"), kills)
		c.kill()
		time.Sleep(500 * time.Millisecond) // in-flight operations meet a dead peer
		c.start()
		downtime += time.Since(t0)
		readyAt = append(readyAt, time.Now())
		tc.gen.Add(1) // even: the new incarnation runs
		kills++
	}
	wg.Wait()
	if f := failure.Load(); f != nil {
		t.Fatal(*f)
	}
	stormed := time.Since(start)
	var recovery time.Duration // longest wait for a stream's first verified operation after a restart

	// After each restart every stream to C moved verified data again
	// (every incarnation but the last, which the storm may have left
	// early, is checked; the last is checked below).
	for _, st := range streams {
		if st.to != c && st.from != c {
			continue
		}
		st.mu.Lock()
		for e := int64(2); e <= 2*int64(kills); e += 2 {
			if f, ok := st.firstOK[e]; ok {
				recovery = max(recovery, f.Sub(readyAt[e/2-1]))
			}
		}
		for e := int64(0); e < 2*int64(kills) && period >= 10*time.Second; e += 2 {
			if st.okEpoch[e] == 0 {
				t.Errorf("%s→%s over %s: no verified operation in C's incarnation %d; last failures:\n%s", st.from.name, st.to.name, st.net, e/2,
					strings.Join(st.errs, "\n"))
			}
		}
		st.mu.Unlock()
	}
	// The storm over, C serves both networks again.
	for _, from := range []*procNode{a, b} {
		waitUntil(t, "a verified PUT and GET to C over tcp", func() bool { return soakPutGet(t, from, c.nid, 2, 1<<20) })
		waitUntil(t, "a verified PUT and GET to C over o2ib", func() bool { return soakPutGet(t, from, ib(c), 3, 1<<20) })
		waitUntil(t, "a verified PUT and GET from C over tcp", func() bool { return soakPutGet(t, c, from.nid, 2, 1<<20) })
		waitUntil(t, "a verified PUT and GET from C over o2ib", func() bool { return soakPutGet(t, c, ib(from), 3, 1<<20) })
	}

	// Nothing is left behind on the nodes that stayed up: every message
	// of the storm (to C's dead incarnations too) was finalized.
	var lstats []string
	for _, n := range []*procNode{a, b} {
		var st Map
		waitUntil(t, n.name+"'s messages to be finalized", func() bool {
			st = n.doc("stats", "show").Get("statistics").(Map)
			return st.Get("msgs_alloc") == int64(0)
		})
		lstats = append(lstats, fmt.Sprintf("%s: %v sent, %v received, %v errors, %v dropped, msgs_max %v", n.name,
			st.Get("send_count"), st.Get("recv_count"), st.Get("errors"), st.Get("drop_count"), st.Get("msgs_max")))
	}

	var ok, failed, bytes int64
	var per []string
	for _, st := range streams {
		ok += st.ok.Load()
		failed += st.failed.Load()
		bytes += st.bytes.Load()
		per = append(per, fmt.Sprintf("%s→%s/%s %d ok %d failed", st.from.name, st.to.name, st.net, st.ok.Load(), st.failed.Load()))
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("soak lnet storm: %d workers, %d verified PUT/GETs (%.0f/s, %.1f MiB/s), %d failed with an error event (all to or from C), "+
		"C killed and restarted %d times (down %.1fs in all; every stream verified again at most %.1fs after a restart), %.1fs; %s; LNet %s; RSS of the lnetds: %s",
		len(streams)*workers, ok, float64(ok)/stormed.Seconds(), float64(bytes)/(1<<20)/stormed.Seconds(), failed,
		kills, downtime.Seconds(), recovery.Seconds(), stormed.Seconds(), strings.Join(per, ", "), strings.Join(lstats, "; "), soakRSS(nodes))
}

// soakWorker runs PUT, receiver check, GET rounds on one slot of st's
// target until stopAt. kt tracks C, the node that gets killed: an
// operation to or from it may fail (with an error event; from C, also
// by C's death cutting the control connection, after which the worker
// dials C's next incarnation); any other failure fails the test.
func soakWorker(ctx context.Context, st *soakStream, kt *soakTarget, slot int, stopAt time.Time, seedSeq *atomic.Uint64,
	failf func(string, ...any)) {
	what := fmt.Sprintf("%s→%s over %s, slot %d", st.from.name, st.to.name, st.net, slot)
	fromC, toC := st.from.name == "C", st.to.name == "C"
	var cl *Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	// dial (re)connects to the initiator's lnetd, waiting for C's next
	// incarnation when C is the initiator.
	dial := func(gen0 int64) bool {
		if cl != nil {
			cl.Close()
			cl = nil
		}
		for ctx.Err() == nil && time.Now().Before(stopAt) {
			if g := kt.gen.Load(); !fromC || (g%2 == 0 && g != gen0) {
				c, err := Dial(st.from.sock)
				if err == nil {
					cl = c
					return true
				}
				if !fromC {
					failf("%s: %v", what, err)
					return false
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	if !dial(-1) {
		return
	}
	rng := rand.New(rand.NewPCG(uint64(slot), uint64(len(st.nid))))
	// call runs one control operation; false means the round is over
	// (a failure recorded or the worker done).
	call := func(gen0 int64, op string, args XferArgs, res *XferResult) bool {
		err := cl.Call(ctx, op, args, res)
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			if fromC && !kt.stable(gen0) {
				st.noteErr("slot %d %s %d B: initiator killed: %v", slot, op, args.Size, err)
				dial(gen0)
				return false
			}
			failf("%s: %s %d B: control call: %v", what, op, args.Size, err)
			return false
		}
		if res.Error == "" {
			return true
		}
		if !fromC && !toC {
			failf("%s: %s %d B failed: %s (events %+v)", what, op, args.Size, res.Error, res.Events)
		} else if !soakErrorEvent(res.Events) {
			failf("%s: %s %d B failed without an error event: %s (events %+v)", what, op, args.Size, res.Error, res.Events)
		} else {
			st.noteErr("slot %d %s %d B: %s", slot, op, args.Size, res.Error)
		}
		return false
	}
	for time.Now().Before(stopAt) && ctx.Err() == nil && cl != nil {
		size := soakSizes[rng.IntN(len(soakSizes))]
		seed := seedSeq.Add(1)
		gen0 := kt.gen.Load()
		// stable: C neither died nor restarted since the round began.
		stable := func() bool { return kt.stable(gen0) }
		buf := make([]byte, size)
		Pattern(buf, seed)
		want := crc32.ChecksumIEEE(buf)
		zeros := crc32.ChecksumIEEE(make([]byte, size))

		var put XferResult
		if !call(gen0, "test.put", XferArgs{NID: st.nid, Bits: uint64(slot), Size: size, Seed: seed, Timeout: 40 * time.Second}, &put) {
			continue
		}
		if put.OK != 1 || put.Bytes != int64(size) || put.CRC != want || !strings.Contains(eventNames(put.Events), "ACK") {
			failf("%s: PUT %d B reported success as %+v (want crc %#x)", what, size, put, want)
			return
		}
		// The receiver holds what was sent, unless it was killed since.
		if tcl, err := Dial(st.to.sock); err == nil {
			var show Map
			err = tcl.Call(ctx, "test.show", nil, &show)
			tcl.Close()
			if err == nil && (!toC || stable()) {
				sl, _ := show.Path("test service", "slots", slot).(Map)
				if sl == nil || sl.Get("length") != int64(size) || sl.Get("crc32") != fmt.Sprintf("0x%08x", want) {
					failf("%s: PUT %d B ACKed but the receiver's slot holds %s (want crc 0x%08x)", what, size, YAML(sl), want)
					return
				}
			}
		} else if !toC {
			failf("%s: %v", what, err)
			return
		}

		var get XferResult
		if !call(gen0, "test.get", XferArgs{NID: st.nid, Bits: uint64(slot), Size: size, Timeout: 40 * time.Second}, &get) {
			st.ok.Add(1) // the PUT was verified
			st.bytes.Add(int64(size))
			st.count(gen0, kt, 1)
			continue
		}
		// The GET returns the PUT's bytes; a restarted target may only
		// return its fresh, zeroed slot.
		if get.OK != 1 || get.Bytes != int64(size) || (get.CRC != want && (!toC || stable() || get.CRC != zeros)) ||
			!strings.Contains(eventNames(get.Events), "REPLY") {
			failf("%s: GET %d B returned %+v; PUT crc %#x, zeros %#x, C restarted: %v", what, size, get, want, zeros, !stable())
			return
		}
		st.ok.Add(2)
		st.bytes.Add(2 * int64(size))
		st.count(gen0, kt, 2)
	}
}

// count credits n verified operations to the target's incarnation, if
// they all ran within it.
func (st *soakStream) count(gen0 int64, tg *soakTarget, n int) {
	if !tg.stable(gen0) {
		return
	}
	st.mu.Lock()
	st.okEpoch[gen0] += n
	if _, ok := st.firstOK[gen0]; !ok {
		st.firstOK[gen0] = time.Now()
	}
	st.mu.Unlock()
}

// soakErrorEvent reports whether evs holds an event with an error status.
func soakErrorEvent(evs []EventInfo) bool {
	for _, e := range evs {
		if e.Status != "" {
			return true
		}
	}
	return false
}

// soakPutGet PUTs size bytes from n to nid's slot and GETs them back,
// reporting whether both succeeded with the data verified.
func soakPutGet(t *testing.T, from *procNode, nid string, slot, size int) bool {
	t.Helper()
	code, p, _ := xfer(t, from, "put", nid, size, slot, 4242, 30*time.Second)
	if code != 0 {
		return false
	}
	code, g, _ := xfer(t, from, "get", nid, size, slot, 0, 30*time.Second)
	if code != 0 {
		return false
	}
	if g.Get("crc32") != p.Get("crc32") {
		t.Fatalf("%s: GET of %d B after a PUT returned crc %v, PUT crc %v", nid, size, g.Get("crc32"), p.Get("crc32"))
	}
	return true
}

// soakRSS reports the lnetds' resident sizes, now and at peak.
func soakRSS(nodes []*procNode) string {
	var s []string
	for _, n := range nodes {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM:") || strings.HasPrefix(l, "VmRSS:") {
				s = append(s, n.name+" "+strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return strings.Join(s, ", ")
}
