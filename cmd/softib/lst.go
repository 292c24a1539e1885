package main

import (
	"os"

	"softib/lnet/selftest"
)

func init() {
	register(&command{
		name:    "lst",
		summary: "LNet selftest console: sessions, groups, brw/ping batches, stat; lst quick for scripts",
		run: func(args []string) int {
			ctx, stop := toolContext()
			defer stop()
			return selftest.RunLst(ctx, args, os.Stdout, os.Stderr)
		},
	})
}
