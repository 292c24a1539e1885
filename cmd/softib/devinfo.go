package main

import (
	"os"

	"softib/tools/devinfo"
	"softib/tools/devsel"
)

func init() {
	register(&command{name: "devinfo", summary: "show device attributes (like ibv_devinfo)", run: runDevinfo})
}

func runDevinfo(args []string) int {
	fs := devsel.NewFlagSet("devinfo", os.Stderr)
	dev := devsel.NewOptions()
	dev.Register(fs, -1)
	verbose := fs.Bool("v", false, "print all the attributes of the device (like ibv_devinfo -v)")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, code, ok := parseTool(fs, args, "devinfo [--addr IP] [-v] [--json]"); !ok {
		return code
	}
	d, err := dev.Open()
	if err != nil {
		return fail("devinfo", err)
	}
	defer d.Close()
	in := devinfo.Collect(d)
	if *asJSON {
		if err := writeJSON(os.Stdout, in); err != nil {
			return fail("devinfo", err)
		}
		return 0
	}
	devinfo.Write(os.Stdout, in, *verbose)
	return 0
}
