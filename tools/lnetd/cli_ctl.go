package lnetd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// ctlUsage lists the lnetctl commands.
const ctlUsage = `usage: softib lnetctl [--socket PATH] [--json] <object> <action> [flags]

  net add --net tcp --if 127.0.0.2[,eth1] [--nid NID] [--peer-timeout S]
          [--peer-credits N] [--peer-buffer-credits N] [--credits N]
          [--conns-per-peer N] [--accept-port N] [--cpt "[0]"]
  net del --net tcp
  net show [--net tcp] [-v]
  peer add --prim_nid NID [--nid NID,...] [--non_mr] [--lock_prim]
  peer del --prim_nid NID [--nid NID,...]
  peer show [--nid NID] [-v]
  peer set --nid NID --health VALUE
  net set --nid NID --health VALUE
  udsp add [--src EXPR] [--dst EXPR] [--rte EXPR] [--priority P] [--idx N]; udsp del --idx N|--all; udsp show [--idx N]
  route add --net NET --gateway NID [--hop N] [--priority N]
  route del --net NET --gateway NID
  route show [--net NET] [--gateway NID] [--hop N] [-v]
  routing show
  ping NID... [--timeout 5] [--source NID]
  lnet configure | unconfigure   (unconfigure: every net but lo is deleted)
  debug recovery --local | --peer   (NIs whose health is below 1000)
  discover [--force] NID...
  discover --primary NID...      (LNetPrimaryNID of each NID; softib)
  fault drop add -s SRC -d DST -r RATE|-i SECS [-p PORTAL] [-m PUT|ACK|GET|REPLY]
          [-o LOCAL_NID] [-x] [-n] [-e HEALTH_ERROR]...   (SRC/DST: NID, *@net or *)
  fault delay add -s SRC -d DST -r RATE|-i SECS -l LATENCY [-p PORTAL] [-m TYPE]
  fault drop|delay del -s SRC -d DST | --all
  fault drop|delay show | reset
  stats show | stats reset
  global show
  set <tunable> <value>          (e.g. set transaction_timeout 30)
  export [--backup] [FILE]       (YAML that import accepts)
  import [--del] FILE            (FILE "-" reads stdin)
  test put|get --nid NID [--size N] [--bits N] [--seed N] [--offset N]
          [--count N] [--noack] [--portal P] [--timeout 30s]
  test show
  test md add --portal P --bits N --size N [--threshold N]
          [--options put,get,truncate,manage_remote,ack_disable] [--retain]
  test md del --id N
  test lazy --portal P [--clear]

Works against a running 'softib lnetd' (default socket %s).
Show commands print YAML in lnetctl's shape, or JSON with --json.
`

// ctl is one lnetctl invocation.
type ctl struct {
	out, errw io.Writer
	in        io.Reader
	json      bool
	sock      string
	cl        *Client
}

// RunCtl is `softib lnetctl`. It returns the exit code: 0 success, 1 a
// failed operation, 2 a bad command line.
func RunCtl(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &ctl{out: stdout, errw: stderr, in: stdin, sock: DefaultSocketPath()}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--json" || a == "-json":
			c.json = true
		case a == "--socket" || a == "-socket":
			if i+1 >= len(args) {
				fmt.Fprintln(stderr, "lnetctl: --socket needs a path")
				return 2
			}
			i++
			c.sock = args[i]
		case strings.HasPrefix(a, "--socket="):
			c.sock = strings.TrimPrefix(a, "--socket=")
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		fmt.Fprintf(stderr, ctlUsage, DefaultSocketPath())
		if len(rest) == 0 {
			return 2
		}
		return 0
	}
	defer func() {
		if c.cl != nil {
			c.cl.Close()
		}
	}()
	return c.run(ctx, rest)
}

