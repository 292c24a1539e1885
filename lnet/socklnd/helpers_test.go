package socklnd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"softib/internal/testaddr"
	"softib/lnet/lnd"
	"softib/wire/lnetwire"
)

// hangGuard bounds waits in tests; it is a hang guard, not a timing
// assertion.
const hangGuard = 30 * time.Second

// testPort is the acceptor port of test nodes: the real 988 as root,
// else an unprivileged stand-in, or a kernel-chosen port if another
// process holds that one. It is reserved by a listener this test binary
// keeps open on its own loopback block (internal/testaddr), so nothing
// else can take it while the nodes use it on the block's addresses.
var testPort = sync.OnceValue(func() int {
	want := 10988
	if os.Geteuid() == 0 {
		want = DefaultAcceptPort
	}
	return testaddr.Port(want)
})

// testIPs returns n fresh loopback addresses unique to this test binary,
// so nodes never collide on ip:port across tests or with other processes.
func testIPs(n int) []string {
	var out []string
	for range n {
		out = append(out, testaddr.Next().String())
	}
	return out
}

func tcpNID(ip string) lnetwire.NID { return lnetwire.MustParseNID(ip + "@tcp") }

// rx is one message a stub host received.
type rx struct {
	hdr  lnetwire.Header
	from lnetwire.NID
	data []byte
}

// fin is one Finalize call.
type fin struct {
	msg    *lnd.Msg
	status error
}

// stubHost is a minimal lnd.Host: it accepts every header, receives the
// payload into a fresh buffer (or a preset one) and records events.
type stubHost struct {
	drv    atomic.Pointer[Driver]
	rxs    chan rx
	fins   chan fin
	reject atomic.Bool // refuse every header
	delay  atomic.Bool // deliver Recv later from another goroutine

	// preset receive resources for allocation tests
	preMsg *lnd.Msg
	preBuf [][]byte

	mu     sync.Mutex
	alive  map[lnetwire.NID]bool
	rxMsgs map[*lnd.Msg]*rxState
}

type rxState struct {
	hdr  lnetwire.Header
	from lnetwire.NID
	buf  []byte
}

func newStubHost() *stubHost {
	return &stubHost{
		rxs:    make(chan rx, 4096),
		fins:   make(chan fin, 4096),
		alive:  make(map[lnetwire.NID]bool),
		rxMsgs: make(map[*lnd.Msg]*rxState),
	}
}

func (h *stubHost) Parse(ni *lnd.NI, hdr *lnetwire.Header, from lnetwire.NID, private any, rdma bool) error {
	if h.reject.Load() {
		return errors.New("stub: rejected")
	}
	d := h.drv.Load()
	if h.preMsg != nil {
		return d.Recv(private, h.preMsg, false, lnd.Whole(h.preBuf), int(hdr.PayloadLength))
	}
	msg := &lnd.Msg{Type: hdr.Type, Hdr: *hdr}
	st := &rxState{hdr: *hdr, from: from, buf: make([]byte, hdr.PayloadLength)}
	h.mu.Lock()
	h.rxMsgs[msg] = st
	h.mu.Unlock()
	dst := lnd.Whole([][]byte{st.buf})
	if h.delay.Load() {
		go func() {
			if err := d.Recv(private, msg, true, dst, int(hdr.PayloadLength)); err != nil {
				h.Finalize(ni, msg, err)
			}
		}()
		return nil
	}
	return d.Recv(private, msg, false, dst, int(hdr.PayloadLength))
}

func (h *stubHost) Finalize(ni *lnd.NI, msg *lnd.Msg, status error) {
	if msg == h.preMsg && msg != nil {
		h.fins <- fin{msg, status}
		return
	}
	h.mu.Lock()
	st := h.rxMsgs[msg]
	delete(h.rxMsgs, msg)
	h.mu.Unlock()
	if st != nil {
		if status == nil {
			h.rxs <- rx{st.hdr, st.from, st.buf}
		}
		return
	}
	h.fins <- fin{msg, status}
}

func (h *stubHost) CreateReplyMsg(ni *lnd.NI, get *lnd.Msg) (*lnd.Msg, error) {
	return nil, errors.New("stub: no RDMA")
}
func (h *stubHost) SetReplyMsgLen(ni *lnd.NI, reply *lnd.Msg, n int) {}
func (h *stubHost) NotifyPeer(ni *lnd.NI, nid lnetwire.NID, alive bool, when time.Time) {
	h.mu.Lock()
	h.alive[nid] = alive
	h.mu.Unlock()
}

// node is a started driver with its stub host.
type node struct {
	d    *Driver
	host *stubHost
	nid  lnetwire.NID
}

// baseConfig is the test default: the test port, any source port
// accepted, so the tests also run without root.
func baseConfig() Config {
	return Config{AcceptPort: testPort(), Accept: AcceptAll, MinReconnect: 50 * time.Millisecond,
		MaxReconnect: 400 * time.Millisecond, SockTimeout: 10 * time.Second}
}

func startNode(t testing.TB, ip string, cfg Config) *node {
	t.Helper()
	h := newStubHost()
	ni := lnd.NewNI(h, lnd.NIConfig{NID: tcpNID(ip), PID: lnetwire.PIDLustre, LNDConfig: cfg, Log: testLog})
	drv, err := New(Config{}).Startup(ni)
	if err != nil {
		t.Fatalf("startup %s: %v", ip, err)
	}
	d := drv.(*Driver)
	h.drv.Store(d)
	t.Cleanup(d.Shutdown)
	return &node{d: d, host: h, nid: d.nid}
}

