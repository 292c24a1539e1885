package pingpong_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/internal/testaddr"
	_ "softib/rxe"
	"softib/tools/pingpong"
	"softib/verbs"
)

func openDev(t *testing.T) verbs.Device {
	t.Helper()
	d, err := verbs.Open(verbs.DeviceConfig{Addr: testaddr.Next()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// runPair runs a server and a client pingpong over two devices in this
// process and returns both outputs.
func runPair(t *testing.T, cfg pingpong.Config) (srvOut, cliOut string) {
	t.Helper()
	ds, dc := openDev(t), openDev(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sb, cb bytes.Buffer
	srv := cfg
	srv.Listener, srv.Out, srv.GIDIndex = ln, &sb, 1
	cli := cfg
	cli.Host, cli.TCPPort, cli.Out, cli.GIDIndex = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port, &cb, 1
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, serr = pingpong.Run(ctx, ds, srv); serr != nil {
			cancel()
		}
	}()
	res, cerr := pingpong.Run(ctx, dc, cli)
	if cerr != nil {
		cancel()
	}
	wg.Wait()
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v\nclient: %v\nserver out:\n%s\nclient out:\n%s", serr, cerr, sb.String(), cb.String())
	}
	if res.Iters != cfg.Iters {
		t.Fatalf("iters %d", res.Iters)
	}
	return sb.String(), cb.String()
}

func checkOut(t *testing.T, out string, iters int) {
	t.Helper()
	for _, want := range []string{"  local address:  LID 0x0000, QPN 0x", "  remote address: LID 0x0000, QPN 0x", ", GID ::ffff:127.",
		" bytes in ", " Mbit/sec\n", " iters in ", " usec/iter\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "\n"+itoa(iters)+" iters in") {
		t.Errorf("output lacks the iteration count %d:\n%s", iters, out)
	}
}

func itoa(n int) string {
	var b []byte
	for n > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

func TestRCPingpong(t *testing.T) {
	for _, c := range []pingpong.Config{
		{Kind: pingpong.RC, Size: 64, Iters: 50, RxDepth: 20},
		{Kind: pingpong.RC, Size: 10000, Iters: 20, Check: true},
		{Kind: pingpong.RC, Size: 4096, Iters: 20, Events: true, MTU: 4096},
	} {
		s, cl := runPair(t, c)
		checkOut(t, s, c.Iters)
		checkOut(t, cl, c.Iters)
	}
}

func TestUDPingpong(t *testing.T) {
	for _, c := range []pingpong.Config{
		{Kind: pingpong.UD, Size: 512, Iters: 50, Check: true},
		{Kind: pingpong.UD, Size: 1024, Iters: 20, Events: true},
	} {
		s, cl := runPair(t, c)
		checkOut(t, s, c.Iters)
		checkOut(t, cl, c.Iters)
	}
}

func TestUDSizeAboveMTU(t *testing.T) {
	d := openDev(t)
	_, err := pingpong.Run(t.Context(), d, pingpong.Config{Kind: pingpong.UD, Size: 8192, Host: "127.0.0.1", TCPPort: 1})
	if err == nil || !strings.Contains(err.Error(), "larger than port MTU") {
		t.Fatalf("err %v", err)
	}
}
