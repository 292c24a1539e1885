//go:build linux

package lnetd

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
)

// lustre217Export is what Lustre 2.17's lnetctl export writes for the
// lnd tunables of a default node's tcp and o2ib NIs (ksocknal_nl_get,
// kiblnd_nl_get: map_on_demand is a netlink flag printed "true", timeout
// the module's, tos -1 unset), with the NI keys import ignores.
const lustre217Export = `net:
    - net type: tcp
      local NI(s):
        - nid: 10.0.0.1@tcp
          status: up
          interfaces:
              0: eth0
          tunables:
              peer_timeout: 180
              peer_credits: 8
              peer_buffer_credits: 0
              credits: 256
          lnd tunables:
              conns_per_peer: 1
              timeout: 50
              tos: -1
          dev cpt: -1
          CPT: "[0]"
    - net type: o2ib
      local NI(s):
        - nid: 10.1.0.1@o2ib
          status: up
          interfaces:
              0: ib0
          tunables:
              peer_timeout: 180
              peer_credits: 8
              peer_buffer_credits: 0
              credits: 256
          lnd tunables:
              peercredits_hiw: 4
              map_on_demand: true
              concurrent_sends: 8
              fmr_pool_size: 512
              fmr_flush_trigger: 384
              fmr_cache: 1
              ntx: 512
              conns_per_peer: 1
              timeout: 50
              tos: -1
          dev cpt: -1
          CPT: "[0]"
`

// TestLustre217ExportLoads: a default Lustre 2.17 node's exported lnd
// tunables load, and mean what they mean there: the tcp timeout is
// sock_timeout, map_on_demand is on, the FMR settings drive o2iblnd's
// MR cache, tos -1 sets no type of service.
func TestLustre217ExportLoads(t *testing.T) {
	c, err := ParseConfig([]byte(lustre217Export))
	if err != nil {
		t.Fatal(err)
	}
	tcp, ib := c.Nets[0].NIs[0].LNDTunables, c.Nets[1].NIs[0].LNDTunables
	if v, ok := tcp.Get("sock_timeout"); !ok || v != 50 {
		t.Errorf("tcp sock_timeout %d %v, want 50 from timeout", v, ok)
	}
	if _, ok := tcp.Get("timeout"); ok {
		t.Error("tcp timeout stored under its own name")
	}
	if sc := (&Daemon{}).socklndConfig(tcp); sc.SockTimeout != 50*time.Second {
		t.Errorf("socklnd SockTimeout %v", sc.SockTimeout)
	}
	if v, _ := ib.Get("map_on_demand"); v != 1 {
		t.Errorf("map_on_demand %d", v)
	}
	oc := o2ibConfig(ib)
	if oc.MRCacheSize != 512 || oc.MRFlushTrigger != 384 || oc.NoMRCache || oc.TOS != 0 || oc.PeerCreditsHiw != 4 ||
		oc.ConcurrentSends != 8 || oc.NTx != 512 || oc.Timeout != 50*time.Second {
		t.Errorf("o2iblnd config %+v", oc)
	}
	// The same keys through lnetd's own export and back.
	again, err := ParseConfig(c.Marshal())
	if err != nil {
		t.Fatalf("re-import: %v\n%s", err, c.Marshal())
	}
	if v, _ := again.Nets[0].NIs[0].LNDTunables.Get("sock_timeout"); v != 50 {
		t.Errorf("re-imported sock_timeout %d", v)
	}
}

// TestO2IBTunablesDrive: every o2ib lnd tunable reaches o2iblnd.Config.
func TestO2IBTunablesDrive(t *testing.T) {
	c, err := ParseConfig([]byte(o2ibNodeYAML("127.0.0.2", 7988, `              fmr_pool_size: 64
              fmr_flush_trigger: 48
              fmr_cache: 0
              wrq_sge: 4
              ib_mtu: 1024
              tos: 96
`)))
	if err != nil {
		t.Fatal(err)
	}
	oc := o2ibConfig(c.Nets[1].NIs[0].LNDTunables)
	if oc.MRCacheSize != 64 || oc.MRFlushTrigger != 48 || !oc.NoMRCache || oc.WrqSGE != 4 || oc.IBMTU != 1024 || oc.TOS != 96 {
		t.Errorf("o2iblnd config %+v", oc)
	}
}

// TestLNDTunablesRefused: values softib cannot honour are refused, the
// error naming the setting and why.
func TestLNDTunablesRefused(t *testing.T) {
	ni := func(typ, lt string) string {
		return "net:\n    - net type: " + typ + "\n      local NI(s):\n        - interfaces: {0: 127.0.0.2}\n          lnd tunables:\n" + lt
	}
	for _, c := range []struct{ yaml, path, msg string }{
		{ni("o2ib", "              ib_mtu: 1000\n"), "lnd tunables.ib_mtu", "ib_mtu 1000: expected 0, 256"},
		{ni("o2ib", "              wrq_sge: 0\n"), "lnd tunables.wrq_sge", "out of range"},
		{ni("o2ib", "              tos: 256\n"), "lnd tunables.tos", "out of range"},
		{ni("tcp", "              tos: 16\n"), "lnd tunables.tos", "tos 16: softib's socklnd sets no IP TOS"},
		{ni("tcp", "              sock_timeout: 50\n              timeout: 30\n"), "lnd tunables.timeout", "timeout 30 and sock_timeout 50"},
	} {
		_, err := ParseConfig([]byte(c.yaml))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Path, c.path) || !strings.Contains(ce.Msg, c.msg) {
			t.Errorf("%q: %v, want path ~%q message ~%q", c.yaml, err, c.path, c.msg)
		}
	}
	// map_on_demand is obsolete in Lustre 2.17, which loads any value
	// (older lnet.conf files carry fragment counts): so does softib.
	for _, v := range []string{"32", "256", "0", "false", "true"} {
		if _, err := ParseConfig([]byte(ni("o2ib", "              map_on_demand: "+v+"\n"))); err != nil {
			t.Errorf("map_on_demand %s: %v", v, err)
		}
	}
}

// TestO2IBDeviceLimitsRefused: an o2ib NI whose wrq_sge exceeds its
// device's max_sge, or whose ib_mtu is not the device's active MTU, does
// not come up, and lnetd says which setting.
func TestO2IBDeviceLimitsRefused(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&testLogWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, c := range []struct{ lt, want string }{
		{"              wrq_sge: 65536\n", "wrq_sge 65536"},
		{"              ib_mtu: 256\n", "ib_mtu 256"},
	} {
		y := fmt.Sprintf("net:\n    - net type: o2ib\n      local NI(s):\n        - interfaces: {0: %s}\n          lnd tunables:\n%s", testaddr.Next(), c.lt)
		cfg, err := ParseConfig([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(Options{Config: cfg, Log: log})
		if err == nil {
			d.Close()
			t.Errorf("%q: lnetd started", c.lt)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.lt, err, c.want)
		}
	}
}
