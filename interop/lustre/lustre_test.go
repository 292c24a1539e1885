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
		// Other messages beside the push in one TCP segment: timing.
		{wsErr, "0,1", "0", "0x5,0x8000000000000000", true},
		{wsErr, "2,1,3", "0,0", "0x8000000000000000,0x8000000000000000", true},
		{wsErr, "1,1", "0", "0x8000000000000000", false}, // lists that do not pair
	} {
		if got := PushFrame(c.errs, c.types, c.ptls, c.mbits); got != c.want {
			t.Errorf("PushFrame(%q, %q, %q, %q) = %v, want %v", c.errs, c.types, c.ptls, c.mbits, got, c.want)
		}
	}
}

func TestFrameMsgs(t *testing.T) {
	// As Wireshark 4.0 lists them: portals for PUTs and GETs, match bits
	// for ACKs, PUTs and GETs, nothing for REPLYs.
	msgs, ok := FrameMsgs("0,1,3,2", "51,0", "0x7,0x2,0x8000000000000000")
	want := []Msg{{Type: "0"}, {Type: "1", Portal: "51", Bits: 2}, {Type: "3"}, {Type: "2", Portal: "0", Bits: pingMatchBits}}
	if !ok || len(msgs) != len(want) {
		t.Fatalf("FrameMsgs = %v, %v", msgs, ok)
	}
	for i := range want {
		if msgs[i] != want[i] {
			t.Errorf("message %d: %+v, want %+v", i, msgs[i], want[i])
		}
	}
	for _, c := range [][3]string{{"1,1", "52", "0x1,0x2"}, {"0,1", "52", "0x1"}, {"1", "52", "junk"}} {
		if _, ok := FrameMsgs(c[0], c[1], c[2]); ok {
			t.Errorf("FrameMsgs(%q, %q, %q) paired", c[0], c[1], c[2])
		}
	}
}

func TestSelftestFrame(t *testing.T) {
	wsErr := []string{"Capture:144 offset:96 (length:0) msg_type:1 ib_type:00"}
	exc := []string{"Malformed Packet (Exception occurred)"}
	for _, c := range []struct {
		errs               []string
		types, ptls, mbits string
		replies, want      bool
	}{
		{wsErr, "1", "51", "0x1", false, true},
		{exc, "2", "52", "0x1", false, true},
		{wsErr, "0,1", "52", "0x2,0x1", false, true},                  // an ACK in the same segment
		{wsErr, "1,2", "51,0", "0x1,0x8000000000000000", false, true}, // and a ping GET
		{wsErr, "1,1", "51,0", "0x1,0x8000000000000000", false, true}, // and a push
		{wsErr, "1,1", "51,12", "0x1,0x1", false, false},              // a PUT to another portal may be the one
		{wsErr, "3", "", "", false, false},
		{wsErr, "3", "", "", true, true},
		{wsErr, "0", "", "", true, false},
		{[]string{"something else"}, "1", "51", "0x1", false, false},
		{nil, "1", "51", "0x1", false, false},
	} {
		if got := SelftestFrame(c.errs, c.types, c.ptls, c.mbits, c.replies); got != c.want {
			t.Errorf("SelftestFrame(%q, %q, %q, %q, %v) = %v, want %v", c.errs, c.types, c.ptls, c.mbits, c.replies, got, c.want)
		}
	}
}