func (c *ctl) usageErr(format string, args ...any) int {
	fmt.Fprintf(c.errw, "lnetctl: "+format+"\n", args...)
	fmt.Fprintf(c.errw, "run `softib lnetctl help` for the commands\n")
	return 2
}

// call sends one request, connecting first.
func (c *ctl) call(ctx context.Context, op string, args, result any) error {
	if c.cl == nil {
		cl, err := Dial(c.sock)
		if err != nil {
			return err
		}
		c.cl = cl
	}
	return c.cl.Call(ctx, op, args, result)
}

// fail prints an error: lnetctl's YAML error block for operation errors,
// then a plain line saying what went wrong and what to do.
func (c *ctl) fail(err error) int {
	var oe *OpError
	if errors.As(err, &oe) {
		if c.json {
			c.errw.Write(JSON(oe.Doc()))
		} else {
			c.errw.Write(YAML(oe.Doc()))
		}
	}
	fmt.Fprintf(c.errw, "lnetctl: %v\n", err)
	return 1
}

// print writes a document as YAML or JSON.
func (c *ctl) print(doc Map) {
	if c.json {
		c.out.Write(JSON(doc))
		return
	}
	c.out.Write(YAML(doc))
}

// flags makes a FlagSet for a subcommand; parse interleaves flags and
// positional arguments as lnetctl does.
func (c *ctl) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.errw)
	return fs
}

func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
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

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (c *ctl) run(ctx context.Context, args []string) int {
	obj, rest := args[0], args[1:]
	action := ""
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		action, rest = rest[0], rest[1:]
	}
	switch obj {
	case "net":
		return c.net(ctx, action, rest)
	case "peer":
		return c.peer(ctx, action, rest)
	case "udsp":
		return c.udsp(ctx, action, rest)
	case "route":
		return c.route(ctx, action, rest)
	case "lnet":
		return c.lnetCmd(ctx, action, rest)
	case "debug":
		return c.debugCmd(ctx, action, rest)
	case "routing":
		if action == "show" || action == "" {
			return c.show(ctx, "routing.show", nil)
		}
	case "ping":
		if action != "" {
			rest = append([]string{action}, rest...)
		}
		return c.ping(ctx, rest)
	case "stats":
		switch action {
		case "show", "":
			return c.show(ctx, "stats.show", nil)
		case "reset":
			return c.simple(ctx, "stats.reset", nil)
		}
	case "global":
		if action == "show" || action == "" {
			return c.show(ctx, "global.show", nil)
		}
	case "set":
		if action == "" || len(rest) != 1 {
			return c.usageErr("usage: set <tunable> <value> (tunables: %s)", strings.Join(settableNames(), ", "))
		}
		return c.simple(ctx, "set", SetArgs{Name: action, Value: rest[0]})
	case "export":
		if action != "" {
			rest = append([]string{action}, rest...)
		}
		return c.export(ctx, rest)
	case "import":
		if action != "" {
			rest = append([]string{action}, rest...)
		}
		return c.importCmd(ctx, rest)
	case "test":
		return c.test(ctx, action, rest)
	case "fault": // fault.go
		return c.fault(ctx, action, rest)
	case "discover": // fault.go
		if action != "" {
			rest = append([]string{action}, rest...)
		}
		return c.discover(ctx, rest)
	default:
		return c.usageErr("unknown command %q", obj)
	}
	return c.usageErr("unknown action %q for %s", action, obj)
}

func (c *ctl) show(ctx context.Context, op string, args any) int {
	var doc Map
	if err := c.call(ctx, op, args, &doc); err != nil {
		return c.fail(err)
	}
	c.print(doc)
	return 0
}

func (c *ctl) simple(ctx context.Context, op string, args any) int {
	if err := c.call(ctx, op, args, nil); err != nil {
		return c.fail(err)
	}
	return 0
}

