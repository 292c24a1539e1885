// Package stat is softib's `rdma statistic`: every process that holds a
// Soft-RoCE device publishes it on a local control socket, and `softib
// stat` and `softib res` read the device's counters and resources from
// there, whichever process holds it.
//
// The sockets live in the runtime directory lnetd uses
// ($XDG_RUNTIME_DIR/softib, else /tmp/softib-$UID; mode 0700), one per
// device, named after its address and process (rxe-127.0.0.1-4791-PID.sock), mode 0600;
// connections from another user are refused (SO_PEERCRED), root
// excepted. The protocol is one JSON request line and one JSON reply.
package stat

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"softib/rxe"
	"softib/verbs"
)

// Snapshot is what a device's control socket answers.
type Snapshot struct {
	Device    string         `json:"device"`
	Port      int            `json:"port"`
	Addr      netip.AddrPort `json:"addr"`
	PID       int            `json:"pid"`
	Comm      string         `json:"comm"`
	Counters  []rxe.Counter  `json:"counters"`
	Resources rxe.Resources  `json:"resources"`
	// ECN is the device's congestion control (rxe.Config.ECN, --ecn):
	// on or off and its DCQCN parameters; nil for a device without it.
	ECN *rxe.ECNInfo `json:"ecn,omitempty"`
}

// Introspector is a device that can report counters and resources
// (*rxe.Device).
type Introspector interface {
	verbs.Device
	Addr() netip.AddrPort
	Counters() []rxe.Counter
	Resources() rxe.Resources
}

// Take reads a snapshot of dev in this process.
func Take(dev Introspector) Snapshot {
	sn := Snapshot{Device: dev.Name(), Port: 1, Addr: dev.Addr(), PID: os.Getpid(), Comm: comm(),
		Counters: dev.Counters(), Resources: dev.Resources()}
	if e, ok := dev.(interface{ ECN() rxe.ECNConfig }); ok {
		info := e.ECN().Info()
		sn.ECN = &info
	}
	return sn
}

func comm() string {
	if b, err := os.ReadFile("/proc/self/comm"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return filepath.Base(os.Args[0])
}

// Dir is the directory of the control sockets.
func Dir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "softib")
	}
	return filepath.Join(os.TempDir(), "softib-"+strconv.Itoa(os.Getuid()))
}

// SocketPath is the control socket of this process's device at addr.
// The process ID is part of the name: processes may share a device
// address (as processes share a Linux rxe device).
func SocketPath(addr netip.AddrPort) string {
	return filepath.Join(Dir(), "rxe-"+addr.Addr().String()+"-"+strconv.Itoa(int(addr.Port()))+"-"+strconv.Itoa(os.Getpid())+".sock")
}

// Server publishes one device.
type Server struct {
	ln   *net.UnixListener
	path string
	dev  Introspector
	wg   sync.WaitGroup
}

// Publish starts the control socket of dev. A device that cannot report
// (not an rxe device) is an error. A stale socket (of a dead process
// whose ID this one now has) is replaced; a live one is an error.
func Publish(d verbs.Device) (*Server, error) {
	dev, ok := d.(Introspector)
	if !ok {
		return nil, fmt.Errorf("stat: device %s has no counters to publish", d.Name())
	}
	path := SocketPath(dev.Addr())
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("stat: %s is in use by a live process", path)
		}
		os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("stat: control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	// Close removes the socket file; the listener must not remove it a
	// second time (another process may have taken the name by then).
	ln.SetUnlinkOnClose(false)
	s := &Server{ln: ln, path: path, dev: dev}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// ensureDir creates dir with mode 0700, refusing one that is not ours
// or is a symlink (a directory planted in /tmp must not redirect us).
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("stat: control socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("stat: control socket directory %s is not a plain directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("stat: control socket directory %s belongs to uid %d, not us (%d)", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// Path returns the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	err := s.ln.Close()
	os.Remove(s.path)
	s.wg.Wait()
	return err
}

type request struct {
	Op string `json:"op"`
}

type reply struct {
	Err      string    `json:"error,omitempty"`
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.answer(c)
		}()
	}
}

func (s *Server) answer(c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	enc := json.NewEncoder(c)
	if uid, ok := peerAllowed(c); !ok {
		enc.Encode(reply{Err: fmt.Sprintf("permission denied: the device's process runs as uid %d, you are uid %d; run as that user or root", os.Getuid(), uid)})
		return
	}
	line, err := bufio.NewReaderSize(c, 4096).ReadSlice('\n')
	if err != nil {
		return
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		enc.Encode(reply{Err: "malformed request: " + err.Error()})
		return
	}
	switch req.Op {
	case "snapshot":
		sn := Take(s.dev)
		enc.Encode(reply{Snapshot: &sn})
	default:
		enc.Encode(reply{Err: fmt.Sprintf("unknown request %q", req.Op)})
	}
}

// ErrNoDevices is returned when no process publishes a device.
var ErrNoDevices = errors.New("no softib device is open on this host (no process holds one, or they run as another user: see " + "$XDG_RUNTIME_DIR/softib or /tmp/softib-$UID)")

// Query asks the control socket at path for a snapshot.
func Query(path string) (*Snapshot, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("%s: permission denied: the device belongs to another user; run as that user or root", path)
		}
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(`{"op":"snapshot"}` + "\n")); err != nil {
		return nil, err
	}
	var r reply
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Err != "" {
		return nil, fmt.Errorf("%s: %s", path, r.Err)
	}
	if r.Snapshot == nil {
		return nil, fmt.Errorf("%s: empty reply", path)
	}
	return r.Snapshot, nil
}

// QueryAll returns snapshots of every published device, sorted by
// address; addr, when valid, selects the devices on that IP address.
// Sockets of processes that died without removing them are removed.
func QueryAll(addr netip.Addr) ([]*Snapshot, error) {
	paths, _ := filepath.Glob(filepath.Join(Dir(), "rxe-*.sock"))
	var out []*Snapshot
	var errs []error
	for _, p := range paths {
		if addr.IsValid() && !strings.HasPrefix(filepath.Base(p), "rxe-"+addr.String()+"-") {
			continue
		}
		sn, err := Query(p)
		if errors.Is(err, syscall.ECONNREFUSED) {
			os.Remove(p) // stale: its process is gone
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, sn)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Addr.Addr().Less(out[j].Addr.Addr()) ||
			out[i].Addr.Addr() == out[j].Addr.Addr() && out[i].Addr.Port() < out[j].Addr.Port()
	})
	if len(out) == 0 {
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		if addr.IsValid() {
			return nil, fmt.Errorf("no softib device is open on %v on this host", addr)
		}
		return nil, ErrNoDevices
	}
	return out, errors.Join(errs...)
}
