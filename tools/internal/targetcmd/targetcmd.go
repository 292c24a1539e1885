// Package targetcmd is what the storage target commands ("softib
// iser-target", "softib srpt") share: the --addr/--port/--lun/-v flags,
// the LUNs opened from their specs on a SCSI target core, the Soft-RoCE
// device and RDMA CM manager under the target, and its run until
// SIGINT/SIGTERM. Each command brings its own flags and target.
package targetcmd

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"softib/cm"
	"softib/rdmacm"
	"softib/rxe"
	"softib/storage/scsi"
	"softib/tools/devsel"
	"softib/verbs"
)

// Target is a storage target as the commands run it.
type Target interface {
	Listen() error
	Serve(ctx context.Context) error
	Close() error
}

// Command describes one target command.
type Command struct {
	// Name is the command's name, also the start of its messages.
	Name string
	// Usage is the usage line.
	Usage string
	// Port is --port's default and PortHelp its help.
	Port     uint
	PortHelp string
	// VerboseHelp is -v's help.
	VerboseHelp string
	// Flags registers the command's own flags on fs (before parsing).
	Flags func(fs *flag.FlagSet)
	// New makes the target listening at addr on m for st's LUNs; logf
	// is nil without -v. Its error is a usage error (exit code 2).
	New func(addr netip.AddrPort, m *rdmacm.Manager, st *scsi.Target, logf func(string, ...any)) (Target, error)
	// IBCM, if set, makes the target listen on the IB CM of the
	// device too (and register its MAD agents on the device's QP1);
	// it runs after Listen. Only softib's own devices (provider rxe)
	// have a QP1 of softib's: with a kernel device the kernel owns it,
	// and the command says the target runs without.
	IBCM func(tgt Target, c *cm.CM) error
	// Banner is the line printed once the target listens; ibcm says
	// whether IBCM ran.
	Banner func(tgt Target, addr netip.AddrPort, luns int, ibcm bool) string
}

type lunList []string

func (l *lunList) String() string     { return strings.Join(*l, " ") }
func (l *lunList) Set(s string) error { *l = append(*l, s); return nil }

// MaxTransfer is the largest transfer a LUN takes: the targets' data
// buffer per command.
const MaxTransfer = 512 << 10

// Run runs the command with args until SIGINT/SIGTERM or ctx ends; it
// returns the exit code.
func (c *Command) Run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "local IP address of the RDMA device (required)")
	provider := fs.String("provider", "", "verbs `provider`: rxe (softib's Soft-RoCE, the default) or ibverbs (the kernel RDMA device holding --addr; a build with -tags ibverbs) (default $"+devsel.EnvProvider+")")
	port := fs.Uint("port", c.Port, c.PortHelp)
	verbose := fs.Bool("v", false, c.VerboseHelp)
	var luns lunList
	fs.Var(&luns, "lun", "a LUN: file:/path[,size=N][,ro][,bs=512|4096] or mem:SIZE (repeat for LUN 1, 2, ...)")
	if c.Flags != nil {
		c.Flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintln(stderr, c.Usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || len(luns) == 0 || *addr == "" || *port == 0 || *port > 65535 {
		fs.Usage()
		return 2
	}
	ip, err := netip.ParseAddr(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --addr: %v\n", c.Name, err)
		return 2
	}
	st := scsi.NewTarget()
	defer st.Close()
	for i, spec := range luns {
		b, cfg, err := scsi.OpenSpec(spec)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
			return 1
		}
		cfg.MaxTransfer = MaxTransfer
		if _, err := st.AddLUN(uint64(i), b, cfg); err != nil {
			b.Close()
			fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
			return 1
		}
	}
	prov := *provider
	if prov == "" {
		prov = os.Getenv(devsel.EnvProvider)
	}
	var dev verbs.Device
	if prov == "" || prov == "rxe" {
		dev, err = rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
	} else {
		dev, err = verbs.Open(verbs.DeviceConfig{Provider: prov, Addr: ip})
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s device on %v: %v\n", c.Name, cmp.Or(prov, "rxe"), ip, err)
		return 1
	}
	defer dev.Close()
	// The IB CMs softib attaches to its devices' QP1 (none for kernel
	// devices), for the target's IB CM listener and MAD agents.
	var cms []*cm.CM
	m := rdmacm.NewManager(rdmacm.Config{CM: cm.Config{Attached: func(c *cm.CM, _ *cm.GSI) { cms = append(cms, c) }}})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 1
	}
	var logf func(string, ...any)
	if *verbose {
		logf = func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }
	}
	at := netip.AddrPortFrom(ip, uint16(*port))
	tgt, err := c.New(at, m, st, logf)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 2
	}
	if err := tgt.Listen(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		tgt.Close()
		return 1
	}
	if c.IBCM != nil {
		if len(cms) == 0 {
			fmt.Fprintf(stderr, "%s: no IB CM login or DM agent on a %s device: the kernel owns its QP1 (RDMA CM only)\n", c.Name, prov)
		}
		for _, x := range cms {
			if err := c.IBCM(tgt, x); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
				tgt.Close()
				return 1
			}
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "%s: %s\n", c.Name, c.Banner(tgt, at, len(luns), c.IBCM != nil && len(cms) > 0))
	err = tgt.Serve(ctx)
	tgt.Close()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 1
	}
	return 0
}
