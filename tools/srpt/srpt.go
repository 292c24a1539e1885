// Package srpt is the "softib srpt" command: an SRP target (package
// storage/srp) on a Soft-RoCE device, serving LUNs backed by files or
// memory to Linux's ib_srp over the RDMA CM (add_target with
// dest=IP:PORT), and over the IB CM with its service ID, with a
// device-management MAD agent on the device's QP1 for srp_daemon-style
// discovery.
package srpt

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"softib/cm"
	"softib/rdmacm"
	"softib/storage/scsi"
	"softib/storage/srp"
	"softib/tools/internal/targetcmd"
)

// guidFlag is a 64-bit GUID given in hex, with or without 0x.
type guidFlag uint64

func (g *guidFlag) String() string { return fmt.Sprintf("%016x", uint64(*g)) }
func (g *guidFlag) Set(s string) error {
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 64)
	if err != nil || v == 0 {
		return fmt.Errorf("want a non-zero 64-bit hex GUID")
	}
	*g = guidFlag(v)
	return nil
}

// Run runs the target until SIGINT/SIGTERM or ctx ends; it returns the
// exit code.
func Run(ctx context.Context, args []string, stderr io.Writer) int {
	var credits *int
	var iocGUID, idExt guidFlag
	cmd := targetcmd.Command{
		Name:        "srpt",
		Usage:       fmt.Sprintf("usage: softib srpt --addr IP --lun file:/path[,size=N] [--lun ...] [--port %d] [--ioc-guid HEX] [--id-ext HEX]", srp.DefaultPort),
		Port:        srp.DefaultPort,
		PortHelp:    "RDMA CM port (the initiator's dest=IP:PORT)",
		VerboseHelp: "log channels",
		Flags: func(fs *flag.FlagSet) {
			credits = fs.Int("credits", 64, "request limit per channel (each credit holds a 512 KiB buffer)")
			fs.Var(&iocGUID, "ioc-guid", "I/O controller GUID: add_target's ioc_guid, the IB CM service ID and the DM agent's IOC GUID (default: the GUID derived from --addr's GID)")
			fs.Var(&idExt, "id-ext", "identifier extension: add_target's id_ext (default: as --ioc-guid)")
		},
		New: func(addr netip.AddrPort, m *rdmacm.Manager, st *scsi.Target, logf func(string, ...any)) (targetcmd.Target, error) {
			return srp.NewTarget(srp.Config{Addr: addr, Credits: *credits, IOCGUID: uint64(iocGUID), IDExt: uint64(idExt), Logf: logf}, m, st)
		},
		IBCM: func(tgt targetcmd.Target, c *cm.CM) error { return tgt.(*srp.Target).ListenIBCM(c) },
		Banner: func(tgt targetcmd.Target, addr netip.AddrPort, luns int, ibcm bool) string {
			return banner(tgt.(*srp.Target), addr, luns, ibcm)
		},
	}
	return cmd.Run(ctx, args, stderr)
}

// banner says where the target listens and gives the add_target lines
// a Linux initiator needs.
func banner(t *srp.Target, addr netip.AddrPort, luns int, ibcm bool) string {
	ids := fmt.Sprintf("id_ext=%016x,ioc_guid=%016x", t.IDExt(), t.IOCGUID())
	var b strings.Builder
	fmt.Fprintf(&b, "listening on %v (RDMA CM)", addr)
	if ibcm {
		fmt.Fprintf(&b, " and IB CM service ID %016x (DM agent on QP1)", t.ServiceID())
	}
	fmt.Fprintf(&b, ", %d LUN(s)\non Linux (RoCE): echo %s,dest=%v > /sys/class/infiniband_srp/srp-rxe0-1/add_target", luns, ids, addr)
	if ibcm {
		// ib_srp's IB CM login needs an SA path record, which a RoCE
		// port cannot get: this line is for IB-style initiators.
		gid := addr.Addr().As16()
		fmt.Fprintf(&b, "\nIB CM login (not Linux ib_srp on RoCE: it needs an SA path record): %s,dgid=%032x,pkey=ffff,service_id=%016x",
			ids, gid[:], t.ServiceID())
	}
	return b.String()
}
