// Package lst is `softib lst`: the command line of the lnet_selftest
// console (lnet/selftest.Console). It keeps the session in a file between
// invocations and starts a short-lived socklnd LNet node per invocation,
// or sends the console RPCs through the local lnetd.
package lst

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/selftest"
	"softib/lnet/socklnd"
	"softib/wire/lnetwire"
)

const lstUsage = `usage: softib lst [--session FILE] <command> [flags] [args]

Session (kept in FILE between invocations):
  new_session NAME [--timeout 300] [--force] [--if ADDR] [--port 988] [--net tcp]
              [--rpc-timeout 10] [--socket PATH]
  show_session [--json]
  end_session
  add_group NAME NID... (ranges: 192.168.1.[2-5]@tcp)
  list_group [NAME] [--json]
  add_batch NAME
  list_batch [NAME] [--json]
  add_test --batch B --from G --to G [--concurrency N] [--distribute a:b] [--loop N]
           brw read|write [size=8..1M] [off=N] [check=none|simple|full]  |  ping
  run B | stop B [--force] | query B [--json]
  stat [--delay 1] [--count 0] [--json] GROUP...

One-shot (no session file; exits 1 on any RPC error or data mismatch):
  quick --from NIDS --to NIDS [--seconds 5] [--delay 1] [--concurrency N]
        [--distribute a:b] [--json] [--force] [--if ADDR] [--port 988] [--socket PATH]
        brw read|write size=1M check=full  |  ping

Requests are Lustre's lnet_selftest messages: the nodes may be softib
lnetd instances or Lustre kernel nodes (lnet_selftest loaded), mixed.
--loop counts RPCs per test unit: a client runs --concurrency units per
server it talks to. Nodes end a session on their own timeout (100 s on a
kernel node) when no lst command reached them; --timeout is the console's.
LST_FEATURES (hex) picks the session features (default 1, BULK_LEN).

The session file defaults to $XDG_RUNTIME_DIR/softib/lst-$LST_SESSION.json
(else /tmp/softib-$UID/...; LST_SESSION defaults to "default"). Nodes are
lnetd instances (their selftest service); lst talks LNet to them from a
short-lived LNet node of its own (--if picks its address; default: the
address the kernel routes towards the first node). When that address is a
node's own NID (lst run on a node), or with --socket, the console RPCs go
through the local lnetd instead.
`

// Options connect the CLI to lnetd (which lives above this package).
type Options struct {
	// Dial connects to the lnetd control socket at path and returns its
	// call function and a close function.
	Dial func(path string) (selftest.ControlCall, func(), error)
	// DefaultSocket is lnetd's default control socket, used when the
	// console's own address would be a node's NID.
	DefaultSocket string
}

// lst is one invocation.
type lst struct {
	out, errw io.Writer
	path      string
	log       *slog.Logger
	opts      Options
	// dialPort is the acceptor port a private console node dials (0:
	// the console goes through lnetd), named in connection-refused hints.
	dialPort int
	// json is --json of the listing commands (show_session, list_group,
	// list_batch, query): one JSON document on stdout.
	json bool
}

// cutJSON removes --json (or -json) from args.
func cutJSON(args []string) ([]string, bool) {
	var rest []string
	found := false
	for _, a := range args {
		if a == "--json" || a == "-json" {
			found = true
			continue
		}
		rest = append(rest, a)
	}
	return rest, found
}

// printJSON prints v as one indented JSON document.
func (l *lst) printJSON(v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(l.out, "%s\n", b)
}

// RunLst is `softib lst`. It returns the exit code: 0 success, 1 a failed
// operation (or, for quick and stat, any RPC error), 2 a bad command line.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, opts Options) int {
	l := &lst{out: stdout, errw: stderr, path: defaultSessionPath(), opts: opts,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		switch {
		case a == "--session" || a == "-session":
			if len(args) < 2 {
				return l.usage("--session needs a file")
			}
			l.path, args = args[1], args[2:]
		case strings.HasPrefix(a, "--session="):
			l.path, args = strings.TrimPrefix(a, "--session="), args[1:]
		case a == "-h" || a == "--help":
			fmt.Fprint(stdout, lstUsage)
			return 0
		default:
			return l.usage("unknown flag %q", a)
		}
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, lstUsage)
		return 2
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "show_session", "list_group", "list_batch", "query":
		args, l.json = cutJSON(args)
	}
	switch cmd {
	case "help":
		fmt.Fprint(stdout, lstUsage)
		return 0
	case "new_session":
		return l.newSession(args)
	case "show_session":
		return l.showSession()
	case "end_session":
		return l.endSession(ctx)
	case "add_group":
		return l.addGroup(ctx, args)
	case "list_group":
		return l.listGroup(ctx, args)
	case "add_batch":
		return l.addBatch(args)
	case "list_batch":
		return l.listBatch(args)
	case "add_test":
		return l.addTest(ctx, args)
	case "run", "stop", "query":
		return l.batchCmd(ctx, cmd, args)
	case "stat":
		return l.stat(ctx, args)
	case "quick":
		return l.quick(ctx, args)
	}
	return l.usage("unknown command %q", cmd)
}

