package devinfo

import (
	"net/netip"

	"softib/tools/stat"
)

// running returns the softib processes other than self that publish a
// device at addr (their softib stat control sockets) and report its
// congestion control. A Soft-RoCE device belongs to the process that
// opened it, so devinfo's own device (opened with devinfo's flags) says
// nothing about the one an lnetd or perftest runs with on that address;
// their snapshots do. Sockets that cannot be read (another user's) are
// left out.
func running(addr netip.AddrPort, self int) []Running {
	sns, _ := stat.QueryAll(addr.Addr())
	var out []Running
	for _, sn := range sns {
		if sn.Addr != addr || sn.PID == self || sn.ECN == nil {
			continue
		}
		out = append(out, Running{PID: sn.PID, Comm: sn.Comm, ECN: sn.ECN})
	}
	return out
}
