//go:build linux

package lnetd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"softib/internal/netemu"
	"softib/internal/testenv"
)

// TestE2EO2IBLoss: two lnetd processes in namespaces behind netemu's
// router, which drops 10% of the RoCEv2 datagrams (UDP 4791: data,
// ACKs and CM MADs) both ways. PUTs and GETs of 0 B .. 1 MiB both ways
// each either complete with verified data (RC retransmission recovered)
// or fail with an error event: never a success with wrong data, never a
// hang. Once the link heals, transfers succeed again.
func TestE2EO2IBLoss(t *testing.T) {
	testenv.RequireRoot(t)
	// Parallel with the other multi-process o2ib tests: each has its own
	// namespaces and processes, and most of the time is spent waiting.
	t.Parallel()
	r := netemu.New(t, netemu.Config{NoIPv6: true, Seed: 6})
	var nodes []*procNode
	for i, h := range []*netemu.Host{r.A, r.B} {
		// Short LND and LNet timeouts bound every failure well inside
		// the hang guard.
		yaml := o2ibNSYAML(h.Dev, 16, 128, "              timeout: 10\n")
		// Aliveness off: after a failure LNet would refuse all but one
		// message a second to the peer it reported down, and every
		// operation here is meant to try the lossy link.
		yaml = strings.Replace(yaml, "              credits: 128\n", "              credits: 128\n              peer_timeout: 0\n", 1)
		nodes = append(nodes, startProc(t, fmt.Sprintf("ns%d", i), h.Addr.String(), yaml, "ip", "netns", "exec", h.Name))
	}
	a, b := nodes[0], nodes[1]
	o2ibPutGet(t, a, b, 4096, 0, 1) // clean path first
	r.SetImpairment(netemu.Both, netemu.Impairment{Loss: 0.10, Match: netemu.Filter{Proto: 17, Port: 4791}})
	var ok, failed int
	seed := 100
	for _, size := range []int{0, 4096, 64 << 10, 1 << 20} {
		for _, dir := range [][2]*procNode{{a, b}, {b, a}} {
			from, to := dir[0], dir[1]
			seed++
			slot := seed % 4
			code, p, _ := xfer(t, from, "put", ib(to), size, slot, seed, 20*time.Second)
			if code != 0 {
				failed++
				failedWithEvent(t, fmt.Sprintf("%s→%s PUT %d B", from.name, to.name, size), code, p)
				t.Logf("%s→%s PUT %d B failed: %v", from.name, to.name, size, p.Get("error"))
				continue
			}
			ok++
			if n, crc := slotCRC(t, to, slot); n != int64(size) || crc != p.Get("crc32") {
				t.Fatalf("%s→%s PUT %d B succeeded but the receiver holds %d B crc %v, sender crc %v",
					from.name, to.name, size, n, crc, p.Get("crc32"))
			}
			code, g, _ := xfer(t, from, "get", ib(to), size, slot, 0, 20*time.Second)
			if code != 0 {
				failed++
				failedWithEvent(t, fmt.Sprintf("%s→%s GET %d B", from.name, to.name, size), code, g)
				t.Logf("%s→%s GET %d B failed: %v", from.name, to.name, size, g.Get("error"))
				continue
			}
			ok++
			if g.Get("crc32") != p.Get("crc32") || g.Get("bytes") != int64(size) {
				t.Fatalf("%s→%s GET %d B succeeded with wrong data:\n%s", from.name, to.name, size, YAML(g))
			}
		}
	}
	s := r.Stats()
	t.Logf("under 10%% loss: %d operations succeeded with verified data, %d failed with an error event", ok, failed)
	t.Logf("router A→B dropped %d, B→A dropped %d", s.AtoB.Dropped, s.BtoA.Dropped)
	if s.AtoB.Dropped == 0 || s.BtoA.Dropped == 0 {
		t.Errorf("the impairment did not bite: %+v", s)
	}
	// Healed, the nodes move verified data again (a connection that
	// failed under loss is replaced on demand).
	r.SetImpairment(netemu.Both, netemu.Impairment{})
	waitUntil(t, "a verified PUT after the link healed", func() bool {
		code, p, _ := xfer(t, a, "put", ib(b), 1<<20, 3, 999, 20*time.Second)
		if code != 0 {
			return false
		}
		n, crc := slotCRC(t, b, 3)
		return n == 1<<20 && crc == p.Get("crc32")
	})
	o2ibPutGet(t, b, a, 1<<20, 2, 1000)
}
