package lnetd

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"softib/lnet/socklnd"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (-update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestParseLustreExample(t *testing.T) {
	c, err := LoadConfig("testdata/lnet.conf.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nets) != 2 || c.Nets[0].Type != "tcp" || c.Nets[1].Type != "o2ib1" {
		t.Fatalf("nets = %+v", c.Nets)
	}
	ib := c.Nets[1].NIs[0]
	if ib.NID != "172.16.1.4@o2ib1" || ib.Interfaces[0] != "ib0" || ib.CPT != "[0,1]" {
		t.Errorf("o2ib NI = %+v", ib)
	}
	if v, _ := ib.LNDTunables.Get("fmr_flush_trigger"); v != 512 {
		t.Errorf("fmr_flush_trigger = %d, want 512", v)
	}
	if v, _ := ib.Tunables.Get("peer_credits"); v != 128 {
		t.Errorf("peer_credits = %d", v)
	}
	if len(c.Routes) != 1 || c.Routes[0].Gateway != "172.16.1.1@o2ib1" || c.Routes[0].Hop != -1 {
		t.Errorf("routes = %+v", c.Routes)
	}
	if len(c.Peers) != 1 || !c.Peers[0].MultiRail || len(c.Peers[0].NIDs) != 2 {
		t.Errorf("peers = %+v", c.Peers)
	}
	if v, _ := c.Global.Get("accept"); v != 1 {
		t.Errorf("accept = %d, want 1 (all)", v)
	}
	golden(t, "lnet.conf.export.yaml", YAML(c.Doc(true)))
	golden(t, "lnet.conf.export.json", JSON(c.Doc(false)))
}

// TestRoundTrip: parse → emit → parse gives the same Config, and
// emitting again the same bytes, for the minimal and the full form.
func TestRoundTrip(t *testing.T) {
	b, err := os.ReadFile("testdata/lnet.conf.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c1, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	out1 := c1.Marshal()
	c2, err := ParseConfig(out1)
	if err != nil {
		t.Fatalf("reparse: %v\n%s", err, out1)
	}
	if !reflect.DeepEqual(c1, c2) {
		t.Errorf("config changed across a round trip:\n%+v\n%+v", c1, c2)
	}
	if out2 := c2.Marshal(); !bytes.Equal(out1, out2) {
		t.Errorf("emit not stable:\n%s\n---\n%s", out1, out2)
	}
	full := YAML(c1.Doc(true))
	c3, err := ParseConfig(full)
	if err != nil {
		t.Fatalf("reparse full: %v", err)
	}
	if again := YAML(c3.Doc(true)); !bytes.Equal(full, again) {
		t.Errorf("full emit not stable:\n%s\n---\n%s", full, again)
	}
}

func TestEmptyConfig(t *testing.T) {
	for _, s := range []string{"", "# nothing\n", "---\n"} {
		c, err := ParseConfig([]byte(s))
		if err != nil || len(c.Nets) != 0 {
			t.Errorf("%q: %+v, %v", s, c, err)
		}
	}
}

// TestShowOutputImports: the show-only keys lnetctl prints (status,
// statistics, peer credits) are accepted by import.
func TestShowOutputImports(t *testing.T) {
	y := `net:
    - net type: lo
      local NI(s):
        - nid: 0@lo
          status: up
          statistics:
              send_count: 0
          tunables:
              peer_timeout: 0
              peer_credits: 0
              peer_buffer_credits: 0
              credits: 0
          lnd tunables:
          dev cpt: 0
          CPT: "[0]"
    - net type: tcp
      local NI(s):
        - nid: 127.0.0.2@tcp
          status: up
          interfaces:
              0: 127.0.0.2
          tcp bonding: 0
peer:
    - primary nid: 127.0.0.3@tcp
      Multi-Rail: False
      peer state: 0
      peer ni:
        - nid: 127.0.0.3@tcp
          state: up
          max_ni_tx_credits: 8
          refcount: 1
global:
    lnd_timeout: 16
`
	c, err := ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nets) != 2 || c.Nets[1].NIs[0].NID != "127.0.0.2@tcp" || len(c.Peers) != 1 {
		t.Fatalf("%+v", c)
	}
}

func TestBadConfig(t *testing.T) {
	cases := []struct {
		name, yaml string
		line       int
		path, msg  string
	}{
		{"unknown top", "nets:\n  - net type: tcp\n", 1, "nets", `unknown key "nets"`},
		{"unknown NI key", "net:\n    - net type: tcp\n      local NI(s):\n        - interface:\n              0: eth0\n",
			4, "net[0].local NI(s)[0].interface", `unknown key "interface"`},
		{"bad tunable", "net:\n    - net type: tcp\n      local NI(s):\n        - interfaces: {0: eth0}\n          tunables:\n              peer_credits: lots\n",
			6, "net[0].local NI(s)[0].tunables.peer_credits", "not an integer"},
		{"unknown tunable", "net:\n    - net type: tcp\n      local NI(s):\n        - tunables:\n              peer_credit: 8\n",
			5, "tunables.peer_credit", "known here: peer_timeout"},
		{"o2ib tunable on tcp", "net:\n    - net type: tcp\n      local NI(s):\n        - lnd tunables:\n              map_on_demand: 32\n",
			5, "lnd tunables.map_on_demand", "unknown key"},
		{"range", "global:\n    discovery: 2\n", 2, "global.discovery", "out of range"},
		{"accept enum", "global:\n    accept: maybe\n", 2, "global.accept", "secure, all, none"},
		{"bad net", "net:\n    - net type: tcpx\n", 2, "net[0].net type", "not a net"},
		{"missing net type", "net:\n    - local NI(s):\n        - interfaces: {0: eth0}\n", 2, "net[0].net type", "missing"},
		{"nid off net", "net:\n    - net type: tcp1\n      local NI(s):\n        - nid: 10.0.0.1@tcp\n", 4, "local NI(s)[0].nid", "not on net tcp1"},
		{"bad nid", "peer:\n    - primary nid: 10.0.0.1@\n", 2, "peer[0].primary nid", "not a NID"},
		{"iface index", "net:\n    - net type: tcp\n      local NI(s):\n        - interfaces:\n              1: eth0\n",
			5, "interfaces.1", "want 0"},
		{"net not list", "net:\n    net type: tcp\n", 2, "net", "expected a list"},
		{"route without gw", "route:\n    - net: o2ib\n", 2, "route[0]", "gateway"},
		{"bad hop", "route:\n    - net: o2ib\n      gateway: 1.2.3.4@tcp\n      hop: 0\n", 4, "route[0].hop", "out of range"},
		{"multirail", "peer:\n    - primary nid: 1.2.3.4@tcp\n      Multi-Rail: perhaps\n", 3, "Multi-Rail", "True or False"},
		{"duplicate", "global:\n    discovery: 1\n    discovery: 0\n", 3, "global.discovery", "duplicate"},
		{"syntax", "net:\n  - net type: tcp\n    local NI(s): [\n", 0, "", "YAML syntax"},
		{"lo tunables", "net:\n    - net type: lo\n      local NI(s):\n        - lnd tunables:\n              x: 1\n", 5, "lnd tunables", "takes no lnd tunables"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml))
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if tc.line != 0 && ce.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", ce.Line, tc.line, err)
			}
			if !strings.Contains(ce.Path, tc.path) || !strings.Contains(ce.Msg, tc.msg) {
				t.Errorf("error %q: want path ~%q and message ~%q", err, tc.path, tc.msg)
			}
		})
	}
}

