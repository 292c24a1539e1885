package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"softib/rdmacm"
	"softib/verbs"
)

// Example shows the librdmacm flow on softib devices: a server listens,
// a client resolves, creates its QP, connects with private data, the
// server accepts, and both sides see ESTABLISHED.
func Example() {
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	var dev verbs.Device // e.g. rxe.Open(...) on 10.0.0.1, then:
	if err := m.AddDevice(dev); err != nil {
		return
	}
	ctx := context.Background()
	ch := rdmacm.NewEventChannel()

	// Server side.
	lis, _ := m.CreateID(ch, "server", rdmacm.PSTCP)
	_ = lis.BindAddr(netip.MustParseAddrPort("10.0.0.1:7174"))
	_ = lis.Listen(16)

	// Client side.
	c, _ := m.CreateID(ch, "client", rdmacm.PSTCP)
	_ = c.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.1:7174"), time.Second)
	for {
		ev, err := ch.GetEvent(ctx)
		if err != nil {
			return
		}
		switch ev.Type {
		case rdmacm.EventAddrResolved:
			_ = ev.ID.ResolveRoute(time.Second)
		case rdmacm.EventRouteResolved:
			cq, _ := ev.ID.Device().CreateCQ(verbs.CQAttr{CQE: 16})
			_, _ = ev.ID.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
				Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
			_ = ev.ID.Connect(&rdmacm.ConnParam{PrivateData: []byte("hello"), RetryCount: 7, RNRRetryCount: 7})
		case rdmacm.EventConnectRequest:
			fmt.Printf("request from %v: %q\n", ev.ID.RemoteAddr(), ev.Conn.PrivateData[:5])
			cq, _ := ev.ID.Device().CreateCQ(verbs.CQAttr{CQE: 16})
			_, _ = ev.ID.CreateQP(nil, &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
				Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
			_ = ev.ID.Accept(nil)
		case rdmacm.EventEstablished:
			fmt.Println("established:", ev.ID.Context())
		case rdmacm.EventRejected, rdmacm.EventUnreachable:
			fmt.Println("failed:", ev.Status, ev.Err)
			return
		}
	}
}
