package main

import (
	"os"

	"softib/lnet/selftest"
	"softib/tools/lnetd"
	"softib/tools/lst"
)

func init() {
	register(&command{
		name:    "lst",
		summary: "LNet selftest console: sessions, groups, brw/ping batches, stat; lst quick for scripts",
		run: func(args []string) int {
			ctx, stop := toolContext()
			defer stop()
			return lst.Run(ctx, args, os.Stdout, os.Stderr, lst.Options{
				Dial: func(path string) (selftest.ControlCall, func(), error) {
					cl, err := lnetd.Dial(path)
					if err != nil {
						return nil, nil, err
					}
					return cl.Call, func() { cl.Close() }, nil
				},
				DefaultSocket: lnetd.DefaultSocketPath(),
			})
		},
	})
}
