package main

import (
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
	verbose := fs.Bool("v", false, "print all the attributes of the device (like ibv_devinfo -v), and a Soft-RoCE device's DCQCN parameters when --ecn is on")
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
	d, err := dev.Open()
	if err != nil {
		return fail("devinfo", err)
	}
	defer d.Close()
	in := devinfo.Collect(d)
	if asJSON {
		if err := writeJSON(os.Stdout, in); err != nil {
			return fail("devinfo", err)
		}
		return 0
	}
	devinfo.Write(os.Stdout, in, verbose)
	return 0
}