func (l *lst) usage(format string, a ...any) int {
	fmt.Fprintf(l.errw, "lst: "+format+"\n", a...)
	fmt.Fprintf(l.errw, "run `softib lst help` for the commands\n")
	return 2
}

func (l *lst) fail(err error) int {
	fmt.Fprintf(l.errw, "lst: %v\n", err)
	if l.dialPort != 0 && (errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")) {
		fmt.Fprintf(l.errw, "lst: hint: nothing accepts on port %d there: is lnetd running on that node, and is %d its accept_port? "+
			"Pass the nodes' accept_port with --port, or run lst where an lnetd runs (it is used through its control socket)\n", l.dialPort, l.dialPort)
	}
	return 1
}

// defaultSessionPath is where the console session is kept.
func defaultSessionPath() string {
	if p := os.Getenv("LST_SESSION_FILE"); p != "" {
		return p
	}
	key := os.Getenv("LST_SESSION")
	if key == "" {
		key = "default"
	}
	dir := filepath.Join(os.TempDir(), "softib-"+strconv.Itoa(os.Getuid()))
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		dir = filepath.Join(d, "softib")
	}
	return filepath.Join(dir, "lst-"+filepath.Base(key)+".json")
}

// splitTest splits args at the test name ("brw write size=1M" or "ping"),
// which is positional: its words (size=..., check=...) are never taken for
// flags. Flags may still follow the test, as in
// "quick ... brw write size=1M --seconds 5": words that start with "-"
// after the test name go back to the flags, with the value that follows a
// non-boolean flag given without "=".
func splitTest(fs *flag.FlagSet, args []string) (flags, test []string) {
	for i, a := range args {
		if a != "brw" && a != "ping" {
			continue
		}
		flags = append(flags, args[:i]...)
		rest := args[i:]
		for j := 0; j < len(rest); j++ {
			w := rest[j]
			if !strings.HasPrefix(w, "-") || w == "-" {
				test = append(test, w)
				continue
			}
			flags = append(flags, w)
			name := strings.TrimLeft(w, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && j+1 < len(rest) {
				j++
				flags = append(flags, rest[j])
			}
		}
		return flags, test
	}
	return args, nil
}

// isBoolFlag reports whether f takes no value (-json, -force).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseFlags parses fs with flags and positional arguments mixed.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (l *lst) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("lst "+name, flag.ContinueOnError)
	fs.SetOutput(l.errw)
	return fs
}

func (l *lst) load() (*selftest.State, error) {
	b, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no session (%s missing): start one with `softib lst new_session NAME`", l.path)
	}
	if err != nil {
		return nil, err
	}
	var st selftest.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("session file %s: %v", l.path, err)
	}
	return &st, nil
}

func (l *lst) save(st *selftest.State) error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, l.path)
}

// ConsoleNode starts the console's own LNet node: one tcp NI on addr (or
// the local address routed towards toward), no acceptor (replies come back
// on its own connections), dialling nodes on port.
func ConsoleNode(netName, addr string, port int, toward lnetwire.NID, log *slog.Logger) (*lnet.Instance, lnetwire.NID, error) {
	if netName == "" {
		netName = "tcp"
	}
	nt, err := lnetwire.ParseNet(netName)
	if err != nil {
		return nil, 0, err
	}
	if nt.Type() != lnetwire.SOCKLND {
		return nil, 0, fmt.Errorf("the lst console runs on tcp nets only (got %s)", nt)
	}
	if port == 0 {
		port = socklnd.DefaultAcceptPort
	}
	nid, err := ConsoleNID(nt, addr, port, toward)
	if err != nil {
		return nil, 0, err
	}
	a := nid.Addr()
	ip := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
	in, err := lnet.New(lnet.Config{
		LNDs: []lnd.LND{socklnd.New(socklnd.Config{})},
		Nets: []lnet.NetConfig{{Net: nt, Addr: nid.Addr(), Interfaces: []string{ip.String()},
			LNDConfig: socklnd.Config{AcceptPort: port, Accept: socklnd.AcceptNone}}},
		Log: log,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("starting the console's LNet node on %v: %v", nid, err)
	}
	return in, nid, nil
}

// ConsoleNID is the NID a console node on net nt gets: addr, or the local
// address the kernel routes towards toward.
func ConsoleNID(nt lnetwire.Net, addr string, port int, toward lnetwire.NID) (lnetwire.NID, error) {
	var ip netip.Addr
	var err error
	if addr != "" {
		if ip, err = netip.ParseAddr(addr); err != nil || !ip.Is4() {
			return 0, fmt.Errorf("--if %q: want an IPv4 address", addr)
		}
	} else {
		a := toward.Addr()
		dst := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
		// A UDP "connection" sends nothing: it asks the kernel which
		// source address the route to the node uses.
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(port))))
		if err != nil {
			return 0, fmt.Errorf("no route to %v: %v (give --if)", toward, err)
		}
		ip = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		c.Close()
	}
	b := ip.As4()
	return lnetwire.MakeNID(nt, binary.BigEndian.Uint32(b[:])), nil
}

