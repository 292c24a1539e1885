package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"softib/rdmacm"
	"softib/tools/devsel"
	"softib/tools/rping"
)

func init() {
	register(&command{name: "rping", summary: "RDMA CM ping: READ/WRITE loop over rdma_cm (rping compatible)", run: runRping})
}

// runRping parses rping's own flags (-s -c -a -I -p -C -S -v -V -d -P -q)
// and the long device flags of devsel (rping's -d is debug, so the device
// name is only --ib-dev).
func runRping(args []string) int {
	const name = "rping"
	fs := devsel.NewFlagSet(name, os.Stderr)
	dev := devsel.NewOptions()
	dev.RegisterCM(fs, "-a (server) / -I (client)")
	var cfg rping.Config
	server := fs.Bool("s", false, "server side")
	clientSide := fs.Bool("c", false, "client side")
	addr := fs.String("a", "", "`address`: the server's (client) or the one to bind (server)")
	src := fs.String("I", "", "source `address` to bind to for client")
	port := fs.Uint("p", rping.DefaultPort, "`port`")
	fs.IntVar(&cfg.Count, "C", 0, "ping `count` times (0: forever)")
	fs.IntVar(&cfg.Size, "S", rping.DefaultSize, "ping data `size`")
	fs.BoolVar(&cfg.Verbose, "v", false, "display ping data to stdout")
	fs.BoolVar(&cfg.Validate, "V", false, "validate ping data")
	fs.BoolVar(&cfg.Debug, "d", false, "debug printfs")
	fs.BoolVar(&cfg.Persistent, "P", false, "persistent server mode allowing multiple connections")
	fs.BoolVar(&cfg.SelfQP, "q", false, "use self-created, self-modified QP")
	asJSON := fs.Bool("json", false, "print the result as JSON ({\"pings\": N, \"connections\": N}) instead of rping's lines")
	if _, code, ok := parseTool(fs, expandShort(args), "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n       softib rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]"); !ok {
		return code
	}
	if *server == *clientSide {
		fmt.Fprintf(os.Stderr, "softib rping: give -s (server) or -c (client) (run 'softib rping --help' for the flags)\n")
		return 2
	}
	cfg.Server = *server
	parse := func(flag, s string) (netip.Addr, bool) {
		if s == "" {
			return netip.Addr{}, true
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "softib rping: -%s %q: not an IP address\n", flag, s)
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	var ok bool
	if cfg.Addr, ok = parse("a", *addr); !ok {
		return 2
	}
	if cfg.Source, ok = parse("I", *src); !ok {
		return 2
	}
	if *port > 65535 {
		fmt.Fprintf(os.Stderr, "softib rping: bad port %d\n", *port)
		return 2
	}
	cfg.Port = uint16(*port)
	if dev.Addr == "" && os.Getenv(devsel.EnvAddr) == "" {
		// The device must own the address rping binds: the server's -a,
		// the client's -I.
		if cfg.Server && cfg.Addr.IsValid() && !cfg.Addr.IsUnspecified() {
			dev.Addr = cfg.Addr.String()
		} else if !cfg.Server && cfg.Source.IsValid() {
			dev.Addr = cfg.Source.String()
		}
	}
	d, err := dev.Open()
	if err != nil {
		return fail(name, err)
	}
	defer d.Close()
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	if err := m.AddDevice(d); err != nil {
		return fail(name, err)
	}
	cfg.Out, cfg.Err, cfg.Progress = os.Stdout, os.Stderr, os.Stderr
	if *asJSON {
		cfg.Out = io.Discard
	}
	ctx, cancel := toolContext()
	defer cancel()
	res, err := rping.Run(ctx, m, cfg)
	if err != nil && !(errors.Is(err, ctx.Err()) && cfg.Server) { // an interrupted server ends well
		return fail(name, err)
	}
	if *asJSON {
		doc := struct {
			Role        string `json:"role"`
			Pings       int    `json:"pings"`
			Connections int    `json:"connections"`
		}{map[bool]string{true: "server", false: "client"}[cfg.Server], res.Pings, res.Conns}
		if err := writeJSON(os.Stdout, doc); err != nil {
			return fail(name, err)
		}
	}
	return 0
}

// expandShort splits getopt-style clusters the flag package does not
// parse: "-vVd" into "-v -V -d", and "-C10" into "-C 10".
func expandShort(args []string) []string {
	const bools, values = "scvVdPq", "aIpCS"
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a, "=") {
			out = append(out, a)
			continue
		}
		switch {
		case strings.IndexByte(values, a[1]) >= 0:
			out = append(out, a[:2], a[2:])
		case strings.Trim(a[1:], bools) == "":
			for _, c := range a[1:] {
				out = append(out, "-"+string(c))
			}
		default:
			out = append(out, a)
		}
	}
	return out
}
