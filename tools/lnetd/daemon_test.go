package lnetd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/lnet/lnd"
	"softib/lnet/lnd/lndtest"
	"softib/wire/lnetwire"
)

func TestNetShowPingPeerStats(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	b := startInproc(t, testIP(), port, "")

	doc := ctlDoc(t, a.sock, "net", "show")
	if doc.Path("net", 0, "net type") != "lo" || doc.Path("net", 1, "local NI(s)", 0, "nid") != a.nid ||
		doc.Path("net", 1, "local NI(s)", 0, "status") != "up" ||
		doc.Path("net", 1, "local NI(s)", 0, "interfaces", "0") != a.ip {
		t.Fatalf("net show:\n%s", YAML(doc))
	}
	out := ctlOK(t, a.sock, "ping", b.nid)
	want := fmt.Sprintf("ping:\n    - primary nid: %s\n      Multi-Rail: True\n      peer ni:\n        - nid: %s\n", b.nid, b.nid)
	if out != want {
		t.Errorf("ping output:\n%s\nwant\n%s", out, want)
	}
	peers := ctlDoc(t, a.sock, "peer", "show", "-v", "--nid", b.nid)
	pni := peers.Path("peer", 0, "peer ni", 0)
	if pm, ok := pni.(Map); !ok || pm.Get("nid") != b.nid || pm.Get("state") != "up" ||
		pm.Get("max_ni_tx_credits") != int64(8) || pm.Get("available_tx_credits") != int64(8) {
		t.Errorf("peer show -v:\n%s", YAML(peers))
	}
	st := ctlDoc(t, a.sock, "stats", "show")
	s, _ := st.Get("statistics").(Map)
	for _, k := range []string{"msgs_alloc", "msgs_max", "errors", "send_count", "recv_count", "route_count",
		"drop_count", "send_length", "recv_length", "route_length", "drop_length"} {
		if _, ok := s.Get(k).(int64); !ok {
			t.Errorf("stats show lacks %s:\n%s", k, YAML(st))
		}
	}
	if s.Get("send_count").(int64) < 1 || s.Get("recv_count").(int64) < 1 {
		t.Errorf("no traffic counted:\n%s", YAML(st))
	}
	ctlOK(t, a.sock, "stats", "reset")
	if n := ctlDoc(t, a.sock, "stats", "show").Path("statistics", "send_count"); n != int64(0) {
		t.Errorf("send_count after reset = %v", n)
	}
	v := ctlDoc(t, a.sock, "net", "show", "-v", "--net", "tcp")
	ni := v.Path("net", 0, "local NI(s)", 0).(Map)
	if ni.Path("tunables", "peer_credits") != int64(8) || ni.Path("statistics", "send_count") == nil ||
		ni.Path("lnd tunables", "conns_per_peer") != int64(1) || ni.Path("lnd statistics", "conns_active") == nil {
		t.Errorf("net show -v:\n%s", YAML(v))
	}
}

func TestNetAddDel(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	ip := testIP()
	ctlOK(t, a.sock, "net", "add", "--net", "tcp1", "--if", ip, "--peer-credits", "16", "--credits", "64", "--conns-per-peer", "2")
	v := ctlDoc(t, a.sock, "net", "show", "-v", "--net", "tcp1")
	ni := v.Path("net", 0, "local NI(s)", 0).(Map)
	if ni.Get("nid") != ip+"@tcp1" || ni.Path("tunables", "peer_credits") != int64(16) ||
		ni.Path("tunables", "credits") != int64(64) || ni.Path("lnd tunables", "conns_per_peer") != int64(2) {
		t.Fatalf("net show after add:\n%s", YAML(v))
	}
	// Adding the same NI again fails with EEXIST.
	code, _, errs := ctlRun(t, a.sock, "net", "add", "--net", "tcp1", "--if", ip)
	if code != 1 || !strings.Contains(errs, "add:\n    - net:\n          errno: -17") {
		t.Errorf("duplicate add: %d\n%s", code, errs)
	}
	ctlOK(t, a.sock, "net", "del", "--net", "tcp1")
	code, _, errs = ctlRun(t, a.sock, "net", "del", "--net", "tcp1")
	if code != 1 || !strings.Contains(errs, "errno: -2") || !strings.Contains(errs, "lnetctl: ") {
		t.Errorf("second del: %d\n%s", code, errs)
	}
	for _, args := range [][]string{
		{"net", "add", "--net", "bogus", "--if", ip},
		{"net", "add", "--net", "tcp2", "--if", "no-such-if0"},
		{"net", "del", "--net", "lo"},
		{"net", "show", "--net", "tcp9"},
	} {
		if code, out, errs := ctlRun(t, a.sock, args...); code != 1 || !strings.Contains(errs, "errno: -") {
			t.Errorf("%v: %d %q %q", args, code, out, errs)
		}
	}
	if code, _, errs := ctlRun(t, a.sock, "net", "frobnicate"); code != 2 || !strings.Contains(errs, "unknown action") {
		t.Errorf("bad action: %d %q", code, errs)
	}
}