// console loads the session and starts the console node; toward names a
// node to route to when the session has no address yet.
func (l *lst) console(st *selftest.State, toward lnetwire.NID, more ...lnetwire.NID) (*selftest.Console, func(), error) {
	if toward == 0 {
		if all := (&selftest.Console{State: st}).AllNodes(); len(all) > 0 {
			toward = all[0]
		} else {
			toward = lnetwire.MustParseNID("127.0.0.1@tcp")
		}
	}
	if st.Socket == "" && l.opts.DefaultSocket != "" {
		// On a node, the console's address is the node's own NID: a
		// second LNet instance cannot use it, the local lnetd can.
		nt, _ := lnetwire.ParseNet(st.Net)
		if st.Net == "" {
			nt = lnetwire.MakeNet(lnetwire.SOCKLND, 0)
		}
		if nid, err := ConsoleNID(nt, st.If, st.Port, toward); err == nil {
			nodes := append(append((&selftest.Console{State: st}).AllNodes(), toward), more...)
			if _, isNode := indexNID(nodes, nid); isNode {
				st.Socket = l.opts.DefaultSocket
				if st.Console == "" {
					st.Console = nid.String() // the session's NID: the node's
				}
			}
		}
		if st.Socket == "" && st.If == "" && l.opts.Dial != nil {
			// A node runs on this host: use it, as the kernel's lst
			// uses its node's LNet. It reaches the nodes on the
			// acceptor port it was configured with (a private console
			// node would dial --port, 988 by default, and miss nodes
			// configured with another accept_port).
			if _, err := os.Stat(l.opts.DefaultSocket); err == nil {
				if _, closeFn, err := l.opts.Dial(l.opts.DefaultSocket); err == nil {
					closeFn()
					st.Socket = l.opts.DefaultSocket
				}
			}
		}
	}
	if st.Socket != "" {
		if l.opts.Dial == nil {
			return nil, nil, errors.New("this build cannot reach lnetd (no control-socket dialer)")
		}
		call, closeFn, err := l.opts.Dial(st.Socket)
		if err != nil {
			return nil, nil, fmt.Errorf("console through lnetd: %w", err)
		}
		if st.Console == "" {
			// The session is named after the console's NID, as the
			// kernel's lst names it after its node's: here lnetd's NID
			// on the session's net, the local address towards the
			// nodes. (Without a NID the session id would carry 0@lo.)
			nt, err := lnetwire.ParseNet(st.Net)
			if st.Net == "" || err != nil {
				nt = lnetwire.MakeNet(lnetwire.SOCKLND, 0)
			}
			if nid, err := ConsoleNID(nt, st.If, st.Port, toward); err == nil {
				st.Console = nid.String()
			} else {
				st.Console = "lnetd:" + st.Socket
			}
		}
		return selftest.NewConsoleVia(selftest.ProxyCaller(call), st), closeFn, nil
	}
	in, nid, err := ConsoleNode(st.Net, st.If, st.Port, toward, l.log)
	if err != nil {
		return nil, nil, err
	}
	l.dialPort = st.Port
	if l.dialPort == 0 {
		l.dialPort = socklnd.DefaultAcceptPort
	}
	if st.Console == "" {
		st.Console = nid.String()
	}
	if st.If == "" {
		a := nid.Addr()
		st.If = netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}).String()
	}
	return selftest.NewConsole(in, st, l.log), func() { in.Close() }, nil
}

// randomStamp is a session stamp: positive as an s64 (the kernel's
// invalid sid has stamp -1), random so that two consoles on one host
// differ.
func randomStamp() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])>>1 | 1
}

