package selftest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"softib/lnet"
	"softib/wire/lnetwire"
)

// State is the console's session: everything lst remembers between
// invocations (the CLI keeps it in a JSON file).
type State struct {
	Name    string `json:"name"`
	Stamp   uint64 `json:"stamp"`
	Console string `json:"console_nid,omitempty"` // NID the session was made from
	Timeout int    `json:"timeout"`               // seconds; 0: nodes never expire it
	Force   bool   `json:"force,omitempty"`
	// Console LNet settings used by every invocation.
	Net  string `json:"net,omitempty"`
	If   string `json:"if,omitempty"`
	Port int    `json:"port,omitempty"`
	// Socket, when set, sends the console RPCs through the lnetd at this
	// control socket instead of a console LNet node (see ProxyOp).
	Socket string `json:"socket,omitempty"`
	// RPCTimeout bounds each console RPC, seconds.
	RPCTimeout int     `json:"rpc_timeout,omitempty"`
	Groups     []Group `json:"groups"`
	Batches    []Batch `json:"batches"`
}

// Group is a named set of node NIDs.
type Group struct {
	Name string   `json:"name"`
	NIDs []string `json:"nids"`
}

// Batch is a named list of tests.
type Batch struct {
	Name  string     `json:"name"`
	ID    uint64     `json:"id"`
	Tests []TestSpec `json:"tests"`
}

// TestSpec is one add_test.
type TestSpec struct {
	Index       int    `json:"index"`
	Kind        string `json:"kind"` // "brw" or "ping"
	From        string `json:"from"`
	To          string `json:"to"`
	Concurrency int    `json:"concurrency"`
	Loop        int    `json:"loop"`       // RPCs per client, -1: until stopped
	Distribute  string `json:"distribute"` // a:b
	Op          string `json:"op,omitempty"`
	Size        int    `json:"size,omitempty"`
	Check       string `json:"check,omitempty"`
}

// String prints the test like its add_test command line.
func (t TestSpec) String() string {
	s := fmt.Sprintf("--from %s --to %s --concurrency %d --distribute %s --loop %d %s", t.From, t.To, t.Concurrency, t.Distribute, t.Loop, t.Kind)
	if t.Kind == "brw" {
		s += fmt.Sprintf(" %s size=%s check=%s", t.Op, FormatSize(t.Size), t.Check)
	}
	return s
}

// FormatSize prints 4096 as 4K and 1048576 as 1M.
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "K"
	}
	return strconv.Itoa(n)
}

// ParseSize parses 4096, 4K, 4k, 1M.
func ParseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K") || strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M") || strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 || v*mult > lnet.MTU {
		return 0, fmt.Errorf("size=%s: want 1..1M bytes (e.g. 4K, 1M)", s)
	}
	return v * mult, nil
}

// ParseTestArgs parses the test part of add_test: "ping" or
// "brw read|write [size=N] [check=none|simple|full]" (lst defaults:
// read, 4K, none).
func ParseTestArgs(args []string) (TestSpec, error) {
	if len(args) == 0 {
		return TestSpec{}, errors.New("missing test: brw read|write size=... check=... or ping")
	}
	t := TestSpec{Kind: args[0]}
	switch args[0] {
	case "ping":
		if len(args) > 1 {
			return t, fmt.Errorf("ping takes no parameters, got %q", args[1:])
		}
		return t, nil
	case "brw":
	default:
		return t, fmt.Errorf("unknown test %q: brw or ping", args[0])
	}
	t.Op, t.Size, t.Check = "read", 4096, "none"
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "read", "write":
			t.Op = k
		case "size":
			n, err := ParseSize(v)
			if err != nil {
				return t, err
			}
			t.Size = n
		case "check":
			if _, err := ParseCheck(v); err != nil {
				return t, err
			}
			t.Check = v
		default:
			return t, fmt.Errorf("unknown brw parameter %q (read, write, size=N, check=none|simple|full)", a)
		}
	}
	return t, nil
}

// ParseNIDs parses NIDs, allowing one bracketed range in the address
// like lst: "192.168.1.[1-4]@tcp", "127.0.0.[2,3,5-6]@tcp".
func ParseNIDs(args []string) ([]lnetwire.NID, error) {
	var out []lnetwire.NID
	for _, a := range args {
		for _, f := range strings.Fields(strings.ReplaceAll(a, " ", "")) {
			exp, err := expandRange(f)
			if err != nil {
				return nil, err
			}
			for _, s := range exp {
				n, err := lnetwire.ParseNID(s)
				if err != nil {
					return nil, err
				}
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		}
	}
	return out, nil
}

func expandRange(s string) ([]string, error) {
	i := strings.IndexByte(s, '[')
	if i < 0 {
		return []string{s}, nil
	}
	j := strings.IndexByte(s[i:], ']')
	if j < 0 {
		return nil, fmt.Errorf("NID %q: unclosed '['", s)
	}
	pre, list, post := s[:i], s[i+1:i+j], s[i+j+1:]
	var out []string
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a || b-a > 4096 {
			return nil, fmt.Errorf("NID %q: bad range %q", s, part)
		}
		for v := a; v <= b; v++ {
			out = append(out, pre+strconv.Itoa(v)+post)
		}
	}
	return out, nil
}

