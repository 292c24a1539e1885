package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"softib/rdmacm"
	"softib/tools/devsel"
	"softib/tools/mckey"
)

func init() {
	register(&command{name: "mckey", summary: "RDMA CM UD multicast join and transfer (librdmacm mckey compatible)", run: runMckey})
}

// runMckey parses mckey's flags (-m -s -b -c -C -S -p) and the long
// device flags of devsel.
func runMckey(args []string) int {
	const name = "mckey"
	fs := devsel.NewFlagSet(name, os.Stderr)
	dev := devsel.NewOptions()
	dev.RegisterCM(fs, "-b")
	var cfg mckey.Config
	group := fs.String("m", "", "multicast `address`")
	bind := fs.String("b", "", "bind `address`")
	fs.BoolVar(&cfg.Sender, "s", false, "sender")
	fs.IntVar(&cfg.Connections, "c", 1, "`connections` (IDs joining the group)")
	fs.IntVar(&cfg.Count, "C", mckey.DefaultCount, "message `count`")
	fs.IntVar(&cfg.Size, "S", mckey.DefaultSize, "message `size`")
	ps := fs.String("p", "0x0111", "port `space`: 0x0111 UDP, 0x0002 IPoIB")
	if _, code, ok := parseTool(fs, mckeyShort(args), "mckey -m multicast_address [-s] [-b bind_address] [-c connections] [-C message_count] [-S message_size] [-p port_space]"); !ok {
		return code
	}
	parse := func(flag, s string) (netip.Addr, bool) {
		if s == "" {
			return netip.Addr{}, true
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "softib mckey: -%s %q: not an IP address\n", flag, s)
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	var ok bool
	if cfg.Group, ok = parse("m", *group); !ok {
		return 2
	}
	if !cfg.Group.IsValid() {
		fmt.Fprintf(os.Stderr, "softib mckey: give the multicast address with -m\n")
		return 2
	}
	if cfg.Bind, ok = parse("b", *bind); !ok {
		return 2
	}
	p, err := strconv.ParseUint(*ps, 0, 16)
	if err != nil {
		fmt.Fprintf(os.Stderr, "softib mckey: -p %q: not a port space\n", *ps)
		return 2
	}
	cfg.PortSpace = rdmacm.PortSpace(p)
	if dev.Addr == "" && os.Getenv(devsel.EnvAddr) == "" && cfg.Bind.IsValid() {
		dev.Addr = cfg.Bind.String()
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
	cfg.Out = os.Stdout
	ctx, cancel := toolContext()
	defer cancel()
	if _, err := mckey.Run(ctx, m, cfg); err != nil {
		return fail(name, err)
	}
	return 0
}

// mckeyShort splits getopt-style clusters ("-C10" into "-C 10").
func mckeyShort(args []string) []string {
	const values = "mbcCSp"
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && !strings.Contains(a, "=") && strings.IndexByte(values, a[1]) >= 0 {
			out = append(out, a[:2], a[2:])
			continue
		}
		out = append(out, a)
	}
	return out
}