// sessionFeatures reads LST_FEATURES (hex, as Lustre's lst) or returns
// every feature.
func sessionFeatures() (uint32, error) {
	v := os.Getenv("LST_FEATURES")
	if v == "" {
		return selftest.FeatsMask, nil
	}
	f, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
	if err != nil || uint32(f)&^selftest.FeatsMask != 0 {
		return 0, fmt.Errorf("LST_FEATURES=%s: known features are %#x", v, selftest.FeatsMask)
	}
	return uint32(f), nil
}

func (l *lst) newSession(args []string) int {
	fs := l.flags("new_session")
	timeout := fs.Int("timeout", 300, "seconds without console contact after which nodes end the session (0: never)")
	force := fs.Bool("force", false, "take nodes away from another console's session")
	ifAddr := fs.String("if", "", "console's IPv4 address (default: the source address towards the first node)")
	port := fs.Int("port", socklnd.DefaultAcceptPort, "nodes' acceptor port")
	netName := fs.String("net", "tcp", "console's LNet network")
	rpcTimeout := fs.Int("rpc-timeout", 10, "seconds to wait for each node's reply")
	sock := fs.String("socket", "", "send console RPCs through the lnetd at this control socket")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		return l.usage("new_session NAME")
	}
	if err := selftest.ValidName("session", pos[0]); err != nil {
		return l.usage("%v", err)
	}
	if st, err := l.load(); err == nil {
		return l.fail(fmt.Errorf("session %q is active (%s): end_session first", st.Name, l.path))
	}
	feats, err := sessionFeatures()
	if err != nil {
		return l.usage("%v", err)
	}
	st := &selftest.State{Name: pos[0], Stamp: randomStamp(), Timeout: *timeout, Force: *force, Net: *netName, If: *ifAddr,
		Port: *port, RPCTimeout: *rpcTimeout, Socket: *sock, Feats: &feats, Groups: []selftest.Group{}, Batches: []selftest.Batch{}}
	if err := l.save(st); err != nil {
		return l.fail(err)
	}
	fmt.Fprintf(l.out, "SESSION: %s FEATURES: %x TIMEOUT: %d FORCE: %s\n", st.Name, feats, st.Timeout, yesNo(st.Force))
	return 0
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

func (l *lst) showSession() int {
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	if l.json {
		l.printJSON(struct {
			Name     string `json:"name"`
			Stamp    uint64 `json:"stamp"`
			Console  string `json:"console"`
			Key      string `json:"key"`
			Features string `json:"features"`
			Timeout  int    `json:"timeout"`
			Force    bool   `json:"force"`
		}{st.Name, st.Stamp, st.Console, l.path, fmt.Sprintf("%x", (&selftest.Console{State: st}).Feats()), st.Timeout, st.Force})
		return 0
	}
	fmt.Fprintf(l.out, "%s ID: %d@%s, KEY: %s FEATURES: %x TIMEOUT: %d FORCE: %s\n", st.Name, st.Stamp, st.Console,
		l.path, (&selftest.Console{State: st}).Feats(), st.Timeout, yesNo(st.Force))
	return 0
}

func (l *lst) endSession(ctx context.Context) int {
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	code := 0
	if len(st.Groups) > 0 {
		c, done, err := l.console(st, 0)
		if err != nil {
			return l.fail(err)
		}
		defer done()
		for _, r := range c.End(ctx) {
			if r.Err != nil {
				fmt.Fprintf(l.errw, "lst: %v did not leave the session: %v\n", r.NID, r.Err)
				code = 1
			}
		}
	}
	if err := os.Remove(l.path); err != nil {
		return l.fail(err)
	}
	fmt.Fprintf(l.out, "session %s ended\n", st.Name)
	return code
}

func (l *lst) addGroup(ctx context.Context, args []string) int {
	if len(args) < 2 {
		return l.usage("add_group NAME NID...")
	}
	nids, err := selftest.ParseNIDs(args[1:])
	if err != nil {
		return l.usage("%v", err)
	}
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	c, done, err := l.console(st, nids[0], nids...)
	if err != nil {
		return l.fail(err)
	}
	defer done()
	res, err := c.AddGroup(ctx, args[0], nids)
	for _, r := range res {
		if r.Err == nil {
			fmt.Fprintf(l.out, "%v are added to session\n", r.NID)
		}
	}
	if err != nil {
		return l.fail(err)
	}
	if err := l.save(st); err != nil {
		return l.fail(err)
	}
	return 0
}

