// Package isertarget is the "softib iser-target" command: an iSER target
// (package storage/iser) on a Soft-RoCE device, serving LUNs backed by
// files or memory to Linux's open-iscsi with the iser transport.
package isertarget

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"

	"softib/rdmacm"
	"softib/rxe"
	"softib/storage/iser"
	"softib/storage/scsi"
	"softib/verbs"
)

type lunList []string

func (l *lunList) String() string     { return strings.Join(*l, " ") }
func (l *lunList) Set(s string) error { *l = append(*l, s); return nil }

// Run runs the target until SIGINT/SIGTERM or ctx ends; it returns the
// exit code.
func Run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("iser-target", flag.ContinueOnError)
	fs.SetOutput(stderr)
	iqn := fs.String("iqn", "iqn.2026-11.org.softib:target", "the target's iSCSI name")
	addr := fs.String("addr", "", "local IP address of the Soft-RoCE device (required)")
	port := fs.Uint("port", iser.DefaultPort, "RDMA CM port (and TCP discovery port)")
	window := fs.Int("window", 32, "commands in flight per connection (each holds a 512 KiB buffer)")
	noDisc := fs.Bool("no-discovery", false, "no SendTargets discovery listener on TCP")
	verbose := fs.Bool("v", false, "log connections")
	var luns lunList
	fs.Var(&luns, "lun", "a LUN: file:/path[,size=N][,ro][,bs=512|4096] or mem:SIZE (repeat for LUN 1, 2, ...)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: softib iser-target --addr IP --lun file:/path[,size=N] [--lun ...] [--iqn IQN] [--port 3260]\n")
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
		fmt.Fprintf(stderr, "iser-target: --addr: %v\n", err)
		return 2
	}
	st := scsi.NewTarget()
	defer st.Close()
	for i, spec := range luns {
		b, cfg, err := scsi.OpenSpec(spec)
		if err != nil {
			fmt.Fprintf(stderr, "iser-target: %v\n", err)
			return 1
		}
		cfg.MaxTransfer = 512 << 10
		if _, err := st.AddLUN(uint64(i), b, cfg); err != nil {
			b.Close()
			fmt.Fprintf(stderr, "iser-target: %v\n", err)
			return 1
		}
	}
	dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
	if err != nil {
		fmt.Fprintf(stderr, "iser-target: rxe device on %v: %v\n", ip, err)
		return 1
	}
	defer dev.Close()
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		fmt.Fprintf(stderr, "iser-target: %v\n", err)
		return 1
	}
	cfg := iser.Config{IQN: *iqn, Addr: netip.AddrPortFrom(ip, uint16(*port)), Window: *window, NoDiscovery: *noDisc}
	if *verbose {
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }
	}
	tgt, err := iser.NewTarget(cfg, m, st)
	if err != nil {
		fmt.Fprintf(stderr, "iser-target: %v\n", err)
		return 2
	}
	if err := tgt.Listen(); err != nil {
		fmt.Fprintf(stderr, "iser-target: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "iser-target: %s on %v (RDMA CM), %d LUN(s)\n", *iqn, cfg.Addr, len(luns))
	err = tgt.Serve(ctx)
	tgt.Close()
	if err != nil {
		fmt.Fprintf(stderr, "iser-target: %v\n", err)
		return 1
	}
	return 0
}
