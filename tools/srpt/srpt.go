// Package srpt is the "softib srpt" command: an SRP target (package
// storage/srp) on a Soft-RoCE device, serving LUNs backed by files or
// memory to Linux's ib_srp over the RDMA CM (add_target with
// dest=IP:PORT).
package srpt

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
	"softib/storage/scsi"
	"softib/storage/srp"
	"softib/verbs"
)

type lunList []string

func (l *lunList) String() string     { return strings.Join(*l, " ") }
func (l *lunList) Set(s string) error { *l = append(*l, s); return nil }

// Run runs the target until SIGINT/SIGTERM or ctx ends; it returns the
// exit code.
func Run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("srpt", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "local IP address of the Soft-RoCE device (required)")
	port := fs.Uint("port", srp.DefaultPort, "RDMA CM port (the initiator's dest=IP:PORT)")
	credits := fs.Int("credits", 64, "request limit per channel (each credit holds a 512 KiB buffer)")
	verbose := fs.Bool("v", false, "log channels")
	var luns lunList
	fs.Var(&luns, "lun", "a LUN: file:/path[,size=N][,ro][,bs=512|4096] or mem:SIZE (repeat for LUN 1, 2, ...)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: softib srpt --addr IP --lun file:/path[,size=N] [--lun ...] [--port %d]\n", srp.DefaultPort)
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
		fmt.Fprintf(stderr, "srpt: --addr: %v\n", err)
		return 2
	}
	st := scsi.NewTarget()
	defer st.Close()
	for i, spec := range luns {
		b, cfg, err := scsi.OpenSpec(spec)
		if err != nil {
			fmt.Fprintf(stderr, "srpt: %v\n", err)
			return 1
		}
		cfg.MaxTransfer = 512 << 10
		if _, err := st.AddLUN(uint64(i), b, cfg); err != nil {
			b.Close()
			fmt.Fprintf(stderr, "srpt: %v\n", err)
			return 1
		}
	}
	dev, err := rxe.Open(rxe.Config{DeviceConfig: verbs.DeviceConfig{Addr: ip}})
	if err != nil {
		fmt.Fprintf(stderr, "srpt: rxe device on %v: %v\n", ip, err)
		return 1
	}
	defer dev.Close()
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		fmt.Fprintf(stderr, "srpt: %v\n", err)
		return 1
	}
	cfg := srp.Config{Addr: netip.AddrPortFrom(ip, uint16(*port)), Credits: *credits}
	if *verbose {
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }
	}
	tgt, err := srp.NewTarget(cfg, m, st)
	if err != nil {
		fmt.Fprintf(stderr, "srpt: %v\n", err)
		return 2
	}
	if err := tgt.Listen(); err != nil {
		fmt.Fprintf(stderr, "srpt: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "srpt: listening on %v (RDMA CM), %d LUN(s); on Linux: echo id_ext=1,ioc_guid=1,dest=%v > /sys/class/infiniband_srp/srp-rxe0-1/add_target\n",
		cfg.Addr, len(luns), cfg.Addr)
	err = tgt.Serve(ctx)
	tgt.Close()
	if err != nil {
		fmt.Fprintf(stderr, "srpt: %v\n", err)
		return 1
	}
	return 0
}
