//go:build linux

package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"softib/internal/netns"
	"softib/internal/testenv"
	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
)

// TestLossyLink connects and disconnects repeatedly between two network
// namespaces whose link drops and duplicates packets, over IPv4 and IPv6:
// the IB CM's retransmissions (short timeouts here) and duplicate
// handling must get every connection up and down.
func TestLossyLink(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ping")
	p := netns.NewPair(t, netns.PairConfig{})
	// Resolve neighbours before the link gets lossy: a lost neighbour
	// solicitation costs a second, as long as all the CM retries here.
	for _, dst := range []netip.Addr{p.B.Addr, p.B.Addr6} {
		if out, err := p.A.Command("ping", "-c", "1", "-W", "5", dst.String()).CombinedOutput(); err != nil {
			t.Fatalf("ping %v: %v\n%s", dst, err, out)
		}
	}
	for _, s := range []netns.Side{netns.A, netns.B} {
		if err := p.SetNetem(s, netns.Netem{Loss: 20, Duplicate: 5}); err != nil {
			t.Fatal(err)
		}
	}
	// Fast timeouts: 2 ms + 64 ms per try, 15 retries.
	cfg := rdmacm.Config{ResponseTimeout: 14, PacketLifeTime: 8}
	open := func(n *netns.Node, addr netip.Addr) *rdmacm.Manager {
		var d verbs.Device
		if err := n.Do(func() (err error) {
			d, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: addr}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		m := rdmacm.NewManager(cfg)
		t.Cleanup(func() { m.Close() })
		if err := m.AddDevice(d); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, fam := range []struct {
		name string
		a, b netip.Addr
	}{{"IPv4", p.A.Addr, p.B.Addr}, {"IPv6", p.A.Addr6, p.B.Addr6}} {
		t.Run(fam.name, func(t *testing.T) {
			ma, mb := open(p.A, fam.a), open(p.B, fam.b)
			sch, cch := rdmacm.NewEventChannel(), rdmacm.NewEventChannel()
			lis, _ := mb.CreateID(sch, nil, rdmacm.PSTCP)
			if err := lis.BindAddr(netip.AddrPortFrom(fam.b, 7000)); err != nil {
				t.Fatal(err)
			}
			if err := lis.Listen(0); err != nil {
				t.Fatal(err)
			}
			const n = 6
			for i := range n {
				c, err := ma.CreateID(cch, i, rdmacm.PSTCP)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(fam.b, 7000), 0); err != nil {
					t.Fatal(err)
				}
				expectLossy(t, cch, rdmacm.EventAddrResolved)
				if err := c.ResolveRoute(0); err != nil {
					t.Fatal(err)
				}
				expectLossy(t, cch, rdmacm.EventRouteResolved)
				pd := []byte(fmt.Sprintf("connection %d", i))
				if err := c.Connect(&rdmacm.ConnParam{QPNum: uint32(0x100 + i), PrivateData: pd}); err != nil {
					t.Fatal(err)
				}
				req := expectLossy(t, sch, rdmacm.EventConnectRequest)
				if string(req.Conn.PrivateData[:len(pd)]) != string(pd) {
					t.Fatalf("request %d carries %q", i, req.Conn.PrivateData[:len(pd)])
				}
				if err := req.ID.Accept(&rdmacm.ConnParam{QPNum: uint32(0x200 + i)}); err != nil {
					t.Fatal(err)
				}
				expectLossy(t, cch, rdmacm.EventConnectResponse) // no QP: the app finishes with Establish
				if err := c.Establish(); err != nil {
					t.Fatal(err)
				}
				expectLossy(t, sch, rdmacm.EventEstablished)
				if err := c.Disconnect(); err != nil {
					t.Fatal(err)
				}
				expectLossy(t, sch, rdmacm.EventDisconnected)
				if err := req.ID.Disconnect(); err != nil {
					t.Fatal(err)
				}
				expectLossy(t, cch, rdmacm.EventDisconnected)
				c.Destroy()
				req.ID.Destroy()
			}
		})
	}
}

// expectLossy is expect, skipping TIMEWAIT_EXIT events of earlier
// connections (their timewait can end at any point of the next one).
func expectLossy(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		e, err := ch.GetEvent(ctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for %v: %v", want, err)
		}
		if e.Type == rdmacm.EventTimewaitExit && want != rdmacm.EventTimewaitExit {
			continue
		}
		if e.Type != want {
			t.Fatalf("event %v (status %d, %v), want %v", e.Type, e.Status, e.Err, want)
		}
		return e
	}
}