func (l *lst) listGroup(ctx context.Context, args []string) int {
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	type jsonNode struct {
		NID   string `json:"nid"`
		State string `json:"state"`
		Error string `json:"error,omitempty"`
	}
	type jsonGroup struct {
		Name   string     `json:"name"`
		Total  int        `json:"total"`
		Active *int       `json:"active,omitempty"`
		Nodes  []jsonNode `json:"nodes,omitempty"`
	}
	groups := []jsonGroup{}
	if len(args) == 0 {
		for i, g := range st.Groups {
			groups = append(groups, jsonGroup{Name: g.Name, Total: len(g.NIDs)})
			if !l.json {
				fmt.Fprintf(l.out, "%d) %s\n", i+1, g.Name)
			}
		}
		if l.json {
			l.printJSON(map[string]any{"groups": groups})
			return 0
		}
		fmt.Fprintf(l.out, "Total %d groups\n", len(st.Groups))
		return 0
	}
	if l.json {
		defer func() { l.printJSON(map[string]any{"groups": groups}) }()
	}
	c, done, err := l.console(st, 0)
	if err != nil {
		return l.fail(err)
	}
	defer done()
	code := 0
	for _, name := range args {
		nids, err := c.GroupNIDs(name)
		if err != nil {
			return l.fail(err)
		}
		active := 0
		res, states := c.Query(ctx, nids)
		g := jsonGroup{Name: name, Total: len(nids), Active: new(int), Nodes: []jsonNode{}}
		for i, r := range res {
			state := string(states[i])
			n := jsonNode{NID: r.NID.String(), State: strings.ToUpper(state)}
			switch states[i] {
			case selftest.NodeActive:
				active++
			case selftest.NodeDown:
				state, code = "Down ("+r.Err.Error()+")", 1
				n.Error = r.Err.Error()
			default:
				code = 1
			}
			g.Nodes = append(g.Nodes, n)
			if !l.json {
				fmt.Fprintf(l.out, "\t%s\t%s\n", r.NID, state)
			}
		}
		*g.Active = active
		groups = append(groups, g)
		if !l.json {
			fmt.Fprintf(l.out, "Total %d nodes, %d active\n", len(nids), active)
		}
	}
	return code
}

func (l *lst) addBatch(args []string) int {
	if len(args) != 1 {
		return l.usage("add_batch NAME")
	}
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	c := &selftest.Console{State: st}
	if err := c.AddBatch(args[0]); err != nil {
		return l.fail(err)
	}
	if err := l.save(st); err != nil {
		return l.fail(err)
	}
	return 0
}

func (l *lst) listBatch(args []string) int {
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	if l.json {
		type jsonTest struct {
			Index int    `json:"index"`
			Test  string `json:"test"`
		}
		type jsonBatch struct {
			Name  string     `json:"name"`
			Tests []jsonTest `json:"tests"`
		}
		batches := []jsonBatch{}
		for _, b := range st.Batches {
			if len(args) > 0 && args[0] != b.Name {
				continue
			}
			jb := jsonBatch{Name: b.Name, Tests: []jsonTest{}}
			for _, t := range b.Tests {
				jb.Tests = append(jb.Tests, jsonTest{Index: t.Index, Test: t.String()})
			}
			batches = append(batches, jb)
		}
		l.printJSON(map[string]any{"batches": batches})
		return 0
	}
	for i, b := range st.Batches {
		if len(args) > 0 && args[0] != b.Name {
			continue
		}
		fmt.Fprintf(l.out, "%d) %s (%d tests)\n", i+1, b.Name, len(b.Tests))
		if len(args) > 0 {
			for _, t := range b.Tests {
				fmt.Fprintf(l.out, "\ttest %d: %s\n", t.Index, t)
			}
		}
	}
	return 0
}

func (l *lst) addTest(ctx context.Context, args []string) int {
	fs := l.flags("add_test")
	batch := fs.String("batch", "", "batch to add the test to")
	from := fs.String("from", "", "client group")
	to := fs.String("to", "", "server group")
	conc := fs.Int("concurrency", 1, "outstanding RPCs per client (1..1024)")
	dist := fs.String("distribute", "1:1", "client:server mapping a:b (numbers or N)")
	loop := fs.Int("loop", -1, "RPCs per client (-1: until stop)")
	args, testArgs := splitTest(fs, args)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) > 0 {
		return l.usage("unexpected %q before the test (brw ... or ping)", pos)
	}
	if *batch == "" || *from == "" || *to == "" {
		return l.usage("add_test needs --batch, --from and --to")
	}
	spec, err := selftest.ParseTestArgs(testArgs)
	if err != nil {
		return l.usage("%v", err)
	}
	if _, err := selftest.ParseDist(*dist); err != nil {
		return l.usage("%v", err)
	}
	if *loop == 0 {
		return l.usage("--loop 0: give a positive count or -1")
	}
	spec.From, spec.To, spec.Concurrency, spec.Distribute, spec.Loop = *from, *to, *conc, *dist, *loop
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	c, done, err := l.console(st, 0)
	if err != nil {
		return l.fail(err)
	}
	defer done()
	if err := c.AddTest(ctx, *batch, spec); err != nil {
		return l.fail(err)
	}
	if err := l.save(st); err != nil {
		return l.fail(err)
	}
	b, _ := c.Batch(*batch)
	fmt.Fprintf(l.out, "Test was added successfully (batch %s, test %d)\n", *batch, len(b.Tests))
	return 0
}

