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

// TestE2ENetemuImpaired runs two lnetd processes in two network
// namespaces joined by netemu's userspace router, which delays (5 ms ±
// 2 ms), drops (5%), reorders (10%) and duplicates (2%) the TCP segments
// in both directions. lnet ping and lnetctl test put/get against the
// echo test service, up to 1 MiB in both directions, all complete with
// matching CRCs: the kernels' TCP recovers and LNet sees no errors.
func TestE2ENetemuImpaired(t *testing.T) {
	testenv.RequireRoot(t)
	r := netemu.New(t, netemu.Config{NoIPv6: true, Seed: 988})
	var nodes []*procNode
	for i, h := range []*netemu.Host{r.A, r.B} {
		yaml := fmt.Sprintf("net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              0: %s\n"+
			"global:\n    accept_port: 988\n    accept: all\n    transaction_timeout: 30\n", h.Dev)
		nodes = append(nodes, startProc(t, fmt.Sprintf("ns%d", i), h.Addr.String(), yaml, "ip", "netns", "exec", h.Name))
	}
	putGet(t, nodes[0], nodes[1], 4096, 0, 1) // clean path first
	r.SetImpairment(netemu.Both, netemu.Impairment{
		Delay: 5 * time.Millisecond, Jitter: 2 * time.Millisecond,
		Loss: 0.05, Reorder: 0.10, Duplicate: 0.02,
	})
	code, out, errs := run(t, "lnet", "ping", nodes[1].nid, "--socket", nodes[0].sock, "-c", "5", "-i", "10ms", "--timeout", "20s")
	if code != 0 || !strings.Contains(out, "5 replies") {
		t.Errorf("ping over the impaired path: %d\n%s%s", code, out, errs)
	}
	for i, size := range []int{0, 100, 8192, 300000, 1 << 20, 1 << 20} {
		putGet(t, nodes[i%2], nodes[(i+1)%2], size, i%4, 10+i)
	}
	for _, n := range nodes {
		if st := n.doc("stats", "show").Get("statistics").(Map); st.Get("errors") != int64(0) {
			t.Errorf("%s: errors over an impaired path TCP should hide:\n%s", n.name, YAML(st))
		}
	}
	s := r.Stats()
	t.Logf("router A→B %+v", s.AtoB)
	t.Logf("router B→A %+v", s.BtoA)
	for _, d := range []struct {
		name string
		s    netemu.DirStats
	}{{"A→B", s.AtoB}, {"B→A", s.BtoA}} {
		if d.s.Dropped == 0 || d.s.Reordered == 0 || d.s.Duplicated == 0 {
			t.Errorf("%s: impairment did not bite: dropped %d reordered %d duplicated %d",
				d.name, d.s.Dropped, d.s.Reordered, d.s.Duplicated)
		}
	}
}
