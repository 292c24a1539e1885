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

	"softib/rdmacm"
	"softib/storage/scsi"
	"softib/storage/srp"
	"softib/tools/internal/targetcmd"
)

// Run runs the target until SIGINT/SIGTERM or ctx ends; it returns the
// exit code.
func Run(ctx context.Context, args []string, stderr io.Writer) int {
	var credits *int
	cmd := targetcmd.Command{
		Name:        "srpt",
		Usage:       fmt.Sprintf("usage: softib srpt --addr IP --lun file:/path[,size=N] [--lun ...] [--port %d]", srp.DefaultPort),
		Port:        srp.DefaultPort,
		PortHelp:    "RDMA CM port (the initiator's dest=IP:PORT)",
		VerboseHelp: "log channels",
		Flags: func(fs *flag.FlagSet) {
			credits = fs.Int("credits", 64, "request limit per channel (each credit holds a 512 KiB buffer)")
		},
		New: func(addr netip.AddrPort, m *rdmacm.Manager, st *scsi.Target, logf func(string, ...any)) (targetcmd.Target, error) {
			return srp.NewTarget(srp.Config{Addr: addr, Credits: *credits, Logf: logf}, m, st)
		},
		Banner: func(addr netip.AddrPort, luns int) string {
			return fmt.Sprintf("listening on %v (RDMA CM), %d LUN(s); on Linux: echo id_ext=1,ioc_guid=1,dest=%v > /sys/class/infiniband_srp/srp-rxe0-1/add_target",
				addr, luns, addr)
		},
	}
	return cmd.Run(ctx, args, stderr)
}
