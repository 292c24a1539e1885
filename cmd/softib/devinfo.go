package main

import (
	"net/netip"
	"os"

	"softib/tools/devinfo"
	"softib/tools/devsel"
	"softib/verbs"
)

func init() {
	register(&command{name: "devinfo", summary: "show device attributes (like ibv_devinfo)", run: runDevinfo})
}

func runDevinfo(args []string) int {
	fs := devsel.NewFlagSet("devinfo", os.Stderr)
	dev := devsel.NewOptions()
	dev.Register(fs, -1)
	verbose := fs.Bool("v", false, "print all the attributes of the device (like ibv_devinfo -v), and a Soft-RoCE device's DCQCN parameters when ECN is on "+
		"(the ecn line is the softib process's that holds the address, else this command's own device's, --ecn)")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, code, ok := parseTool(fs, args, "devinfo [--addr IP] [-v] [--json]"); !ok {
		return code
	}
	if cfg, err := dev.Config(); err == nil && dev.Name == "" && !cfg.Addr.IsValid() {
		// A provider of standing devices (the kernel's, -tags ibverbs)
		// and no -d or --addr: every device, as ibv_devinfo prints them.
		if names, err := verbs.DeviceNames(cfg.Provider); err == nil {
			for _, n := range names {
				dev.Name = n
				if code := devinfoOne(dev, *verbose, *asJSON); code != 0 {
					return code
				}
			}
			return 0
		}
	}
	return devinfoOne(dev, *verbose, *asJSON)
}

func devinfoOne(dev *devsel.Options, verbose, asJSON bool) int {
	// The Soft-RoCE address asked for: a softib device is per process,
	// and when another process holds the default address Open takes
	// another; the ecn line is then that process's (devinfo.CollectAt).
	var want netip.AddrPort
	if cfg, err := dev.Config(); err == nil && cfg.Addr.IsValid() {
		want = netip.AddrPortFrom(cfg.Addr, dev.UDPPortOrDefault())
	}
	d, err := dev.Open()
	if err != nil {
		return fail("devinfo", err)
	}
	defer d.Close()
	in := devinfo.CollectAt(d, want)
	if asJSON {
		if err := writeJSON(os.Stdout, in); err != nil {
			return fail("devinfo", err)
		}
		return 0
	}
	devinfo.Write(os.Stdout, in, verbose)
	return 0
}
