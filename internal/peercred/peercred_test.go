package peercred

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestUID: the peer of a Unix socket connected from this process is our
// own user.
func TestUID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if uid, ok := UID(sc); !ok || uid != os.Getuid() {
		t.Fatalf("UID = %d, %v; want %d", uid, ok, os.Getuid())
	}
}