func TestGlobalSet(t *testing.T) {
	a := startInproc(t, testIP(), reservePort(), "")
	ctlOK(t, a.sock, "set", "transaction_timeout", "30")
	ctlOK(t, a.sock, "set", "max_interfaces", "64")
	ctlOK(t, a.sock, "set", "discovery", "0")
	ctlOK(t, a.sock, "set", "routing", "1")
	ctlOK(t, a.sock, "set", "accept", "secure")
	ctlOK(t, a.sock, "set", "response_tracking", "1")
	g := ctlDoc(t, a.sock, "global", "show")
	if g.Path("global", "transaction_timeout") != int64(30) || g.Path("global", "max_intf") != int64(64) ||
		g.Path("global", "discovery") != int64(0) || g.Path("global", "accept") != "secure" {
		t.Errorf("global show:\n%s", YAML(g))
	}
	if got := a.d.Instance().Globals(); got.TransactionTimeout != 30*time.Second || got.MaxInterfaces != 64 || got.ResponseTracking != 1 {
		t.Errorf("core globals not applied: %+v", got)
	}
	for _, args := range [][]string{{"set", "discovery", "2"}, {"set", "no_such", "1"}, {"set", "test_portal", "5"}} {
		if code, _, errs := ctlRun(t, a.sock, args...); code != 1 || !strings.Contains(errs, "set:") {
			t.Errorf("%v: %d %q", args, code, errs)
		}
	}
}

// TestExportImportRoundTrip: export --backup of a configured node,
// imported into a fresh node, exports the same YAML; import --del undoes.
func TestExportImportRoundTrip(t *testing.T) {
	port := reservePort()
	ip := testIP()
	extra := `    numa_range: 2
    retry_count: 1
peer:
    - primary nid: 10.9.9.9@tcp
      Multi-Rail: True
      peer ni:
        - nid: 10.9.9.9@tcp
        - nid: 10.9.8.9@tcp
route:
    - net: o2ib3
      gateway: 10.9.9.1@tcp
      hop: 2
      priority: 1
      health_sensitivity: 1
routing:
    enable: 0
`
	a := startInproc(t, ip, port, extra)
	ctlOK(t, a.sock, "net", "add", "--net", "tcp3", "--if", testIP(), "--peer-credits", "32", "--cpt", "[0,1]")
	dir := t.TempDir()
	f1 := filepath.Join(dir, "a.yaml")
	ctlOK(t, a.sock, "export", "--backup", f1)
	exp1, _ := os.ReadFile(f1)
	full := ctlOK(t, a.sock, "export") // with status/statistics: must import too
	if _, err := ParseConfig([]byte(full)); err != nil {
		t.Fatalf("export (non-backup) does not parse: %v\n%s", err, full)
	}
	// Free the addresses, then rebuild the node from the file.
	a.ln.Close()
	a.srv.Close()
	a.d.Close()
	c := startInproc(t, testIP(), port, "")
	ctlOK(t, c.sock, "net", "del", "--net", "tcp")
	ctlOK(t, c.sock, "import", f1)
	f2 := filepath.Join(dir, "c.yaml")
	ctlOK(t, c.sock, "export", "--backup", f2)
	exp2, _ := os.ReadFile(f2)
	if !bytes.Equal(exp1, exp2) {
		t.Errorf("export → import → export differs:\n--- first\n%s\n--- second\n%s", exp1, exp2)
	}
	// Importing again changes nothing (nets already up are skipped).
	ctlOK(t, c.sock, "import", f1)
	exp3 := ctlOK(t, c.sock, "export", "--backup")
	if exp3 != string(exp2) {
		t.Errorf("second import changed the config:\n%s", exp3)
	}
	ctlOK(t, c.sock, "import", "--del", f1)
	left, err := ParseConfig([]byte(ctlOK(t, c.sock, "export", "--backup")))
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Nets) != 0 || len(left.Peers) != 0 || len(left.Routes) != 0 {
		t.Errorf("import --del left %+v", left)
	}
	// A bad file is refused with its line.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("global:\n    bogus: 1\n"), 0o644)
	if code, _, errs := ctlRun(t, c.sock, "import", bad); code != 1 || !strings.Contains(errs, bad+":2: global.bogus") {
		t.Errorf("bad import: %d %q", code, errs)
	}
}

