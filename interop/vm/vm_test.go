package vm

import (
	"strings"
	"testing"
	"time"
)

func TestParseRC(t *testing.T) {
	r, err := ParseRC("124 61234\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != 124 || r.Elapsed != 61234*time.Millisecond || !r.TimedOut() {
		t.Fatalf("got %+v", r)
	}
	for _, bad := range []string{"", "1", "x 2", "1 y", "1 -5", "1 2 3"} {
		if _, err := ParseRC(bad); err == nil {
			t.Errorf("ParseRC(%q) accepted", bad)
		}
	}
}

func TestSocketOn(t *testing.T) {
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100A8C0:9C40 0200A8C0:4853 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
`
	if !SocketOn(strings.NewReader(tcp), 18515, true) {
		t.Error("listener on 18515 not found")
	}
	if SocketOn(strings.NewReader(tcp), 40000, true) {
		t.Error("established socket on 40000 counted as listening")
	}
	if !SocketOn(strings.NewReader(tcp), 40000, false) {
		t.Error("socket on 40000 not found")
	}
	if SocketOn(strings.NewReader("garbage\n\n  1: x\n"), 1, false) {
		t.Error("garbage matched")
	}
}

func TestJobScript(t *testing.T) {
	s := JobScript("echo hi", 1500*time.Millisecond)
	if !strings.HasPrefix(s, "#timeout=2\n") {
		t.Fatalf("timeout line: %q", s[:20])
	}
	if !strings.HasSuffix(s, "echo hi\n") || !strings.Contains(s, "wait_listen()") {
		t.Fatalf("script body missing: %q", s)
	}
	if JobScript("", 0)[:11] != "#timeout=1\n" {
		t.Fatal("zero timeout not clamped to 1 s")
	}
}

func TestSanitize(t *testing.T) {
	if got := sanitize("perf write_bw -R srv=rxe"); got != "perf_write_bw_-R_srv_rxe" {
		t.Fatalf("got %q", got)
	}
	if len(sanitize(strings.Repeat("a", 100))) != 40 {
		t.Fatal("not truncated")
	}
}

func TestActiveMTU(t *testing.T) {
	for _, c := range []struct{ netdev, want int }{{1500, 1024}, {9000, 4096}, {1104, 1024}, {1103, 512}, {1000, 512}, {4176, 4096}, {4175, 2048}} {
		if got := ActiveMTU(c.netdev); got != c.want {
			t.Errorf("ActiveMTU(%d) = %d, want %d", c.netdev, got, c.want)
		}
	}
}
