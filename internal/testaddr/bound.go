package testaddr

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Bound reports whether a socket of this network namespace serves ap: a
// TCP socket listening on it (network "tcp") or a UDP socket bound to it
// ("udp"), read from /proc/thread-self/net/{tcp,udp}{,6}; a socket on the
// wildcard address (0.0.0.0 or ::) with ap's port counts. Tests wait with it for a
// server in another goroutine or process to be ready: unlike a probe that
// binds ap itself, it cannot take the address from the server, whose own
// bind would then fail with "address in use".
func Bound(network string, ap netip.AddrPort) (bool, error) {
	if network != "tcp" && network != "udp" {
		return false, fmt.Errorf("testaddr: Bound: network %q: want tcp or udp", network)
	}
	// The calling thread's namespace, not /proc/net's (the thread group
	// leader's): a test binary's main thread may have been left in another
	// network namespace for good (internal/netemu's router threads enter
	// theirs and never leave, and one may have been the main thread),
	// while the threads that run goroutines are in the process's own.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dir := "/proc/thread-self/net/"
	if _, err := os.Stat(dir); err != nil {
		dir = "/proc/self/net/" // before Linux 3.17
	}
	want := ap.Addr().Unmap()
	for _, f := range []string{dir + network, dir + network + "6"} {
		b, err := readProc(f)
		if errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(f, "6") {
			continue // a kernel without IPv6
		}
		if err != nil {
			return false, fmt.Errorf("testaddr: Bound: %w", err)
		}
		lines := strings.Split(string(b), "\n")
		for _, line := range lines[1:] { // the first is the header
			// sl local_address rem_address st ...; st 0A is TCP_LISTEN
			// (a UDP socket's st is 07, or 01 once connected).
			fl := strings.Fields(line)
			if len(fl) < 4 || network == "tcp" && fl[3] != "0A" {
				continue
			}
			local, err := procAddrPort(fl[1])
			if err != nil {
				return false, fmt.Errorf("testaddr: Bound: %s: %w", f, err)
			}
			if local.Port() == ap.Port() && (local.Addr().Unmap() == want || local.Addr().IsUnspecified()) {
				return true, nil
			}
		}
	}
	return false, nil
}

// procAddrPort parses a /proc/net address, "0100007F:1F90": the address
// as 32-bit words each printed in host byte order, the port in hex.
func procAddrPort(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	port, perr := strconv.ParseUint(p, 16, 16)
	raw, herr := hex.DecodeString(h)
	if !ok || perr != nil || herr != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// readProc reads a /proc/net table in as few reads as it fits: the kernel
// resumes a later read at a position in its table, which can skip a
// socket when others come and go in between.
func readProc(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 0, 256<<10)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = slices.Grow(b, len(b))
		}
	}
}