func TestPeerAddDelRoutes(t *testing.T) {
	a := startInproc(t, testIP(), reservePort(), "")
	ctlOK(t, a.sock, "peer", "add", "--prim_nid", "10.1.1.1@tcp", "--nid", "10.1.1.2@tcp")
	p := ctlDoc(t, a.sock, "peer", "show", "--nid", "10.1.1.2@tcp")
	if p.Path("peer", 0, "primary nid") != "10.1.1.1@tcp" || p.Path("peer", 0, "Multi-Rail") != true ||
		p.Path("peer", 0, "peer ni", 1, "nid") != "10.1.1.2@tcp" {
		t.Errorf("peer show:\n%s", YAML(p))
	}
	ctlOK(t, a.sock, "peer", "del", "--prim_nid", "10.1.1.1@tcp")
	if code, _, errs := ctlRun(t, a.sock, "peer", "show", "--nid", "10.1.1.2@tcp"); code != 1 || !strings.Contains(errs, "errno: -2") {
		t.Errorf("peer show after del: %d %q", code, errs)
	}
	ctlOK(t, a.sock, "route", "add", "--net", "o2ib", "--gateway", "10.1.1.9@tcp", "--hop", "3")
	r := ctlDoc(t, a.sock, "route", "show", "-v")
	if r.Path("route", 0, "gateway") != "10.1.1.9@tcp" || r.Path("route", 0, "hop") != int64(3) {
		t.Errorf("route show:\n%s", YAML(r))
	}
	ctlOK(t, a.sock, "route", "del", "--net", "o2ib", "--gateway", "10.1.1.9@tcp")
	if code, _, _ := ctlRun(t, a.sock, "route", "del", "--net", "o2ib", "--gateway", "10.1.1.9@tcp"); code != 1 {
		t.Error("second route del succeeded")
	}
}

func TestPingErrors(t *testing.T) {
	a := startInproc(t, testIP(), reservePort(), "")
	// Nobody listens there: the ping fails with an lnetctl error block.
	dead := testIP() + "@tcp"
	code, out, errs := ctlRun(t, a.sock, "ping", "--timeout", "3s", dead)
	if code != 1 || out != "" || !strings.Contains(errs, "manage:\n    - ping:\n          errno: -") ||
		!strings.Contains(errs, "failed to ping "+dead) {
		t.Errorf("ping dead peer: %d %q %q", code, out, errs)
	}
	if code, _, errs := ctlRun(t, a.sock, "ping", "10.0.0.1@o2ib"); code != 1 || !strings.Contains(errs, "errno: -113") {
		t.Errorf("ping unreachable net: %d %q", code, errs)
	}
	if code, _, _ := ctlRun(t, a.sock, "ping", "nonsense"); code != 1 {
		t.Errorf("ping bad NID: %d", code)
	}
}