// Console drives nodes' selftest services over LNet from one instance.
// It holds no session state of its own beyond State.
type Console struct {
	call    Caller
	State   *State
	Timeout time.Duration
}

// NewConsole returns a console on in for the session st.
func NewConsole(in *lnet.Instance, st *State, log *slog.Logger) *Console {
	if log == nil {
		log = slog.Default()
	}
	return NewConsoleVia(newEndpoint(in, log).callBytes, st)
}

// NewConsoleVia returns a console sending its RPCs through call (e.g.
// ProxyCaller of a local lnetd).
func NewConsoleVia(call Caller, st *State) *Console {
	to := time.Duration(st.RPCTimeout) * time.Second
	if to <= 0 {
		to = 10 * time.Second
	}
	return &Console{call: call, State: st, Timeout: to}
}

// SID returns the session id.
func (c *Console) SID() SID {
	n, _ := lnetwire.ParseNID(c.State.Console)
	return SID{NID: n, Stamp: c.State.Stamp}
}

// NodeResult is the outcome of one console RPC to one node.
type NodeResult struct {
	NID lnetwire.NID
	Rep Msg
	Err error
}

// each sends a request built by mk to every node in parallel.
func (c *Console) each(ctx context.Context, nids []lnetwire.NID, mk func(i int, m *Msg)) []NodeResult {
	res := make([]NodeResult, len(nids))
	var wg sync.WaitGroup
	for i, n := range nids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var m Msg
			mk(i, &m)
			m.SID = c.SID()
			res[i].NID = n
			rep, err := c.call(ctx, n, m.Append(nil), c.Timeout)
			if err != nil {
				res[i].Err = err // names the request and the node
				return
			}
			r := &res[i].Rep
			err = ParseMsg(rep, r)
			switch {
			case err != nil:
			case r.Type != m.Type.ReplyType():
				err = fmt.Errorf("%w: %v to a %v", ErrBadType, r.Type, m.Type)
			case r.Status != 0:
				err = &StatusError{Errno: syscall.Errno(r.Status), Type: r.Type}
			}
			if err != nil {
				res[i].Err = fmt.Errorf("%v to %v: %w", m.Type, n, err)
			}
		}()
	}
	wg.Wait()
	return res
}

// firstErr joins the errors of failed nodes.
func firstErr(what string, res []NodeResult) error {
	var errs []error
	for _, r := range res {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s %v: %w", what, r.NID, r.Err))
		}
	}
	return errors.Join(errs...)
}

// Group returns the named group.
func (c *Console) Group(name string) (*Group, bool) {
	for i := range c.State.Groups {
		if c.State.Groups[i].Name == name {
			return &c.State.Groups[i], true
		}
	}
	return nil, false
}

// Batch returns the named batch.
func (c *Console) Batch(name string) (*Batch, bool) {
	for i := range c.State.Batches {
		if c.State.Batches[i].Name == name {
			return &c.State.Batches[i], true
		}
	}
	return nil, false
}

// GroupNIDs returns a group's NIDs.
func (c *Console) GroupNIDs(name string) ([]lnetwire.NID, error) {
	g, ok := c.Group(name)
	if !ok {
		return nil, fmt.Errorf("no group %q (add it with add_group)", name)
	}
	return ParseNIDs(g.NIDs)
}

// checkName validates a group or batch name.
func checkName(kind, s string) error {
	if s == "" || len(s) >= NameSize || strings.ContainsAny(s, " \t\x00") {
		return fmt.Errorf("bad %s name %q: 1..%d characters, no blanks", kind, s, NameSize-1)
	}
	return nil
}

// AddGroup joins nodes to the session (MKSN) and records the group. It
// fails, recording nothing, unless every node joined.
func (c *Console) AddGroup(ctx context.Context, name string, nids []lnetwire.NID) ([]NodeResult, error) {
	if err := checkName("group", name); err != nil {
		return nil, err
	}
	if _, dup := c.Group(name); dup {
		return nil, fmt.Errorf("group %q already exists", name)
	}
	if len(nids) == 0 {
		return nil, errors.New("a group needs at least one NID")
	}
	res := c.each(ctx, nids, func(_ int, m *Msg) {
		*m = Msg{Type: MsgMakeSessReq, Name: c.State.Name, Timeout: uint32(c.State.Timeout), Force: c.State.Force}
	})
	for i, r := range res {
		var se *StatusError
		if errors.As(r.Err, &se) && se.Errno == 16 {
			res[i].Err = fmt.Errorf("%w: node is in session %q of another console (end it there, or new_session --force)", r.Err, r.Rep.Name)
		}
	}
	if err := firstErr("join", res); err != nil {
		return res, err
	}
	g := Group{Name: name}
	for _, n := range nids {
		g.NIDs = append(g.NIDs, n.String())
	}
	c.State.Groups = append(c.State.Groups, g)
	return res, nil
}

