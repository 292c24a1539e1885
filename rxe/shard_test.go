package rxe_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"softib/internal/stats"
	"softib/internal/testaddr"
	"softib/rxe"
	"softib/udp"
	"softib/udp/udptest"
	"softib/verbs"
)

// spinWaitWC is waitWC with a spinning start: up to 64 Polls in a row
// (yielding between them), the way a polling application takes over the
// receive (Config.PollRxAfter), before waitWC's sleeping waits; bounded,
// so that a synctest bubble's clock still advances to retransmit
// timeouts.
func spinWaitWC(t *testing.T, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wcs := make([]verbs.WC, 16)
	for range 64 {
		if len(out) == n {
			return out
		}
		k, err := cq.Poll(wcs[:min(len(wcs), n-len(out))])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, wcs[:k]...)
		runtime.Gosched()
	}
	return append(out, waitWC(t, cq, n-len(out))...)
}

// shardStream posts n signalled WRITE_WITH_IMM of assorted sizes from a
// to b, slot by slot, and checks the shard invariant's promise: every WR
// completes exactly once, in order, successfully, each receive
// completion carries its WR's immediate in order, and the data arrived.
func shardStream(t *testing.T, a, b *end, n, slot int) {
	t.Helper()
	sizes := []int{0, 1, 1023, 1024, 1025, 3000, slot}
	fill(a.buf, uint64(len(a.buf)))
	var wrs []verbs.SendWR
	for k := range n {
		off := k * slot
		postRecv(t, b, verbs.RecvWR{ID: uint64(k)})
		wrs = append(wrs, verbs.SendWR{ID: uint64(k), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
			ImmData: uint32(k), SGL: []verbs.SGE{a.mr.SGE(off, sizes[k%len(sizes)])},
			RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
	}
	post(t, a, wrs...)
	for k, wc := range spinWaitWC(t, a.cq, n) {
		if wc.WRID != uint64(k) || wc.Status != verbs.WCSuccess {
			t.Fatalf("send completion %d: %+v\nstats a %v\nstats b %v", k, wc, a.dev.Stats(), b.dev.Stats())
		}
	}
	for k, wc := range spinWaitWC(t, b.cq, n) {
		if wc.WRID != uint64(k) || wc.Status != verbs.WCSuccess || wc.ImmData != uint32(k) {
			t.Fatalf("receive completion %d: %+v", k, wc)
		}
	}
	b.sync()
	for k := range n {
		off, size := k*slot, sizes[k%len(sizes)]
		if !bytes.Equal(b.buf[off:off+size], a.buf[off:off+size]) {
			t.Fatalf("WR %d (%d bytes): data differs", k, size)
		}
	}
}

// TestSimNetShards runs several RC QPs between two devices that receive
// through three shards each, on the simulated network with faults. With
// ShardByFlow each peer's packets stay on one shard, as SO_REUSEPORT
// keeps them; with ShardSpray every datagram picks a shard at random, so
// one QP's packets arrive through all three shards and their goroutines
// (and polling CQs) race to queue and process them: the invariant in
// shard.go says that is network reordering to the QP, and the WRs must
// still complete exactly once and in order. The CQs are polled
// (waitWC), so the per-shard receive tokens are exercised too.
func TestSimNetShards(t *testing.T) {
	faults := []struct {
		name string
		f    udptest.Faults
	}{
		{"perfect", udptest.Faults{}},
		{"drop", udptest.Faults{Drop: 0.05}},
		{"duplicate", udptest.Faults{Duplicate: 0.1}},
		{"reorder", udptest.Faults{Reorder: 0.1, ReorderGap: 3}},
		{"everything", udptest.Faults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.05, Corrupt: 0.01, Delay: 50 * time.Microsecond, Jitter: 100 * time.Microsecond}},
	}
	for _, pol := range []udptest.ShardPolicy{udptest.ShardByFlow, udptest.ShardSpray} {
		for i, sf := range faults {
			t.Run(fmt.Sprintf("%d/%s", pol, sf.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					nw := udptest.NewNetwork(uint64(100 + i))
					defer nw.Close()
					open := func(ap netip.AddrPort) *rxe.Device {
						eps, err := nw.ListenShards(ap, 3, pol)
						if err != nil {
							t.Fatal(err)
						}
						cfg := rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ap.Addr(), RxShards: 3}, Conn: eps[0]}
						for _, ep := range eps[1:] {
							cfg.ShardConns = append(cfg.ShardConns, ep)
						}
						return openDev(t, cfg)
					}
					da := open(netip.MustParseAddrPort("10.201.0.1:4791"))
					db := open(netip.MustParseAddrPort("10.201.0.2:4791"))
					const qps, n, slot = 3, 16, 8 << 10
					o := connOpts{timeout: 10, retry: 7, rnrRetry: 7, minRNR: 1}
					var as, bs []*end
					for range qps {
						a, b := newEnd(t, da, verbs.QPTypeRC, n*slot), newEnd(t, db, verbs.QPTypeRC, n*slot)
						connect(t, a, b, o)
						connect(t, b, a, o)
						as, bs = append(as, a), append(bs, b)
					}
					nw.SetFaults(sf.f)
					done := make(chan struct{}, qps)
					for q := range qps {
						go func() {
							defer func() { done <- struct{}{} }()
							shardStream(t, as[q], bs[q], n, slot)
						}()
					}
					for range qps {
						<-done
					}
					if testing.Verbose() {
						t.Logf("network %v\na %v\nb %v", stats.Snapshot(&nw.Stats), da.Stats(), db.Stats())
					}
				})
			})
		}
	}
}

