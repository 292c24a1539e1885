package main

import (
	"fmt"
	"os"

	"softib/tools/devsel"
	"softib/tools/pingpong"
)

func init() {
	register(&command{name: "rc_pingpong", summary: "RC SEND ping-pong (ibv_rc_pingpong compatible)",
		run: func(args []string) int { return runPingpong(pingpong.RC, args) }})
	register(&command{name: "ud_pingpong", summary: "UD SEND ping-pong (ibv_ud_pingpong compatible)",
		run: func(args []string) int { return runPingpong(pingpong.UD, args) }})
}

func runPingpong(kind pingpong.Kind, args []string) int {
	name := kind.String()
	fs := devsel.NewFlagSet(name, os.Stderr)
	dev := devsel.NewOptions()
	// RoCE needs a GID, so -g defaults to the IPv4-mapped index.
	dev.Register(fs, 1, "g", "gid-idx")
	cfg, err := pingpong.RegisterFlags(fs, kind)
	if err != nil {
		return fail(name, err)
	}
	pos, code, ok := parseTool(fs, args, name+" [flags] [server-host]   (no host: be the server)")
	if !ok {
		return code
	}
	c, err := cfg.Finish(pos)
	if err != nil {
		fmt.Fprintf(os.Stderr, "softib %s: %v\n", name, err)
		return 2
	}
	d, err := dev.Open()
	if err != nil {
		return fail(name, err)
	}
	defer d.Close()
	c.Port, c.GIDIndex, c.PeerUDPPort, c.Out = dev.Port(), dev.GIDIndex, dev.PeerPort(), os.Stdout
	c.BindAddr = dev.BindAddr()
	ctx, cancel := toolContext()
	defer cancel()
	if _, err := pingpong.Run(ctx, d, c); err != nil {
		return fail(name, err)
	}
	return 0
}
