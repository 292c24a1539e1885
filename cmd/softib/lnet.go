package main

import (
	"context"
	"os"
	"os/signal"

	"softib/tools/lnetd"
)

func init() {
	register(&command{
		name:    "lnet",
		summary: "LNet utilities: lnet ping NID [-c N] (through lnetd or standalone)",
		run: func(args []string) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return lnetd.RunLNet(ctx, args, os.Stdout, os.Stderr)
		},
	})
}