// TestRxShardsConfig: RxShards that cannot be honoured fail Open.
func TestRxShardsConfig(t *testing.T) {
	nw := udptest.NewNetwork(1)
	defer nw.Close()
	ap := netip.MustParseAddrPort("10.202.0.1:4791")
	ep := nw.Endpoint(ap)
	defer ep.Close()
	for _, c := range []rxe.Config{
		{DeviceConfig: verbs.DeviceConfig{Addr: ap.Addr(), RxShards: 2}, Conn: ep},
		{DeviceConfig: verbs.DeviceConfig{Addr: ap.Addr(), RxShards: -1}},
		{DeviceConfig: verbs.DeviceConfig{Addr: ap.Addr(), RxShards: 100000}},
		{DeviceConfig: verbs.DeviceConfig{Addr: ap.Addr()}, ShardConns: []udp.Conn{ep}},
	} {
		if d, err := rxe.Open(c); !errors.Is(err, verbs.ErrInvalidArgument) {
			if err == nil {
				d.Close()
			}
			t.Errorf("RxShards %d, Conn %v, %d ShardConns: %v, want ErrInvalidArgument", c.RxShards, c.Conn != nil, len(c.ShardConns), err)
		}
	}
}

// TestRxShardsLoopback: a device opened with RxShards 4 on loopback
// receives the traffic of several QPs (each sending from its own source
// port) through more than one socket, and every QP's stream is intact.
func TestRxShardsLoopback(t *testing.T) {
	ip := testaddr.Next()
	ip2 := testaddr.Next()
	da := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip, RxShards: 4}})
	db := openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip2, RxShards: 4}})
	const qps, n, slot = 8, 8, 4 << 10
	o := connOpts{timeout: 14, retry: 7, rnrRetry: 7, minRNR: 1}
	for range qps {
		a, b := newEnd(t, da, verbs.QPTypeRC, n*slot), newEnd(t, db, verbs.QPTypeRC, n*slot)
		connect(t, a, b, o)
		connect(t, b, a, o)
		shardStream(t, a, b, n, slot)
	}
	used := 0
	for _, k := range rxe.ShardDatagrams(db) {
		if k > 0 {
			used++
		}
	}
	// 8 flows over 4 shards all on one: probability 4^-7.
	if used < 2 {
		t.Fatalf("receive shards used: %v", rxe.ShardDatagrams(db))
	}
}