func TestConfigErrorText(t *testing.T) {
	e := &ConfigError{File: "lnet.yaml", Line: 7, Path: "global.discovery", Msg: "2 is out of range [0, 1]"}
	if got, want := e.Error(), "lnet.yaml:7: global.discovery: 2 is out of range [0, 1]"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestYAMLQuoting(t *testing.T) {
	doc := Map{}.add("a", "[0]").add("b", "123").add("c", "true").add("d", "0@lo").add("e", "").
		add("f", true).add("g", int64(-1)).add("h", nil).add("i", List{"x", int64(2)})
	got := string(YAML(doc))
	want := "a: \"[0]\"\nb: \"123\"\nc: \"true\"\nd: 0@lo\ne: \"\"\nf: True\ng: -1\nh:\ni:\n    - x\n    - 2\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestMapJSONKeepsOrder(t *testing.T) {
	doc := Map{}.add("z", int64(1)).add("a", Map{}.add("y", "s").add("b", List{int64(3), true, nil}))
	b := JSON(doc)
	var back Map
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(doc, back) {
		t.Errorf("JSON round trip:\n%#v\n%#v", doc, back)
	}
	if back.Path("a", "b", 0) != int64(3) || back.Path("a", "y") != "s" || back.Path("nope", 1) != nil {
		t.Errorf("Path lookups wrong")
	}
}

// FuzzParseConfig: no input panics, and whatever parses re-emits to YAML
// that parses to the same configuration.
func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile("testdata/lnet.conf.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("net:\n    - net type: tcp\n      local NI(s):\n        - interfaces: {0: 127.0.0.2}\n"))
	f.Add([]byte("global:\n    accept: all\n    accept_port: 7000\n"))
	f.Add([]byte("route:\n    - net: o2ib\n      gateway: 1.2.3.4@tcp\n      hop: 3\n"))
	f.Add([]byte("peer:\n    - primary nid: 1.2.3.4@tcp\n      Multi-Rail: True\n      peer ni:\n        - nid: 1.2.3.5@tcp\n"))
	f.Add([]byte("routing:\n    enable: 1\nbuffers:\n    tiny: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		out := c.Marshal()
		c2, err := ParseConfig(out)
		if err != nil {
			t.Fatalf("re-parse of emitted config failed: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(normalize(c), normalize(c2)) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", c, c2, out)
		}
	})
}

// normalize maps nil and empty slices to the same value for comparison.
func normalize(c *Config) *Config {
	n := *c
	n.Nets = nil
	for _, x := range c.Nets {
		y := NetConfig{Type: x.Type}
		for _, ni := range x.NIs {
			if len(ni.Interfaces) == 0 {
				ni.Interfaces = nil
			}
			if len(ni.Tunables) == 0 {
				ni.Tunables = nil
			}
			if len(ni.LNDTunables) == 0 {
				ni.LNDTunables = nil
			}
			y.NIs = append(y.NIs, ni)
		}
		n.Nets = append(n.Nets, y)
	}
	for i := range n.Peers {
		if len(n.Peers[i].NIDs) == 0 {
			n.Peers[i].NIDs = nil
		}
	}
	if len(n.Global) == 0 {
		n.Global = nil
	}
	if len(n.Routing) == 0 {
		n.Routing = nil
	}
	if len(n.Buffers) == 0 {
		n.Buffers = nil
	}
	return &n
}

// TestSocklndTableMatchesParams: every tcp lnd tunable is a ksocklnd
// parameter the driver accepts.
func TestSocklndTableMatchesParams(t *testing.T) {
	for _, k := range socklndTable {
		if k.local || k.alias != "" {
			continue
		}
		var c socklnd.Config
		if err := c.SetParam(k.name, strconv.FormatInt(k.def, 10)); err != nil {
			t.Errorf("%s: %v", k.name, err)
		}
	}
}