func (l *lst) batchCmd(ctx context.Context, cmd string, args []string) int {
	force := false
	if cmd == "stop" && len(args) == 2 && (args[0] == "--force" || args[1] == "--force") {
		force = true
		if args[0] == "--force" {
			args = args[1:]
		} else {
			args = args[:1]
		}
	}
	if len(args) != 1 {
		return l.usage("%s BATCH", cmd)
	}
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	c, done, err := l.console(st, 0)
	if err != nil {
		return l.fail(err)
	}
	defer done()
	opc := map[string]uint32{"run": selftest.BatchRun, "stop": selftest.BatchStop, "query": selftest.BatchQuery}[cmd]
	var res []selftest.NodeResult
	if force {
		res, err = c.StopForce(ctx, args[0])
	} else {
		res, err = c.BatchOp(ctx, args[0], opc)
	}
	active := 0
	for i := range res {
		active += int(res[i].Active())
	}
	switch cmd {
	case "run":
		if err == nil {
			fmt.Fprintf(l.out, "%s is running now\n", args[0])
		}
	case "stop":
		if err == nil {
			fmt.Fprintf(l.out, "%s is stopped now\n", args[0])
		}
	case "query":
		state := "idle"
		if active > 0 {
			state = "running"
		}
		if l.json {
			type jsonNode struct {
				NID    string `json:"nid"`
				Active int    `json:"active_tests"`
				Error  string `json:"error,omitempty"`
			}
			nodes := []jsonNode{}
			for _, r := range res {
				n := jsonNode{NID: r.NID.String()}
				if r.Err != nil {
					n.Error = r.Err.Error()
				} else {
					n.Active = int(r.Active())
				}
				nodes = append(nodes, n)
			}
			l.printJSON(map[string]any{"batch": args[0], "state": strings.ToUpper(state), "nodes": nodes})
			break
		}
		for _, r := range res {
			if r.Err == nil {
				fmt.Fprintf(l.out, "\t%s\tactive test instances: %d\n", r.NID, r.Active())
			}
		}
		fmt.Fprintf(l.out, "selftest.Batch %s is %s\n", args[0], state)
	}
	if err != nil {
		return l.fail(err)
	}
	return 0
}

// statLoop samples the groups every delay, count times (0: until ctx
// ends), and reports each interval. It returns the last stats per group
// and whether any node was unreachable.
func statLoop(ctx context.Context, c *selftest.Console, groups []string, delay time.Duration, count int, report func([]selftest.GroupStats)) ([]selftest.GroupStats, error) {
	var all []lnetwire.NID
	members := make([][]lnetwire.NID, len(groups))
	for i, g := range groups {
		nids, err := c.GroupNIDs(g)
		if err != nil {
			return nil, err
		}
		members[i] = nids
		for _, n := range nids {
			if _, dup := indexNID(all, n); !dup {
				all = append(all, n)
			}
		}
	}
	prev := selftest.TakeSample(c.Stat(ctx, all))
	var last []selftest.GroupStats
	for i := 0; count == 0 || i < count; i++ {
		select {
		case <-ctx.Done():
			return last, nil
		case <-time.After(delay):
		}
		cur := selftest.TakeSample(c.Stat(ctx, all))
		last = last[:0:0]
		for gi, g := range groups {
			last = append(last, selftest.ComputeGroup(g, members[gi], prev, cur))
		}
		report(last)
		prev = cur
	}
	return last, nil
}

func indexNID(s []lnetwire.NID, n lnetwire.NID) (int, bool) {
	for i, x := range s {
		if x == n {
			return i, true
		}
	}
	return -1, false
}

