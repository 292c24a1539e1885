package testaddr_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"softib/internal/testaddr"
)

// TestUnique: addresses are distinct loopback addresses outside 127.0/16
// and the tools' 127.200/8-127.249/8, and a second process gets another
// block while this one holds its claim.
func TestUnique(t *testing.T) {
	seen := map[netip.Addr]bool{}
	for range 600 { // crosses two block boundaries
		a := testaddr.Next()
		b := a.As4()
		if !a.IsLoopback() || b[1] < 16 || b[1] > 199 || b[3] == 0 || b[3] == 255 || seen[a] {
			t.Fatalf("address %v (seen %v)", a, seen[a])
		}
		seen[a] = true
	}
	if os.Getenv("TESTADDR_CHILD") != "" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildBlock$", "-test.v")
	cmd.Env = append(os.Environ(), "TESTADDR_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for a := range seen {
		if strings.Contains(string(out), "block "+testaddr.Block().String()) || strings.Contains(string(out), " "+a.String()+"\n") {
			t.Fatalf("child got an address of ours:\n%s", out)
		}
	}
}

func TestChildBlock(t *testing.T) {
	if os.Getenv("TESTADDR_CHILD") == "" {
		t.Skip("run by TestUnique")
	}
	t.Logf("block %v", testaddr.Block())
	t.Logf("addr %v\n", testaddr.Next())
}

// TestPort: the reserved port is held by a live listener, and the block's
// other addresses can listen on it.
func TestPort(t *testing.T) {
	p := testaddr.Port(0)
	if _, err := net.Listen("tcp4", netip.AddrPortFrom(testaddr.Block(), uint16(p)).String()); err == nil {
		t.Fatal("the reservation is not held")
	}
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(testaddr.Next(), uint16(p)).String())
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}