func (c *ctl) net(ctx context.Context, action string, args []string) int {
	fs := c.flags("net " + action)
	netName := fs.String("net", "", "network (tcp, tcp1, ...)")
	switch action {
	case "set":
		nid := fs.String("nid", "", "local NID")
		return c.setHealth(ctx, "net", fs, nid, args)
	case "add":
		ifs := fs.String("if", "", "interfaces or IPv4 addresses, comma separated")
		nid := fs.String("nid", "", "NID (optional; default: address of the first interface)")
		pt := fs.Int("peer-timeout", -1, "seconds before a silent peer is dead (0 off)")
		pc := fs.Int("peer-credits", -1, "credits per peer")
		pbc := fs.Int("peer-buffer-credits", -1, "router buffer credits per peer")
		cr := fs.Int("credits", -1, "NI credits")
		cpp := fs.Int("conns-per-peer", -1, "connections per peer (socklnd, o2iblnd)")
		port := fs.Int("accept-port", -1, "acceptor port of this NI (softib)")
		tos := fs.Int("tos", -2, "type of service of the NI's connections (o2ib: -1 none, 0..255; tcp: -1 only)")
		cpt := fs.String("cpt", "", "CPT list (stored)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if *netName == "" || (*ifs == "" && *nid == "") {
			return c.usageErr("net add needs --net and --if (or --nid)")
		}
		a := NetArgs{Net: *netName, Interfaces: splitList(*ifs), NID: *nid, CPT: *cpt}
		for _, kv := range []struct {
			name string
			v    int
		}{{"peer_timeout", *pt}, {"peer_credits", *pc}, {"peer_buffer_credits", *pbc}, {"credits", *cr}} {
			if kv.v >= 0 {
				a.Tunables.Set(kv.name, int64(kv.v))
			}
		}
		if *cpp >= 0 {
			a.LNDTunables.Set("conns_per_peer", int64(*cpp))
		}
		if *port >= 0 {
			a.LNDTunables.Set("accept_port", int64(*port))
		}
		if *tos != -2 {
			a.LNDTunables.Set("tos", int64(*tos))
		}
		return c.simple(ctx, "net.add", a)
	case "del":
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if *netName == "" {
			return c.usageErr("net del needs --net")
		}
		return c.simple(ctx, "net.del", NetArgs{Net: *netName})
	case "show", "":
		v := fs.Bool("v", false, "verbose: statistics, tunables, credits")
		fs.BoolVar(v, "verbose", false, "same as -v")
		pos, err := parseInterleaved(fs, args)
		if err != nil {
			return 2
		}
		if len(pos) > 0 {
			// "-v 2" style levels: any level means verbose here.
			if _, err := strconv.Atoi(pos[0]); err != nil {
				return c.usageErr("unexpected argument %q", pos[0])
			}
		}
		return c.show(ctx, "net.show", ShowArgs{Net: *netName, Verbose: *v})
	}
	return c.usageErr("unknown action %q for net (add, del, show, set)", action)
}

// udsp is lnetctl udsp add/del/show (lnet/udsp.go).
func (c *ctl) udsp(ctx context.Context, action string, args []string) int {
	fs := c.flags("udsp " + action)
	idx := fs.Int("idx", -1, "rule index")
	switch action {
	case "add":
		src := fs.String("src", "", "local NID or net expression")
		dst := fs.String("dst", "", "peer NID or net expression")
		rte := fs.String("rte", "", "router NID expression")
		prio := fs.Int64("priority", -1, "priority (0 is the highest); without it --src --dst and --dst --rte make a preferred list")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["priority"] && *prio < 0 {
			return c.usageErr("invalid priority %d (0 is the highest)", *prio)
		}
		if *src == "" && *dst == "" && *rte == "" {
			return c.usageErr("udsp add needs --src, --dst or --rte")
		}
		return c.simple(ctx, "udsp.add", UDSPArgs{Src: *src, Dst: *dst, Rte: *rte, Priority: *prio, Idx: *idx})
	case "del":
		all := fs.Bool("all", false, "delete every rule")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if !*all && *idx < 0 {
			return c.usageErr("udsp del needs --idx N or --all")
		}
		if *all {
			*idx = -1
		}
		return c.simple(ctx, "udsp.del", UDSPArgs{Idx: *idx})
	case "show", "":
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		return c.show(ctx, "udsp.show", UDSPArgs{Idx: *idx})
	}
	return c.usageErr("unknown action %q for udsp (add, del, show)", action)
}

