//go:build linux

package rxe_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"softib/internal/e2etest"
	"softib/internal/netns"
	"softib/rxe"
	"softib/verbs"
)

// TestNetnsNetem runs RC traffic between two namespaces joined by a veth
// with netem-style loss 10%, duplication and reordering: the real kernel
// path, with IPv6 (ICRC verified on receive) and IPv4.
func TestNetnsNetem(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) {
			// The relay applies the impairments (this kernel may lack sch_netem);
			// packets still cross the kernel stack through TAP devices.
			p := netns.NewPair(t, netns.PairConfig{Relay: true, Seed: 7})
			if v6 && !p.A.Addr6.IsValid() {
				t.Skip("no IPv6 in the namespaces")
			}
			open := func(n *netns.Node) *rxe.Device {
				addr := n.Addr
				if v6 {
					addr = n.Addr6
				}
				// The default socket configuration (GRO on), as Open makes it.
				s := e2etest.ListenUDP(t, n.Do, netip.AddrPortFrom(addr, rxe.RoCEv2Port))
				return openDev(t, rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr, NetMTU: n.MTU}, Conn: s})
			}
			da, db := open(p.A), open(p.B)
			a, b := newEnd(t, da, verbs.QPTypeRC, 1<<20), newEnd(t, db, verbs.QPTypeRC, 1<<20)
			o := connOpts{timeout: 14, retry: 7, rnrRetry: 7, minRNR: 1}
			connect(t, a, b, o)
			connect(t, b, a, o)
			impair := netns.Netem{Loss: 10, Duplicate: 5, Reorder: 10, Delay: 2 * time.Millisecond}
			for _, s := range []netns.Side{netns.A, netns.B} {
				if err := p.SetNetem(s, impair); err != nil {
					t.Fatalf("netem: %v", err)
				}
			}
			fill(a.buf, 3)
			fill(b.buf, 4)
			b.sync()
			orig := bytes.Clone(b.buf)
			const slot = 32 << 10
			var wrs []verbs.SendWR
			for k := range 8 {
				off := uint64(k * slot)
				n := uint32(1000 + 2000*k)
				wrs = append(wrs,
					verbs.SendWR{ID: uint64(3 * k), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{a.mr.SGE(int(off), int(n))}, RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()},
					verbs.SendWR{ID: uint64(3*k + 1), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{a.mr.SGE(512<<10+int(off), int(n))}, RemoteAddr: b.mr.Addr() + 512<<10 + off, RKey: b.mr.RKey()},
					verbs.SendWR{ID: uint64(3*k + 2), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{a.mr.SGE(int(off), int(n))}})
				postRecv(t, b, verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{b.mr.SGE(256<<10+int(off), slot)}})
			}
			post(t, a, wrs...)
			for k, wc := range waitWC(t, a.cq, len(wrs)) {
				if wc.WRID != uint64(k) || wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %d: %+v", k, wc)
				}
			}
			waitWC(t, b.cq, 8)
			b.sync()
			for k := range 8 {
				off := k * slot
				n := 1000 + 2000*k
				if !bytes.Equal(b.buf[off:off+n], a.buf[off:off+n]) || !bytes.Equal(b.buf[256<<10+off:256<<10+off+n], a.buf[off:off+n]) ||
					!bytes.Equal(a.buf[512<<10+off:512<<10+off+n], orig[512<<10+off:512<<10+off+n]) {
					t.Fatalf("message %d: data differs", k)
				}
			}
			st := da.Stats()
			t.Logf("a: retries %d, seq NAKs %d, ICRC errors %d; b: dup %d, out of seq %d, ICRC IPv4 IDs recovered %d",
				st["CompRetry"], st["RcvSeqErr"], st["ICRCErr"], db.Stats()["DupReq"], db.Stats()["OutOfSeqReq"], db.Stats()["ICRCIPv4ID"])
		})
	}
}