func (l *lst) stat(ctx context.Context, args []string) int {
	fs := l.flags("stat")
	delay := fs.Float64("delay", 1, "seconds between samples")
	count := fs.Int("count", 0, "samples to print (0: until interrupted)")
	asJSON := fs.Bool("json", false, "print each sample as one JSON line")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) == 0 {
		return l.usage("stat GROUP...")
	}
	if *delay <= 0 {
		return l.usage("--delay must be positive")
	}
	st, err := l.load()
	if err != nil {
		return l.fail(err)
	}
	c, done, err := l.console(st, 0)
	if err != nil {
		return l.fail(err)
	}
	defer done()
	bad := false
	_, err = statLoop(ctx, c, pos, time.Duration(*delay*float64(time.Second)), *count, func(gs []selftest.GroupStats) {
		if *asJSON {
			b, _ := json.Marshal(map[string]any{"time": time.Now().Format(time.RFC3339Nano), "groups": gs})
			fmt.Fprintf(l.out, "%s\n", b)
		}
		for i := range gs {
			if !*asJSON {
				gs[i].Format(l.out)
			}
			if gs[i].Down > 0 || gs[i].Errors() > 0 {
				bad = true
			}
		}
	})
	if err != nil {
		return l.fail(err)
	}
	if bad {
		return 1
	}
	return 0
}

// QuickResult is the JSON document of `lst quick --json`.
type QuickResult struct {
	Test    selftest.TestSpec       `json:"test"`
	Clients []string                `json:"clients"`
	Servers []string                `json:"servers"`
	Seconds float64                 `json:"seconds"`
	Samples [][]selftest.GroupStats `json:"samples"`
	RPCs    uint64                  `json:"rpcs"`        // test RPCs completed by the clients
	RPCRate float64                 `json:"rpcs_per_s"`  // over the whole run
	MiBRate float64                 `json:"mib_per_s"`   // brw payload over the whole run
	Errors  uint64                  `json:"errors"`      // failed and expired test RPCs on all nodes
	BRWErr  uint64                  `json:"brw_errors"`  // data mismatches and failed brw RPCs
	Down    []string                `json:"unreachable"` // nodes that stopped answering
	OK      bool                    `json:"ok"`
	// Interrupted is set when SIGINT/SIGTERM cut the run short; the
	// totals cover the time it ran.
	Interrupted bool     `json:"interrupted,omitempty"`
	Problems    []string `json:"problems,omitempty"`
}