// setHealth is peer set / net set --health V --nid NID (the value of
// one peer NI's or local NI's health, for tests; Lustre's lnetctl has
// the same knob).
func (c *ctl) setHealth(ctx context.Context, obj string, fs *flag.FlagSet, nid *string, args []string) int {
	h := fs.Int("health", -1, "health value 0..1000")
	if _, err := parseInterleaved(fs, args); err != nil {
		return 2
	}
	if *nid == "" || *h < 0 {
		return c.usageErr("%s set needs --nid NID --health VALUE", obj)
	}
	return c.simple(ctx, obj+".set", HealthArgs{NID: *nid, Health: *h})
}

func (c *ctl) peer(ctx context.Context, action string, args []string) int {
	fs := c.flags("peer " + action)
	nid := fs.String("nid", "", "peer NID(s)")
	switch action {
	case "add", "del":
		prim := fs.String("prim_nid", "", "primary NID")
		fs.StringVar(prim, "prim-nid", "", "same as --prim_nid")
		nonMR := fs.Bool("non_mr", false, "the peer is not Multi-Rail")
		lockPrim := fs.Bool("lock_prim", false, "keep --prim_nid the primary NID whatever discovery learns")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if *prim == "" {
			return c.usageErr("peer %s needs --prim_nid", action)
		}
		return c.simple(ctx, "peer."+action, PeerArgs{PrimaryNID: *prim, NIDs: splitList(*nid), NonMR: *nonMR, LockPrim: *lockPrim})
	case "set":
		return c.setHealth(ctx, "peer", fs, nid, args)
	case "show", "list", "":
		v := fs.Bool("v", false, "verbose: credits, refcount")
		fs.BoolVar(v, "verbose", false, "same as -v")
		pos, err := parseInterleaved(fs, args)
		if err != nil {
			return 2
		}
		if len(pos) > 0 {
			if _, err := strconv.Atoi(pos[0]); err != nil {
				return c.usageErr("unexpected argument %q", pos[0])
			}
		}
		return c.show(ctx, "peer.show", ShowArgs{NID: *nid, Verbose: *v})
	}
	return c.usageErr("unknown action %q for peer (add, del, show, set)", action)
}

func (c *ctl) route(ctx context.Context, action string, args []string) int {
	fs := c.flags("route " + action)
	netName := fs.String("net", "", "remote network")
	gw := fs.String("gateway", "", "gateway NID")
	hop := fs.Int("hop", -1, "hop count (1..255, -1 default)")
	prio := fs.Int("priority", 0, "priority (0 is the highest)")
	verbose := fs.Bool("v", false, "show hop, priority, state and type")
	fs.BoolVar(verbose, "verbose", false, "same as -v")
	if _, err := parseInterleaved(fs, args); err != nil {
		return 2
	}
	switch action {
	case "add", "del":
		if *netName == "" || *gw == "" {
			return c.usageErr("route %s needs --net and --gateway", action)
		}
		// lnetctl's route add takes no -v, its route del neither --hop
		// nor --priority: refused rather than ignored.
		var bad string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "v" || f.Name == "verbose" || (action == "del" && (f.Name == "hop" || f.Name == "priority")) {
				bad = f.Name
			}
		})
		if bad != "" {
			return c.usageErr("route %s takes no --%s", action, bad)
		}
		return c.simple(ctx, "route."+action, RouteConfig{Net: *netName, Gateway: *gw, Hop: int64(*hop),
			Priority: int64(*prio), HealthSensitivity: 1})
	case "show", "":
		h := int64(*hop)
		if h < 0 {
			h = 0
		}
		a := RouteShowArgs{Net: *netName, Gateway: *gw, Hop: h, Verbose: *verbose}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "priority" && *prio >= 0 { // lnetctl: -1 shows every priority
				p := int64(*prio)
				a.Priority = &p
			}
		})
		return c.show(ctx, "route.show", a)
	}
	return c.usageErr("unknown action %q for route (add, del, show)", action)
}

