package socklnd

import (
	"testing"
	"time"
)

func TestSetParam(t *testing.T) {
	var c Config
	for _, kv := range [][2]string{
		{"accept_port", "7988"}, {"accept", "all"}, {"sock_timeout", "5"}, {"keepalive", "0"},
		{"nconnds", "100"}, {"nagle", "1"}, {"min_bulk", "2048"}, {"zc_min_payload", "65536"},
		{"min_reconnectms", "10"}, {"max_reconnectms", "5"}, {"typed_conns", "0"}, {"enable_csum", "1"},
		{"conns_per_peer", "2"},
	} {
		if err := c.SetParam(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	d := c.withDefaults()
	if d.AcceptPort != 7988 || d.Accept != AcceptAll || d.SockTimeout != 5*time.Second || d.Keepalive >= 0 ||
		d.Nconnds != MaxNconnds || !d.Nagle || d.MinBulk != 2048 || d.ZCMinPayload != 65536 ||
		d.MinReconnect != 10*time.Millisecond || d.MaxReconnect != 10*time.Millisecond || !d.SingleConn ||
		!d.EnableCsum || d.ConnsPerPeer != 2 {
		t.Fatalf("config %+v", d)
	}
	for _, bad := range [][2]string{{"nope", "1"}, {"accept", "maybe"}, {"nconnds", "x"}, {"nagle", "y"}} {
		if err := c.SetParam(bad[0], bad[1]); err == nil {
			t.Errorf("%s=%s accepted", bad[0], bad[1])
		}
	}
	if len(ParamNames()) != len(paramNames) {
		t.Fatal("ParamNames incomplete")
	}
	// The zero Config is the Lustre defaults.
	z := Config{}.withDefaults()
	if z.AcceptPort != 988 || z.Accept != AcceptSecure || z.SockTimeout != 50*time.Second || z.Keepalive != 30*time.Second ||
		z.Nconnds != 4 || z.Nagle || z.MinBulk != 1024 || z.ZCMinPayload != 16<<10 ||
		z.MinReconnect != time.Second || z.MaxReconnect != time.Minute || z.SingleConn || z.Version != 3 {
		t.Fatalf("defaults %+v", z)
	}
}