func (l *lst) quick(ctx context.Context, args []string) int {
	fs := l.flags("quick")
	from := fs.String("from", "", "client NIDs (comma or blank separated; ranges like 127.0.0.[2-3]@tcp)")
	to := fs.String("to", "", "server NIDs")
	seconds := fs.Float64("seconds", 5, "how long to run")
	delay := fs.Float64("delay", 1, "seconds between stat reports")
	conc := fs.Int("concurrency", 1, "outstanding RPCs per client")
	dist := fs.String("distribute", "1:1", "client:server mapping a:b")
	asJSON := fs.Bool("json", false, "print one JSON document instead of the tables")
	force := fs.Bool("force", false, "take nodes from another console's session")
	ifAddr := fs.String("if", "", "console's IPv4 address")
	port := fs.Int("port", socklnd.DefaultAcceptPort, "nodes' acceptor port")
	netName := fs.String("net", "tcp", "console's LNet network")
	rpcTimeout := fs.Int("rpc-timeout", 10, "seconds to wait for a node's reply")
	sock := fs.String("socket", "", "send console RPCs through the lnetd at this control socket")
	args, testArgs := splitTest(fs, args)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) > 0 {
		return l.usage("unexpected %q", pos)
	}
	if *from == "" || *to == "" {
		return l.usage("quick needs --from and --to")
	}
	spec, err := selftest.ParseTestArgs(testArgs)
	if err != nil {
		return l.usage("%v", err)
	}
	if _, err := selftest.ParseDist(*dist); err != nil {
		return l.usage("%v", err)
	}
	if *seconds <= 0 || *delay <= 0 {
		return l.usage("--seconds and --delay must be positive")
	}
	// One report at the end at least: a --delay longer than the run
	// would stretch the run to --delay.
	*delay = min(*delay, *seconds)
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	}
	clients, err := selftest.ParseNIDs(split(*from))
	if err != nil {
		return l.usage("--from: %v", err)
	}
	servers, err := selftest.ParseNIDs(split(*to))
	if err != nil {
		return l.usage("--to: %v", err)
	}
	if len(clients) == 0 || len(servers) == 0 {
		return l.usage("--from and --to need NIDs")
	}
	st := &selftest.State{Name: "quick", Stamp: randomStamp(), Timeout: int(*seconds) + 60, Force: *force, Net: *netName,
		If: *ifAddr, Port: *port, RPCTimeout: *rpcTimeout, Socket: *sock}
	c, done, err := l.console(st, servers[0], clients...)
	if err != nil {
		return l.fail(err)
	}
	defer done()
	res := QuickResult{}
	problem := func(format string, a ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, a...)) }
	spec.From, spec.To, spec.Concurrency, spec.Distribute, spec.Loop = "clients", "servers", *conc, *dist, -1
	setup := func() error {
		if _, err := c.AddGroup(ctx, "clients", clients); err != nil {
			return err
		}
		if _, err := c.AddGroup(ctx, "servers", servers); err != nil {
			return err
		}
		if err := c.AddBatch("quick"); err != nil {
			return err
		}
		if err := c.AddTest(ctx, "quick", spec); err != nil {
			return err
		}
		_, err := c.BatchOp(ctx, "quick", selftest.BatchRun)
		return err
	}
	defer func() {
		// Leave the nodes free for the next run, whatever happened.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Timeout)
		defer cancel()
		for _, r := range c.End(ectx) {
			if r.Err != nil && !*asJSON {
				fmt.Fprintf(l.errw, "lst: %v did not leave the session: %v\n", r.NID, r.Err)
			}
		}
	}()
	if err := setup(); err != nil {
		return l.fail(err)
	}
	st.Batches[0].Tests[0].Loop = -1
	res.Test = st.Batches[0].Tests[0]
	for _, n := range clients {
		res.Clients = append(res.Clients, n.String())
	}
	for _, n := range servers {
		res.Servers = append(res.Servers, n.String())
	}
	if !*asJSON {
		fmt.Fprintf(l.out, "lst quick: %s: %d clients -> %d servers for %gs (console %s)\n", res.Test, len(clients), len(servers), *seconds, st.Console)
	}
	all := c.AllNodes()
	start := selftest.TakeSample(c.Stat(ctx, all))
	n := max(1, int(*seconds / *delay + 0.5))
	_, err = statLoop(ctx, c, []string{"clients", "servers"}, time.Duration(*delay*float64(time.Second)), n, func(gs []selftest.GroupStats) {
		res.Samples = append(res.Samples, gs)
		if !*asJSON {
			for i := range gs {
				gs[i].Format(l.out)
			}
		}
	})
	if err != nil {
		return l.fail(err)
	}
	// Interrupted (SIGINT) or not, stop the batch, wait for the RPCs in
	// flight and read the totals.
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.Timeout)
	defer pcancel()
	if _, err := c.BatchOp(pctx, "quick", selftest.BatchStop); err != nil {
		problem("stop: %v", err)
	} else if err := waitIdle(pctx, c, "quick", c.Timeout); err != nil {
		// RPCs to a dead node wait for their timeout: abort them.
		problem("stop: %v", err)
		if _, err := c.StopForce(pctx, "quick"); err == nil {
			_ = waitIdle(pctx, c, "quick", c.Timeout)
		}
	}
	end := selftest.TakeSample(c.Stat(pctx, all))
	tot := selftest.RunTotals(start, end, clients, servers)
	res.Seconds = tot.Seconds
	for _, nid := range tot.Down {
		res.Down = append(res.Down, nid.String())
		problem("%v: %v", nid, end.Nodes[nid].Err)
	}
	res.RPCs, res.Errors, res.BRWErr = tot.RPCs, tot.Errors(), tot.BRWErrors
	if res.Seconds > 0 {
		res.RPCRate = float64(res.RPCs) / res.Seconds
		res.MiBRate = float64(tot.Bytes) / (1 << 20) / res.Seconds
	}
	if res.Errors > 0 {
		problem("%d RPC errors (%d brw) on the nodes", res.Errors, res.BRWErr)
	}
	if res.RPCs == 0 {
		problem("no test RPC completed")
	}
	res.OK = len(res.Problems) == 0
	res.Interrupted = ctx.Err() != nil
	if *asJSON {
		b, _ := json.MarshalIndent(&res, "", "  ")
		fmt.Fprintf(l.out, "%s\n", b)
	} else {
		fmt.Fprintf(l.out, "[Total] %d RPCs in %.2fs: %.0f RPC/s, %.2f MiB/s, errors %d (brw %d)\n",
			res.RPCs, res.Seconds, res.RPCRate, res.MiBRate, res.Errors, res.BRWErr)
		for _, p := range res.Problems {
			fmt.Fprintf(l.errw, "lst quick: %s\n", p)
		}
	}
	if res.Interrupted {
		fmt.Fprintf(l.errw, "lst quick: interrupted after %.2fs; the totals above cover that time\n", res.Seconds)
		return ExitInterrupted
	}
	if !res.OK {
		return 1
	}
	return 0
}

// ExitInterrupted is the exit code of a run stopped by SIGINT/SIGTERM
// (128 + SIGINT, as a shell reports it).
const ExitInterrupted = 130

// waitIdle waits at most d for a batch to stop.
func waitIdle(ctx context.Context, c *selftest.Console, batch string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.WaitIdle(ctx, batch)
}
