//go:build linux

package mckey_test

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/rdmacm"
	"softib/rxe"
	"softib/tools/mckey"
	"softib/verbs"
)

// lineWriter collects output and reports when a line with want shows.
type lineWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.seen != nil && strings.Contains(w.b.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

func (w *lineWriter) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.b.String() }

// TestMckeyNetns runs the mckey receiver and sender, two connections
// each, in two network namespaces: every message of every connection
// arrives over the kernel's IP multicast, and the output has mckey's
// lines.
func TestMckeyNetns(t *testing.T) {
	p := netns.NewPair(t, netns.PairConfig{})
	// Datagrams are not retransmitted: wait until the link carries
	// traffic (a fresh veth drops what it is given until linkwatch has
	// activated its queue, up to a second later, longer under load).
	testenv.RequireTool(t, "ping")
	if out, err := p.A.Command("ping", "-c", "1", "-w", "20", p.B.Addr.String()).CombinedOutput(); err != nil {
		t.Fatalf("ping %v: %v\n%s", p.B.Addr, err, out)
	}
	open := func(n *netns.Node, addr netip.Addr) *rdmacm.Manager {
		var d verbs.Device
		if err := n.Do(func() (err error) {
			d, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		m := rdmacm.NewManager(rdmacm.Config{})
		t.Cleanup(func() { m.Close() })
		if err := m.AddDevice(d); err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := open(p.A, p.A.Addr), open(p.B, p.B.Addr)
	group := netip.MustParseAddr("239.77.0.9")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rout := &lineWriter{want: "receiving data transfers", seen: make(chan struct{})}
	seen := rout.seen
	type result struct {
		r   mckey.Result
		err error
	}
	rc := make(chan result, 1)
	go func() {
		r, err := mckey.Run(ctx, mb, mckey.Config{Group: group, Bind: p.B.Addr, Connections: 2, Count: 20, Size: 300, Pause: -1, Out: rout})
		rc <- result{r, err}
	}()
	select {
	case <-seen:
	case r := <-rc:
		t.Fatalf("receiver ended early: %+v %v\n%s", r.r, r.err, rout)
	}
	var sout strings.Builder
	sr, err := mckey.Run(ctx, ma, mckey.Config{Group: group, Bind: p.A.Addr, Sender: true, Connections: 2, Count: 20, Size: 300, Pause: -1, Out: &sout})
	if err != nil || sr.Sent != 40 || sr.Joined != 2 {
		t.Fatalf("sender: %+v %v\n%s", sr, err, sout.String())
	}
	r := <-rc
	if r.err != nil || r.r.Received != 40 || r.r.Joined != 2 {
		t.Fatalf("receiver: %+v %v\n%s", r.r, r.err, rout)
	}
	for _, want := range []string{"mckey: starting server", "mckey: joined dgid: ::ffff:239.77.0.9 mlid 0x0 sl 0", "data transfers complete", "return status 0"} {
		if !strings.Contains(rout.String(), want) {
			t.Errorf("receiver output lacks %q:\n%s", want, rout)
		}
	}
	if !strings.Contains(sout.String(), "initiating data transfers") {
		t.Errorf("sender output:\n%s", sout.String())
	}
}