// TestPutGetVerified moves 0 B .. 1 MiB through the echo service and
// checks the data on both ends by CRC.
func TestPutGetVerified(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	b := startInproc(t, testIP(), port, "")
	for i, size := range []int{0, 1, 4095, 4096, 65536, 1 << 20} {
		slot := fmt.Sprint(i % 4)
		put := ctlDoc(t, a.sock, "test", "put", "--nid", b.nid, "--size", fmt.Sprint(size), "--bits", slot, "--seed", fmt.Sprint(100+i))
		p := put.Get("test put").(Map)
		if p.Get("ok") != int64(1) || p.Get("bytes") != int64(size) {
			t.Fatalf("put %d:\n%s", size, YAML(put))
		}
		if types := eventTypes(p); types != "SEND,ACK" && types != "ACK,SEND" {
			t.Errorf("put %d events %s", size, types)
		}
		show := ctlDoc(t, b.sock, "test", "show")
		sl := show.Path("test service", "slots", i%4).(Map)
		if sl.Get("length") != int64(size) || sl.Get("crc32") != p.Get("crc32") {
			t.Errorf("size %d: receiver slot %v, sender crc %v", size, YAML(sl), p.Get("crc32"))
		}
		get := ctlDoc(t, a.sock, "test", "get", "--nid", b.nid, "--size", fmt.Sprint(size), "--bits", slot)
		g := get.Get("test get").(Map)
		if g.Get("ok") != int64(1) || g.Get("crc32") != p.Get("crc32") || (eventTypes(g) != "SEND,REPLY" && eventTypes(g) != "REPLY,SEND") {
			t.Errorf("get %d:\n%s", size, YAML(get))
		}
	}
}

func eventTypes(m Map) string {
	var s []string
	for _, e := range m.Get("events").(List) {
		s = append(s, e.(Map).Get("type").(string))
	}
	return strings.Join(s, ",")
}

// TestMDThresholdUnlink: an MD with threshold 2 takes two PUTs, is
// unlinked with the second, and the third PUT finds nothing: dropped at
// the target, never ACKed.
func TestMDThresholdUnlink(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	b := startInproc(t, testIP(), port, "")
	md := ctlDoc(t, b.sock, "test", "md", "add", "--portal", "20", "--bits", "7", "--size", "8192", "--threshold", "2", "--options", "put")
	if md.Path("md", "id") != int64(1) {
		t.Fatalf("md add:\n%s", YAML(md))
	}
	for i := range 2 {
		ctlOK(t, a.sock, "test", "put", "--nid", b.nid, "--portal", "20", "--bits", "7", "--size", "1000", "--seed", fmt.Sprint(i))
	}
	code, out, errs := ctlRun(t, a.sock, "test", "put", "--nid", b.nid, "--portal", "20", "--bits", "7", "--size", "1000", "--timeout", "2s")
	if code != 1 || !strings.Contains(out, "ok: 0") || !strings.Contains(errs, "no ACK within") {
		t.Errorf("third put: %d\n%s%s", code, out, errs)
	}
	show := ctlDoc(t, b.sock, "test", "show")
	m := show.Path("test service", "mds", 0).(Map)
	evs := m.Get("events").(List)
	if m.Get("unlinked") != true || len(evs) != 2 || evs[1].(Map).Get("unlinked") != true ||
		evs[0].(Map).Get("offset") != int64(0) || evs[1].(Map).Get("offset") != int64(1000) {
		t.Errorf("md after 3 puts:\n%s", YAML(show))
	}
	if st := b.d.Instance().Stats(); st.DropCount < 1 {
		t.Errorf("target drop_count %d", st.DropCount)
	}
	// Deleting an unlinked MD fails; a retained MD can be unlinked by hand.
	if code, _, _ := ctlRun(t, b.sock, "test", "md", "del", "--id", "1"); code != 1 {
		t.Error("deleting an auto-unlinked MD succeeded")
	}
	ctlOK(t, b.sock, "test", "md", "add", "--portal", "20", "--bits", "8", "--threshold", "1", "--retain")
	ctlOK(t, a.sock, "test", "put", "--nid", b.nid, "--portal", "20", "--bits", "8", "--size", "10")
	ctlOK(t, b.sock, "test", "md", "del", "--id", "2")
	m2 := ctlDoc(t, b.sock, "test", "show").Path("test service", "mds", 1).(Map)
	if evs := m2.Get("events").(List); m2.Get("unlinked") != true || len(evs) != 2 || evs[1].(Map).Get("type") != "UNLINK" {
		t.Errorf("retained md after del:\n%s", YAML(m2))
	}
}

