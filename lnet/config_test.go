package lnet_test

import (
	"errors"
	"slices"
	"testing"

	"softib/lnet"
	"softib/wire/lnetwire"
)

func TestParseNetworks(t *testing.T) {
	got, err := lnet.ParseNetworks("o2ib0(ib0),tcp0(eth0, eth1)[0,1], tcp2, o2ib3[2]")
	if err != nil {
		t.Fatal(err)
	}
	want := []lnet.NetConfig{
		{Net: lnetwire.MakeNet(lnetwire.O2IBLND, 0), Interfaces: []string{"ib0"}},
		{Net: lnetwire.MakeNet(lnetwire.SOCKLND, 0), Interfaces: []string{"eth0", "eth1"}},
		{Net: lnetwire.MakeNet(lnetwire.SOCKLND, 2)},
		{Net: lnetwire.MakeNet(lnetwire.O2IBLND, 3)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].Net != want[i].Net || !slices.Equal(got[i].Interfaces, want[i].Interfaces) {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", "tcp0(eth0", "tcp0()", "foo0(eth0)", "tcp0(eth0)x", "tcp,,o2ib", "tcp0(eth0,)"} {
		if _, err := lnet.ParseNetworks(bad); err == nil {
			t.Errorf("ParseNetworks(%q) accepted", bad)
		} else if !errors.Is(err, lnet.ErrInvalid) && !errors.Is(err, lnetwire.ErrBadNID) {
			t.Errorf("ParseNetworks(%q): untyped error %v", bad, err)
		}
	}
}
