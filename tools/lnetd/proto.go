package lnetd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"softib/internal/peercred"
)

// The control protocol between softib lnetctl and lnetd runs over a
// Unix-domain stream socket only its owner can open. Each request and
// each response is one JSON object on one line:
//
//	→ {"v":1,"op":"net.show","args":{"verbose":true}}
//	← {"result":{...}}            or   {"error":{"cmd":"show","obj":"net","errno":-2,"descr":"..."}}
//
// Requests on one connection are answered in order. Show commands return
// a Map in lnetctl's shape (key order kept), so the client only prints.

// ProtoVersion is the control protocol version this package speaks.
const ProtoVersion = 1

// maxRequest bounds one request line; import documents are the largest.
const maxRequest = 16 << 20

// Request is one control request.
type Request struct {
	V    int             `json:"v"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response is the answer to one Request: Result, or Err.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Err    *OpError        `json:"error,omitempty"`
}

// OpError is a failed operation, carrying what lnetctl prints in its YAML
// error block (command, object, negative errno, description) plus a hint
// saying what to do.
type OpError struct {
	Cmd   string `json:"cmd"`   // "add", "del", "show", "manage", ...
	Obj   string `json:"obj"`   // "net", "peer", "ping", ...
	Errno int    `json:"errno"` // negative errno, as lnetctl prints
	Descr string `json:"descr"`
	Hint  string `json:"hint,omitempty"`
}

// Error returns the description and the hint.
func (e *OpError) Error() string {
	s := e.Descr
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Doc returns the lnetctl error block:
//
//	add:
//	    - net:
//	          errno: -22
//	          descr: "cannot add network: Invalid argument"
func (e *OpError) Doc() Map {
	return Map{}.add(e.Cmd, List{Map{}.add(e.Obj, Map{}.add("errno", int64(e.Errno)).add("descr", e.Descr))})
}

// Errno values used in OpError (Linux numbers, negated when stored).
const (
	errnoNoEnt    = int(syscall.ENOENT)
	errnoIO       = int(syscall.EIO)
	errnoExist    = int(syscall.EEXIST)
	errnoInval    = int(syscall.EINVAL)
	errnoBusy     = int(syscall.EBUSY)
	errnoNoDev    = int(syscall.ENODEV)
	errnoTimedOut = int(syscall.ETIMEDOUT)
	errnoHostUnr  = int(syscall.EHOSTUNREACH)
	errnoNoSys    = int(syscall.ENOSYS)
	errnoProto    = int(syscall.EPROTO)
)

// opErr builds an OpError from an errno and a description.
func opErr(cmd, obj string, errno int, format string, args ...any) *OpError {
	return &OpError{Cmd: cmd, Obj: obj, Errno: -errno, Descr: fmt.Sprintf(format, args...)}
}

// ErrNoDaemon is matched by errors from connecting to an lnetd that is
// not running.
var ErrNoDaemon = errors.New("lnetd is not running")

// DefaultSocketPath is where lnetd listens unless told otherwise:
// $XDG_RUNTIME_DIR/softib/lnetd.sock, else /tmp/softib-$UID/lnetd.sock.
func DefaultSocketPath() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "softib", "lnetd.sock")
	}
	return filepath.Join(os.TempDir(), "softib-"+strconv.Itoa(os.Getuid()), "lnetd.sock")
}

// Listen creates the control socket at path: its directory is created
// with mode 0700 (an existing one must belong to us and not be open to
// others), the socket gets mode 0600. A stale socket left by a dead lnetd
// is removed; a live one is an error.
func Listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		// A symlink planted in /tmp must not redirect our socket.
		return nil, fmt.Errorf("control socket directory %s is not a plain directory: choose another --socket", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return nil, fmt.Errorf("control socket directory %s belongs to uid %d, not us (%d): choose another --socket", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		// Our own directory, too open (e.g. made by hand): tighten it so
		// only we can reach the socket.
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, err
		}
	}
	if _, err := os.Lstat(path); err == nil {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("another lnetd is already listening on %s (stop it, or use --socket)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Handler executes one request; a nil *OpError means success.
type Handler func(ctx context.Context, op string, args json.RawMessage) (any, *OpError)

// Server answers control requests on a listener.
type Server struct {
	h   Handler
	wg  sync.WaitGroup
	mu  sync.Mutex
	cs  map[net.Conn]struct{}
	ctx context.Context
	end context.CancelFunc
}

// NewServer returns a server dispatching to h.
func NewServer(h Handler) *Server {
	s := &Server{h: h, cs: make(map[net.Conn]struct{})}
	s.ctx, s.end = context.WithCancel(context.Background())
	return s
}

// Serve accepts connections until ln is closed. Connections from another
// user (SO_PEERCRED) are refused, root excepted.
func (s *Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if uid, ok := peerAllowed(c); !ok {
			// Say why before hanging up: the client prints it.
			resp := Response{Err: opErr("manage", "connect", int(syscall.EACCES),
				"control socket refused for uid %d: lnetd runs as uid %d", uid, os.Getuid())}
			resp.Err.Hint = "run the command as the user that started lnetd, or as root"
			c.SetWriteDeadline(time.Now().Add(time.Second))
			json.NewEncoder(c).Encode(&resp)
			c.Close()
			continue
		}
		s.mu.Lock()
		s.cs[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

// Close cancels requests in progress, closes the connections and waits
// for their goroutines.
func (s *Server) Close() {
	s.end()
	s.mu.Lock()
	for c := range s.cs {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// peerAllowed reports whether the peer of a control connection may use
// it (root or lnetd's own user), and the peer's uid (-1 if unknown).
func peerAllowed(c net.Conn) (int, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return os.Getuid(), true // in-memory pipes in tests
	}
	uid, ok := peercred.UID(uc)
	if !ok {
		return -1, false
	}
	return uid, uid == 0 || uid == os.Getuid()
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.cs, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	enc := json.NewEncoder(c)
	for {
		line, err := readLine(r, maxRequest)
		if err != nil {
			return
		}
		var req Request
		var resp Response
		if err := json.Unmarshal(line, &req); err != nil {
			resp.Err = opErr("manage", "request", errnoProto, "malformed control request: %v", err)
		} else if req.V != ProtoVersion {
			resp.Err = opErr("manage", "request", errnoProto,
				"control protocol version %d, lnetd speaks %d", req.V, ProtoVersion)
			resp.Err.Hint = "use the softib binary lnetd was started from"
		} else {
			res, oerr := s.h(s.ctx, req.Op, req.Args)
			if oerr != nil {
				resp.Err = oerr
			} else if res != nil {
				b, err := json.Marshal(res)
				if err != nil {
					resp.Err = opErr("manage", req.Op, errnoIO, "encoding the result: %v", err)
				} else {
					resp.Result = b
				}
			}
		}
		if err := enc.Encode(&resp); err != nil {
			return
		}
	}
}

// readLine reads one '\n'-terminated line of at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var out []byte
	for {
		chunk, err := r.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > max {
			return nil, fmt.Errorf("control request longer than %d bytes", max)
		}
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(out) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// Client talks to one lnetd. It is safe for sequential use; concurrent
// callers are serialized.
type Client struct {
	mu sync.Mutex
	c  net.Conn
	r  *bufio.Reader
}

// Dial connects to the lnetd control socket at path. A missing or dead
// socket gives an error matching ErrNoDaemon that says what to do.
func Dial(path string) (*Client, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if errors.Is(err, syscall.EACCES) {
		return nil, fmt.Errorf("cannot reach lnetd at %s: permission denied: the control socket belongs to another user (run as that user or as root): %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot reach lnetd at %s: is `softib lnetd` running? (start it with `softib lnetd --config lnet.yaml`, or pass --socket): %w: %w",
			path, ErrNoDaemon, err)
	}
	return NewClient(c), nil
}

// NewClient wraps an established connection (tests use net.Pipe).
func NewClient(c net.Conn) *Client {
	return &Client{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

// Close closes the connection.
func (cl *Client) Close() error { return cl.c.Close() }

// Call sends op with args and decodes the result into result (may be
// nil). A failed operation returns its *OpError. The context bounds the
// wait: cancelling it closes the connection.
func (cl *Client) Call(ctx context.Context, op string, args, result any) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	req := Request{V: ProtoVersion, Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return err
		}
		req.Args = b
	}
	b, err := json.Marshal(&req)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { cl.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := cl.c.Write(append(b, '\n')); err != nil {
		// lnetd may have said why it hung up (a refused user) before
		// closing: prefer its word to EPIPE.
		if line, rerr := readLine(cl.r, 1<<20); rerr == nil {
			var resp Response
			if json.Unmarshal(line, &resp) == nil && resp.Err != nil {
				return resp.Err
			}
		}
		return cl.ioErr(ctx, err)
	}
	line, err := readLine(cl.r, 1<<30)
	if err != nil {
		return cl.ioErr(ctx, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return fmt.Errorf("malformed reply from lnetd: %w", err)
	}
	if resp.Err != nil {
		return resp.Err
	}
	if result != nil && resp.Result != nil {
		return json.Unmarshal(resp.Result, result)
	}
	return nil
}

func (cl *Client) ioErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("lnetd connection lost (did it exit? check its log): %w", err)
}
