package lustre

import (
	"regexp"
	"strings"
	"testing"
)

func TestBadLines(t *testing.T) {
	log := `[    1.0] LNet: Added LNI 192.168.77.2@tcp [8/256/0/180]
[    2.0] LNetError: 120:0:(socklnd_cb.c:1) Connection to 12345-192.168.77.1@tcp reset
[    3.0] LNetError: 121:0:(o2iblnd_cb.c:2) something else
[    4.0] BUG: kernel NULL pointer dereference
[    5.0] loading out-of-tree module taints kernel.`
	got := BadLines(log, nil)
	if len(got) != 3 {
		t.Fatalf("BadLines without allowances = %q", got)
	}
	got = BadLines(log, []*regexp.Regexp{regexp.MustCompile(`socklnd_cb.c.*reset`)})
	if len(got) != 2 || !strings.Contains(got[0], "o2iblnd_cb") || !strings.HasPrefix(got[1], "[    4.0] BUG") {
		t.Fatalf("BadLines with an allowance = %q", got)
	}
}

func TestLnetdConfig(t *testing.T) {
	got := LnetdConfig{Global: "    transaction_timeout: 30"}.Config("192.168.77.1")
	want := `net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: 192.168.77.1
    - net type: o2ib
      local NI(s):
        - interfaces:
              0: 192.168.77.1
global:
    transaction_timeout: 30
`
	if got != want {
		t.Fatalf("Config:\n%s\nwant:\n%s", got, want)
	}
	if y := (LnetdConfig{YAML: "x"}).Config("a"); y != "x" {
		t.Fatalf("YAML override: %q", y)
	}
}

func TestUpScript(t *testing.T) {
	s := upScript("192.168.77.2", []string{"tcp", "o2ib"})
	for _, want := range []string{
		"modprobe $m; done\nlnetctl lnet configure\n",
		"lnetctl net add --net tcp --if eth0 --skip-mr-route-setup\nlnetctl net add --net o2ib --if eth0 --skip-mr-route-setup\nmodprobe lnet_selftest\n",
		"grep -q 'nid: 192.168.77.2@o2ib'",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("upScript lacks %q:\n%s", want, s)
		}
	}
	if q := shellQuote("a b'c"); q != `'a b'\''c'` {
		t.Errorf("shellQuote = %s", q)
	}
}

func TestPushFrame(t *testing.T) {
	wsErr := []string{"Capture:144 offset:96 (length:0) msg_type:1 ib_type:00"}
	for _, c := range []struct {
		errs               []string
		types, ptls, mbits string
		want               bool
	}{
		{wsErr, "1", "0", "0x8000000000000000", true},
		{wsErr, "1,1", "0,0", "0x8000000000000000,0x8000000000000000", true},
		{wsErr, "1", "0", "9223372036854775808", true},
		{wsErr, "1", "52", "0x8000000000000000", false}, // selftest portal
		{wsErr, "1", "0", "0x0000000000000001", false},  // not the ping bits
		{wsErr, "2", "0", "0x8000000000000000", false},  // a ping GET
		{wsErr, "1,1", "0,52", "0x8000000000000000,0x8000000000000000", false},
		{[]string{"Malformed Packet"}, "1", "0", "0x8000000000000000", false},
		{nil, "1", "0", "0x8000000000000000", false},
		{wsErr, "", "", "", false},
	} {
		if got := PushFrame(c.errs, c.types, c.ptls, c.mbits); got != c.want {
			t.Errorf("PushFrame(%q, %q, %q, %q) = %v, want %v", c.errs, c.types, c.ptls, c.mbits, got, c.want)
		}
	}
}
