package devsel_test

import (
	"io"
	"strings"
	"testing"

	"softib/internal/testaddr"
	"softib/rxe"
	"softib/tools/devsel"
)

// TestECNFlag: --ecn opens a Soft-RoCE device with congestion signalling
// (its counters include np_cnp_sent) and is refused for another
// provider.
func TestECNFlag(t *testing.T) {
	o := devsel.NewOptions()
	fs := devsel.NewFlagSet("t", io.Discard)
	o.Register(fs, -1, "g")
	if _, err := devsel.ParseArgs(fs, []string{"--ecn", "--addr", testaddr.Next().String(), "--udp-port", "0"}); err != nil {
		t.Fatal(err)
	}
	if !o.ECN {
		t.Fatal("--ecn not parsed")
	}
	d, err := o.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if c := d.(*rxe.Device).ECN(); !c.Enable || c.MinTimeBetweenCNPs == 0 {
		t.Fatalf("device ECN config %+v", c)
	}
	found := false
	for _, c := range d.(*rxe.Device).Counters() {
		found = found || c.Name == "np_cnp_sent"
	}
	if !found {
		t.Fatal("no np_cnp_sent counter")
	}
	o.Provider = "ibverbs"
	if _, err := o.Open(); err == nil || !strings.Contains(err.Error(), "ibverbs") {
		t.Fatalf("--ecn with another provider: %v", err)
	}
}
