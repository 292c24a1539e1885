package main

import (
	"context"
	"os"

	"softib/tools/lnetd"
)

func init() {
	register(&command{
		name:    "lnetd",
		summary: "run an LNet node from lnetctl-style YAML, controlled by lnetctl",
		run: func(args []string) int {
			return lnetd.RunDaemon(context.Background(), args, os.Stderr)
		},
	})
}
