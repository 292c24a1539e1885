//go:build linux

package rxe_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"softib/internal/tsharktest"
	"softib/interop/vm"
	"softib/interop/vmtest"
	"softib/rxe"
	"softib/tools/perftest"
	"softib/verbs"
)

// guestRxeCounters reads the guest rxe0's hw_counters (what `rdma
// statistic` shows).
func guestRxeCounters(ctx context.Context, t *testing.T, v *vm.VM) map[string]uint64 {
	t.Helper()
	r, err := v.Run(ctx, "hw_counters", "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *", 30*time.Second)
	if err != nil || r.Code != 0 {
		t.Fatalf("guest hw_counters: %v rc %d %s", err, r.Code, r.Stderr)
	}
	m := map[string]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		k, val, ok := strings.Cut(l, ":")
		if n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64); ok && err == nil {
			m[k] = n
		}
	}
	if len(m) == 0 {
		t.Fatalf("no guest hw_counters: %q", r.Stdout)
	}
	return m
}

// TestECNInteropKernelRxe: softib with ECN on against Linux 6.1 rxe
// (which has no congestion signalling) in the QEMU guest. ib_write_bw
// runs both ways (perftest's TCP exchange; softib's client, then the
// guest's), the second time with 5% of softib's packets CE-marked on the
// link (nftables in the tap's namespace), as a congested router would.
// Kernel rxe must keep working: both runs complete and its hw_counters
// show no error (retransmissions after TCG stalls are logged). On the wire softib's RoCEv2 packets carry ECT(0) (DSCP
// 0 kept) and the guest's none (its traffic class is 0, so no router
// would mark them): softib receives no CE and sends no CNP, and kernel
// rxe, which ignores ECN, sends none either.
func TestECNInteropKernelRxe(t *testing.T) {
	ctx, v := vmtest.Boot(t, "ECN interop with kernel rxe", "sibecn", 8*time.Minute)
	if v == nil {
		return
	}
	host, guest := netip.MustParseAddr(v.HostIP()), netip.MustParseAddr(v.GuestIP())
	var dv verbs.Device
	inNetns(t, v.Namespace(), func() (err error) {
		dv, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: host}, ECN: rxe.ECNConfig{Enable: true}})
		return err
	})
	t.Cleanup(func() { dv.Close() })
	dev := dv.(*rxe.Device)
	pcapPath := filepath.Join(t.TempDir(), "ecn-guest.pcap")
	capt, err := v.Capture(ctx, pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	defer capt.Stop()
	before := guestRxeCounters(ctx, t, v)

	const iters, size = 1000, 65536
	cfg := perftest.Config{Test: perftest.WriteBW, GIDIndex: -1, Iters: iters, Size: size}
	guestCmd := func(port int) string {
		return fmt.Sprintf("ib_write_bw -d rxe0 -F -x 1 -p %d -n %d -s %d", port, iters, size)
	}
	runOnce := func(name string, run func() (vm.Result, error)) {
		r, err := vmtest.RetryPerftestClock(t, func() (vm.Result, error) {
			r, err := run()
			t.Logf("%s: guest rc %d\n%s\n%s", name, r.Code, r.Stdout, r.Stderr)
			return r, err
		})
		if err != nil || r.Code != 0 {
			t.Fatalf("%s: guest side: %v rc %d", name, err, r.Code)
		}
	}

	// 1. Guest server, softib client (softib sends the data).
	runOnce("softib → kernel rxe", func() (vm.Result, error) {
		c := cfg
		c.TCPPort = 18700
		job, err := v.Go("perf_server", guestCmd(c.TCPPort), 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		c.Host, c.Out = guest.String(), &out
		var rows []perftest.Row
		for try := 0; try < 50; try++ { // the guest's server needs a moment to listen
			inNetns(t, v.Namespace(), func() error { rows, err = perftest.Run(ctx, dev, c); return nil })
			if err == nil || !strings.Contains(err.Error(), "couldn't connect") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		r, werr := job.Wait(ctx)
		if err != nil || len(rows) == 0 || rows[0].Iters == 0 {
			t.Fatalf("softib client: %v rows %+v\n%s", err, rows, out.String())
		}
		return r, werr
	})

	// 2. softib server, guest client, with 5% of softib's packets (its
	// ACKs now) CE-marked towards the guest.
	rules := "table ip softib_ecn {\n chain out {\n  type filter hook output priority 0; policy accept;\n" +
		"  udp dport 4791 ip ecn ect0 numgen random mod 100 < 5 counter ip ecn set ce\n }\n}\n"
	nft := exec.Command("ip", "netns", "exec", v.Namespace(), "nft", "-f", "-")
	nft.Stdin = strings.NewReader(rules)
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	runOnce("kernel rxe → softib, CE marks towards the guest", func() (vm.Result, error) {
		c := cfg
		c.TCPPort = 18701
		var ln net.Listener
		inNetns(t, v.Namespace(), func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(host, uint16(c.TCPPort)).String())
			return err
		})
		defer ln.Close()
		var out bytes.Buffer
		c.Out, c.Listener = &out, ln
		type res struct {
			rows []perftest.Row
			err  error
		}
		done := make(chan res, 1)
		sctx, stop := context.WithTimeout(ctx, 3*time.Minute)
		defer stop()
		go func() {
			rows, err := perftest.Run(sctx, dev, c)
			done <- res{rows, err}
		}()
		r, err := v.Run(ctx, "perf_client", guestCmd(c.TCPPort)+" "+host.String(), 3*time.Minute)
		if err != nil || r.Code != 0 {
			stop()
		}
		s := <-done
		if s.err != nil || len(s.rows) == 0 || s.rows[0].Iters == 0 {
			t.Errorf("softib server: %v rows %+v\n%s", s.err, s.rows, out.String())
		}
		return r, err
	})
	marked := exec.Command("ip", "netns", "exec", v.Namespace(), "nft", "list", "table", "ip", "softib_ecn")
	mo, _ := marked.CombinedOutput()
	t.Logf("marking rule after the run:\n%s", mo)

	after := guestRxeCounters(ctx, t, v)
	for k, a := range after {
		d := a - before[k]
		t.Logf("guest rxe0 %s: +%d", k, d)
		// completer_retry_err counts the requester's retransmissions,
		// which TCG's stalls cause now and then (a timeout, the peer
		// answers the duplicate): recovered, not errors. Every other
		// error counter must stay where it was.
		if (strings.HasSuffix(k, "_err") && k != "completer_retry_err" || k == "link_downed") && d != 0 {
			t.Errorf("guest rxe0 %s rose by %d", k, d)
		}
	}
	if after["rcvd_pkts"] == before["rcvd_pkts"] || after["sent_pkts"] == before["sent_pkts"] {
		t.Fatalf("guest counters did not move: %v → %v", before, after)
	}
	st := dev.Stats()
	t.Logf("softib: %v", st)
	if st["NPECNMarked"] != 0 || st["NPCNPSent"] != 0 || st["RPCNPHandled"] != 0 || st["RPCNPIgnored"] != 0 || st["ICRCErr"] != 0 {
		t.Fatalf("softib counters: marked %d, CNPs sent %d handled %d ignored %d, ICRC errors %d",
			st["NPECNMarked"], st["NPCNPSent"], st["RPCNPHandled"], st["RPCNPIgnored"], st["ICRCErr"])
	}

	capt.Stop()
	rows := tsharktest.Fields(t, pcapPath, []string{"ip.src", "ip.dsfield.ecn", "infiniband.bth.opcode"}, "-Y", "infiniband")
	var fromHost, ce, fromGuest, cnps int
	for _, r := range rows {
		switch netip.MustParseAddr(r[0]) {
		case host:
			fromHost++
			switch r[1] {
			case "2":
			case "3":
				ce++
			default:
				t.Fatalf("softib packet with ECN %s: %q", r[1], r)
			}
		case guest:
			fromGuest++
			if r[1] != "0" {
				t.Fatalf("kernel rxe packet with ECN %s: %q", r[1], r)
			}
		}
		if r[2] == "129" {
			cnps++
		}
	}
	t.Logf("capture: %d softib packets (%d CE), %d kernel rxe packets, %d CNPs", fromHost, ce, fromGuest, cnps)
	if fromHost == 0 || fromGuest == 0 || ce == 0 || cnps != 0 {
		t.Fatalf("capture: %d softib packets (%d CE), %d kernel rxe packets, %d CNPs", fromHost, ce, fromGuest, cnps)
	}
}