func (c *ctl) ping(ctx context.Context, args []string) int {
	fs := c.flags("ping")
	var timeout secondsFlag
	fs.Var(&timeout, "timeout", "how long to wait, in seconds as Lustre's lnetctl (5) or as a duration (5s) (default: transaction_timeout)")
	src := fs.String("source", "", "local NID to ping from")
	nids, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(nids) == 0 {
		return c.usageErr("ping needs at least one NID")
	}
	list := List{}
	code := 0
	for _, n := range nids {
		var r PingReply
		if err := c.call(ctx, "ping", PingArgs{NID: n, Timeout: time.Duration(timeout), Source: *src}, &r); err != nil {
			code = c.fail(err)
			if errors.Is(err, ErrNoDaemon) {
				return code
			}
			continue
		}
		list = append(list, r.Doc())
	}
	if len(list) > 0 {
		c.print(Map{}.add("ping", list))
	}
	return code
}

func (c *ctl) export(ctx context.Context, args []string) int {
	fs := c.flags("export")
	backup := fs.Bool("backup", false, "only the configuration (no status or statistics)")
	fs.BoolVar(backup, "b", false, "same as --backup")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	var doc Map
	if err := c.call(ctx, "export", map[string]bool{"backup": *backup}, &doc); err != nil {
		return c.fail(err)
	}
	if len(pos) == 0 {
		c.print(doc)
		return 0
	}
	out := YAML(doc)
	if c.json {
		out = JSON(doc)
	}
	if err := os.WriteFile(pos[0], out, 0o644); err != nil {
		fmt.Fprintf(c.errw, "lnetctl: %v\n", err)
		return 1
	}
	return 0
}

func (c *ctl) importCmd(ctx context.Context, args []string) int {
	fs := c.flags("import")
	del := fs.Bool("del", false, "delete the nets, peers and routes in FILE instead")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		return c.usageErr("import needs one FILE (- for stdin)")
	}
	var b []byte
	if pos[0] == "-" {
		b, err = io.ReadAll(c.in)
	} else {
		b, err = os.ReadFile(pos[0])
	}
	if err != nil {
		fmt.Fprintf(c.errw, "lnetctl: %v\n", err)
		return 1
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) && pos[0] != "-" {
			ce.File = pos[0]
		}
		fmt.Fprintf(c.errw, "lnetctl: %v\n", err)
		return 1
	}
	var res ImportResult
	if err := c.call(ctx, "import", ImportArgs{Config: cfg, Del: *del}, &res); err != nil {
		return c.fail(err)
	}
	code := 0
	for _, e := range res.Errors {
		code = c.fail(e)
	}
	return code
}

