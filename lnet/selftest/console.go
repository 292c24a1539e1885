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
	// Timeout is the console's idle timeout in seconds (lst
	// new_session --timeout). The nodes end a session on their own
	// timeout (the kernel's session_timeout, 100 s by default, reported
	// in MKSN replies) when no console RPC reaches them.
	Timeout int  `json:"timeout"`
	Force   bool `json:"force,omitempty"`
	// Feats are the session features asked for (LST_FEATURES; default
	// FeatsMask).
	Feats *uint32 `json:"features,omitempty"`
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
	Offset      int    `json:"offset,omitempty"` // brw off=: page offset of the client's buffer
	Check       string `json:"check,omitempty"`
}

// String prints the test like its add_test command line.
func (t TestSpec) String() string {
	s := fmt.Sprintf("--from %s --to %s --concurrency %d --distribute %s --loop %d %s", t.From, t.To, t.Concurrency, t.Distribute, t.Loop, t.Kind)
	if t.Kind == "brw" {
		s += fmt.Sprintf(" %s size=%s check=%s", t.Op, FormatSize(t.Size), t.Check)
		if t.Offset != 0 {
			s += fmt.Sprintf(" off=%d", t.Offset)
		}
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
	if err != nil || v <= 0 || v*mult > lnet.MTU || v*mult%wordSize != 0 {
		return 0, fmt.Errorf("size=%s: want 8..1M bytes, a multiple of 8 (e.g. 4K, 1M)", s)
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
		case "off":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n%wordSize != 0 {
				return t, fmt.Errorf("off=%s: want a non-negative multiple of 8", v)
			}
			t.Offset = n % pageSize
		default:
			return t, fmt.Errorf("unknown brw parameter %q (read, write, size=N, off=N, check=none|simple|full)", a)
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

// Console drives nodes' selftest services from one LNet instance (or
// through a Caller), sending the requests Lustre's console does
// (conrpc.c). It holds no session state of its own beyond State.
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
	return NewConsoleVia(newEndpoint(in, log, nil).callBytes, st)
}

// NewConsoleVia returns a console sending its RPCs through call (e.g.
// ProxyCaller of a local lnetd).
func NewConsoleVia(call Caller, st *State) *Console {
	to := time.Duration(st.RPCTimeout) * time.Second
	if to <= 0 {
		to = 30 * time.Second // LST_TRANS_TIMEOUT
	}
	return &Console{call: call, State: st, Timeout: to}
}

// SID returns the session id.
func (c *Console) SID() SID {
	n, err := lnetwire.ParseNID(c.State.Console)
	if err != nil {
		n = 0
	}
	return SID{NID: n, Stamp: c.State.Stamp}
}

// Feats returns the session features.
func (c *Console) Feats() uint32 {
	if c.State.Feats != nil {
		return *c.State.Feats
	}
	return FeatsMask
}

// NodeResult is the outcome of one console RPC to one node. Rep is the
// reply when one came (also with a non-zero status).
type NodeResult struct {
	NID lnetwire.NID
	Rep Msg
	Err error
}

// Active returns a BATCH reply's count of active tests (0 without one).
func (r *NodeResult) Active() uint32 {
	if r.Rep == nil || r.Rep.Type() != MsgBatchRep {
		return 0
	}
	return r.Rep.BatchRep().Active()
}

// Counters returns a STAT reply's counters (zero without one).
func (r *NodeResult) Counters() Counters {
	if r.Rep == nil || r.Rep.Type() != MsgStatRep {
		return Counters{}
	}
	return r.Rep.StatRep().Counters()
}

// each sends a request built by mk to every node in parallel; mk may
// return bulk for the node to GET.
func (c *Console) each(ctx context.Context, nids []lnetwire.NID, t MsgType, mk func(i int, m Msg) []byte) []NodeResult {
	res := make([]NodeResult, len(nids))
	var wg sync.WaitGroup
	for i, n := range nids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := NewMsg(t, c.Feats())
			m.SetReqSID(c.SID())
			bulk := mk(i, m)
			res[i].NID = n
			raw, err := c.call(ctx, n, m, bulk, c.Timeout)
			if err != nil {
				res[i].Err = err // names the request and the node
				return
			}
			rep, _, err := Parse(raw)
			switch {
			case err != nil:
			case rep.Type() != t.ReplyType():
				err = fmt.Errorf("%w: %v to a %v", ErrBadType, rep.Type(), t)
			case rep.Status() != 0:
				res[i].Rep = rep
				err = &StatusError{Errno: syscall.Errno(rep.Status()), Type: rep.Type()}
			default:
				res[i].Rep = rep
			}
			if err != nil {
				res[i].Err = fmt.Errorf("%v to %v: %w", t, n, err)
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

// ValidName validates a session, group or batch name (kind names it in
// the error).
func ValidName(kind, s string) error { return checkName(kind, s) }

// AddGroup joins nodes to the session (MKSN) and records the group. It
// fails, recording nothing, unless every node joined. Nodes already in
// a group of the session are not asked again: a node counts the MKSNs
// of its console and leaves only when as many RMSNs came.
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
	joined := c.AllNodes()
	var ask []lnetwire.NID
	for _, n := range nids {
		if !slices.Contains(joined, n) {
			ask = append(ask, n)
		}
	}
	res := c.each(ctx, ask, MsgMakeSessReq, func(_ int, m Msg) []byte {
		mk := m.MksnReq()
		mk.SetForce(c.State.Force)
		mk.SetName(c.State.Name)
		return nil
	})
	for i, r := range res {
		var se *StatusError
		switch {
		case errors.As(r.Err, &se) && se.Errno == syscall.EBUSY:
			res[i].Err = fmt.Errorf("%w: node is in session %q of %v (end it there, or new_session --force)",
				r.Err, r.Rep.MksnRep().Name(), r.Rep.ReplySID().NID)
		case r.Err == nil && r.Rep.Feats() != c.Feats():
			res[i].Err = fmt.Errorf("%v: session features %#x, the console's are %#x (set LST_FEATURES)",
				MsgMakeSessRep, r.Rep.Feats(), c.Feats())
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

// setTestParams writes a test's service and parameters (lstcon_testrpc_prep).
func (c *Console) setTestParams(tr TestReq, t *TestSpec) error {
	switch t.Kind {
	case "ping":
		tr.SetService(ServicePing)
		tr.SetPing(0, 0)
		return nil
	case "brw":
	default:
		return fmt.Errorf("unknown test kind %q", t.Kind)
	}
	tr.SetService(ServiceBRW)
	op := uint32(BRWRead)
	if t.Op == "write" {
		op = BRWWrite
	}
	ck, err := ParseCheck(t.Check)
	if err != nil {
		return err
	}
	if c.Feats()&FeatBulkLen == 0 {
		tr.SetBulkV0(op, uint32((t.Size+pageSize-1)/pageSize), ck)
	} else {
		tr.SetBulkV1(uint16(op), uint16(ck), uint32(t.Size), uint32(t.Offset))
	}
	return nil
}

// AddTest adds a test to a batch, as lstcon_test_nodes_add: the servers
// learn it first, then each client gets its destinations (a bulk the
// client GETs) according to the distribution. Loop counts RPCs per test
// unit: every client runs Concurrency units per destination.
func (c *Console) AddTest(ctx context.Context, batchName string, t TestSpec) error {
	b, ok := c.Batch(batchName)
	if !ok {
		return fmt.Errorf("no batch %q (add it with add_batch)", batchName)
	}
	if t.Concurrency == 0 {
		t.Concurrency = 1
	}
	if t.Concurrency < 1 || t.Concurrency > MaxConcurrency {
		return fmt.Errorf("--concurrency %d: want 1..%d", t.Concurrency, MaxConcurrency)
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
	if err := c.setTestParams(make(TestReq, MsgSize), &t); err != nil {
		return err
	}
	mapping := dist.Map(len(clients), len(servers))
	span := len(mapping[0])
	if span > IDsPerPage {
		return fmt.Errorf("--distribute %s: %d servers per client, at most %d", t.Distribute, span, IDsPerPage)
	}
	src := dist.Src
	if src <= 0 || src > len(clients) {
		src = len(clients)
	}
	// Servers: no destinations; loop is how many RPCs they may expect
	// at once (the kernel sizes its buffers with it).
	ndist := (len(clients) + src - 1) / src
	nspan := (len(servers) + span - 1) / span
	nmax := (ndist + nspan - 1) / nspan
	fill := func(m Msg, client bool) TestReq {
		tr := m.TestReq()
		tr.SetBID(b.ID)
		tr.SetConcur(uint32(t.Concurrency))
		tr.SetIsClient(client)
		tr.SetStopOnErr(true)
		_ = c.setTestParams(tr, &t)
		return tr
	}
	res := c.each(ctx, servers, MsgTestReq, func(_ int, m Msg) []byte {
		tr := fill(m, false)
		tr.SetLoop(int32(nmax * src * t.Concurrency))
		return nil
	})
	if err := firstErr("add test on server", res); err != nil {
		return err
	}
	res = c.each(ctx, clients, MsgTestReq, func(i int, m Msg) []byte {
		tr := fill(m, true)
		tr.SetLoop(int32(t.Loop))
		tr.SetNDest(uint32(len(mapping[i])))
		bulk := make([]byte, DestListLen(len(mapping[i])))
		for k, j := range mapping[i] {
			PutDest(bulk, k, lnetwire.ProcessID{NID: servers[j], PID: lnetwire.PIDLustre})
		}
		return bulk
	})
	if err := firstErr("add test on client", res); err != nil {
		return err
	}
	b.Tests = append(b.Tests, t)
	return nil
}

// batchNodes returns a batch's client nodes, and its server nodes.
func (c *Console) batchNodes(b *Batch) (clients, servers []lnetwire.NID, err error) {
	add := func(out []lnetwire.NID, g string) ([]lnetwire.NID, error) {
		nids, err := c.GroupNIDs(g)
		if err != nil {
			return nil, err
		}
		for _, n := range nids {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
		return out, nil
	}
	for _, t := range b.Tests {
		if clients, err = add(clients, t.From); err != nil {
			return nil, nil, err
		}
		if servers, err = add(servers, t.To); err != nil {
			return nil, nil, err
		}
	}
	return clients, servers, nil
}

// BatchOp runs or stops a batch on its client nodes, or queries it on
// its clients and servers (as lst run, stop, query). A stop lets the
// RPCs in flight finish; StopForce aborts them.
func (c *Console) BatchOp(ctx context.Context, name string, opc uint32) ([]NodeResult, error) {
	return c.batchOp(ctx, name, opc, false)
}

// StopForce stops a batch, aborting its RPCs in flight (lst stop --force).
func (c *Console) StopForce(ctx context.Context, name string) ([]NodeResult, error) {
	return c.batchOp(ctx, name, BatchStop, true)
}

func (c *Console) batchOp(ctx context.Context, name string, opc uint32, force bool) ([]NodeResult, error) {
	b, ok := c.Batch(name)
	if !ok {
		return nil, fmt.Errorf("no batch %q", name)
	}
	if len(b.Tests) == 0 {
		return nil, fmt.Errorf("batch %q has no tests (add_test --batch %s ...)", name, name)
	}
	clients, servers, err := c.batchNodes(b)
	if err != nil {
		return nil, err
	}
	nodes := clients
	if opc == BatchQuery {
		for _, n := range servers {
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
	}
	res := c.each(ctx, nodes, MsgBatchReq, func(_ int, m Msg) []byte {
		br := m.BatchReq()
		br.SetBID(b.ID)
		br.SetOpc(opc)
		if force {
			br.SetArg(1)
		}
		return nil
	})
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
	return c.each(ctx, nids, MsgStatReq, func(int, Msg) []byte { return nil })
}

// NodeState is a node's state as list_group shows it (LST_NODE_*).
type NodeState string

// Node states.
const (
	NodeActive  NodeState = "Active"  // in this session
	NodeBusy    NodeState = "Busy"    // in another console's session
	NodeDown    NodeState = "Down"    // no reply
	NodeUnknown NodeState = "Unknown" // in no session
)

// Query asks nodes which session they are in (DEBUG, as the console's
// session query and pinger): the replies also restart the nodes'
// session timers.
func (c *Console) Query(ctx context.Context, nids []lnetwire.NID) ([]NodeResult, []NodeState) {
	res := c.each(ctx, nids, MsgDebugReq, func(int, Msg) []byte { return nil })
	st := make([]NodeState, len(res))
	for i, r := range res {
		var se *StatusError
		switch {
		case errors.As(r.Err, &se) && se.Errno == syscall.ESRCH:
			st[i] = NodeUnknown
		case r.Err != nil && r.Rep == nil:
			st[i] = NodeDown
		case r.Rep.ReplySID() == c.SID():
			st[i] = NodeActive
		default:
			st[i] = NodeBusy
		}
	}
	return res, st
}

// End removes every node from the session (RMSN); a node in no session
// (ESRCH) counts as removed.
func (c *Console) End(ctx context.Context) []NodeResult {
	res := c.each(ctx, c.AllNodes(), MsgRemoveSesReq, func(int, Msg) []byte { return nil })
	for i, r := range res {
		var se *StatusError
		if errors.As(r.Err, &se) && se.Errno == syscall.ESRCH {
			res[i].Err = nil
		}
	}
	return res
}

// WaitIdle queries a batch until no test of it runs on any node, or ctx
// ends.
func (c *Console) WaitIdle(ctx context.Context, name string) error {
	for {
		res, err := c.BatchOp(ctx, name, BatchQuery)
		if err != nil {
			return err
		}
		active := uint32(0)
		for i := range res {
			active += res[i].Active()
		}
		if active == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("batch %s still running: %w", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
