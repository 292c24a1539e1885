package main

import (
	"fmt"
	"net/netip"
	"os"

	"softib/tools/devsel"
	"softib/tools/res"
	"softib/tools/stat"
)

func init() {
	register(&command{name: "stat", summary: "device and QP counters of every open device, and each QP's DCQCN rate limiter (like rdma statistic)", run: runStat})
	register(&command{name: "res", summary: "QPs, CQs, MRs and PDs of every open device (like rdma resource)", run: runRes})
}

// snapshots reads the devices' control sockets, printing (and going on
// past) those that did not answer.
func snapshots(name, addr string) ([]*stat.Snapshot, int) {
	var a netip.Addr
	if addr != "" {
		var err error
		if a, err = netip.ParseAddr(addr); err != nil {
			return nil, fail(name, fmt.Errorf("--addr %q: %v", addr, err))
		}
	}
	sns, err := stat.QueryAll(a.Unmap())
	if len(sns) == 0 {
		return nil, fail(name, err)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "softib %s: %v\n", name, err)
	}
	return sns, 0
}

func runStat(args []string) int {
	fs := devsel.NewFlagSet("stat", os.Stderr)
	addr := fs.String("addr", "", "show only the devices on this IP `address`")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseTool(fs, args, "stat [show | qp [show]] [--addr IP] [--json]")
	if !ok {
		return code
	}
	qp := false
	for _, p := range pos {
		switch p {
		case "show", "link":
		case "qp":
			qp = true
		default:
			return fail("stat", fmt.Errorf("unknown object %q (want show or qp)", p))
		}
	}
	sns, code := snapshots("stat", *addr)
	if sns == nil {
		return code
	}
	switch {
	case *asJSON && qp:
		return jsonOut("stat", stat.QPs(sns))
	case *asJSON:
		return jsonOut("stat", stat.Links(sns))
	case qp:
		stat.WriteQPs(os.Stdout, sns)
	default:
		stat.WriteLinks(os.Stdout, sns)
	}
	return 0
}

func runRes(args []string) int {
	fs := devsel.NewFlagSet("res", os.Stderr)
	addr := fs.String("addr", "", "show only the devices on this IP `address`")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseTool(fs, args, "res [show] [qp | cq | mr | pd] [--addr IP] [--json]")
	if !ok {
		return code
	}
	kind := ""
	for _, p := range pos {
		switch p {
		case "show":
		case "qp", "cq", "mr", "pd":
			kind = p
		default:
			return fail("res", fmt.Errorf("unknown resource %q (want qp, cq, mr or pd)", p))
		}
	}
	sns, code := snapshots("res", *addr)
	if sns == nil {
		return code
	}
	if *asJSON {
		v, err := res.JSON(kind, sns)
		if err != nil {
			return fail("res", err)
		}
		return jsonOut("res", v)
	}
	if kind == "" {
		res.WriteSummary(os.Stdout, sns)
		return 0
	}
	if err := res.Write(os.Stdout, kind, sns); err != nil {
		return fail("res", err)
	}
	return 0
}

func jsonOut(name string, v any) int {
	if err := writeJSON(os.Stdout, v); err != nil {
		return fail(name, err)
	}
	return 0
}
