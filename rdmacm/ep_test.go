//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"softib/rdmacm"
	"softib/verbs"
)

// hangGuard bounds a test's waits; it is not a timing assertion.
func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// acceptOne accepts one endpoint in the background.
func acceptOne(ctx context.Context, l *rdmacm.Listener) <-chan *rdmacm.Endpoint {
	c := make(chan *rdmacm.Endpoint, 1)
	go func() {
		e, err := l.Accept(ctx)
		if err != nil {
			close(c)
			return
		}
		c <- e
	}()
	return c
}

// TestEndpointReadWriteSend moves data every way the endpoint API
// offers: private data and buffer descriptions both ways, RDMA WRITE,
// RDMA READ, SEND/RECV.
func TestEndpointReadWriteSend(t *testing.T) {
	env := newEnv(t)
	ctx := hangGuard(t)
	l, err := env.m.Listen(netip.AddrPortFrom(env.a, 0), &rdmacm.EndpointConfig{BufSize: 8192, PrivateData: []byte("from server")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := acceptOne(ctx, l)
	cli, err := env.m.Dial(ctx, l.Addr(), &rdmacm.EndpointConfig{PrivateData: []byte("from client")})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	if string(cli.PrivateData) != "from server" || string(srv.PrivateData) != "from client" {
		t.Errorf("private data: client got %q, server got %q", cli.PrivateData, srv.PrivateData)
	}
	if cli.Remote.Len != 8192 || srv.Remote.Len != 4096 || cli.Remote.RKey != srv.MR.RKey() {
		t.Errorf("remote buffers: client sees %+v, server sees %+v", cli.Remote, srv.Remote)
	}

	copy(srv.Buf[100:], "server data")
	// The peer's READ is served by the server's QP engine: taking the
	// QP's lock orders the copy before it for the race detector (a
	// real program orders it by telling the peer, e.g. with a SEND).
	srv.QP.Query()
	if err := cli.PostRead(0, 11, 100); err != nil {
		t.Fatal(err)
	}
	if wc, err := cli.WaitSend(ctx); err != nil || wc.Opcode != verbs.WCRDMARead || string(cli.Buf[:11]) != "server data" {
		t.Fatalf("READ: %v %v %q", wc.Opcode, err, cli.Buf[:11])
	}
	copy(cli.Buf[200:], "client data")
	if err := cli.PostWrite(200, 11, 8000); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.WaitSend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.PostRecv(0, 64); err != nil {
		t.Fatal(err)
	}
	if err := cli.PostSend(200, 11); err != nil {
		t.Fatal(err)
	}
	if wc, err := srv.WaitRecv(ctx); err != nil || wc.ByteLen != 11 || string(srv.Buf[:11]) != "client data" || string(srv.Buf[8000:8011]) != "client data" {
		t.Fatalf("RECV: %+v %v %q %q", wc, err, srv.Buf[:11], srv.Buf[8000:8011])
	}
	if _, err := cli.WaitSend(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEndpointErrors: bounds are checked before posting, a wait ends
// with its context, Dial to a port nobody listens on fails with the
// rejection, oversized private data is refused.
func TestEndpointErrors(t *testing.T) {
	env := newEnv(t)
	ctx := hangGuard(t)
	l, err := env.m.Listen(netip.AddrPortFrom(env.a, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	accepted := acceptOne(ctx, l)
	cli, err := env.m.Dial(ctx, l.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	if err := cli.PostSend(4090, 10); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Errorf("PostSend past the buffer: %v", err)
	}
	if err := cli.PostWrite(0, 10, 4090); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Errorf("PostWrite past the peer's buffer: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := srv.WaitRecv(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitRecv with a cancelled context: %v", err)
	}
	cli.Close()
	srv.Close()
	cli.Close() // twice is fine
	l.Close()

	if _, err := env.m.Dial(ctx, netip.AddrPortFrom(env.a, l.Addr().Port()), nil); err == nil {
		t.Error("Dial to a closed listener succeeded")
	}
	if _, err := env.m.Dial(ctx, l.Addr(), &rdmacm.EndpointConfig{PrivateData: make([]byte, 40)}); !errors.Is(err, rdmacm.ErrPrivateDataTooLong) {
		t.Errorf("Dial with 40 bytes of private data: %v", err)
	}
}
