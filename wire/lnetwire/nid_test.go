package lnetwire_test

import (
	"errors"
	"testing"

	"softib/wire/lnetwire"
)

func TestParseNID(t *testing.T) {
	valid := []struct {
		in   string
		want lnetwire.NID
		str  string // canonical form ("" = in)
	}{
		{"192.168.1.1@tcp", 0x00020000C0A80101, ""},
		{"10.0.0.1@o2ib1", 0x000500010A000001, ""},
		{"0@lo", 0x0009000000000000, ""},
		{"192.168.1.2@tcp0", 0x00020000C0A80102, "192.168.1.2@tcp"},
		{"10.0.0.1@o2ib3", 0x000500030A000001, ""},
		{"255.255.255.255@tcp65535", 0x0002FFFFFFFFFFFF, ""},
		{"0.0.0.0@tcp", 0x0002000000000000, ""},
		{"12@gni", 0x000D00000000000C, ""},
		{"4294967295@kfi7", 0x00100007FFFFFFFF, ""},
		{"1.2.3.4@efa", 0x0012000001020304, ""},
		{"1.2.3.4@gip2", 0x000E000201020304, ""},
		{"5@ptlf", 0x000F000000000005, ""},
		{"9@bxi3f", 0x0013000000000009, ""},
		{"<?>", lnetwire.NIDAny, ""},
		{"*", lnetwire.NIDAny, "<?>"},
	}
	for _, c := range valid {
		got, err := lnetwire.ParseNID(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseNID(%q) = %#x, %v; want %#x", c.in, uint64(got), err, uint64(c.want))
			continue
		}
		want := c.str
		if want == "" {
			want = c.in
		}
		if s := got.String(); s != want {
			t.Errorf("String(%#x) = %q, want %q", uint64(got), s, want)
		}
	}
	invalid := []string{
		"", "@", "192.168.1.1", "192.168.1.1@", "@tcp", "192.168.1.1@tcpx", "192.168.1.1@foo",
		"192.168.1@tcp", "192.168.1.1.1@tcp", "256.1.1.1@tcp", "01.1.1.1@tcp", "1.1.1.1@tcp65536",
		"1.1.1.1@tcp01", "a.b.c.d@tcp", "1@lo", "x@lo", "-1@gni", "4294967296@gni", "012@gni",
		"1.1.1.1 @tcp", "1.1.1.1@tcp ", "1..1.1@tcp", "1.1.1.1@123",
	}
	for _, s := range invalid {
		n, err := lnetwire.ParseNID(s)
		if err == nil {
			t.Errorf("ParseNID(%q) = %v, want error", s, n)
			continue
		}
		var ne *lnetwire.NIDError
		if !errors.Is(err, lnetwire.ErrBadNID) || !errors.As(err, &ne) || ne.Reason == "" {
			t.Errorf("ParseNID(%q) error %v is not a descriptive NIDError", s, err)
		}
	}
}

func TestNetAndNIDParts(t *testing.T) {
	n := lnetwire.MustParseNID("10.0.0.1@o2ib1")
	if n.Net() != lnetwire.MakeNet(lnetwire.O2IBLND, 1) || n.Addr() != 0x0A000001 || n.Net().Type() != lnetwire.O2IBLND || n.Net().Num() != 1 {
		t.Fatalf("parts of %v wrong", n)
	}
	for _, s := range []string{"tcp", "@tcp1", "o2ib3", "lo"} {
		net, err := lnetwire.ParseNet(s)
		if err != nil {
			t.Fatalf("ParseNet(%q): %v", s, err)
		}
		t.Logf("%s -> %v (%#x)", s, net, uint32(net))
	}
	if s := lnetwire.MakeNet(7, 2).String(); s != "<7:2>" {
		t.Errorf("unknown net prints %q", s)
	}
	if s := lnetwire.MakeNID(lnetwire.MakeNet(7, 2), 255).String(); s != "0xff@<7:2>" {
		t.Errorf("unknown NID prints %q", s)
	}
	if !lnetwire.NIDLo0.Valid() || lnetwire.NIDAny.Valid() || lnetwire.NID(1<<60).Valid() {
		t.Error("Valid wrong")
	}
}

func TestProcessID(t *testing.T) {
	cases := []struct {
		in   string
		want lnetwire.ProcessID
		str  string
	}{
		{"12345-10.0.0.1@tcp", lnetwire.ProcessID{NID: lnetwire.MustParseNID("10.0.0.1@tcp"), PID: lnetwire.PIDLustre}, ""},
		{"10.0.0.1@tcp", lnetwire.ProcessID{NID: lnetwire.MustParseNID("10.0.0.1@tcp"), PID: lnetwire.PIDLustre}, "12345-10.0.0.1@tcp"},
		{"988u-0@lo", lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: 988 | lnetwire.PIDUserFlag}, ""},
		{"*-0@lo", lnetwire.ProcessID{NID: lnetwire.NIDLo0, PID: lnetwire.PIDAny}, ""},
	}
	for _, c := range cases {
		got, err := lnetwire.ParseProcessID(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseProcessID(%q) = %v, %v", c.in, got, err)
		}
		want := c.str
		if want == "" {
			want = c.in
		}
		if got.String() != want {
			t.Errorf("String = %q, want %q", got.String(), want)
		}
	}
	if !(988 | lnetwire.PIDUserFlag).IsUser() || lnetwire.PIDLustre.IsUser() || lnetwire.PIDAny.IsUser() {
		t.Error("IsUser wrong")
	}
	for _, s := range []string{"x-0@lo", "12-", "-0@lo", "2147483648u-0@lo"} {
		if _, err := lnetwire.ParseProcessID(s); err == nil {
			t.Errorf("ParseProcessID(%q) accepted", s)
		}
	}
}
