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

	"softib/rdmacm"
	"softib/storage/iser"
	"softib/storage/scsi"
	"softib/tools/internal/targetcmd"
)

// Run runs the target until SIGINT/SIGTERM or ctx ends; it returns the
// exit code.
func Run(ctx context.Context, args []string, stderr io.Writer) int {
	var iqn *string
	var window *int
	var noDisc *bool
	cmd := targetcmd.Command{
		Name:        "iser-target",
		Usage:       "usage: softib iser-target --addr IP --lun file:/path[,size=N] [--lun ...] [--iqn IQN] [--port 3260]",
		Port:        iser.DefaultPort,
		PortHelp:    "RDMA CM port (and TCP discovery port)",
		VerboseHelp: "log connections",
		Flags: func(fs *flag.FlagSet) {
			iqn = fs.String("iqn", "iqn.2026-11.org.softib:target", "the target's iSCSI name")
			window = fs.Int("window", 32, "commands in flight per connection (each holds a 512 KiB buffer)")
			noDisc = fs.Bool("no-discovery", false, "no SendTargets discovery listener on TCP")
		},
		New: func(addr netip.AddrPort, m *rdmacm.Manager, st *scsi.Target, logf func(string, ...any)) (targetcmd.Target, error) {
			return iser.NewTarget(iser.Config{IQN: *iqn, Addr: addr, Window: *window, NoDiscovery: *noDisc, Logf: logf}, m, st)
		},
		Banner: func(_ targetcmd.Target, addr netip.AddrPort, luns int, _ bool) string {
			return fmt.Sprintf("%s on %v (RDMA CM), %d LUN(s)", *iqn, addr, luns)
		},
	}
	return cmd.Run(ctx, args, stderr)
}