// TestLazyPortal: a PUT to a lazy portal with no ME waits at the target
// and completes (ACKed) once an MD is attached.
func TestLazyPortal(t *testing.T) {
	port := reservePort()
	a := startInproc(t, testIP(), port, "")
	b := startInproc(t, testIP(), port, "")
	ctlOK(t, b.sock, "test", "lazy", "--portal", "21")
	type result struct {
		code      int
		out, errs string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		code := RunCtl(ctx, []string{"--socket", a.sock, "--json", "test", "put", "--nid", b.nid, "--portal", "21",
			"--bits", "3", "--size", "5000", "--seed", "9", "--timeout", "40s"}, nil, &out, &errb)
		done <- result{code, out.String(), errb.String()}
	}()
	deadline := time.Now().Add(hangGuard)
	for b.d.Instance().Stats().Delayed < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the PUT never waited on the lazy portal")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("PUT completed before an MD existed: %+v", r)
	default:
	}
	ctlOK(t, b.sock, "test", "md", "add", "--portal", "21", "--bits", "3", "--size", "8192", "--threshold", "1")
	r := <-done
	if r.code != 0 {
		t.Fatalf("lazy PUT: %d %s %s", r.code, r.out, r.errs)
	}
	var doc Map
	if err := doc.UnmarshalJSON([]byte(r.out)); err != nil {
		t.Fatal(err)
	}
	m := ctlDoc(t, b.sock, "test", "show").Path("test service", "mds", 0).(Map)
	if m.Get("unlinked") != true || doc.Path("test put", "bytes") != int64(5000) {
		t.Errorf("after lazy delivery: md %s put %s", YAML(m), YAML(doc))
	}
	ctlOK(t, b.sock, "test", "lazy", "--portal", "21", "--clear")
}

// TestExtraLND: a net of another LND type (here an in-memory stand-in
// for o2iblnd) comes up when its LND is offered; its o2iblnd tunables are
// stored and exported, and the echo service works over it.
func TestExtraLND(t *testing.T) {
	nw := lndtest.New(lnetwire.O2IBLND)
	mk := func(addr string) (*Daemon, string) {
		y := fmt.Sprintf("net:\n    - net type: o2ib\n      local NI(s):\n        - nid: %s@o2ib\n"+
			"          lnd tunables:\n              map_on_demand: 32\n              peercredits_hiw: 16\n", addr)
		cfg, err := ParseConfig([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(Options{Config: cfg, LNDs: []lnd.LND{nw.LND()}, Log: slog.New(slog.NewTextHandler(&testLogWriter{t}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		sock := filepath.Join(t.TempDir(), "s")
		ln, err := Listen(sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(d.Handle)
		go srv.Serve(ln)
		t.Cleanup(func() { ln.Close(); srv.Close() })
		return d, sock
	}
	_, sa := mk("10.0.0.1")
	_, sb := mk("10.0.0.2")
	ctlOK(t, sa, "test", "put", "--nid", "10.0.0.2@o2ib", "--size", "300000", "--seed", "5")
	g := ctlDoc(t, sa, "test", "get", "--nid", "10.0.0.2@o2ib", "--size", "300000")
	b := ctlDoc(t, sb, "test", "show").Path("test service", "slots", 0).(Map)
	if g.Path("test get", "crc32") != b.Get("crc32") {
		t.Errorf("o2ib echo: get %v, slot %v", g.Path("test get", "crc32"), b.Get("crc32"))
	}
	exp, err := ParseConfig([]byte(ctlOK(t, sa, "export", "--backup")))
	if err != nil {
		t.Fatal(err)
	}
	ni := exp.Nets[0].NIs[0]
	if v, _ := ni.LNDTunables.Get("map_on_demand"); exp.Nets[0].Type != "o2ib" || v != 32 {
		t.Errorf("export: %+v", exp.Nets)
	}
}
