package pingpong_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"

	"softib/tools/pingpong"
	"softib/verbs"
)

var gid2 = verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.2"))

func TestDestGolden(t *testing.T) {
	for _, c := range []struct {
		d    pingpong.Dest
		want string
	}{
		{pingpong.Dest{LID: 0, QPN: 0x11, PSN: 0xabcdef, GID: gid2}, "0000:000011:abcdef:00000000000000000000ffff7f000002\x00"},
		{pingpong.Dest{LID: 0x1234, QPN: 0xffffff, PSN: 1}, "1234:ffffff:000001:00000000000000000000000000000000\x00"},
	} {
		got := c.d.Append(nil)
		if string(got) != c.want || len(got) != pingpong.DestLen || c.d.Len() != len(got) {
			t.Errorf("Append(%+v) = %q, want %q", c.d, got, c.want)
		}
		back, err := pingpong.ParseDest(got)
		if err != nil || back != c.d {
			t.Errorf("ParseDest(%q) = %+v, %v", got, back, err)
		}
	}
}

func TestParseDestErrors(t *testing.T) {
	for _, s := range []string{"", "0000", "zz:000011:abcdef:00000000000000000000ffff7f000002", "0000:000011:abcdef:0000",
		"0000:000011:abcdef:0000000000000000000000000000000g", "10000:000011:abcdef:00000000000000000000ffff7f000002"} {
		if _, err := pingpong.ParseDest([]byte(s)); !errors.Is(err, pingpong.ErrBadMessage) {
			t.Errorf("ParseDest(%q) err = %v", s, err)
		}
	}
	// rdma-core's sscanf("%x:...") accepts short hex fields.
	d, err := pingpong.ParseDest([]byte("0:11:5:00000000000000000000ffff7f000002"))
	if err != nil || d.QPN != 0x11 || d.PSN != 5 || d.GID != gid2 {
		t.Errorf("lenient parse: %+v %v", d, err)
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add(pingpong.Dest{QPN: 0x11, PSN: 0xabcdef, GID: gid2}.Append(nil))
	f.Add(pingpong.Dest{LID: 0xffff, QPN: 0xffffff, PSN: 0xffffff}.Append(nil))
	f.Add([]byte("0:1:2:3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := pingpong.ParseDest(b)
		if err != nil {
			return
		}
		again, err := pingpong.ParseDest(d.Append(nil))
		if err != nil || again != d {
			t.Fatalf("round trip %+v -> %+v, %v", d, again, err)
		}
		if len(d.Append(nil)) != d.Len() {
			t.Fatal("Len mismatch")
		}
	})
}

// TestExchangeSequence checks the byte sequence both sides put on the
// wire: client message, server message, "done".
func TestExchangeSequence(t *testing.T) {
	cli, srv := net.Pipe()
	my := pingpong.Dest{QPN: 0x11, PSN: 0x123456, GID: gid2}
	peer := pingpong.Dest{QPN: 0x12, PSN: 0x654321, GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.3"))}
	errc := make(chan error, 1)
	var seen bytes.Buffer
	go func() {
		// A scripted rdma-core server.
		buf := make([]byte, pingpong.DestLen)
		if _, err := io.ReadFull(srv, buf); err != nil {
			errc <- err
			return
		}
		seen.Write(buf)
		if _, err := srv.Write(peer.Append(nil)); err != nil {
			errc <- err
			return
		}
		done := make([]byte, 5)
		_, err := io.ReadFull(srv, done)
		seen.Write(done)
		srv.Close()
		errc <- err
	}()
	got, err := pingpong.ClientExchange(cli, my)
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got != peer {
		t.Fatalf("client got %+v", got)
	}
	if want := string(my.Append(nil)) + "done\x00"; seen.String() != want {
		t.Fatalf("server saw %q, want %q", seen.String(), want)
	}

	// Server side against a client that closes right after "done".
	cli, srv = net.Pipe()
	connected := false
	go func() {
		cli.Write(peer.Append(nil))
		buf := make([]byte, pingpong.DestLen)
		io.ReadFull(cli, buf)
		cli.Write([]byte("done\x00"))
		cli.Close()
	}()
	rem, err := pingpong.ServerExchange(srv, my, func(d pingpong.Dest) error { connected = d == peer; return nil })
	if err != nil || rem != peer || !connected {
		t.Fatalf("server: %+v %v connected=%v", rem, err, connected)
	}
}

func TestAddressLine(t *testing.T) {
	d := pingpong.Dest{QPN: 0x11, PSN: 0xabc, GID: gid2}
	if got, want := pingpong.AddressLine("local", d), "  local address:  LID 0x0000, QPN 0x000011, PSN 0x000abc, GID ::ffff:127.0.0.2\n"; got != want {
		t.Errorf("local line %q, want %q", got, want)
	}
	if got, want := pingpong.AddressLine("remote", pingpong.Dest{LID: 1, QPN: 0x12}), "  remote address: LID 0x0001, QPN 0x000012, PSN 0x000000, GID ::\n"; got != want {
		t.Errorf("remote line %q, want %q", got, want)
	}
}

func TestSummary(t *testing.T) {
	r := pingpong.Result{Bytes: 8192000, Iters: 1000, Elapsed: 10_000_000} // 10 ms
	want := "8192000 bytes in 0.01 seconds = 6553.60 Mbit/sec\n1000 iters in 0.01 seconds = 10.00 usec/iter\n"
	if got := string(r.AppendSummary(nil)); got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}
