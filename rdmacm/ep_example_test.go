//go:build linux

package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"

	"softib/rdmacm"
	"softib/rxe"
	"softib/verbs"
)

// Example_endpoint is the RC WRITE + SEND program of the rxe example
// (about 120 lines of QP states, GIDs and key exchange) with the
// connection API: Listen, Accept and Dial return connected endpoints
// whose buffers are registered and already known to the peer.
func Example_endpoint() {
	srvIP, cliIP := loopAddr(), loopAddr() // two loopback addresses of this process
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	for _, ip := range []netip.Addr{srvIP, cliIP} {
		dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
		if err != nil {
			panic(err)
		}
		defer dev.Close()
		m.AddDevice(dev)
	}
	ctx := context.Background()
	l, err := m.Listen(netip.AddrPortFrom(srvIP, 0), nil) // port 0: any free port
	if err != nil {
		panic(err)
	}
	defer l.Close()
	got := make(chan string)
	go func() {
		srv, err := l.Accept(ctx)
		if err != nil {
			panic(err)
		}
		defer srv.Close()
		srv.PostRecv(0, 64)
		wc, _ := srv.WaitRecv(ctx) // the SEND comes after the WRITE, so both are there
		got <- fmt.Sprintf("%s, %s", srv.Buf[1024:1024+5], srv.Buf[:wc.ByteLen])
	}()

	cli, err := m.Dial(ctx, l.Addr(), nil)
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	copy(cli.Buf, "hello")
	cli.PostWrite(0, 5, 1024) // to the server's buffer at offset 1024
	copy(cli.Buf[64:], "done")
	cli.PostSend(64, 4)
	for range 2 {
		if _, err := cli.WaitSend(ctx); err != nil {
			panic(err)
		}
	}
	fmt.Println(<-got)
	// Output: hello, done
}