// AddBatch records an empty batch.
func (c *Console) AddBatch(name string) error {
	if err := checkName("batch", name); err != nil {
		return err
	}
	if _, dup := c.Batch(name); dup {
		return fmt.Errorf("batch %q already exists", name)
	}
	c.State.Batches = append(c.State.Batches, Batch{Name: name, ID: uint64(len(c.State.Batches) + 1)})
	return nil
}

// testBody converts a spec to the wire form (without servers).
func testBody(t *TestSpec) (TestBody, error) {
	b := TestBody{Index: uint32(t.Index), Concurrency: uint32(t.Concurrency), Loop: int32(t.Loop)}
	switch t.Kind {
	case "ping":
		b.Service = ServicePing
	case "brw":
		b.Service = ServiceBRW
		b.Size = uint32(t.Size)
		b.BRWOp = BRWRead
		if t.Op == "write" {
			b.BRWOp = BRWWrite
		}
		ck, err := ParseCheck(t.Check)
		if err != nil {
			return b, err
		}
		b.Check = ck
	default:
		return b, fmt.Errorf("unknown test kind %q", t.Kind)
	}
	return b, nil
}

// AddTest adds a test to a batch: the servers learn it first, then each
// client gets its servers according to the distribution.
func (c *Console) AddTest(ctx context.Context, batchName string, t TestSpec) error {
	b, ok := c.Batch(batchName)
	if !ok {
		return fmt.Errorf("no batch %q (add it with add_batch)", batchName)
	}
	if t.Concurrency == 0 {
		t.Concurrency = 1
	}
	if t.Concurrency < 1 || t.Concurrency > 1024 {
		return fmt.Errorf("--concurrency %d: want 1..1024", t.Concurrency)
	}
	if t.Distribute == "" {
		t.Distribute = "1:1"
	}
	if t.Loop == 0 {
		t.Loop = -1
	}
	dist, err := ParseDist(t.Distribute)
	if err != nil {
		return err
	}
	clients, err := c.GroupNIDs(t.From)
	if err != nil {
		return err
	}
	servers, err := c.GroupNIDs(t.To)
	if err != nil {
		return err
	}
	t.Index = len(b.Tests) + 1
	body, err := testBody(&t)
	if err != nil {
		return err
	}
	if len(servers) > MaxServers {
		return fmt.Errorf("group %q has %d nodes, at most %d servers per test", t.To, len(servers), MaxServers)
	}
	res := c.each(ctx, servers, func(_ int, m *Msg) {
		*m = Msg{Type: MsgTestReq, BID: b.ID, Test: body}
	})
	if err := firstErr("add test on server", res); err != nil {
		return err
	}
	mapping := dist.Map(len(clients), len(servers))
	res = c.each(ctx, clients, func(i int, m *Msg) {
		tb := body
		tb.Client = true
		for _, j := range mapping[i] {
			tb.Servers = append(tb.Servers, lnetwire.ProcessID{NID: servers[j], PID: lnetwire.PIDLustre})
		}
		*m = Msg{Type: MsgTestReq, BID: b.ID, Test: tb}
	})
	if err := firstErr("add test on client", res); err != nil {
		return err
	}
	b.Tests = append(b.Tests, t)
	return nil
}

// batchNodes returns every node taking part in a batch.
func (c *Console) batchNodes(b *Batch) ([]lnetwire.NID, error) {
	var out []lnetwire.NID
	for _, t := range b.Tests {
		for _, g := range []string{t.To, t.From} {
			nids, err := c.GroupNIDs(g)
			if err != nil {
				return nil, err
			}
			for _, n := range nids {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		}
	}
	return out, nil
}

// BatchOp runs, stops or queries a batch on all its nodes.
func (c *Console) BatchOp(ctx context.Context, name string, opc uint32) ([]NodeResult, error) {
	b, ok := c.Batch(name)
	if !ok {
		return nil, fmt.Errorf("no batch %q", name)
	}
	if len(b.Tests) == 0 {
		return nil, fmt.Errorf("batch %q has no tests (add_test --batch %s ...)", name, name)
	}
	nodes, err := c.batchNodes(b)
	if err != nil {
		return nil, err
	}
	res := c.each(ctx, nodes, func(_ int, m *Msg) { *m = Msg{Type: MsgBatchReq, BID: b.ID, Opc: opc} })
	return res, firstErr("batch", res)
}

// AllNodes returns every node of every group.
func (c *Console) AllNodes() []lnetwire.NID {
	var out []lnetwire.NID
	for _, g := range c.State.Groups {
		nids, _ := ParseNIDs(g.NIDs)
		for _, n := range nids {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// Stat queries the counters of nodes (STAT).
func (c *Console) Stat(ctx context.Context, nids []lnetwire.NID) []NodeResult {
	return c.each(ctx, nids, func(_ int, m *Msg) { *m = Msg{Type: MsgStatReq} })
}

// End removes every node from the session (RMSN).
func (c *Console) End(ctx context.Context) []NodeResult {
	return c.each(ctx, c.AllNodes(), func(_ int, m *Msg) { *m = Msg{Type: MsgRemoveSesReq} })
}
