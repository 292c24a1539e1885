//go:build linux

package lnetd

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"softib/lnet/o2iblnd"
	"softib/wire/lnetwire"
)

// o2ibNodeYAML is a test node with a tcp and an o2ib NI on one address,
// discovery off: the o2ib tests address the o2ib NID and mean that rail,
// which Multi-Rail selection would share with tcp once discovery on the
// first send made the peers Multi-Rail.
func o2ibNodeYAML(ip string, port int, lndTunables string) string {
	return fmt.Sprintf(`net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: %[1]s
    - net type: o2ib
      local NI(s):
        - interfaces:
              0: %[1]s
          tunables:
              peer_credits: 16
              credits: 128
          lnd tunables:
%[3]s
global:
    accept_port: %[2]d
    accept: all
    transaction_timeout: 20
    discovery: 0
`, ip, port, lndTunables)
}

// o2ibNID returns the NID of d's o2ib NI.
func (d *Daemon) o2ibNID(t *testing.T) lnetwire.NID {
	t.Helper()
	for _, n := range d.in.Nets() {
		if n.NID.Net().Type() == lnetwire.O2IBLND {
			return n.NID
		}
	}
	t.Fatal("no o2ib NI")
	return 0
}

// startO2IBInproc starts an in-process daemon with tcp and o2ib NIs.
func startO2IBInproc(t *testing.T, ip string, port int, lndTunables string) *inprocNode {
	t.Helper()
	cfg, err := ParseConfig([]byte(o2ibNodeYAML(ip, port, lndTunables)))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(&testLogWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	d, err := New(Options{Config: cfg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "ctl", "lnetd.sock")
	ln, err := Listen(sock)
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	n := &inprocNode{d: d, ip: ip, nid: ip + "@tcp", sock: sock, srv: NewServer(d.Handle), ln: ln}
	go n.srv.Serve(ln)
	t.Cleanup(func() {
		ln.Close()
		n.srv.Close()
		d.Close()
	})
	return n
}

func TestO2IBConfigParses(t *testing.T) {
	cfg, err := ParseConfig([]byte(o2ibNodeYAML("127.0.0.2", 7988,
		"              peercredits_hiw: 12\n              concurrent_sends: 32\n              keepalive: 0\n              service: 9870\n")))
	if err != nil {
		t.Fatal(err)
	}
	ni := cfg.Nets[1].NIs[0]
	if cfg.Nets[1].Type != "o2ib" || ni.Interfaces[0] != "127.0.0.2" {
		t.Fatalf("o2ib net: %+v", cfg.Nets[1])
	}
	if v, _ := ni.Tunables.Get("peer_credits"); v != 16 {
		t.Errorf("peer_credits %d", v)
	}
	c := o2ibConfig(ni.LNDTunables)
	if c.PeerCreditsHiw != 12 || c.ConcurrentSends != 32 || c.Keepalive >= 0 || c.Service != 9870 || c.CM != nil {
		t.Errorf("o2iblnd config %+v", c)
	}
	if a, err := niIPv4(ni); err != nil || a.String() != "127.0.0.2" {
		t.Errorf("niIPv4 = %v, %v", a, err)
	}
	if a, err := niIPv4(NIConfig{NID: "10.1.2.3@o2ib1", Interfaces: []string{"lo"}}); err != nil || a.String() != "10.1.2.3" {
		t.Errorf("niIPv4 by NID = %v, %v", a, err)
	}
	if a, err := niIPv4(NIConfig{Interfaces: []string{"lo"}}); err != nil || !a.IsLoopback() {
		t.Errorf("niIPv4 of lo = %v, %v", a, err)
	}
	for _, bad := range []NIConfig{{Interfaces: []string{"no-such-ib9"}}, {Interfaces: []string{"::1"}}, {}} {
		if a, err := niIPv4(bad); err == nil {
			t.Errorf("niIPv4(%+v) = %v, want an error", bad, a)
		}
	}
}

// TestO2IBDaemon: two in-process daemons bring up tcp and o2ib NIs (an
// rxe device and RDMA CM each), net show lists the o2ib NI with its
// tunables, ping and verified 1 MiB PUT/GET work over o2ib, and deleting
// and re-adding the net closes and reopens the device (UDP 4791 freed).
func TestO2IBDaemon(t *testing.T) {
	port := reservePort()
	a := startO2IBInproc(t, testIP(), port, "              peercredits_hiw: 8\n              concurrent_sends: 16\n              conns_per_peer: 2\n")
	b := startO2IBInproc(t, testIP(), port, "              ntx: 256\n")
	bIB := b.ip + "@o2ib"

	doc := ctlDoc(t, a.sock, "net", "show", "-v", "--net", "o2ib")
	ni, _ := doc.Path("net", 0, "local NI(s)", 0).(Map)
	if doc.Path("net", 0, "net type") != "o2ib" || ni == nil || ni.Get("nid") != a.ip+"@o2ib" || ni.Get("status") != "up" ||
		ni.Path("tunables", "peer_credits") != int64(16) || ni.Path("lnd tunables", "concurrent_sends") != int64(16) {
		t.Fatalf("net show o2ib:\n%s", YAML(doc))
	}
	all := ctlOK(t, a.sock, "net", "show")
	if !strings.Contains(all, "net type: o2ib") || !strings.Contains(all, "net type: tcp") {
		t.Errorf("net show:\n%s", all)
	}
	// The NI runs with the mapped tunables.
	var drv *o2iblnd.Driver
	for _, n := range a.d.in.Nets() {
		if n.NID.String() == a.ip+"@o2ib" {
			drv = a.d.o2ib.Driver(n.NID)
		}
	}
	if drv == nil {
		t.Fatal("no o2iblnd driver for A's o2ib NI")
	}
	if c := drv.Config(); c.PeerCredits != 16 || c.PeerCreditsHiw != 8 || c.Service != o2iblnd.DefaultService || c.ConnsPerPeer != 2 {
		t.Errorf("driver config %+v", c)
	}

	out := ctlOK(t, a.sock, "ping", bIB)
	if !strings.Contains(out, bIB) {
		t.Errorf("ping %s:\n%s", bIB, out)
	}
	// conns_per_peer 2: A opened two connections (QPs) to B; the ping
	// went on the first one up, the second may still be connecting.
	bNID := b.d.o2ibNID(t)
	waitUntil(t, "A's second o2ib connection to B", func() bool { return drv.Conns(bNID) == 2 })
	for i, size := range []int{1, 4096, 300000, 1 << 20} {
		slot := fmt.Sprint(i % 4)
		put := ctlDoc(t, a.sock, "test", "put", "--nid", bIB, "--size", fmt.Sprint(size), "--bits", slot, "--seed", fmt.Sprint(7+i))
		p := put.Get("test put").(Map)
		if p.Get("ok") != int64(1) || p.Get("bytes") != int64(size) {
			t.Fatalf("put %d:\n%s", size, YAML(put))
		}
		sl := ctlDoc(t, b.sock, "test", "show").Path("test service", "slots", i%4).(Map)
		if sl.Get("length") != int64(size) || sl.Get("crc32") != p.Get("crc32") {
			t.Errorf("size %d: receiver slot %v, sender crc %v", size, YAML(sl), p.Get("crc32"))
		}
		g := ctlDoc(t, a.sock, "test", "get", "--nid", bIB, "--size", fmt.Sprint(size), "--bits", slot).Get("test get").(Map)
		if g.Get("ok") != int64(1) || g.Get("crc32") != p.Get("crc32") {
			t.Errorf("get %d: %s", size, YAML(g))
		}
	}

	// Delete closes the device: re-adding binds UDP 4791 on the address
	// again. Both ends restart: a lone restarted end is refused by the
	// other's IB CM while it still holds the old connection (stale REQ:
	// same GUID and QPN), until that connection times out.
	for _, n := range []*inprocNode{a, b} {
		ctlOK(t, n.sock, "net", "del", "--net", "o2ib")
		if c, err := net.ListenPacket("udp4", n.ip+":4791"); err != nil {
			t.Errorf("UDP 4791 on %s still taken after net del: %v", n.ip, err)
		} else {
			c.Close()
		}
		ctlOK(t, n.sock, "net", "add", "--net", "o2ib", "--if", n.ip, "--conns-per-peer", "3")
	}
	ctlOK(t, a.sock, "ping", bIB)
	ctlOK(t, b.sock, "ping", a.ip+"@o2ib")
	if c := a.d.o2ib.Driver(a.d.o2ibNID(t)).Config(); c.ConnsPerPeer != 3 {
		t.Errorf("net add --conns-per-peer 3: driver runs with %d", c.ConnsPerPeer)
	}
	// A second o2ib net on the same address cannot get the port.
	if code, _, errs := ctlRun(t, b.sock, "net", "add", "--net", "o2ib1", "--if", b.ip); code != 1 || !strings.Contains(errs, "4791") {
		t.Errorf("o2ib1 on a taken address: %d %s", code, errs)
	}
	// Shutdown closes the device too (Close is idempotent: cleanup's
	// second call does nothing).
	b.d.Close()
	if c, err := net.ListenPacket("udp4", b.ip+":4791"); err != nil {
		t.Errorf("UDP 4791 on %s still taken after Close: %v", b.ip, err)
	} else {
		c.Close()
	}
}
