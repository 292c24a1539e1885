package main

import (
	"context"
	"os"

	"softib/tools/lnetd"
)

func init() {
	register(&command{
		name:    "lnetctl",
		summary: "configure and inspect a running lnetd (net, peer, ping, stats, import/export)",
		run: func(args []string) int {
			return lnetd.RunCtl(context.Background(), args, os.Stdin, os.Stdout, os.Stderr)
		},
	})
}
