package pingpong

import (
	"flag"
	"fmt"
)

// Flags is the command-line form of a Config (rdma-core's options; the
// device options -d, -i, -g come from devsel).
type Flags struct {
	fs  *flag.FlagSet
	cfg Config
	sl  *uint
	hop *uint
}

// RegisterFlags adds the pingpong flags of kind to fs.
func RegisterFlags(fs *flag.FlagSet, kind Kind) (*Flags, error) {
	f := &Flags{fs: fs, cfg: Config{Kind: kind}}
	c := &f.cfg
	size := 4096
	if kind == UD {
		size = 2048
	}
	for _, n := range []string{"p", "port"} {
		fs.IntVar(&c.TCPPort, n, DefaultTCPPort, "listen on/connect to TCP `port`")
	}
	for _, n := range []string{"s", "size"} {
		fs.IntVar(&c.Size, n, size, "`size` of message to exchange")
	}
	if kind == RC {
		for _, n := range []string{"m", "mtu"} {
			fs.IntVar(&c.MTU, n, 1024, "path `MTU`")
		}
	}
	for _, n := range []string{"r", "rx-depth"} {
		fs.IntVar(&c.RxDepth, n, 500, "number of receives to post at a time")
	}
	for _, n := range []string{"n", "iters"} {
		fs.IntVar(&c.Iters, n, 1000, "number of exchanges")
	}
	sl := fs.Uint("l", 0, "service level value")
	fs.UintVar(sl, "sl", 0, "service level value")
	for _, n := range []string{"e", "events"} {
		fs.BoolVar(&c.Events, n, false, "sleep on CQ events (default poll)")
	}
	for _, n := range []string{"c", "chk"} {
		fs.BoolVar(&c.Check, n, false, "validate received buffers")
	}
	f.sl = sl
	// Not in rdma-core (whose pingpongs always send hop limit 1): the
	// IP TTL across routed paths.
	f.hop = fs.Uint("hop-limit", 1, "GRH hop limit = IP TTL of every packet (rdma-core's 1 does not cross a router)")
	return f, nil
}

// Finish applies the positional arguments (at most the server host) and
// checks the values.
func (f *Flags) Finish(args []string) (Config, error) {
	c := f.cfg
	switch len(args) {
	case 0:
	case 1:
		c.Host = args[0]
	default:
		return Config{}, fmt.Errorf("too many arguments %q: want at most the server host", args)
	}
	sizeSet := false
	f.fs.Visit(func(fl *flag.Flag) { sizeSet = sizeSet || fl.Name == "s" || fl.Name == "size" })
	c.FitMTU = c.Kind == UD && !sizeSet
	if *f.sl > 15 {
		return Config{}, fmt.Errorf("bad service level %d", *f.sl)
	}
	c.SL = uint8(*f.sl)
	if *f.hop < 1 || *f.hop > 255 {
		return Config{}, fmt.Errorf("--hop-limit %d: want 1 to 255", *f.hop)
	}
	c.HopLimit = uint8(*f.hop)
	if c.TCPPort <= 0 || c.TCPPort > 65535 {
		return Config{}, fmt.Errorf("bad port %d", c.TCPPort)
	}
	switch {
	case c.Size <= 0:
		return Config{}, fmt.Errorf("-s %d: the message size must be positive", c.Size)
	case c.RxDepth <= 0:
		return Config{}, fmt.Errorf("-r %d: the receive depth must be positive", c.RxDepth)
	case c.Iters <= 0:
		return Config{}, fmt.Errorf("-n %d: the number of exchanges must be positive", c.Iters)
	}
	if c.Kind == RC && MTUFromFlag(c.MTU) == 0 {
		return Config{}, fmt.Errorf("bad MTU %d: use 256, 512, 1024, 2048 or 4096", c.MTU)
	}
	return c, nil
}