func (c *ctl) test(ctx context.Context, action string, args []string) int {
	fs := c.flags("test " + action)
	switch action {
	case "put", "get":
		nid := fs.String("nid", "", "target NID (its lnetd runs the echo service)")
		size := fs.Int("size", 4096, "bytes (0 .. 1048576)")
		bits := fs.Uint64("bits", 0, "match bits (echo slot number)")
		seed := fs.Uint64("seed", 1, "data pattern seed (put)")
		off := fs.Int("offset", 0, "remote offset")
		count := fs.Int("count", 1, "repeat, stopping at the first failure")
		noack := fs.Bool("noack", false, "PUT without ACK")
		portal := fs.Int("portal", -1, "portal (default: the test portal)")
		timeout := fs.Duration("timeout", 30*time.Second, "wait for ACK/REPLY")
		pos, err := parseInterleaved(fs, args)
		if err != nil {
			return 2
		}
		if *nid == "" && len(pos) == 1 {
			*nid = pos[0]
		}
		if *nid == "" {
			return c.usageErr("test %s needs --nid", action)
		}
		a := XferArgs{NID: *nid, Size: *size, Bits: *bits, Seed: *seed, Offset: *off, Count: *count,
			NoAck: *noack, Timeout: *timeout}
		if *portal >= 0 {
			a.Portal = portal
		}
		var r XferResult
		if err := c.call(ctx, "test."+action, a, &r); err != nil {
			return c.fail(err)
		}
		c.print(xferDoc(action, *nid, &r))
		if r.Error != "" {
			fmt.Fprintf(c.errw, "lnetctl: test %s to %s failed after %d ok: %s\n", action, *nid, r.OK, r.Error)
			return 1
		}
		return 0
	case "show", "":
		return c.show(ctx, "test.show", nil)
	case "lazy":
		portal := fs.Int("portal", -1, "portal")
		clear := fs.Bool("clear", false, "turn lazy off (drops waiting PUTs)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if *portal < 0 {
			return c.usageErr("test lazy needs --portal")
		}
		return c.simple(ctx, "test.lazy", MDArgs{Portal: *portal, Clear: *clear})
	case "md":
		sub := ""
		if len(args) > 0 {
			sub, args = args[0], args[1:]
		}
		portal := fs.Int("portal", -1, "portal")
		bits := fs.Uint64("bits", 0, "match bits")
		ignore := fs.Uint64("ignore", 0, "ignore bits")
		size := fs.Int("size", 4096, "MD size")
		thresh := fs.Int("threshold", 0, "operations allowed (0: unlimited)")
		opts := fs.String("options", "put,get", "MD options")
		maxSize := fs.Int("max-size", 0, "with max_size: bytes per operation")
		retain := fs.Bool("retain", false, "keep the MD when exhausted (default: auto unlink)")
		id := fs.Int("id", 0, "MD id (del)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		switch sub {
		case "add":
			if *portal < 0 {
				return c.usageErr("test md add needs --portal")
			}
			var r map[string]int
			a := MDArgs{Portal: *portal, Bits: *bits, IgnoreBits: *ignore, Size: *size, Threshold: *thresh,
				Options: splitList(*opts), MaxSize: *maxSize, Retain: *retain}
			if err := c.call(ctx, "test.md.add", a, &r); err != nil {
				return c.fail(err)
			}
			c.print(Map{}.add("md", Map{}.add("id", int64(r["id"]))))
			return 0
		case "del":
			return c.simple(ctx, "test.md.del", MDArgs{ID: *id})
		case "show", "":
			return c.show(ctx, "test.show", nil)
		}
		return c.usageErr("unknown action %q for test md (add, del, show)", sub)
	}
	return c.usageErr("unknown action %q for test (put, get, show, md, lazy)", action)
}

// xferDoc renders a test put/get result.
func xferDoc(action, nid string, r *XferResult) Map {
	evs := List{}
	for _, e := range r.Events {
		m := Map{}.add("type", e.Type).add("mlength", int64(e.MLength)).add("offset", int64(e.Offset))
		if e.Status != "" {
			m = m.add("status", e.Status)
		}
		evs = append(evs, m)
	}
	m := Map{}.add("nid", nid).add("ok", int64(r.OK)).add("bytes", r.Bytes).
		add("crc32", fmt.Sprintf("0x%08x", r.CRC)).
		add("elapsed_ms", float64(r.Elapsed.Microseconds())/1000).add("events", evs)
	if r.Error != "" {
		m = m.add("error", r.Error)
	}
	return Map{}.add("test "+action, m)
}