// pattern fills n bytes deterministically from seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// putMsg builds a PUT from a to b carrying payload.
func putMsg(from, to lnetwire.NID, payload []byte, match uint64) *lnd.Msg {
	m := &lnd.Msg{Type: lnetwire.MsgPUT, Target: lnetwire.ProcessID{NID: to, PID: lnetwire.PIDLustre}}
	m.Hdr = lnetwire.Header{DestNID: to, SrcNID: from, DestPID: lnetwire.PIDLustre, SrcPID: lnetwire.PIDLustre,
		Type: lnetwire.MsgPUT, PayloadLength: uint32(len(payload)), MatchBits: match, WMD: lnetwire.WireHandleNone}
	if len(payload) > 0 {
		m.Payload = lnd.Whole([][]byte{payload})
	}
	return m
}

// send sends and waits for the finalization of one message.
func (n *node) send(t testing.TB, m *lnd.Msg) error {
	t.Helper()
	if err := n.d.Send(m); err != nil {
		return err
	}
	return n.waitFin(t, m)
}

// waitFin waits for the next Finalize, which must be m's unless m is nil.
func (n *node) waitFin(t testing.TB, m *lnd.Msg) error {
	t.Helper()
	select {
	case f := <-n.host.fins:
		if m != nil && f.msg != m {
			t.Fatalf("finalized %p, want %p", f.msg, m)
		}
		return f.status
	case <-time.After(hangGuard):
		t.Fatal("hang guard: no Finalize")
	}
	return nil
}

func (n *node) waitRx(t testing.TB) rx {
	t.Helper()
	select {
	case r := <-n.host.rxs:
		return r
	case <-time.After(hangGuard):
		t.Fatal("hang guard: nothing received")
	}
	return rx{}
}

// eventually polls cond until it holds (hang guard only).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("hang guard: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// rawPeer is a hand-driven socklnd peer over a plain TCP socket, playing
// a kernel node or a misbehaving one.
type rawPeer struct {
	t   testing.TB
	nc  net.Conn
	br  *bufio.Reader
	nid lnetwire.NID
}

// dialRaw connects to n from ip (any port) and optionally completes the
// handshake with a HELLO of the given version and type.
func dialRaw(t testing.TB, n *node, ip string) *rawPeer {
	t.Helper()
	dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: hangGuard}
	nc, err := dl.Dial("tcp4", n.d.ListenAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(hangGuard))
	t.Cleanup(func() { nc.Close() })
	return &rawPeer{t: t, nc: nc, br: bufio.NewReader(nc), nid: tcpNID(ip)}
}

func (r *rawPeer) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// handshake sends the acceptor request and a HELLO, and returns the reply.
func (r *rawPeer) handshake(target lnetwire.NID, version uint32, typ lnetwire.SockConnType, inc uint64) lnetwire.SockHello {
	r.t.Helper()
	req := lnetwire.AcceptorRequest{Version: 1, Target: target}
	b := req.Append(nil)
	h := lnetwire.SockHello{Version: version, SrcNID: uint64(r.nid), DstNID: uint64(target), SrcPID: 12345,
		DstPID: 12345, SrcIncarnation: inc, ConnType: typ}
	r.write(h.Append(b))
	return r.readHello()
}

func (r *rawPeer) readHello() lnetwire.SockHello {
	r.t.Helper()
	c := &conn{br: r.br}
	h, err := c.readHello()
	if err != nil {
		r.t.Fatalf("raw peer: reading HELLO: %v", err)
	}
	return h
}

// readMsg reads one V2+ message: the ksock header, and for LNET the
// lnet_hdr and payload.
func (r *rawPeer) readMsg() (lnetwire.SockMsg, *lnetwire.Header, []byte, error) {
	var b [lnetwire.SockMsgHdrLen]byte
	if _, err := io.ReadFull(r.br, b[:]); err != nil {
		return lnetwire.SockMsg{}, nil, nil, err
	}
	var m lnetwire.SockMsg
	m.Decode(lnetwire.SockMsgHdr(b[:]))
	if m.Type == lnetwire.SockMsgNOOP {
		return m, nil, nil, nil
	}
	var hb [lnetwire.HdrSize]byte
	if _, err := io.ReadFull(r.br, hb[:]); err != nil {
		return m, nil, nil, err
	}
	h, err := lnetwire.ParseHeader(hb[:])
	if err != nil {
		return m, nil, nil, err
	}
	p := make([]byte, h.PayloadLength)
	_, err = io.ReadFull(r.br, p)
	return m, &h, p, err
}

// lnetFrame builds a V2+ LNET message.
func lnetFrame(m lnetwire.SockMsg, h *lnetwire.Header, payload []byte) []byte {
	m.Type = lnetwire.SockMsgLNet
	b := m.Append(nil)
	b = h.Append(b)
	return append(b, payload...)
}

// expectClosed waits for the peer to close the raw connection.
func (r *rawPeer) expectClosed() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(hangGuard))
	_, err := io.Copy(io.Discard, r.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatal("hang guard: connection not closed")
	}
}

var le = binary.LittleEndian

// testLog keeps driver logs out of test output unless SOCKLND_LOG is set.
var testLog = func() *slog.Logger {
	if os.Getenv("SOCKLND_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// nopConn is a net.Conn that does nothing, for connections that are only
// registered, never started.
type nopConn struct{}

func (nopConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (nopConn) Write(b []byte) (int, error)      { return len(b), nil }
func (nopConn) Close() error                     { return nil }
func (nopConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (nopConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (nopConn) SetDeadline(time.Time) error      { return nil }
func (nopConn) SetReadDeadline(time.Time) error  { return nil }
func (nopConn) SetWriteDeadline(time.Time) error { return nil }

func mustListen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	eventually(t, "listen "+addr, func() bool {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err == nil
	})
	return ln
}
